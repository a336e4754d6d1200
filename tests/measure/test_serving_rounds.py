"""Per-round speedups, their spread, and the engine's own batch (worked by hand)."""

import pandas as pd
import pytest

from specnb.measure.serving_rounds import batch_of, mean_batch, occupancy, relative_mad, round_speedups


def requests(config: str, decode_s: list[float], level: int = 2) -> list[dict]:
    """One request per round (rounds 0, 1, 2), 11 tokens, 0.1 s to the first."""
    return [{"config": config, "concurrency": level, "round": r, "prompt_index": 0, "success": True,
             "output_tokens": 11, "ttft": 0.1, "latency": 0.1 + s} for r, s in enumerate(decode_s)]


def test_each_round_is_its_own_paired_speedup():
    records = pd.DataFrame(requests("spec-off", [1.0, 1.0, 1.2]) + requests("ngram k=2", [0.5, 0.4, 0.6]))
    rounds = round_speedups(records)
    assert list(rounds["round"]) == [0, 1, 2] and set(rounds["config"]) == {"ngram k=2"}
    assert list(rounds["speedup_tpot"]) == pytest.approx([2.0, 2.5, 2.0])  # Σ spec-off decode s ÷ Σ decode s
    # spread: median 2.0, deviations 0, 0.5, 0 → MAD 0 ; 2, 2.5, 1.5 → MAD 0.5 ÷ 2
    assert relative_mad(rounds["speedup_tpot"]) == 0.0
    assert relative_mad([2.0, 2.5, 1.5]) == pytest.approx(0.25)


def test_the_batch_is_the_engines_measured_one_else_the_level():
    summary = pd.DataFrame({"config": ["a", "b", "c"], "concurrency": [4, 4, 8], "mean_batch": [3.2, None, 0.0]})
    assert list(batch_of(summary)) == [3.2, 4.0, 8.0]  # none (or no reading) falls back to the level
    assert list(batch_of(summary.drop(columns="mean_batch"))) == [4.0, 4.0, 8.0]


def test_occupancy_holds_each_sample_until_the_next():
    trace = [[0.0, 0], [1.0, 2], [3.0, 1], [4.0, 0]]  # idle 1 s, 2 running for 2 s, 1 for 1 s, closed
    held = occupancy(trace)
    assert held.to_dict() == {0.0: 1.0, 1.0: 1.0, 2.0: 2.0}
    assert mean_batch(trace) == pytest.approx((2 * 2 + 1 * 1) / 4)  # a gauge's time average, idle included
    assert occupancy("[[0, 3], [2.5, 0]]").to_dict() == {3.0: 2.5}  # a run row's JSON text reads the same
