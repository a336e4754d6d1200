"""validate: claims read through the measured CIs, and where a budget's extra repeats go, on hand-made tables."""


import pandas as pd
import pytest
from helpers import sweep_record

from specnb.core.errors import ParameterError
from specnb.measure.sizing import Spread
from specnb.predict.validate import add_errors, check_choice, more_repeats, validation_summary


def points(rows, units=4) -> pd.DataFrame:
    """Grid points from (draft, γ, predicted, predicted lo, measured, measured lo, measured hi)."""
    table = pd.DataFrame(rows, columns=["draft", "gamma", "predicted_speedup", "predicted_lo", "measured_speedup",
                                        "measured_lo", "measured_hi"])
    table = table.assign(batch_size=1, predicted_hi=table["predicted_speedup"] + 0.1, units=units, units_needed=17,
                         flops_leviathan_speedup=1.0, wallclock_leviathan_speedup=1.0)
    return add_errors(table)


def test_a_recommendation_is_wrong_only_when_the_cis_separate():
    # predicted best: d γ=1 (band clears 1.0); measured best: d γ=3, 10% faster
    clear = points([("d", 1, 1.20, 1.05, 1.00, 0.97, 1.03), ("d", 3, 1.10, 1.02, 1.10, 1.06, 1.14)])
    check = check_choice(clear, draft="d", batch_size=1)
    assert check["recommended"] == "d γ=1" and not check["within_5pct"] and check["wrong"]  # 1.06 > 1.03
    overlap = points([("d", 1, 1.20, 1.05, 1.00, 0.90, 1.10), ("d", 3, 1.10, 1.02, 1.10, 1.00, 1.20)])
    check = check_choice(overlap, draft="d", batch_size=1)
    assert not check["within_5pct"] and not check["wrong"]  # 10% short on the point estimates, within noise
    # declining (verifier-only, exactly 1.0x) is wrong only when a draft's whole CI is above 1.0
    declined = points([("d", 1, 0.95, 0.90, 1.08, 1.02, 1.14)])
    check = check_choice(declined, draft="d", batch_size=1)
    assert check["recommended"] is None and check["recommended_hi"] == 1.0 and check["wrong"]
    assert not check_choice(points([("d", 1, 0.95, 0.90, 1.08, 0.98, 1.18)]), draft="d", batch_size=1)["wrong"]
    summary = validation_summary(overlap)
    assert summary["recommendation_verdict"] == "inconclusive" and summary["target_recommendation_met"] is False


def test_the_error_claim_is_met_missed_or_inconclusive():
    # predicted 1.20 against measured 1.00: a 20% error, the CI decides whether it is beyond noise
    narrow = points([("d", 1, 1.20, 1.10, 1.00, 0.97, 1.03), ("d", 3, 1.20, 1.10, 1.00, 0.98, 1.02)])
    wide = points([("d", 1, 1.20, 1.10, 1.00, 0.85, 1.25), ("d", 3, 1.20, 1.10, 1.00, 0.80, 1.15)])
    close = points([("d", 1, 1.05, 0.95, 1.00, 0.85, 1.25), ("d", 3, 1.02, 0.95, 1.00, 0.80, 1.15)])
    missed, inconclusive, met = (validation_summary(t) for t in (narrow, wide, close))
    assert missed["error_verdict"] == "missed" and missed["median_error_beyond_ci"] == pytest.approx((0.17 + 0.18) / 2)
    assert inconclusive["error_verdict"] == "inconclusive" and inconclusive["within_ci"] == 0.5
    assert inconclusive["median_error_beyond_ci"] == pytest.approx(0.05 / 2)  # inside one CI, 0.05 past the other
    assert met["error_verdict"] == "met" and met["target_error_met"] is True
    assert not inconclusive["target_error_met"] and not missed["target_error_met"]


def test_extra_repeats_go_to_the_wide_points_the_highest_predicted_first():
    table = points([("d", 1, 1.30, 1.1, 1.00, 0.80, 1.20), ("d", 3, 1.10, 1.0, 1.00, 0.80, 1.20),
                    ("e", 1, 1.20, 1.1, 1.00, 0.99, 1.01)])  # e γ=1 is already within ±5%
    spread = Spread(sd=0.1, df=10, units=12, tokens_per_unit=16, wall_ms_per_unit=500.0)  # needs 17 units
    # 4 units so far, 4 per repeat: 4 more repeats = 16 runs each, 8 s per candidate with its baseline's 8 s
    assert more_repeats(table, spread, 4, 24.0) == (["d γ=1", "d γ=3"], 4)
    assert more_repeats(table, spread, 4, 16.0) == (["d γ=1"], 4)
    assert more_repeats(table, spread, 4, 8.0) == (["d γ=1"], 2)  # not enough for 4 repeats: what fits
    assert more_repeats(table, spread, 4, 3.0) == ([], 0)
    assert more_repeats(table.assign(units=17), spread, 4, 60.0) == ([], 0)  # already sized


