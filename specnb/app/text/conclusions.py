"""The measuring notebooks' conclusions as Markdown, with the numbers behind them (the decision
framework's verdicts are ``specnb.app.text.verdicts``).

Every function takes the tables a notebook has already computed and returns a ``Report``: the
Markdown a cell displays (a ``Report`` renders itself as Markdown when it is a cell's last
expression) and the headline values the notebook records in its summary JSON. Keeping the wording
here keeps notebooks to narrative plus calls, and lets tests check the sentences against the
numbers.
"""

from __future__ import annotations

import pandas as pd

from specnb.app.text.common import bullets
from specnb.app.text.report import Report
from specnb.core import theory
from specnb.core.intervals import interval_text, speedup_text
from specnb.core.reference import REFERENCE_MPS

# ---------------------------------------------------------------- 01 FLOPs and theory


def reference_theory(ref_table: pd.DataFrame, gammas=range(3, 9)) -> Report:
    """The reference pair by FLOPs (``specnb.decode.kinds.by_name.flops_table`` of the reference verifier,
    its 0.5B and 1.5B drafts): c, Leviathan's speedup at the reported α and γ = 4, and the 1.5B draft's break-even α."""
    v_gflops, d_gflops = (ref_table["flops_per_token"].iloc[i] / 1e9 for i in (0, 1))
    c_small, c_large = (float(ref_table["c_flops"].iloc[i]) for i in (1, 2))
    alpha = REFERENCE_MPS["alpha"]
    speedup = float(theory.expected_speedup(alpha, 4, c_small))
    best_gamma, best_speedup = theory.optimal_gamma(alpha, c_small)
    break_even = [float(theory.break_even_alpha(g, c_large)) for g in gammas]
    text = bullets([
        f"Reference: {v_gflops:.2f} vs {d_gflops:.2f} GFLOPs/token gives c = {c_small:.4f}; at α = {alpha} and γ = 4 "
        f"theory says {theory.format_speedup(speedup)} (best γ = {int(best_gamma)} gives only "
        f"{theory.format_speedup(best_speedup)}).",
        f"The 1.5B draft (c = {c_large:.4f}) needs α between {min(break_even):.0%} and {max(break_even):.0%} for "
        f"γ = {min(gammas)}..{max(gammas)} just to break even: " + ", ".join(f"{a:.0%}" for a in break_even) + "."])
    return Report(text, {"reference_verifier_gflops": v_gflops, "reference_draft_gflops": d_gflops,
                         "reference_c": round(c_small, 4), "reference_c_large": round(c_large, 4),
                         "reference_speedup_alpha_0392_gamma_4": round(speedup, 4),
                         "reference_break_even_alpha_c05002": [round(a, 4) for a in break_even]})


def model_drafts(flops: pd.DataFrame) -> pd.DataFrame:
    """The rows of a FLOPs table that are drafts with a model (prompt lookup has no FLOPs)."""
    return flops[(flops["role"] == "draft") & (flops["flops_per_token"] > 0)]


def theory_conclusion(ref_table: pd.DataFrame, ours: pd.DataFrame, gamma: int = 4) -> Report:
    """Notebook 01's conclusion: the reference by FLOPs, then what each of the user's model drafts
    must reach to break even at ``gamma`` by its FLOPs c (attention over the table's context included)."""
    ref = reference_theory(ref_table)
    lines, values = [ref.markdown], dict(ref.values)
    for r in model_drafts(ours).itertuples():
        be = float(theory.break_even_alpha(gamma, r.c_flops_at_context))
        lines.append(f"- {r.model}: FLOPs c = {r.c_flops_at_context:.3f}; at γ = {gamma} it must reach α ≥ {be:.0%} "
                     "to break even.")
        values[f"break_even_alpha_gamma{gamma}_{r.model}"] = round(be, 4)
    lines.append("\nThese are FLOPs-based predictions; notebook 02 measures the c this machine actually sees.")
    return Report("\n".join(lines), values)


# ---------------------------------------------------------------- 02 dispatch overhead


