"""analysis for the gamma sweep (03) and batch size (05) notebooks: step economics, verdicts,
Leviathan predictions, forward scaling, ragged-batch costs; synthetic records with known answers
plus one run of the real engine on tiny random models."""

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import WORDS, gamma_sweep, perturbed_copy, sweep_record, tiny_tokenizer, word_model

from specnb.app.charts import measured
from specnb.core.errors import ParameterError
from specnb.measure import acceptance, analysis, forward, runs
from specnb.models.load import Pair

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def sweep():
    return gamma_sweep()


def test_step_costs_express_a_step_in_verifier_only_tokens(sweep):
    steps = analysis.measured_steps(sweep).set_index("candidate")
    assert list(steps.index) == ["d γ=2", "d γ=6"]
    win = steps.loc["d γ=2"]
    assert win["baseline_ms_per_token"] == pytest.approx(10.0)
    assert win[["draft_ms_per_step", "verify_ms_per_step", "overhead_ms_per_step"]].tolist() == pytest.approx(
        [10, 12, 2]
    )
    assert win["tokens_per_step"] == pytest.approx(2.5) and win["break_even_tokens"] == pytest.approx(2.4)
    assert win[["draft_cost", "verify_cost", "overhead_cost"]].sum() == pytest.approx(win["break_even_tokens"])
    assert win["decode_speedup"] == pytest.approx(2.5 / 2.4)
    lose = steps.loc["d γ=6"]
    assert lose["break_even_tokens"] == pytest.approx(4.4) and lose["decode_speedup"] == pytest.approx(2 / 4.4)
    with pytest.raises(ParameterError, match="baseline"):
        analysis.measured_steps(sweep[sweep["gamma"] > 0])


def test_gamma_verdicts_name_winner_and_loser(sweep):
    summary = runs.summarise(sweep, n_boot=200)
    verdicts = analysis.gamma_verdicts(summary, analysis.measured_steps(sweep)).set_index("candidate")
    assert verdicts.loc["d γ=2", "verdict"] == "wins" and verdicts.loc["d γ=6", "verdict"] == "loses"
    one = runs.summarise(sweep[sweep["prompt_ids"] == "p0"], n_boot=50)  # one prompt: no CI, point decides
    assert analysis.gamma_verdicts(one, analysis.measured_steps(sweep))["verdict"].tolist() == ["wins", "loses"]
    flat = summary.assign(speedup_lo=0.9, speedup_hi=1.1)
    assert set(analysis.gamma_verdicts(flat, analysis.measured_steps(sweep))["verdict"]) == {"inconclusive"}


def test_leviathan_predictions_from_measured_alpha_and_both_cs():
    summary = pd.DataFrame(
        {
            "candidate": ["verifier-only", "d γ=2", "d γ=4", "lookup γ=2"],
            "draft": ["", "d", "d", "lookup"],
            "gamma": [0, 2, 4, 2],
            "batch_size": 1,
            "alpha": [np.nan, 0.5, 1.0, np.nan],
        }
    )
    wall = pd.DataFrame({"candidate": ["d γ=2", "d γ=4"], "c_wall": [0.25, 0.3]})
    pred = analysis.leviathan_predictions(summary, {"d": 0.1}, wall)
    assert len(pred) == 4  # baseline and the lookup that never drafted have no α
    at2 = pred[pred["gamma"] == 2].set_index("kind")["speedup"]
    assert at2["FLOPs c"] == pytest.approx(1.75 / 1.2) and at2["wall-clock c"] == pytest.approx(1.75 / 1.5)
    assert np.isfinite(pred[pred["gamma"] == 4]["speedup"]).all()  # α = 1 is clipped, not a division by zero
    assert set(pred["source"]) == {"d (Leviathan, FLOPs c)", "d (Leviathan, wall-clock c)"}
    assert len(analysis.leviathan_predictions(summary, {}, pd.DataFrame())) == 0


def test_token_alpha_counts_only_reached_positions_and_feeds_predictions():
    # γ=3, three steps accepting 3, 1, 0: position 1 reached 3x (2 accepted), 2 reached 2x (1), 3 reached 1x (1)
    rec = sweep_record("d γ=3", 3, tokens=8, forwards=4, accepted=4, drafted=9, steps=3, accept_lengths=[3, 1, 0])
    rec.update(accepted_by_position=[2, 1, 1], drafted_by_position=[3, 3, 3])
    frame = pd.DataFrame([sweep_record("verifier-only", 0, tokens=8, forwards=8, verify_ms=70.0), rec])
    alpha = acceptance.token_alpha_by_candidate(frame)
    assert alpha.set_index("candidate").loc["d γ=3", ["reached", "alpha_token"]].tolist() == pytest.approx([6, 4 / 6])
    summary = runs.summarise(frame, n_boot=10).merge(alpha[["candidate", "batch_size", "alpha_token"]], how="left")
    pred = analysis.leviathan_predictions(summary, {"d": 0.0}, pd.DataFrame(), alpha="alpha_token")
    assert pred["alpha"].tolist() == pytest.approx([4 / 6])
    assert pred["speedup"].tolist() == pytest.approx([(1 - (4 / 6) ** 4) / (1 - 4 / 6)])
    chart = measured.alpha_chart(summary).to_dict()
    rates = {d["kind"]: d["rate"] for d in next(iter(chart["datasets"].values()))}
    assert rates == pytest.approx({"accepted ÷ drafted": 4 / 9, "accepted ÷ reached (per-token α)": 4 / 6})


