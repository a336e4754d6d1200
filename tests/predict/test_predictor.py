"""predict/calibrate: cost-model fit, acceptance profiles, prediction vs closed forms,
the recommendation, the hand-entered reference profile, profile JSON, and bad inputs (API and CLI).
Synthetic numbers, plus one end-to-end run on tiny random models."""


import json
from dataclasses import asdict

import numpy as np
import pandas as pd
import pytest
from helpers import DRAFT, synthetic_profile

from specnb.core import theory
from specnb.core.errors import ParameterError
from specnb.decode.kinds.kind import PER_STEP
from specnb.measure import acceptance
from specnb.predict import costs, predictor, reference_replay, traces, what_if

QUICK = predictor.Bootstrap(n_boot=20, sims_per_boot=4)  # a coarse band, fast

# ---------------------------------------------------------------------------- cost model


def test_cost_model_prices_each_kernel_stretch_on_its_own():
    """A mixed path (oneDNN at 1 and 4..64 rows, MKL's GEMM at 2..3): verifying 2 tokens costs 1.9x one,
    4 tokens 1.0x. One line through every M >= 2 prices both alike (here: as the majority, 4+); each stretch on its own
    prices what runs, and a batch's tokens in all pick the stretch."""
    grid = pd.DataFrame({"n_tokens": [1, 2, 3, 4, 5, 6, 7], "batch_size": 1,
                         "median_ms": [60.0, 114, 116, 60, 61, 62, 63]})
    pooled = costs.fit_cost_model(grid)
    split = costs.fit_cost_model(grid, breaks=(2, 4, 65))
    assert split.forward_ms(np.array([1, 2, 3, 4, 7])) == pytest.approx([60.0, 114, 116, 60, 63])
    assert split.forward_ms(2, 2) == pytest.approx(60.0)  # 2 tokens x 2 rows: the oneDNN stretch
    assert split.forward_ms(40, 2) == pytest.approx(pooled.forward_ms(40, 2))  # past 64 rows, no point: the pooled line
    assert abs(pooled.forward_ms(2) - 114) > 40  # what it fixes: the pooled line prices 2 tokens as 4
    assert costs.CostModel(**json.loads(json.dumps(asdict(split)))).forward_ms(3) == pytest.approx(116.0)


def test_route_breaks_follow_the_rows_each_kernel_takes():
    from helpers import tiny_model

    from specnb.models.kernels import route_breaks, use_kernels

    assert route_breaks(tiny_model()) == (2,)  # MKL: matrix-vector at 1 row, GEMM from 2
    assert route_breaks(use_kernels(tiny_model(), "onednn")) == (2, 65)
    assert route_breaks(use_kernels(tiny_model(), "onednn", spans=((1, 1), (4, 64)))) == (2, 4, 65)
    assert route_breaks(None) == (2,)  # prompt lookup: nothing runs


def test_fit_needs_two_sizes():
    grid = pd.DataFrame({"n_tokens": [1, 1], "batch_size": [1, 1], "median_ms": [5.0, 6.0]})
    with pytest.raises(ParameterError, match="two sizes"):
        costs.fit_cost_model(grid)


# ---------------------------------------------------------------------------- acceptance


def sample_accept_lengths(profile, steps, rng) -> np.ndarray:
    """Independent Monte Carlo: per step, accept positions in order while a coin with a_i lands."""
    lengths = np.zeros(steps, dtype=int)
    for s in range(steps):
        for a in profile:
            if rng.random() >= a:
                break
            lengths[s] += 1
    return lengths


def test_tokens_per_step_matches_monte_carlo():
    profile = np.array([0.9, 0.7, 0.6, 0.4, 0.3])
    lengths = sample_accept_lengths(profile, 20000, np.random.default_rng(1))
    tau = lengths.mean() + 1
    se = lengths.std() / np.sqrt(len(lengths))
    assert abs(theory.tokens_per_step_from_profile(profile) - tau) < 4 * se


def test_profile_recovered_from_bench_style_records():
    true = [0.85, 0.6, 0.5, 0.3]
    rng = np.random.default_rng(3)
    rows = []
    for prompt in ("p1", "p2", "p3"):
        lengths = sample_accept_lengths(true, 3000, rng)
        rows.append(
            {
                "draft": "d",
                "gamma": 4,
                "prompt_ids": prompt,
                "accepted_by_position": [int((lengths > i).sum()) for i in range(4)],
                "drafted_by_position": [len(lengths)] * 4,
            }
        )
    profile = acceptance.profile_from_records(pd.DataFrame(rows), "d")
    assert profile.gamma == 4 and len(profile.per_prompt) == 3
    reached = np.array(profile.reached)
    se = np.sqrt(np.array(true) * (1 - np.array(true)) / reached)
    assert np.all(np.abs(profile.conditional() - true) < 4 * se)


def test_counts_from_positions_handles_shortened_drafts():
    # 3 steps: accepted 2 of 3, 0 of 3, then a last step that drafted 1 and accepted it
    reached, accepted = acceptance.counts_from_positions([2, 1, 0], [3, 2, 2])
    assert reached == [3, 2, 1] and accepted == [2, 1, 0]


