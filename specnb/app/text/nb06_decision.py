"""What notebook 06 says: the reference MPS run replayed, what the validation says of the predictor
(read through the measured CIs), the verdict for every draft and batch size, and the "do X instead"
line that it and ``specnb predict`` end with."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from specnb.app.text.cell_report import Report
from specnb.app.text.common import bullets, fidelity_text, prediction_verdict
from specnb.core import reference
from specnb.core.intervals import VERDICTS, interval_text, verdict
from specnb.core.reference import REFERENCE_MPS
from specnb.measure.runs import BASELINE
from specnb.predict.engine_choice import choices
from specnb.predict.reference_replay import best_assumption
from specnb.predict.validate import ERROR_TARGET


def reference_conclusion(comparison: pd.DataFrame) -> Report:
    """What the reference MPS run says once replayed (``predict.reference_replay.reference_comparison``): the
    FLOPs formula's miss, the per-token reading's miss, and the best-fitting assumption's fit."""
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


@dataclass(frozen=True, kw_only=True)
class Validated:
    """What notebook 06's validation produced, as its conclusion reads it: the claims
    (``specnb.predict.validate.validation_summary``), the recommendation checks, what was validated
    (``grid_text``) and the validation grid (``table``), which adds the points whose error lies beyond
    their CI by more than the target."""

    summary: dict
    checks: pd.DataFrame
    grid_text: str
    table: pd.DataFrame | None = None


def decision_conclusion(validated: Validated, predictions: dict, profile, instead: str = "") -> Report:
    """Notebook 06's conclusion: the validation's claims read through the measured CIs, each
    recommendation that fell short with its CIs, the verdict for every (draft, batch size), and
    ``instead``: what the alternatives measured on this machine (``instead_line``)."""
    summary, checks, grid_text, table = validated.summary, validated.checks, validated.grid_text, validated.table
    lines = [error_line(summary, grid_text), *(off_points_lines(table) if table is not None else []),
             f"{summary['within_band']:.0%} of measured speedups fall inside the predicted 10–90% band; "
             f"{summary['ci_overlaps_band']:.0%} of their CIs overlap it.",
             recommendation_line(summary)]
    for _, miss in checks[~checks["within_5pct"]].iterrows():
        lines.append(missed_choice_line(miss))
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


def error_line(summary: dict, grid_text: str) -> str:
    """The error claim (median |error| ≤ 10%): within it, missed beyond the CIs, or inconclusive."""
    n, ci = summary["grid_points"], summary["median_ci_half_width"]
    leviathan = (f"Leviathan with FLOPs c: **{summary['flops_leviathan_median_abs_error']:.1%}**; with wall-clock c: "
                 f"{summary['wallclock_leviathan_median_abs_error']:.1%}.")
    cis = (f"{n} points, CIs ±{ci:.0%}, {summary['within_ci']:.0%} of them holding the prediction, "
           f"{summary['points_sized']} with the runs a ±{ERROR_TARGET / 2:.0%} CI needs")
    where = f"Validation on held-out points ({grid_text})"
    if summary["error_verdict"] == "met":
        return (f"{where}: predictor within **{summary['median_abs_error']:.1%}** ({cis}; median |error|, max "
                f"{summary['max_abs_error']:.1%}; target ≤ {ERROR_TARGET:.0%}: met). {leviathan}")
    if summary["error_verdict"] == "missed":
        return (f"{where}: median |error| of the predictor **{summary['median_abs_error']:.1%}**, and "
                f"{summary['median_error_beyond_ci']:.1%} beyond the measured CIs ({cis}; target ≤ "
                f"{ERROR_TARGET:.0%}: missed). {leviathan}")
    return (f"{where}: **inconclusive at this budget**: median |error| {summary['median_abs_error']:.1%}, but "
            f"{summary['median_error_beyond_ci']:.1%} beyond the measured CIs ({cis}); CIs this wide cannot tell "
            f"a {ERROR_TARGET:.0%} error from noise; more tokens or a larger `validation_budget_s` would narrow "
            f"them. {leviathan}")


