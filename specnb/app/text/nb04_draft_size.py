"""What notebook 04 says: the fastest draft and why each draft won or paid the speculation tax in
Leviathan's terms, and the spread short runs would show."""

from __future__ import annotations

import pandas as pd

from specnb.app.text.cell_report import Report
from specnb.app.text.common import bullets
from specnb.core.intervals import VERDICTS, speedup_text
from specnb.measure.analysis import ranked
from specnb.predict.draft_reason import DraftOutcome, draft_reason


def explain_draft(row) -> str:
    """Why a draft (a ``draft_table`` row) won or paid the speculation tax, in Leviathan's terms
    (``specnb.predict.draft_reason``): its wall-clock c against the break-even c at its best γ, and
    against its per-token α (the break-even c at γ = 1, the highest of all γ); says so when the
    measurement disagrees."""
    c, alpha, be, gamma = row["c_wall"], row["alpha_token"], row["break_even_c"], int(row["best_gamma"])
    reason = draft_reason(row)
    if reason.outcome is DraftOutcome.UNKNOWN:
        return "it drafted no tokens here, so c and α are unknown"
    disagree = (
        f", yet it measured {row['speedup']:.2f}x: measurement and formula disagree, a sign of noise (few "
        "prompts or tokens, a busy machine)"
    ) if reason.disagrees else ""
    if reason.outcome is DraftOutcome.NO_GAMMA_PAYS:
        return (
            f"its wall-clock c {c:.3f} is at or above its per-token α {alpha:.3f}, the break-even c at γ = 1, "
            "so by the formula no γ can pay" + disagree
        )
    if reason.outcome is DraftOutcome.ABOVE_BREAK_EVEN:
        return (
            f"its wall-clock c {c:.3f} is above the break-even c {be:.3f} at γ = {gamma} (per-token α {alpha:.3f})"
            + disagree
        )
    if reason.outcome is DraftOutcome.LOST_TO_OVERHEAD:
        return (
            f"its wall-clock c {c:.3f} is below the break-even c {be:.3f} at γ = {gamma}, yet it lost: verifying "
            "γ + 1 tokens costs more than one and the loop has overheads, which the formula leaves out"
        )
    return f"its wall-clock c {c:.3f} is below the break-even c {be:.3f} at γ = {gamma} (per-token α {alpha:.3f})"


def draft_size_conclusion(table: pd.DataFrame, spread: pd.DataFrame, short_run_prompts: int, setting: str) -> Report:
    """Notebook 04's conclusion: the best draft (``analysis.ranked``: the fastest of those that win) with
    its CI and why (``explain_draft``), every other draft's verdict and what its FLOPs c would have
    said, and the spread short runs would show. With no draft that wins, it says so and names the
    closest."""
    winner = ranked(table).iloc[0]
    wins = winner["verdict"] == VERDICTS[0]
    faster = table[table["verdict"] == VERDICTS[0]]
    head = "Best" if wins else "No draft wins beyond noise; the closest"
    lines = [
        f"{head}: **{winner['draft']}** at γ = {winner['best_gamma']}: "
        f"{speedup_text(winner['speedup'], winner['speedup_lo'], winner['speedup_hi'])} (95% CI) over verifier-only, "
        f"α = {winner['alpha']:.2f} "
        f"(per token {winner['alpha_token']:.2f}), c = {winner['c_wall']:.3f} by wall clock and "
        f"{winner['c_flops']:.3f} by FLOPs ({winner['verdict']}); {explain_draft(winner)}."
        + (f" Drafts faster beyond noise: {', '.join(faster['draft'])}." if wins else "")
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
        "winner": winner["draft"] if wins else None,
        "closest": winner["draft"],
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