def lookup_profile(runs, proposed, cap=4, step_ms=0.1) -> costs.HardwareProfile:
    """``synthetic_profile`` whose draft is a lookup drafter with the given trace (repeated)."""
    profile = synthetic_profile(overhead=(0.0, 0.0))
    profile.drafts[DRAFT] = costs.DraftCosts(kind=PER_STEP, decode=None, prefill=None, flops_per_token=0.0,
                                             step_ms=step_ms)
    profile.traces[DRAFT] = [traces.AcceptanceTrace(prompt_id=p, runs=list(runs), proposed=list(proposed), cap=cap,
                                                    hit_budget=True) for p in "ab"]
    return profile


def test_proposals_beyond_the_trace_cap_are_flagged():
    profile = lookup_profile([0] + [4] * 47, [0] + [4] * 47)
    pred = predictor.predict(profile, DRAFT, range(1, 7), bootstrap=QUICK)
    assert list(pred.table["extrapolated"]) == [False] * 4 + [True] * 2
    assert pred.notes and "up to 4 tokens" in pred.notes[0]


def test_a_draft_that_proposes_nothing_costs_only_its_bookkeeping():
    """A lookup drafter without matches is verified 1 token at a time: verifier-only plus its host
    time, not the γ + 1-token forward a "k drafts per step" model would charge."""
    profile = lookup_profile([0] * 48, [0] * 48, step_ms=0.0)
    pred = predictor.predict(profile, DRAFT, [4], bootstrap=QUICK)
    assert pred.predicted_speedup == pytest.approx(1.0, abs=1e-9)
    assert pred.table["tokens_per_step"].iloc[0] == pytest.approx(1.0)


# ---------------------------------------------------------------------------- prediction


def test_prediction_agrees_with_leviathan_when_its_assumptions_hold():
    """Free verification, no prefill or overhead, long generation, flat α: the Leviathan formula
    with wall-clock c is exact, so the simulated prediction must match it."""
    alpha, c, t_v = 0.7, 0.2, 50.0
    profile = synthetic_profile(
        t_v=(t_v, 0.0), t_d=(c * t_v, 0.0), prefill=(0.0, 0.0), overhead=(0.0, 0.0), alpha=alpha, n_new=400
    )
    pred = predictor.predict(profile, DRAFT, range(1, 9), bootstrap=QUICK)
    # the draft's catch-up forward is priced as an ordinary one, as Leviathan's γ·c does
    expected = theory.expected_speedup(alpha, np.arange(1, 9), c)
    assert np.allclose(pred.table["predicted_speedup"], expected, rtol=0.02)
    assert np.allclose(pred.table["break_even_alpha"], theory.break_even_alpha(np.arange(1, 9), c), atol=0.02)


def test_recommendation_is_the_argmax():
    pred = predictor.predict(synthetic_profile(), DRAFT, range(1, 9),
                             bootstrap=predictor.Bootstrap(n_boot=30, sims_per_boot=4))
    table = pred.table
    assert pred.best_gamma == int(table.loc[table["predicted_speedup"].idxmax(), "gamma"])
    assert pred.recommended_gamma == pred.best_gamma and pred.predicted_speedup > 1.0
    assert pred.speedup_lo <= pred.predicted_speedup <= pred.speedup_hi
    assert 0.0 < pred.break_even_alpha < 1.0


def test_no_recommendation_when_nothing_beats_the_verifier():
    slow = synthetic_profile(t_d=(55.0, 3.0), alpha=0.2)
    pred = predictor.predict(slow, DRAFT, range(1, 5), bootstrap=predictor.Bootstrap(n_boot=30, sims_per_boot=4))
    assert pred.recommended_gamma is None and pred.predicted_speedup <= 1.0
    assert (pred.table["predicted_speedup"] <= 1.0).all()
    data = pred.as_dict()
    assert data["recommended_gamma"] is None and len(data["table"]) == 4


def test_batch_runs_until_the_slowest_row():
    profile = synthetic_profile(t_v=(60.0, 0.0), t_d=(6.0, 0.0), prefill=(0.0, 0.0), overhead=(0.0, 0.0))
    band = predictor.Bootstrap(n_boot=40, sims_per_boot=8)
    one = predictor.predict(profile, DRAFT, [4], predictor.Workload(batch_size=1), bootstrap=band)
    four = predictor.predict(profile, DRAFT, [4], predictor.Workload(batch_size=4), bootstrap=band)
    # costs do not depend on batch here, so only the slowest-row effect lowers the speedup
    assert four.predicted_speedup < one.predicted_speedup


def test_what_if_moves_the_verdict():
    profile = synthetic_profile()
    base = predictor.predict(profile, DRAFT, range(1, 9), bootstrap=QUICK)
    better = what_if.what_if(profile, DRAFT, alpha=0.95)
    faster = what_if.what_if(profile, DRAFT, draft_speed=3.0)
    assert better.predicted_speedup > base.predicted_speedup
    assert faster.predicted_speedup > base.predicted_speedup
    with pytest.raises(ParameterError):
        what_if.what_if(profile, DRAFT, draft_speed=0)


