"""Screening after the lowest level: a speculative configuration whose TPOT speedup's CI lies below 1 at the
lowest load is left out of the higher levels (on a dense verifier speculation only loses more as the batch
grows), judged by the summary's own CI at that level — simultaneous over its configurations, launch noise
counted — and named with it; spec-off, a configuration whose CI holds 1 and the adaptive schedule are kept;
a mixture-of-experts verifier gets the screened configuration back at the top level. Checked on simulated
servers, whose cost model says which configuration loses and by how much."""

import pandas as pd
import pytest
from helpers import closed

from specnb.measure.serving_load import Target
from specnb.measure.serving_stats import crossover, summarise_sweep
from specnb.measure.serving_sweep import SweepSettings, run_sweep, screen_out
from specnb.serve.simulated.sim_engine import SimConfig, SimCost, SimServer, expected_speedup
from specnb.serve.speculation import SPEC_OFF, Speculation

NGRAM3 = Speculation(entry="ngram", k=3, method="ngram", family="ngram")
DRAFT3 = Speculation(entry="smollm2-draft-s", k=3, method="draft_model", family="draft_model", uses_model=True)
COST = SimCost(fixed_ms=20.0, per_token_ms=1.0, draft_ms=1.0, acceptance=(0.8, 0.6, 0.4), speed=5.0)
SLOW_DRAFT = SimCost(fixed_ms=20.0, per_token_ms=1.0, draft_ms=100.0, acceptance=(0.8, 0.6, 0.4), speed=5.0)
PROMPTS = pd.DataFrame({"prompt": [f"prompt {i} words" for i in range(8)], "category": "a"})


@pytest.fixture(scope="module")
def servers():
    """Spec-off, n-gram k=3 (2.1x at batch 1) and a draft model whose 100 ms draft loses (0.42x at batch 1)."""
    with SimServer(SimConfig(speculation=SPEC_OFF, cost=COST)) as off, \
            SimServer(SimConfig(speculation=NGRAM3, cost=COST)) as ngram, \
            SimServer(SimConfig(speculation=DRAFT3, cost=SLOW_DRAFT)) as draft:
        yield [Target(url=s.url, engine="simulated", model=s.model, speculation=s.config.speculation)
               for s in (off, ngram, draft)]


def levels_run(sweep) -> dict[str, list[int]]:
    return {config: sorted(set(group["concurrency"])) for config, group in sweep.records.groupby("config")}


def test_a_configuration_that_loses_at_the_lowest_level_is_left_out_of_the_higher_ones(servers):
    assert expected_speedup(SLOW_DRAFT, DRAFT3, 1) < 0.5 < 2 < expected_speedup(COST, NGRAM3, 1)
    sweep = run_sweep(servers, PROMPTS, closed(1, 2, 4, tokens=16, range_ratio=0.5))
    assert sweep.stopped == "" and sweep.records["success"].all()
    assert levels_run(sweep) == {"spec-off": [1, 2, 4], "ngram k=3": [1, 2, 4], "smollm2-draft-s k=3": [1]}
    assert set(sweep.runs[sweep.runs["config"] == "smollm2-draft-s k=3"]["concurrency"]) == {1}
    lowest = lambda table: table[table["concurrency"] == 1]  # noqa: E731
    screen = summarise_sweep(lowest(sweep.records), lowest(sweep.runs))  # the summary's own CI at that level
    lost = screen.set_index("config").loc["smollm2-draft-s k=3"]
    assert lost["speedup_tpot_hi"] < 1.0 and lost["ci"] == "simultaneous" and lost["critical"] > 1.96
    assert sweep.screened == {"smollm2-draft-s k=3": f"smollm2-draft-s k=3 measured at 1 concurrent only: TPOT speedup "
                              f"{lost['speedup_tpot']:.2f}x [95% CI {lost['speedup_tpot_lo']:.2f}–"
                              f"{lost['speedup_tpot_hi']:.2f}, simultaneous over 2 configuration(s), launch noise not "
                              "measured] there, a loss at the lowest load, which on a dense verifier only grows "
                              "with the batch"}
    summary = summarise_sweep(sweep.records, sweep.runs)
    verdicts = crossover(summary, "speedup_tpot").set_index("config")["verdict"]  # one level is still a verdict
    assert verdicts["smollm2-draft-s k=3"] == "never pays" and verdicts["ngram k=3"] == "pays at every level measured"
    unscreened = run_sweep(servers, PROMPTS, closed(1, 2, tokens=16, range_ratio=0.5), SweepSettings(screen=False))
    assert unscreened.screened == {} and levels_run(unscreened)["smollm2-draft-s k=3"] == [1, 2]
    moe = run_sweep(servers, PROMPTS, closed(1, 2, 4, tokens=16, range_ratio=0.5), SweepSettings(moe=True))
    assert list(moe.screened) == ["smollm2-draft-s k=3"]  # still named, with its CI
    assert levels_run(moe)["smollm2-draft-s k=3"] == [1, 4]  # and measured at the top level all the same


