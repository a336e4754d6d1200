"""What notebook 05 says: where one verifier forward turns compute-bound, the speedup per batch size
at a fixed γ and at the best γ, and what ragged batches cost."""

from __future__ import annotations

import pandas as pd

from specnb.app.text.cell_report import Report
from specnb.app.text.common import bullets
from specnb.core.intervals import VERDICTS, speedup_text, verdict


def knee_text(grid: pd.DataFrame) -> Report:
    """Where one verifier forward starts to cost two one-token forwards (``forward.batch_knee``)."""
    import math

    from specnb.measure.forward import batch_knee  # deferred: loads torch and numpy

    knee = batch_knee(grid)
    one = grid.loc[(grid.n_tokens == 1) & (grid.batch_size == 1), "median_ms"].iloc[0]
    tokens = int((grid["n_tokens"] * grid["batch_size"]).max())
    text = f"A one-token forward takes {one:.1f} ms; " + (
        f"from {knee:.0f} tokens per forward on, a forward costs at least two of them."
        if not math.isnan(knee)
        else f"no measured forward (up to {tokens} tokens) cost two one-token forwards."
    )
    return Report(text, {"knee_tokens_per_forward": None if math.isnan(knee) else knee})


def rated(row) -> str:
    """A speedup with its CI and the verdict the CI gives: "1.05x [0.98–1.12], inconclusive"."""
    lo, hi = row.get("speedup_lo"), row.get("speedup_hi")
    return f"{speedup_text(row['speedup'], lo, hi)}, {verdict(row['speedup'], lo, hi)}"


def best_by_batch(best_by_b: pd.DataFrame) -> str:
    """Where the best γ wins, where it loses and where the CI cannot tell, by batch size."""
    said = {word: [b for b, r in best_by_b.iterrows() if verdict(r["speedup"], r.get("speedup_lo"),
                                                                 r.get("speedup_hi")) == word] for word in VERDICTS}
    if len(said[VERDICTS[0]]) == len(best_by_b):
        return f"The best γ beats verifier-only at every batch size up to {max(best_by_b.index)}."
    parts = [f"{what} at batch {', '.join(map(str, said[word]))}" for word, what in
             zip(VERDICTS, ("The best γ beats verifier-only", "no γ beats it beyond noise",
                            "even the best γ is slower")) if said[word]]
    return "; ".join(parts)[0].upper() + "; ".join(parts)[1:] + "."


def batch_conclusion(
    fixed: pd.DataFrame, best: pd.DataFrame, ragged: pd.DataFrame, grid: pd.DataFrame, fixed_gamma: int, device
) -> Report:
    """Notebook 05's conclusion: the knee, the speedup at the fixed γ and the best γ per batch size
    (``analysis.best_per_draft``) each with its verdict, and what ragged batches cost at the largest
    batch."""
    knee = knee_text(grid)
    fixed_by_b, best_by_b = fixed.set_index("batch_size"), best.set_index("batch_size")
    big = ragged[(ragged["gamma"] == fixed_gamma) & (ragged["batch_size"] == ragged["batch_size"].max())].iloc[0]
    tokens = int((grid["n_tokens"] * grid["batch_size"]).max())
    knee_at = knee.values["knee_tokens_per_forward"]
    lines = [
        f"On {device}, one verifier forward becomes compute-bound (costs ≥ 2 one-token forwards) at "
        + (f"{knee_at:.0f} tokens." if knee_at is not None else f"no measured size (up to {tokens} tokens)."),
        f"Speedup at γ = {fixed_gamma}: "
        + ", ".join(
            f"batch {b}: {rated(r)} ({b * (fixed_gamma + 1)} tokens per verification)"
            for b, r in fixed_by_b.iterrows()
        )
        + ".",
        "Best γ per batch size: "
        + ", ".join(f"batch {b}: γ = {int(r.gamma)}, {rated(r)}" for b, r in best_by_b.iterrows())
        + ".",
        best_by_batch(best_by_b),
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