def test_what_if_with_nothing_changed_is_the_prediction():
    """A draft with measured forward times: the what-if at speed 1.0 keeps them, not just the line."""
    profile = synthetic_profile()
    grid = pd.DataFrame({"n_tokens": [1, 2, 1, 2], "batch_size": [1, 1, 2, 2], "median_ms": [9.0, 16.0, 12.0, 18.0]})
    profile.drafts[DRAFT].decode = costs.fit_cost_model(grid)
    base = predictor.predict(profile, DRAFT, range(1, 5), bootstrap=predictor.Bootstrap(n_boot=40, sims_per_boot=8))
    same = what_if.what_if(profile, DRAFT, gammas=range(1, 5))
    assert same.table["predicted_speedup"].to_numpy() == pytest.approx(base.table["predicted_speedup"].to_numpy())
    decode = profile.drafts[DRAFT].decode
    faster = what_if.scale(decode, 2.0)
    assert faster.forward_ms(np.array([1, 2, 3])) == pytest.approx(decode.forward_ms(np.array([1, 2, 3])) / 2)
    assert decode.forward_ms(1) == 9.0 and decode.forward_ms(2) == pytest.approx(14.0)  # M=2 pooled: 16 and 12


def test_reference_mps_profile_predicts_leviathans_step_arithmetic():
    profile = reference_replay.reference_mps_profile(0.0)
    draft = next(iter(profile.drafts))
    pred = predictor.predict(profile, draft, range(1, 9), bootstrap=QUICK)
    tok_s = pred.table.set_index("gamma")["predicted_tok_s"]
    assert pred.baseline_tok_s == pytest.approx(14.4, rel=0.01)
    # by hand: t_v = 1000/14.4 = 69.44 ms, t_d = t_v/2.8 = 24.80 ms, free verification, flat α = 0.392:
    # a step takes γ·t_d + t_v and yields τ = (1 − α^(γ+1))/(1 − α) tokens; γ = 1: 1.392/94.25 ms = 14.77
    # tok/s, γ = 4: 1.6403/168.65 ms = 9.73 tok/s. The predictor replays 128-token generations, whose
    # last step is cut at the budget, so it sits up to ~1% above the infinite-length formula.
    hand = {1: 14.770, 2: 12.984, 4: 9.662, 8: 6.139}
    for gamma, expected in hand.items():
        assert tok_s[gamma] == pytest.approx(expected, rel=0.03)
    # FLOPs-c reproduces the reference's 0.99x at γ = 4
    assert theory.format_speedup(pred.table.set_index("gamma").loc[4, "flops_leviathan_speedup"]) == "0.99x"
    # costlier verification can only slow speculation down
    costly = predictor.predict(reference_replay.reference_mps_profile(0.2), draft, [4, 7], bootstrap=QUICK)
    assert (costly.table["predicted_tok_s"].to_numpy() < tok_s.loc[[4, 7]].to_numpy()).all()


# ---------------------------------------------------------------------------- JSON and bad input


def test_bad_arguments():
    profile = synthetic_profile()
    with pytest.raises(ParameterError, match="gamma"):
        predictor.predict(profile, DRAFT, [0, 1])
    with pytest.raises(ParameterError, match="no calibration for draft"):
        predictor.predict(profile, "other", [1])
    with pytest.raises(ParameterError, match="batch_size"):
        predictor.predict(profile, DRAFT, [1], predictor.Workload(batch_size=0))


def test_a_gain_inside_the_band_is_not_recommended():
    """One calibration prompt the draft gets all right, one it gets all wrong: on average speculation
    wins, but a bootstrap set of the bad prompt loses, so the band reaches below 1.0x: no
    recommendation, and a note saying why."""
    profile = synthetic_profile(t_v=(60.0, 0.0), t_d=(2.0, 0.0), prefill=(0.0, 0.0), overhead=(0.0, 0.0), n_new=40)
    profile.traces[DRAFT] = [
        traces.AcceptanceTrace(prompt_id="good", runs=[40] * 40, proposed=None, cap=None, hit_budget=True),
        traces.AcceptanceTrace(prompt_id="bad", runs=[0] * 40, proposed=None, cap=None, hit_budget=True),
    ]
    pred = predictor.predict(profile, DRAFT, [4], bootstrap=predictor.Bootstrap(n_boot=100, sims_per_boot=4))
    assert pred.predicted_speedup > 1.3 and pred.speedup_lo < 1.0
    assert pred.best_gamma == 4 and pred.recommended_gamma is None
    assert any("not recommended" in note for note in pred.notes)
    assert (
        predictor.clears_break_even(1.01, 1.02)
        and not predictor.clears_break_even(1.01, 0.97)
        and not predictor.clears_break_even(0.9, 0.8)
    )