def off_points_lines(table: pd.DataFrame) -> list[str]:
    """The points off by more than the error target beyond their measured CI, per batch size: the
    errors that are not noise, whatever the median says."""
    off = table[table["error_beyond_ci"] > ERROR_TARGET]
    lines = []
    for b, group in off.groupby("batch_size"):
        items = "; ".join(f"{r.draft} γ={r.gamma}: predicted {r.predicted_speedup:.2f}x, measured "
                          f"{r.measured_speedup:.2f}x {ci_text(r.measured_lo, r.measured_hi)}"
                          for r in group.itertuples())
        lines.append(f"Off by more than {ERROR_TARGET:.0%} beyond the CI at batch {b} "
                     f"({len(group)} of {int((table['batch_size'] == b).sum())} points): {items}.")
    return lines


def recommendation_line(summary: dict) -> str:
    """The recommendation claim: within 5% of the best measured option, or wrong beyond the CIs."""
    head = (f"Recommendations within 5% of the best measured option: {summary['recommendations_within_5pct']} "
            f"(worst: {summary['recommendation_worst_ratio']:.1%} of the best)")
    verdict = summary["recommendation_verdict"]
    if verdict == "met":
        return f"{head}: met."
    if verdict == "missed":
        return (f"{head}; wrong beyond the CIs (the best option's CI wholly above the recommended one's): "
                f"{summary['recommendations_wrong']}: missed.")
    return f"{head}; none of the shortfalls clears the CIs: **inconclusive at this budget**, not wrong."


def missed_choice_line(miss) -> str:
    """One recommendation short of the best measured option, with both CIs and whether they separate;
    an option whose CI holds 1x is the "fastest" measured, not the "best" (``core.intervals.verdict``)."""
    said = verdict(miss["best_measured_speedup"], miss["best_lo"], miss["best_hi"])
    best = "best" if said == VERDICTS[0] or miss["best_measured"] == BASELINE else "fastest"
    kind = "Wrong" if miss["wrong"] else f"Short of the {best}, within noise"
    beats = "" if best == "best" else f", {said}: its CI holds 1x"
    return (f"{kind}: {miss['draft']} at batch {miss['batch_size']}: recommended {miss['recommended'] or BASELINE} "
            f"(predicted {miss['recommended_predicted_speedup']:.2f}x, measured "
            f"{miss['recommended_measured_speedup']:.2f}x {ci_text(miss['recommended_lo'], miss['recommended_hi'])}); "
            f"{best} measured {miss['best_measured']} ({miss['best_measured_speedup']:.2f}x "
            f"{ci_text(miss['best_lo'], miss['best_hi'])}{beats}, predicted "
            f"{miss['best_measured_predicted_speedup']:.2f}x).")


def ci_text(lo: float, hi: float) -> str:
    """A 95% CI as text; verifier-only's exact 1.0x and a one-unit point (no CI) say so."""
    if lo != lo or hi != hi:
        return "[no CI: one unit]"
    if lo == hi:
        return "[exact]"
    return f"[{interval_text(lo, hi)}]"


def instead_line(measured: dict | None) -> str:
    """One line for ``specnb predict`` and notebook 06: what speculation and its alternatives measured on
    this machine, e.g. "speculation 1.07x; llama.cpp · F32 1.45x (same output); int8 2.1x (1/8 identical)"."""
    if not measured:
        return ("no alternatives measured on this machine yet: notebook 07 measures them (`specnb run "
                "notebooks/07_alternatives.ipynb`)")
    summary = pd.DataFrame(measured["rows"])
    pick = choices(summary)
    parts = []
    if pick["speculation"] is not None:
        parts.append(f"speculation ({pick['speculation'].speculation}) {pick['speculation'].speedup:.2f}x")
    for key in ("lossless", "fastest"):
        row = pick[key]
        if row is not None and not any(row.method in p for p in parts):
            parts.append(f"{row.method} {row.speedup:.2f}x ({fidelity_text(row)})")
    return (f"notebook 07's last table from this machine (saved {measured['created_utc'][:10]}, read from the "
            "specnb cache): " + "; ".join(parts))
