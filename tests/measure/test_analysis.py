"""analysis for the draft-size tradeoff: per-draft tables from synthetic records with known answers,
and once on tiny models."""

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import WORDS, perturbed_copy, record, synthetic, tiny_tokenizer, word_model

from specnb.app.charts import measured
from specnb.measure import acceptance, analysis, runs
from specnb.models.load import Pair
from specnb.models.lookup import PromptLookup


@pytest.fixture
def records():
    """Two prompts; draft "big" at γ=1 (2x faster) and γ=2 (1.25x), draft "tiny" at γ=1 (0.5x)."""
    rows = []
    for p in ("p1", "p2"):
        rows.append(record("verifier-only", p, 10, 100.0, verify_ms=90.0, verifier_forwards=10))  # 10 ms per step
        rows.append(record("big γ=1", p, 10, 50.0, "big", 1, [3 if p == "p1" else 1], [4], steps=4, draft_ms=4.0))
        rows.append(record("big γ=2", p, 10, 80.0, "big", 2, [3, 2], [4, 4], steps=4, draft_ms=4.0))
        rows.append(record("tiny γ=1", p, 10, 200.0, "tiny", 1, [0], [10], steps=10, draft_ms=1.0))
    return pd.DataFrame(rows)


@pytest.fixture
def flops():
    return pd.DataFrame({"model": ["v", "big", "tiny"], "params": [100, 50, 1], "flops_per_token": [200, 100, 2],
                         "c_flops": [1.0, 0.5, 0.01]})


def test_per_token_alpha_pools_positions_reached_over_gammas(records):
    alpha = acceptance.token_alpha_by_draft(records).set_index("draft")
    # big: γ=1 reached 4+4, accepted 3+1; γ=2 reached 7+7, accepted 5+5 -> 14 / 22
    assert alpha.loc["big", "alpha_token"] == pytest.approx(14 / 22)
    assert alpha.loc["tiny", "alpha_token"] == 0.0


def test_draft_wall_c_pools_gammas(records):
    c = analysis.draft_wall_c(records).set_index("draft")
    assert c.loc["big", "verifier_step_ms"] == pytest.approx(10.0)  # 180 ms over 18 steps after prefill
    assert c.loc["big", "draft_ms_per_drafted_token"] == pytest.approx(16.0 / 24)
    assert c.loc["big", "c_wall"] == pytest.approx(16.0 / 24 / 10.0)
    assert c.loc["tiny", "c_wall"] == pytest.approx(0.01)


def test_best_is_chosen_among_the_gammas_that_win():
    summary = pd.DataFrame({"draft": "a", "gamma": [1, 4], "batch_size": 1, "candidate": ["a γ=1", "a γ=4"],
                            "speedup": [1.2, 1.4], "speedup_lo": [1.1, 0.8], "speedup_hi": [1.3, 2.0]})
    best = analysis.best_per_draft(summary)
    assert best["candidate"].tolist() == ["a γ=1"] and best["verdict"].tolist() == ["wins"]


def test_draft_table_known_answers(records, flops):
    table = analysis.draft_table(records, flops)
    assert table["draft"].tolist() == ["big", "tiny"]  # largest FLOPs first
    big, tiny = table.iloc[0], table.iloc[1]
    assert big["best_gamma"] == 1 and big["speedup"] == pytest.approx(2.0) and big["verdict"] == "wins"
    assert big["alpha"] == pytest.approx(4 / 8)  # accepted ÷ drafted at γ=1, both prompts
    assert big[["alpha_prompt_mean", "alpha_prompt_min", "alpha_prompt_max"]].tolist() == pytest.approx(
        [0.5, 0.25, 0.75]
    )
    assert big["n_prompts"] == 2 and big["alpha_prompt_std"] == pytest.approx(np.std([0.25, 0.75], ddof=1))
    assert big["alpha_token"] == pytest.approx(14 / 22)
    assert big["break_even_c"] == pytest.approx(14 / 22)  # at γ = 1 the break-even c is α itself
    assert big[["params", "flops_per_token", "c_flops"]].tolist() == [50, 100, 0.5]
    assert tiny["speedup"] == pytest.approx(0.5) and tiny["verdict"] == "loses"
    assert tiny["break_even_c"] == 0.0 and tiny["c_wall"] > tiny["break_even_c"]


def test_c_alpha_points_and_chart(records, flops):
    table = analysis.draft_table(records, flops)
    points = analysis.c_alpha_points(table)
    assert len(points) == 4 and set(points["c_kind"]) == {"FLOPs", "wall clock"}
    flops_big = points[(points["draft"] == "big") & (points["c_kind"] == "FLOPs")].iloc[0]
    assert flops_big["c"] == 0.5 and flops_big["alpha"] == pytest.approx(14 / 22) and flops_big["best_speedup"] == 2.0
    spec = measured.c_alpha_chart(points[points["c_kind"] == "FLOPs"], c_title="FLOPs c").to_dict()
    assert any(layer.get("encoding", {}).get("y", {}).get("title") == "FLOPs c" for layer in spec["layer"])