def test_the_budget_buys_repeats_for_the_wide_points_only(monkeypatch):
    """validate's second pass, with the runs and predictions stubbed: the first pass is noisy, so
    the budget goes to more repeats of the highest-predicted point (with verifier-only), numbered
    after the first pass's repeats so every run pairs with its own baseline run."""
    import numpy as np

    from specnb.measure.runs import make_candidates, summarise
    from specnb.predict import validate as module

    calls = []
    rng = np.random.default_rng(0)

    def run_interleaved(pair, frame, candidates, *, repeats, batch_size, warmup=True, **_):
        calls.append(([c.name for c in candidates], repeats, warmup))
        rows = [sweep_record(c.name, c.gamma, pid, tokens=16, forwards=8, verify_ms=1e3 * np.exp(rng.normal(0, 0.2)),
                             steps=8, accepted=4, drafted=8 * c.gamma, batch_size=batch_size, repeat=r)
                for r in range(repeats) for pid in frame["id"] for c in candidates]
        return pd.DataFrame(rows).assign(draft=lambda f: f["draft"].where(f["gamma"] == 0, "d"))

    def grid_table(profile, pair, models, records, frames, n_new):
        measured = summarise(records, n_boot=50).query("gamma > 0")
        return add_errors(measured.assign(
            measured_speedup=measured["speedup"], measured_lo=measured["speedup_lo"],
            measured_hi=measured["speedup_hi"], units=measured["records"], units_needed=99,
            predicted_speedup=measured["gamma"].map({1: 1.2, 3: 1.1}), predicted_lo=1.0, predicted_hi=1.3,
            flops_leviathan_speedup=1.0, wallclock_leviathan_speedup=1.0))

    monkeypatch.setattr(module, "run_interleaved", run_interleaved)
    monkeypatch.setattr(module, "grid_table", grid_table)
    monkeypatch.setattr(module, "make_candidates", lambda models, gammas: make_candidates({"d": object()}, gammas))
    prompts = pd.DataFrame({"id": list("abcd"), "category": "x", "prompt": list("abcd")})
    plan = {"gammas": (1, 3), "batch_sizes": (1,), "max_new_tokens": 16}
    records, table = module.validate(None, (None, {"d": None}), prompts, **plan, budget_s=1e4)
    assert calls[0] == (["verifier-only", "d γ=1", "d γ=3"], 1, True)
    assert calls[1][0][0] == "verifier-only" and calls[1][0][1] == "d γ=1" and calls[1][2] is False
    extra = calls[1][1]
    assert extra >= 1 and set(records["repeat"]) == set(range(1 + extra))
    assert table.set_index("gamma").loc[1, "units"] == 4 * (1 + extra)
    _, no_budget = module.validate(None, (None, {"d": None}), prompts, **plan, budget_s=None)
    assert len(calls) == 3 and (no_budget["units"] == 4).all()  # no budget: the first pass alone


def hand_validation_table() -> pd.DataFrame:
    """Four measured points with their CIs, errors worked out by hand: (predicted − measured) ÷ measured."""
    from specnb.predict.validate import add_errors

    rows = [  # draft, γ, predicted, band lo, band hi, measured, its CI, FLOPs-c Leviathan, wall-clock Leviathan
        ("a", 1, 1.20, 1.05, 1.30, 1.00, 0.95, 1.05, 1.50, 1.10),  # error +0.20, 0.15 beyond the CI; recommended
        ("a", 2, 1.10, 1.02, 1.20, 1.10, 1.00, 1.20, 0.77, 1.21),  # error 0, inside
        ("b", 1, 0.90, 0.80, 0.95, 0.90, 0.85, 0.95, 0.99, 0.99),  # error 0, inside
        ("b", 2, 0.95, 0.85, 1.05, 1.20, 1.10, 1.30, 1.68, 1.32),  # error −0.2083, 0.125 beyond; best measured
    ]
    table = pd.DataFrame(rows, columns=["draft", "gamma", "predicted_speedup", "predicted_lo", "predicted_hi",
                                        "measured_speedup", "measured_lo", "measured_hi", "flops_leviathan_speedup",
                                        "wallclock_leviathan_speedup"])
    return add_errors(table.assign(batch_size=1, units=4, units_needed=17))