def test_the_screen_counts_the_stored_launch_noise(servers):
    """A store whose pairs say two launches differ by ±60% in log: no lowest-level loss of 0.44x is beyond
    that, so nothing is screened; the same sweep with an empty store screens the slow draft."""
    from specnb.measure.serving_stats import AaPair, NoiseKey, save_pairs

    key = NoiseKey(machine="test", engine="simulated", version="noisy")
    save_pairs(key, [AaPair(id=str(i), date="2026-12-01T00:00:00+00:00", levels=[1.0], d=[0.6 * (-1) ** i], v=[0.0])
                     for i in range(3)])
    noisy = run_sweep(servers, PROMPTS, closed(1, 2, tokens=16, range_ratio=0.5), SweepSettings(noise_key=key))
    assert noisy.screened == {} and levels_run(noisy)["smollm2-draft-s k=3"] == [1, 2]
    empty = run_sweep(servers, PROMPTS, closed(1, 2, tokens=16, range_ratio=0.5),
                      SweepSettings(noise_key=NoiseKey(machine="test", engine="simulated", version="none")))
    assert list(empty.screened) == ["smollm2-draft-s k=3"]


def test_a_ci_that_holds_1_spec_off_and_a_schedule_are_kept(servers):
    """At the lowest level: a configuration whose paired requests run ±10% of spec-off's, prompt by prompt, has a
    CI holding 1; the losing draft's records relabelled as the adaptive schedule, or with no spec-off beside them,
    lose as much and are kept all the same."""
    sweep = run_sweep(servers, PROMPTS, closed(1, tokens=16, range_ratio=0.5))
    load = closed(1, tokens=16, range_ratio=0.5)[0]
    off = sweep.records[sweep.records["config"] == "spec-off"]
    wobble = off["prompt_index"].map(lambda i: 0.9 if i % 2 else 1.1)
    even = off.assign(config="suffix k=3", latency=off["ttft"] + (off["latency"] - off["ttft"]) * wobble)
    loser = sweep.records[sweep.records["config"] == "smollm2-draft-s k=3"]
    runs = lambda config, name: sweep.runs[sweep.runs["config"] == config].assign(config=name)  # noqa: E731
    sweep.records = pd.concat([sweep.records, even, loser.assign(config="adaptive")], ignore_index=True)
    sweep.runs = pd.concat([sweep.runs, runs("spec-off", "suffix k=3"), runs("smollm2-draft-s k=3", "adaptive")],
                           ignore_index=True)
    summary = summarise_sweep(sweep.records, sweep.runs).set_index("config")
    assert summary.loc["suffix k=3", "speedup_tpot_lo"] < 1.0 < summary.loc["suffix k=3", "speedup_tpot_hi"]
    suffix = Speculation(entry="suffix", k=3, method="suffix", family="suffix")
    adaptive = Speculation(entry="smollm2-draft-s", k=3, method="draft_model", family="draft_model", adaptive=True,
                           schedule=((1, 4096, 3),))
    targets = [*servers, *(Target(url="http://127.0.0.1:1", engine="simulated", speculation=s)
                           for s in (suffix, adaptive))]
    assert list(screen_out(sweep, load, targets, seed=0)) == ["smollm2-draft-s k=3"]
    no_baseline = sweep.records[sweep.records["config"] != "spec-off"]
    sweep.records = no_baseline
    assert screen_out(sweep, load, targets, seed=0) == {}