def dispatch_conclusion(grid: pd.DataFrame, fit, ratios: pd.DataFrame, verifier_flops: float, verifier: str,
                        device) -> Report:
    """Notebook 02's conclusion: the fitted fixed cost t0 and its share of the verifier's forward
    next to the reference run's, what 6x fewer FLOPs buys here, each draft's two c, and what
    verifying the most tokens measured costs."""
    from specnb.core import reference
    from specnb.measure.forward import smaller_vs_faster

    t_verifier = float(fit.predict_ms(verifier_flops))
    share = fit.t0_ms / t_verifier
    six = float(smaller_vs_faster(fit, verifier_flops, [6])["times_faster"].iloc[0])
    v_rows = grid[(grid["model"] == verifier) & (grid["batch_size"] == 1)].set_index("n_tokens")["median_ms"]
    n_max = int(v_rows.index.max())
    lines = [f"On {device} a forward costs t₀ = {fit.t0_ms:.1f} ms plus {fit.ms_per_gflop:.1f} ms per GFLOP "
             f"(R² = {fit.r2:.3f}); t₀ is {share:.0%} of the verifier's one-token forward ({t_verifier:.1f} ms by the "
             f"fit, {v_rows[1]:.1f} ms measured). The reference's MPS run implies about "
             f"{reference.dispatch_share():.0%}.",
             f"By this fit, a draft with 6x fewer FLOPs would be {six:.2f}x faster per token (the reference saw "
             f"{REFERENCE_MPS['draft_speed_ratio']}x)."]
    if abs(share) < 0.05:
        lines.append("Dispatch is negligible on this device (t₀ within a few % of zero): per token, the FLOPs c is "
                     "close to the wall-clock c, unlike on the reference's MPS run.")
    lines += [f"{r.draft}: {r.flops_smaller:.1f}x fewer FLOPs but {r.times_faster:.2f}x faster: FLOPs c = "
              f"{r.flops_c:.3f}, wall-clock c = {r.wall_clock_c:.3f}." for r in ratios.itertuples()]
    lines.append(f"Verifying {n_max} tokens in one forward costs {v_rows[n_max] / v_rows[1]:.1f}x one token, not "
                 f"{n_max}x.")
    values = {"t0_ms": round(fit.t0_ms, 3), "ms_per_gflop": round(fit.ms_per_gflop, 3), "fit_r2": round(fit.r2, 4),
              "dispatch_share_of_verifier_forward": round(share, 4), "six_times_smaller_is_times_faster": round(six, 3),
              f"verifier_ms_{n_max}_tokens_over_1": round(float(v_rows[n_max] / v_rows[1]), 3)}
    for r in ratios.itertuples():
        values[f"wall_clock_c_{r.draft}"] = round(r.wall_clock_c, 4)
        values[f"flops_c_{r.draft}"] = round(r.flops_c, 4)
    return Report(bullets(lines, "Notebook 03 uses the wall-clock c next to the FLOPs c to predict the measured "
                                 "speedup."),
                  values)


def tree_width_text(widths: pd.DataFrame, verifier: str) -> Report:
    """What ``forward.tree_widths`` says about trees: how many candidates a verification can carry at
    a chain's price."""
    lines = [f"A chain verifying {int(r.chain_tokens)} tokens costs {r.chain_ms:.1f} ms on {verifier}; a forward of "
             f"{int(r.widest_tokens)} tokens costs {r.widest_ms:.1f} ms (within {r.tolerance:.0%}), so a tree of up to "
             f"{int(r.widest_tokens) - 1} candidate nodes verifies at about the chain's price"
             + (f"; {int(r.next_tokens)} tokens cost {r.next_ms:.1f} ms." if pd.notna(r.next_tokens)
                else "; no larger forward was measured.")
             for r in widths.itertuples()]
    values = {f"tree_tokens_at_chain_{int(r.chain_tokens)}": int(r.widest_tokens) for r in widths.itertuples()}
    return Report(bullets(lines), values)


# ---------------------------------------------------------------- 03 gamma sweep


def verdict_lines(verdicts: pd.DataFrame, trends: dict[str, str]) -> Report:
    """Each γ's verdict with its reason, then each draft's step arithmetic from its smallest to its
    largest γ (``analysis.gamma_verdicts``, ``reasons.step_trend``)."""
    from specnb.app.text.reasons import gamma_reason
    from specnb.measure.analysis import VERDICTS

    lines = [gamma_reason(r) for r in verdicts.itertuples()]
    lines += [f"**{name}**: {trend}" for name, trend in trends.items()]
    values = {f"candidates_{word}": verdicts.loc[verdicts["verdict"] == word, "candidate"].tolist()
              for word in VERDICTS}
    return Report(bullets(lines), {"drafts": list(trends), **values})