def test_validation_summary_on_a_hand_worked_table():
    from specnb.predict.validate import validation_summary

    summary = validation_summary(hand_validation_table())
    assert summary["grid_points"] == 4
    assert summary["median_abs_error"] == pytest.approx(0.10)  # |errors| 0, 0, 0.20, 0.2083: median (0 + 0.20)/2
    assert summary["max_abs_error"] == pytest.approx(0.25 / 1.2)
    assert summary["flops_leviathan_median_abs_error"] == pytest.approx((0.3 + 0.4) / 2)  # 0.5, 0.3, 0.1, 0.4
    assert summary["wallclock_leviathan_median_abs_error"] == pytest.approx(0.1)  # 0.1, 0.1, 0.1, 0.1
    assert summary["within_band"] == pytest.approx(0.5)  # a γ=2 and b γ=1
    assert summary["ci_overlaps_band"] == pytest.approx(0.75)  # all but b γ=2 ([1.10, 1.30] vs [0.85, 1.05])
    assert summary["within_ci"] == pytest.approx(0.5)
    assert summary["median_error_beyond_ci"] == pytest.approx((0 + 0.125) / 2)  # 0, 0, 0.15, 0.15/1.2
    assert summary["median_ci_half_width"] == pytest.approx((0.05 / 0.9 + 0.1 / 1.2) / 2)
    assert summary["points_sized"] == "0/4"
    assert summary["error_verdict"] == "met" and summary["target_error_met"] is True  # 0.10 ≤ 0.10
    assert summary["recommendations_within_5pct"] == "0/3" and summary["target_recommendation_met"] is False
    assert summary["recommendations_wrong"] == "2/3" and summary["recommendation_verdict"] == "missed"
    assert summary["recommendation_worst_ratio"] == pytest.approx(1.0 / 1.2)


def test_recommendation_check_on_a_hand_worked_table():
    from specnb.predict.validate import recommendation_check

    checks = recommendation_check(hand_validation_table()).set_index("draft")
    # a: a γ=1 is predicted best and its band clears 1.0 -> recommended, measured 1.00 against a γ=2's 1.10
    assert checks.loc["a", "recommended"] == "a γ=1"
    assert checks.loc["a", "ratio_to_best"] == pytest.approx(1.0 / 1.1) and not checks.loc["a", "within_5pct"]
    assert not checks.loc["a", "wrong"]  # a γ=2's CI [1.00, 1.20] overlaps a γ=1's [0.95, 1.05]: within noise
    # b: the best prediction (0.95) loses -> verifier-only, worth 1.0x, against b γ=2's measured 1.20
    assert pd.isna(checks.loc["b", "recommended"]) and checks.loc["b", "recommended_measured_speedup"] == 1.0
    assert checks.loc["b", "best_measured"] == "b γ=2" and checks.loc["b", "ratio_to_best"] == pytest.approx(1 / 1.2)
    assert checks.loc["b", "wrong"]  # b γ=2's CI starts at 1.10, above verifier-only's exact 1.0
    # any draft: a γ=1 again (highest prediction overall), best measured b γ=2
    assert checks.loc["any", "recommended"] == "a γ=1" and checks.loc["any", "best_measured"] == "b γ=2"
    # when nothing measured beats 1.0x, verifier-only is the best option and declining is within 5%
    losing = hand_validation_table().query("draft == 'b' and gamma == 1")
    check = recommendation_check(losing).iloc[0]
    assert check["recommended"] is None and check["best_measured"] == "verifier-only" and check["within_5pct"]


def test_calibration_and_validation_prompts_are_disjoint_and_share_categories():
    from specnb.measure.prompts import split_prompts

    calibration, validation = split_prompts("all", 4, 4)
    assert not set(calibration["id"]) & set(validation["id"])
    assert list(calibration["category"]) == list(validation["category"])
    calibration, validation = split_prompts("all", 8, 4)  # more calibration prompts: the same 4 categories, twice
    assert sorted(calibration["category"]) == sorted(list(validation["category"]) * 2)
    calibration, _ = split_prompts("all", 8, 0)  # calibration alone: every category
    assert calibration["category"].nunique() == 8
    with pytest.raises(ParameterError, match="need 9 \\+ 1"):
        split_prompts("code", 9, 1)
