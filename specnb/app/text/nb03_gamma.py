"""What notebook 03 says: why each candidate won or paid the speculation tax, one sentence each from
the measured step arithmetic (``specnb.measure.analysis``), each draft's trend over γ, and the sweep's
conclusion."""

from __future__ import annotations

import numpy as np
import pandas as pd

from specnb.app.text.cell_report import Report
from specnb.app.text.common import bullets
from specnb.core.errors import ParameterError
from specnb.core.intervals import VERDICTS, interval_text, speedup_text
from specnb.measure.analysis import ranked


def step_trend(steps: pd.DataFrame, token_alpha: pd.DataFrame, draft: str) -> str:
    """How one draft's step cost and yield move from its smallest to its largest γ (batch 1), in
    one sentence: the arithmetic behind its verdicts (``measured_steps``,
    ``specnb.measure.acceptance.token_alpha_by_candidate``)."""
    mine = steps[(steps["draft"] == draft) & (steps["batch_size"] == 1)].sort_values("gamma")
    if mine.empty:
        raise ParameterError(f"no batch-1 steps of draft {draft!r}; drafts here: {sorted(set(steps['draft']))}")
    lo, hi = mine.iloc[0], mine.iloc[-1]
    counts = token_alpha[token_alpha["candidate"].isin(set(mine["candidate"]))]
    alpha = counts["accepted"].sum() / max(counts["reached"].sum(), 1)  # per-token α, every γ pooled
    return (
        f"from γ = {lo.gamma} to γ = {hi.gamma} drafting per step grows {lo.draft_ms_per_step:.0f} → "
        f"{hi.draft_ms_per_step:.0f} ms and verifying {lo.verify_ms_per_step:.0f} → {hi.verify_ms_per_step:.0f} "
        "ms, "
        f"so a step costs {lo.break_even_tokens:.2f} → {hi.break_even_tokens:.2f} verifier-only tokens while it "
        f"yields {lo.tokens_per_step:.2f} → {hi.tokens_per_step:.2f} (at a per-token α of {alpha:.2f} no γ yields "
        f"more than 1/(1 − α) = {1 / (1 - min(alpha, 0.999)):.2f} on average)."
    )


def alpha_text(r) -> str:
    """α, and the per-token α when the summary carries it."""
    token = getattr(r, "alpha_token", float("nan"))
    return f"α = {r.alpha:.2f}" + (f", per token {token:.2f}" if np.isfinite(token) else "")


def with_reasons(verdicts: pd.DataFrame) -> pd.DataFrame:
    """``measure.analysis.gamma_verdicts``'s table with a ``reason`` column (``gamma_reason``)."""
    return verdicts.assign(reason=[gamma_reason(r) for r in verdicts.itertuples()])


def gamma_reason(r) -> str:
    """Why one candidate (a ``measure.analysis.gamma_verdicts`` row) won or lost: what a step costs in
    verifier-only tokens and what it yields."""
    ci = (f" [{interval_text(r.speedup_lo, r.speedup_hi, ', ')}]" if np.isfinite(r.speedup_lo)
          else " (no CI: one prompt batch)")
    yields = "yields" if r.tokens_per_step > r.break_even_tokens else "yields only"
    return (
        f"{r.candidate}, batch {r.batch_size}: {r.speedup:.2f}x{ci}, {r.verdict}. A step costs the time of "
        f"{r.break_even_tokens:.2f} verifier-only tokens ({r.draft_ms_per_step:.0f} ms drafting {r.gamma} "
        f"token{'s' if r.gamma > 1 else ''}, {r.verify_ms_per_step:.0f} ms verifying {r.gamma + 1}, "
        f"{r.overhead_ms_per_step:.0f} ms bookkeeping) and {yields} {r.tokens_per_step:.2f} tokens "
        f"({alpha_text(r)})."
    )


def verdict_lines(verdicts: pd.DataFrame, trends: dict[str, str]) -> Report:
    """Each γ's verdict with its reason, then each draft's step arithmetic from its smallest to its
    largest γ (``analysis.gamma_verdicts``, ``step_trend``)."""
    lines = [gamma_reason(r) for r in verdicts.itertuples()]
    lines += [f"**{name}**: {trend}" for name, trend in trends.items()]
    values = {f"candidates_{word}": verdicts.loc[verdicts["verdict"] == word, "candidate"].tolist()
              for word in VERDICTS}
    return Report(bullets(lines), {"drafts": list(trends), **values})


def best_line(best) -> str:
    """The best candidate (the first row of ``analysis.ranked``) in one sentence: "Best" only when it
    wins; otherwise that none wins beyond noise, and which came closest."""
    numbers = (f"{best['candidate']}, {best['tok_s']:.1f} tok/s, "
               f"{speedup_text(best['speedup'], best['speedup_lo'], best['speedup_hi'], sep=', ')} at "
               f"α = {best['alpha']:.2f} (per token {best['alpha_token']:.2f}), τ = {best['tau']:.2f}")
    if best["verdict"] == VERDICTS[0]:
        return f"Best: {numbers} (wins)."
    none = "every candidate loses" if best["verdict"] == VERDICTS[2] else "no candidate wins beyond noise"
    return f"No winner: {none}; the closest is {numbers} ({best['verdict']})."


def gamma_sweep_conclusion(
    summary: pd.DataFrame, verdicts: pd.DataFrame, trends: dict[str, str], predictions: pd.DataFrame, setting: str
) -> Report:
    """Notebook 03's conclusion: verifier-only speed, the best candidate with its CI (``best_line``),
    where each draft wins and loses and why, and how far Leviathan's formula (FLOPs c, wall-clock c)
    is off. ``setting`` says what ran (device, verifier, prompts, tokens)."""
    spec = summary[summary["gamma"] > 0]
    base_tok_s = float(summary.loc[summary["gamma"] == 0, "tok_s"].iloc[0])
    best = ranked(spec).iloc[0]  # over every draft and γ: the fastest of those that win
    errors = predictions.merge(spec[["candidate", "speedup"]], on="candidate", suffixes=("", "_measured"))
    errors = (errors["speedup"] - errors["speedup_measured"]).abs().groupby(errors["kind"]).mean()
    lines = [f"{setting}: verifier-only ran at {base_tok_s:.1f} tok/s.", best_line(best)]
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
        "best_verdict": best["verdict"],
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
