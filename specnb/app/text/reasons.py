"""Why a candidate won or paid the speculation tax, one sentence each, from the measured step
arithmetic (``specnb.measure.analysis``) and Leviathan's break-even c."""

from __future__ import annotations

import numpy as np
import pandas as pd

from specnb.core.errors import ParameterError
from specnb.core.intervals import interval_text


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


def explain_draft(row) -> str:
    """Why a draft (a ``draft_table`` row) won or paid the speculation tax, in Leviathan's terms:
    its wall-clock c against the break-even c at its best γ, and against its per-token α (the
    break-even c at γ = 1, the highest of all γ); says so when the measurement disagrees."""
    c, alpha, be, gamma = row["c_wall"], row["alpha_token"], row["break_even_c"], int(row["best_gamma"])
    if not (np.isfinite(c) and np.isfinite(alpha)):
        return "it drafted no tokens here, so c and α are unknown"
    disagree = (
        f", yet it measured {row['speedup']:.2f}x: measurement and formula disagree, a sign of noise (few "
        "prompts or tokens, a busy machine)"
    )
    if c >= alpha:
        return (
            f"its wall-clock c {c:.3f} is at or above its per-token α {alpha:.3f}, the break-even c at γ = 1, "
            "so by the formula no γ can pay" + (disagree if row["speedup"] > 1 else "")
        )
    if c >= be:
        return (
            f"its wall-clock c {c:.3f} is above the break-even c {be:.3f} at γ = {gamma} (per-token α {alpha:.3f})"
            + (disagree if row["speedup"] > 1 else "")
        )
    if row["speedup"] < 1:
        return (
            f"its wall-clock c {c:.3f} is below the break-even c {be:.3f} at γ = {gamma}, yet it lost: verifying "
            "γ + 1 tokens costs more than one and the loop has overheads, which the formula leaves out"
        )
    return f"its wall-clock c {c:.3f} is below the break-even c {be:.3f} at γ = {gamma} (per-token α {alpha:.3f})"
