"""nb06_decision: the decision framework's claims read through the measured CIs, and the "do X instead" line."""

def summary(**changes):
    base = {"grid_points": 16, "median_abs_error": 0.117, "max_abs_error": 0.3, "median_error_beyond_ci": 0.02,
            "flops_leviathan_median_abs_error": 0.5, "wallclock_leviathan_median_abs_error": 0.51, "within_ci": 0.75,
            "median_ci_half_width": 0.14, "points_sized": "3/16", "error_verdict": "inconclusive",
            "recommendations_within_5pct": "5/10", "recommendation_worst_ratio": 0.85, "recommendations_wrong": "0/10",
            "recommendation_verdict": "inconclusive"}
    return {**base, **changes}


def test_the_error_claim_never_says_missed_when_the_cis_cannot_tell():
    from specnb.app.text.nb06_decision import error_line

    text = error_line(summary(), "grid")
    assert "inconclusive at this budget" in text and "missed" not in text and "±14%" in text
    met = error_line(summary(error_verdict="met", median_abs_error=0.062), "grid")
    assert "predictor within **6.2%** (16 points, CIs ±14%" in met and "met" in met
    missed = error_line(summary(error_verdict="missed", median_error_beyond_ci=0.13), "grid")
    assert "13.0% beyond the measured CIs" in missed and "missed" in missed


def test_a_shortfall_inside_the_cis_is_not_called_a_miss():
    from specnb.app.text.nb06_decision import missed_choice_line, recommendation_line

    assert "**inconclusive at this budget**, not wrong" in recommendation_line(summary())
    assert recommendation_line(summary(recommendation_verdict="met")).endswith(": met.")
    assert "1/10: missed" in recommendation_line(summary(recommendation_verdict="missed", recommendations_wrong="1/10"))
    shortfall = {"draft": "any", "batch_size": 1, "recommended": None, "recommended_predicted_speedup": 1.0,
                 "recommended_measured_speedup": 1.0, "recommended_lo": 1.0, "recommended_hi": 1.0,
                 "best_measured": "eagle γ=1", "best_measured_speedup": 1.3, "best_lo": 0.95, "best_hi": 1.6,
                 "best_measured_predicted_speedup": 1.04, "wrong": False}
    line = missed_choice_line(shortfall)
    assert line.startswith("Short of the fastest, within noise") and "[exact]" in line
    assert "fastest measured eagle γ=1 (1.30x [0.95–1.60], inconclusive: its CI holds 1x" in line  # not "best"
    assert missed_choice_line({**shortfall, "best_lo": 1.05}).startswith("Short of the best, within noise")
    assert missed_choice_line({**shortfall, "best_lo": 1.1, "wrong": True}).startswith("Wrong:")


def test_points_off_beyond_their_ci_are_named_per_batch_size():
    import pandas as pd

    from specnb.app.text.nb06_decision import off_points_lines

    table = pd.DataFrame({"draft": ["e", "e", "m"], "gamma": [1, 3, 1], "batch_size": [1, 2, 2],
                          "predicted_speedup": [1.30, 0.97, 0.96], "measured_speedup": [1.00, 0.71, 0.90],
                          "measured_lo": [0.80, 0.61, 0.80], "measured_hi": [1.25, 0.85, 1.00],
                          "error_beyond_ci": [0.05, 0.17, 0.0]})
    assert off_points_lines(table) == ["Off by more than 10% beyond the CI at batch 2 (1 of 2 points): e γ=3: "
                                       "predicted 0.97x, measured 0.71x [0.61–0.85]."]
    assert off_points_lines(table.assign(error_beyond_ci=0.0)) == []


def test_the_conclusion_reads_the_validation_and_each_prediction():
    from types import SimpleNamespace

    import pandas as pd

    from specnb.app.text.nb06_decision import Validated, decision_conclusion

    p = SimpleNamespace(recommended_gamma=3, best_gamma=3, predicted_speedup=1.4, speedup_lo=1.2, speedup_hi=1.6,
                        break_even_alpha=0.3)
    profile = SimpleNamespace(acceptance={"e": SimpleNamespace(alpha_iid=lambda: 0.7)})
    validated = Validated(summary=summary(within_band=0.8, ci_overlaps_band=0.9),
                          checks=pd.DataFrame({"within_5pct": [True]}), grid_text="grid")
    report = decision_conclusion(validated, {("e", 1): p}, profile, "use llama.cpp")
    assert "inconclusive at this budget" in report.markdown and "80% of measured speedups" in report.markdown
    assert "e, batch 1: speculate with γ = 3 (1.40x, band 1.20–1.60); break-even α on this machine 0.30, " \
           "measured α 0.70." in report.markdown
    assert report.markdown.endswith("**Instead of speculating**, use llama.cpp.")
    assert report.values == {"recommendations": {"e batch 1": (3, 1.4)}}