def test_forward_scaling_and_knee():
    # memory-bound up to 8 tokens per forward (10 ms), then 1.25 ms per extra token
    grid = pd.DataFrame(
        [
            {"model": "v", "n_tokens": n, "batch_size": b, "median_ms": 10.0 + 1.25 * max(0, n * b - 8)}
            for b in (1, 2, 4, 8)
            for n in (1, 4)
        ]
    )
    scaled = forward.forward_scaling(grid)
    assert scaled["tokens"].tolist() == sorted(scaled["tokens"].tolist())
    assert scaled.set_index("tokens").loc[32, "times_one_token"] == pytest.approx(4.0)
    assert scaled.set_index("tokens").loc[8, "ms_per_token"].tolist() == pytest.approx([1.25, 1.25])
    assert forward.batch_knee(grid) == 16  # 10 + 1.25·8 = 20 ms = 2 one-token forwards
    assert np.isnan(forward.batch_knee(grid, ratio=10))
    with pytest.raises(ParameterError, match="1 token at batch size 1"):
        forward.forward_scaling(grid[grid["batch_size"] > 1])


def test_ragged_summary_shares():
    frame = pd.DataFrame(
        [
            sweep_record("verifier-only", 0, tokens=20, forwards=8, batch_size=4),  # 28 row-steps, 16 live
            sweep_record(
                "d γ=2", 2, tokens=20, forwards=5, batch_size=4, accepted=10, drafted=24, steps=12, ragged=6, idle=4
            ),
        ]
    )
    r = analysis.ragged_summary(frame).set_index("candidate")
    assert r.loc["verifier-only", ["row_steps", "idle_row_steps", "ragged_slots"]].tolist() == [28, 12, 0]
    assert r.loc["verifier-only", "idle_row_share"] == pytest.approx(12 / 28)
    assert r.loc["d γ=2", "masked_slot_share"] == pytest.approx(6 / (6 + 10 + 12))
    assert r.loc["d γ=2", "idle_row_share"] == pytest.approx(4 / 16)
    assert r.loc["d γ=2", "ragged_slots_per_token"] == pytest.approx(6 / 20)


def test_on_real_engine_records_the_counts_add_up():
    """Batch 2 on tiny random models: a step's parts sum to its time, idle + live row-steps
    = rows × forwards, and the charts build."""
    verifier = word_model(0)
    pair = Pair(verifier=verifier, tokenizer=tiny_tokenizer(), device=torch.device("cpu"), dtype=torch.float32,
                verifier_name="tiny")
    rng = np.random.default_rng(4)
    prompts = pd.DataFrame(
        {
            "id": list("abcd"),
            "category": "x",
            "prompt": [" ".join(rng.choice(WORDS[:20], size=n)) for n in (5, 11, 8, 6)],
        }
    )
    candidates = runs.make_candidates({"noisy": perturbed_copy(verifier, 0.3, 1)}, gammas=[1, 3])
    records = pd.concat(
        [
            runs.run_interleaved(pair, prompts, candidates, max_new_tokens=10, batch_size=b, progress=False)
            for b in (1, 2)
        ],
        ignore_index=True,
    )
    steps = analysis.measured_steps(records)
    assert len(steps) == 4 and (steps["tokens_per_step"] >= 1).all()
    assert np.allclose(
        steps["step_ms"], steps[["draft_ms_per_step", "verify_ms_per_step", "overhead_ms_per_step"]].sum(axis=1)
    )
    ragged = analysis.ragged_summary(records)
    spec = records[records["gamma"] > 0]
    assert ((spec["steps"] + spec["idle_row_steps"]) == (spec["verifier_forwards"] - 1) * spec["batch_size"]).all()
    assert (ragged[ragged["batch_size"] == 1]["ragged_slots"] == 0).all()
    assert ragged["masked_slot_share"].between(0, 1).all() and ragged["idle_row_share"].between(0, 1).all()
    summary = runs.summarise(records, n_boot=50)
    verdicts = analysis.gamma_verdicts(summary, steps)
    assert set(verdicts["verdict"]) <= {"wins", "loses", "inconclusive"}
    grid = forward.measure_forward_grid(verifier, n_tokens=(1, 2), batch_sizes=(1, 2), context_len=4,
                                        timing=forward.TimingPlan(repeats=1))
    for chart in (
        measured.step_cost_chart(steps[steps["batch_size"] == 1]),
        measured.accept_length_chart(records, 3),
        measured.ragged_cost_chart(ragged),
        measured.per_token_vs_batch_chart(forward.forward_scaling(grid)),
    ):
        assert chart.to_dict()["title"]


def test_accept_length_chart_shares_and_iid_reference(sweep):
    spec = measured.accept_length_chart(sweep, 2).to_dict()
    data = next(iter(spec["datasets"].values()))
    shares = {kind: [d["share"] for d in data if d["kind"] == kind] for kind in ("measured", "i.i.d. at the draft's α")}
    assert shares["measured"] == pytest.approx([0, 0.5, 0.5])  # lengths 2, 2, 1, 1 per prompt
    assert sum(shares["i.i.d. at the draft's α"]) == pytest.approx(1.0)
    assert "α = 0.75" in spec["title"]["subtitle"][0] and "τ = 2.50" in spec["title"]["subtitle"][0]