def gamma_sweep_conclusion(
    summary: pd.DataFrame, verdicts: pd.DataFrame, trends: dict[str, str], predictions: pd.DataFrame, setting: str
) -> Report:
    """Notebook 03's conclusion: verifier-only speed, the best candidate with its CI, where each
    draft wins and loses and why, and how far Leviathan's formula (FLOPs c, wall-clock c) is off.
    ``setting`` says what ran (device, verifier, prompts, tokens)."""
    from specnb.measure.analysis import VERDICTS

    spec = summary[summary["gamma"] > 0]
    base_tok_s = float(summary.loc[summary["gamma"] == 0, "tok_s"].iloc[0])
    best = spec.loc[spec["speedup"].idxmax()]  # over every draft and γ
    errors = predictions.merge(spec[["candidate", "speedup"]], on="candidate", suffixes=("", "_measured"))
    errors = (errors["speedup"] - errors["speedup_measured"]).abs().groupby(errors["kind"]).mean()
    lines = [
        f"{setting}: verifier-only ran at {base_tok_s:.1f} tok/s.",
        f"Best: {best['candidate']}, {best['tok_s']:.1f} tok/s, "
        f"{speedup_text(best['speedup'], best['speedup_lo'], best['speedup_hi'], sep=', ')} at "
        f"α = {best['alpha']:.2f} (per token {best['alpha_token']:.2f}), τ = {best['tau']:.2f}.",
    ]
    for name, trend in trends.items():
        mine = verdicts[verdicts["draft"] == name]
        said = {
            word: ", ".join(f"γ = {g}" for g in mine.loc[mine["verdict"] == word, "gamma"]) or "no γ"
            for word in VERDICTS
        }
        lines.append(
            f"**{name}** wins at {said['wins']}, loses at {said['loses']}, inconclusive (CI spans 1x) at "
            f"{said['inconclusive']}. Why: {trend}"
        )
    lines += [
        f"Leviathan's formula with the measured per-token α misses the measured speedup by {err:.2f} on average "
        f"with {kind}."
        for kind, err in errors.items()
    ]
    values = {
        "baseline_tok_s": round(base_tok_s, 3),
        "best_candidate": best["candidate"],
        "best_gamma": int(best["gamma"]),
    }
    values.update(
        {
            f"best_{key}": round(float(best[key]), 4)
            for key in ("speedup", "speedup_lo", "speedup_hi", "alpha", "alpha_token", "tau", "tok_s")
        }
    )
    values.update({f"speedup {r.candidate}": round(r.speedup, 4) for r in spec.itertuples()})
    values.update(
        {
            f"prediction_mean_abs_error_{kind.replace(' ', '_').replace('-', '_')}": round(float(err), 4)
            for kind, err in errors.items()
        }
    )
    closing = (
        "The wall-clock c already includes dispatch; what it still misses is that verifying γ + 1 tokens costs "
        "more than one token and that accept/rollback take time (the bars above). Notebook 05 asks how this "
        "changes with batch size."
    )
    return Report(bullets(lines, closing), values)


# ---------------------------------------------------------------- 04 draft-size tradeoff


def draft_size_conclusion(table: pd.DataFrame, spread: pd.DataFrame, short_run_prompts: int, setting: str) -> Report:
    """Notebook 04's conclusion: the fastest draft with its CI and why it won (``explain_draft``), every
    other draft's verdict and what its FLOPs c would have said, and the spread short runs would show."""
    from specnb.app.text.reasons import explain_draft
    from specnb.measure.analysis import VERDICTS

    winner = table.loc[table["speedup"].idxmax()]
    faster = table[table["verdict"] == VERDICTS[0]]
    lines = [
        f"Fastest: **{winner['draft']}** at γ = {winner['best_gamma']}: {winner['speedup']:.2f}x (95% CI "
        f"{interval_text(winner['speedup_lo'], winner['speedup_hi'])}) over verifier-only, α = {winner['alpha']:.2f} "
        f"(per token {winner['alpha_token']:.2f}), c = {winner['c_wall']:.3f} by wall clock and "
        f"{winner['c_flops']:.3f} by FLOPs ({winner['verdict']}); {explain_draft(winner)}. Drafts faster beyond "
        f"noise: {', '.join(faster['draft']) or 'none'}."
    ]
    for _, r in table[table["draft"] != winner["draft"]].iterrows():
        flops_says = "can win" if r["c_flops"] < r["alpha_token"] else "cannot win"
        lines.append(
            f"{r['draft']}: {r['speedup']:.2f}x at γ = {r['best_gamma']} ({r['verdict']}); "
            f"{explain_draft(r)}. "
            f"With its FLOPs c ({r['c_flops']:.3f}) the formula says it {flops_says}."
        )
    s = spread.loc[winner["draft"]]
    lines.append(
        f"Short runs of {short_run_prompts} prompt(s) with {winner['draft']} would report α from "
        f"{s['alpha_p05']:.2f} to {s['alpha_p95']:.2f} and speedups from {s['speedup_p05']:.2f}x to "
        f"{s['speedup_p95']:.2f}x (5–95%); {s['share_faster']:.0%} of them would call it faster. Across "
        "prompts "
        f"its α ranged {winner['alpha_prompt_min']:.2f}–{winner['alpha_prompt_max']:.2f}."
    )
    values = {
        "winner": winner["draft"],
        "winner_short_run_speedup_p05": round(float(s["speedup_p05"]), 4),
        "winner_short_run_speedup_p95": round(float(s["speedup_p95"]), 4),
    }
    for r in table.itertuples():
        values.update(
            {
                f"best_gamma_{r.draft}": int(r.best_gamma),
                f"speedup_{r.draft}": round(r.speedup, 4),
                f"c_wall_{r.draft}": round(r.c_wall, 4),
                f"alpha_token_{r.draft}": round(r.alpha_token, 4),
            }
        )
    return Report(bullets(lines, f"{setting}; notebook 05 asks how batching changes the picture."), values)