def test_profile_speedups_from_measured_positions(records, flops):
    table = analysis.draft_table(records, flops)
    pred = analysis.profile_speedups(records, table).set_index(["draft", "gamma", "c_kind"])
    # big at γ=2 (its largest): position 1 accepted 6 of 8, position 2 accepted 4 of the 6 that reached it
    assert pred.loc[("big", 2, "FLOPs"), "tau"] == pytest.approx(1 + 0.75 + 0.75 * 4 / 6)
    assert pred.loc[("big", 1, "FLOPs"), "speedup"] == pytest.approx(1.75 / 1.5)
    assert pred.loc[("tiny", 1, "wall clock"), "speedup"] == pytest.approx(1 / 1.01)
    longer = analysis.profile_speedups(records, table, max_gamma=4).query("draft == 'tiny'")
    assert len(longer) == 8 and longer["extrapolated"].tolist() == [False] * 2 + [True] * 6


def test_draft_table_on_tiny_models():
    """End to end on real records: every column filled and the α's consistent."""
    torch.set_num_threads(1)
    verifier = word_model(0)
    pair = Pair(verifier=verifier, tokenizer=tiny_tokenizer(), device=torch.device("cpu"), dtype=torch.float32,
                verifier_name="tiny")
    prompts = pd.DataFrame(
        {"id": ["a", "b"], "category": ["x", "y"], "prompt": [" ".join(WORDS[i : i + 8]) for i in (0, 5)]}
    )
    drafts = {"noisy": perturbed_copy(verifier, 0.3, 1), "lookup": PromptLookup()}
    recs = runs.run_interleaved(pair, prompts, runs.make_candidates(drafts, [1, 3]), max_new_tokens=10, progress=False)
    flops = pd.DataFrame(
        {"model": ["noisy", "lookup"], "params": [1, 0], "flops_per_token": [10, 0], "c_flops": [1.0, 0.0]}
    )
    table = analysis.draft_table(recs, flops)
    assert set(table["draft"]) == {"noisy", "lookup"} and table["best_gamma"].isin([1, 3]).all()
    assert (table["c_wall"] > 0).all() and (table["n_prompts"] == 2).all()
    pooled = recs[recs["gamma"] > 0].groupby("draft")[["accepted", "drafted"]].sum()
    per_token = table.set_index("draft")["alpha_token"]
    assert (
        per_token >= (pooled["accepted"] / pooled["drafted"]).reindex(per_token.index) - 1e-12
    ).all()  # reached ≤ drafted
    assert (table["alpha_prompt_min"] <= table["alpha_prompt_max"]).all()
    assert len(analysis.profile_speedups(recs, table)) == 2 * 3 * 2


def test_wall_clock_costs_from_records():
    base = synthetic("verifier-only", [10], [100.0], steps=0)
    base[0].update(verifier_forwards=10, verify_ms=90.0)  # 9 decoding steps after prefill: 10 ms each
    cand = synthetic("d γ=2", [10], [100.0], accepted=4, drafted=8, steps=4, gamma=2)
    cand[0].update(draft_ms=16.0, verify_ms=60.0)
    cost = analysis.wall_clock_costs(pd.DataFrame(base + cand)).iloc[0]
    assert cost["draft_ms_per_drafted_token"] == pytest.approx(2.0)
    assert cost["verify_ms_per_step"] == pytest.approx(15.0)
    assert cost["c_wall"] == pytest.approx(0.2)


def test_best_per_draft_and_simulated_runs():
    summary = pd.DataFrame(
        {
            "draft": ["", "a", "a", "b"],
            "gamma": [0, 1, 2, 1],
            "batch_size": 1,
            "speedup": [1.0, 1.1, 1.3, 0.8],
            "speedup_lo": float("nan"),
            "speedup_hi": float("nan"),
            "candidate": ["v", "a γ=1", "a γ=2", "b γ=1"],
        }
    )
    assert analysis.best_per_draft(summary)["candidate"].tolist() == ["a γ=2", "b γ=1"]
    frame = pd.DataFrame(
        synthetic("verifier-only", [10] * 4, [100] * 4)
        + synthetic("d γ=1", [10] * 4, [50, 50, 200, 200], accepted=1, drafted=4, gamma=1)
    )
    frame.loc[4, "accepted"] = 4  # one prompt accepts everything
    short = analysis.simulate_runs(runs.per_prompt(frame), run_size=2, n_runs=200, seed=1)
    assert len(short) == 200 and set(short["prompts"]) == {2}
    assert short["alpha"].min() == pytest.approx(2 / 8) and short["alpha"].max() == pytest.approx(5 / 8)
    assert set(short["speedup"].round(6)) <= {2.0, 0.5, round(20 / 250 / (20 / 200), 6)}
