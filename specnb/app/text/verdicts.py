"""The decision framework's text (notebook 06): what the validation says of the predictor, the
verdict for every draft and batch size, and the reference MPS run replayed — as ``Report``s."""

from __future__ import annotations

import pandas as pd

from specnb.app.text.conclusions import Report, bullets
from specnb.core.reference import REFERENCE_MPS


def reference_conclusion(comparison: pd.DataFrame) -> Report:
    """What the reference MPS run says once replayed (``predict.reference_replay.reference_comparison``): the
    FLOPs formula's miss, the per-token reading's miss, and the best-fitting assumption's fit."""
    from specnb.core import reference
    from specnb.predict.reference_replay import best_assumption

    reading, f, worst = best_assumption(comparison)
    gammas = sorted(REFERENCE_MPS["reported_tok_s"])
    lo, hi = gammas[0], gammas[-1]
    reported = " and ".join(f"{REFERENCE_MPS['reported_tok_s'][g]}" for g in (lo, hi))
    flops = comparison.drop_duplicates("gamma").set_index("gamma")
    iid = comparison[
        comparison["alpha_reading"].str.startswith("per-token") & (comparison["verify_extra_token_fraction"] == 0)
    ].set_index("gamma")
    pick = comparison[
        (comparison["alpha_reading"] == reading) & (comparison["verify_extra_token_fraction"] == f)
    ].set_index("gamma")
    c = REFERENCE_MPS["draft_flops_per_token"] / REFERENCE_MPS["verifier_flops_per_token"]
    lines = [
        f"**FLOPs theory** (c = {c:.4f}, α = {REFERENCE_MPS['alpha']} per token) says "
        f"{flops.loc[lo, 'flops_theory_tok_s']:.1f} tok/s at γ = {lo} and "
        f"{flops.loc[hi, 'flops_theory_tok_s']:.1f} "
        f"at γ = {hi}: {flops.loc[lo, 'flops_theory_error']:+.0%} and {flops.loc[hi, 'flops_theory_error']:+.0%} "
        "off "
        f"the reported {reported}, because the draft costs 1/{REFERENCE_MPS['draft_speed_ratio']} of a verifier "
        f"forward, not 1/{reference.size_ratio():.2f}.",
        f"**Wall-clock costs with α read as a per-token probability** predict "
        f"{iid.loc[lo, 'predicted_tok_s']:.1f} "
        f"and {iid.loc[hi, 'predicted_tok_s']:.1f} tok/s even with free verification: too slow. With that α a "
        "step "
        "would emit too few tokens; no cost assumption closes the gap, since costlier verification only lowers "
        "the "
        "lines.",
        f"**Reading α = {REFERENCE_MPS['alpha']} as accepted ÷ drafted at γ = {lo}** (per-token α ≈ "
        f"{pick.loc[lo, 'flat_alpha']:.2f}) and assuming each extra verified token costs {f:.0%} of a forward "
        "(the f "
        "on the grid above that fits the report best: a fitted assumption, not a measurement), the predictor "
        "gives "
        f"{pick.loc[lo, 'predicted_tok_s']:.1f} tok/s at γ = {lo} and {pick.loc[hi, 'predicted_tok_s']:.1f} at "
        f"γ = {hi} (reported {reported}; worst error {worst:.0%}). The chart shows how sensitive this is to f: "
        "the "
        "gap is explained by the acceptance reading plus a verification that is not free on MPS — neither of "
        "which "
        "the FLOPs formula can express.",
    ]
    values = {
        "reference_best_assumption": {
            "alpha_reading": reading,
            "verify_extra_token_fraction": f,
            "max_abs_error": round(worst, 4),
        }
    }
    for g in gammas:
        values[f"reference_gamma{g}_predicted_tok_s"] = round(float(pick.loc[g, "predicted_tok_s"]), 2)
        values[f"reference_gamma{g}_flops_theory_tok_s"] = round(float(flops.loc[g, "flops_theory_tok_s"]), 2)
    return Report(bullets(lines), values)


def decision_conclusion(summary: dict, checks: pd.DataFrame, predictions: dict, profile, grid_text: str,
                        instead: str = "") -> Report:
    """Notebook 06's conclusion: the validation's headline numbers against their targets, each missed
    recommendation, the verdict for every (draft, batch size), and ``instead``: what the alternatives
    measured on this machine (``specnb.app.text.engine_choice.instead_line``). ``grid_text`` says what was validated."""
    from specnb.measure.runs import BASELINE

    met = {True: "met", False: "missed"}
    lines = [
        f"Validation on {summary['grid_points']} held-out points ({grid_text}): median |error| of the predictor "
        f"**{summary['median_abs_error']:.1%}** of measured speedup (max {summary['max_abs_error']:.1%}; target "
        f"≤ 10%: {met[summary['target_error_met']]}); Leviathan with FLOPs c: "
        f"**{summary['flops_leviathan_median_abs_error']:.1%}**; Leviathan with wall-clock c: "
        f"{summary['wallclock_leviathan_median_abs_error']:.1%}.",
        f"{summary['within_band']:.0%} of measured speedups fall inside the predicted 10–90% band.",
        f"Recommendations within 5% of the best measured option: {summary['recommendations_within_5pct']} (worst: "
        f"{summary['recommendation_worst_ratio']:.1%} of the best; target: all — "
        f"{met[summary['target_recommendation_met']]}).",
    ]
    for _, miss in checks[~checks["within_5pct"]].iterrows():
        lines.append(
            f"Missed: {miss['draft']} at batch {miss['batch_size']}: recommended "
            f"{miss['recommended'] or BASELINE} (predicted {miss['recommended_predicted_speedup']:.2f}x, "
            f"measured {miss['recommended_measured_speedup']:.2f}x); best measured {miss['best_measured']} "
            f"({miss['best_measured_speedup']:.2f}x, predicted "
            f"{miss['best_measured_predicted_speedup']:.2f}x)."
        )
    lines += [
        f"{d}, batch {b}: {prediction_verdict(p)}; break-even α on this machine {p.break_even_alpha:.2f}, measured α "
        f"{profile.acceptance[d].alpha_iid():.2f}."
        for (d, b), p in predictions.items()
    ]
    if instead:
        lines.append(f"**Instead of speculating**, {instead}.")
    values = {
        "recommendations": {
            f"{d} batch {b}": (p.recommended_gamma, round(p.predicted_speedup, 3)) for (d, b), p in predictions.items()
        }
    }
    return Report(bullets(lines), values)


def prediction_verdict(p) -> str:
    """A ``Prediction``'s recommendation in one line: speculate with which γ, or why not."""
    if p.recommended_gamma is not None:
        return (f"speculate with γ = {p.recommended_gamma} ({p.predicted_speedup:.2f}x, band "
                f"{p.speedup_lo:.2f}–{p.speedup_hi:.2f})")
    if p.predicted_speedup <= 1.0:
        return (f"don't speculate: no γ beats verifier-only (best γ = {p.best_gamma} gives "
                f"{p.predicted_speedup:.2f}x)")
    return (f"don't speculate: γ = {p.best_gamma} wins on average ({p.predicted_speedup:.2f}x), but its band "
            f"{p.speedup_lo:.2f}–{p.speedup_hi:.2f}x includes 1.0")