# ---------------------------------------------------------------- 05 batch size


def knee_text(grid: pd.DataFrame) -> Report:
    """Where one verifier forward starts to cost two one-token forwards (``forward.batch_knee``)."""
    import math

    from specnb.measure.forward import batch_knee

    knee = batch_knee(grid)
    one = grid.loc[(grid.n_tokens == 1) & (grid.batch_size == 1), "median_ms"].iloc[0]
    tokens = int((grid["n_tokens"] * grid["batch_size"]).max())
    text = f"A one-token forward takes {one:.1f} ms; " + (
        f"from {knee:.0f} tokens per forward on, a forward costs at least two of them."
        if not math.isnan(knee)
        else f"no measured forward (up to {tokens} tokens) cost two one-token forwards."
    )
    return Report(text, {"knee_tokens_per_forward": None if math.isnan(knee) else knee})


def batch_conclusion(
    fixed: pd.DataFrame, best: pd.DataFrame, ragged: pd.DataFrame, grid: pd.DataFrame, fixed_gamma: int, device
) -> Report:
    """Notebook 05's conclusion: the knee, the speedup at the fixed γ and the best γ per batch size,
    where even the best γ loses, and what ragged batches cost at the largest batch."""
    knee = knee_text(grid)
    fixed_by_b, best_by_b = fixed.set_index("batch_size"), best.set_index("batch_size")
    losing = best_by_b.index[best_by_b["speedup"] < 1].tolist()
    big = ragged[(ragged["gamma"] == fixed_gamma) & (ragged["batch_size"] == ragged["batch_size"].max())].iloc[0]
    tokens = int((grid["n_tokens"] * grid["batch_size"]).max())
    knee_at = knee.values["knee_tokens_per_forward"]
    lines = [
        f"On {device}, one verifier forward becomes compute-bound (costs ≥ 2 one-token forwards) at "
        + (f"{knee_at:.0f} tokens." if knee_at is not None else f"no measured size (up to {tokens} tokens)."),
        f"Speedup at γ = {fixed_gamma}: "
        + ", ".join(
            f"batch {b}: {r.speedup:.2f}x ({b * (fixed_gamma + 1)} tokens per verification)"
            for b, r in fixed_by_b.iterrows()
        )
        + ".",
        "Best γ per batch size: "
        + ", ".join(f"batch {b}: γ = {int(r.gamma)}, {r.speedup:.2f}x" for b, r in best_by_b.iterrows())
        + ".",
        (
            f"Even the best γ is slower than verifier-only at batch {', '.join(map(str, losing))}."
            if losing
            else f"The best γ beats verifier-only at every batch size up to {max(best_by_b.index)}."
        ),
        f"Ragged batches at batch {int(big['batch_size'])}, γ = {fixed_gamma}: {big['masked_slot_share']:.0%} of "
        "the "
        f"cache slots appended for live rows were masked holes, and {big['idle_row_share']:.0%} of row-steps were "
        "spent on rows that had already finished.",
    ]
    values = {
        **knee.values,
        "masked_slot_share_largest_batch": round(float(big["masked_slot_share"]), 4),
        "idle_row_share_largest_batch": round(float(big["idle_row_share"]), 4),
    }
    for b in fixed_by_b.index:
        values[f"speedup_gamma_{fixed_gamma}_batch_{b}"] = round(float(fixed_by_b.loc[b, "speedup"]), 4)
        values[f"best_gamma_batch_{b}"] = int(best_by_b.loc[b, "gamma"])
        values[f"best_speedup_batch_{b}"] = round(float(best_by_b.loc[b, "speedup"]), 4)
    closing = (
        "Compare with the GPU literature above: the batch size at which speculation stops paying follows the "
        "knee "
        "of the verifier's forward cost, which is a property of the device."
    )
    return Report(bullets(lines, closing), values)
