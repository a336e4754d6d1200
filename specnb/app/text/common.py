"""Text more than one notebook shows: Markdown bullets, a table as a reader takes it in (``table``), a
prediction's one-line verdict (notebooks 06 and 07, ``specnb predict``) and how faithful an engine's
output stayed to the fp32 verifier's (notebooks 06 and 07)."""

from __future__ import annotations

import html
from dataclasses import dataclass

import pandas as pd

from specnb.core.intervals import VERDICTS, interval_text, verdict


def bullets(lines, closing: str = "") -> str:
    return "\n".join(f"- {line}" for line in lines) + (f"\n\n{closing}" if closing else "")


@dataclass(frozen=True)
class Table:
    """A table as a notebook cell shows it: ``setting``, the columns that hold one value on every row
    said once above it ("every row: batch_size 1; verifier_kernels default"), and ``frame``, the rest."""

    frame: pd.DataFrame
    setting: dict

    def setting_line(self) -> str:
        return "every row: " + "; ".join(f"{name} {value}" for name, value in self.setting.items())

    def _repr_html_(self) -> str:
        line = f"<p><em>{html.escape(self.setting_line())}</em></p>" if self.setting else ""
        return line + self.frame._repr_html_()

    def __repr__(self) -> str:
        return (self.setting_line() + "\n" if self.setting else "") + repr(self.frame)


def table(frame: pd.DataFrame, digits: int = 3) -> Table:
    """``frame`` rounded to ``digits``, with every column that holds one value on all of its rows (two
    or more) moved into the setting line above it: a column that never varies is a setting, not a
    result, and read twelve times over it hides the columns that do vary."""
    frame = frame.round(digits)
    if len(frame) < 2:
        return Table(frame, {})
    constant = [c for c in frame.columns if frame[c].astype(str).nunique() == 1]
    if len(constant) == len(frame.columns):  # nothing varies: the table is its setting
        return Table(frame, {})
    return Table(frame.drop(columns=constant), {str(c): frame[c].iloc[0] for c in constant})


def prompts_text(chosen: pd.DataFrame) -> str:
    """"2 prompts (summarisation, extraction)": how many prompts ran and of which categories, so two
    notebooks that measured on different prompts say so in their setting lines."""
    categories = ", ".join(dict.fromkeys(chosen["category"]))
    return f"{len(chosen)} prompt{'s' if len(chosen) != 1 else ''} ({categories})"


def fidelity_text(row) -> str:
    """"8/8 identical", or "1/8 identical, 48% of tokens before the first divergence (median token 6)"."""
    if row.identical_prompts == row.prompts:
        return f"{row.identical_prompts}/{row.prompts} identical"
    where = "" if row.median_first_divergence is None or pd.isna(row.median_first_divergence) else \
        f" (median token {row.median_first_divergence:.0f})"
    return f"{row.identical_prompts}/{row.prompts} identical, {row.prefix_share:.0%} of tokens before the first " \
           f"divergence{where}"


def prediction_verdict(p) -> str:
    """A ``Prediction``'s recommendation in one line: speculate with which γ, or why not, in the words
    its band gives (``specnb.core.intervals.verdict``: a band that holds 1x is inconclusive, whatever
    the point says)."""
    band = interval_text(p.speedup_lo, p.speedup_hi)
    if p.recommended_gamma is not None:
        return f"speculate with γ = {p.recommended_gamma} ({p.predicted_speedup:.2f}x, band {band})"
    if verdict(p.predicted_speedup, p.speedup_lo, p.speedup_hi) == VERDICTS[2]:
        return (f"don't speculate: no γ beats verifier-only (best γ = {p.best_gamma} gives "
                f"{p.predicted_speedup:.2f}x, band {band}x: loses)")
    return (f"don't speculate: the best γ = {p.best_gamma} predicts {p.predicted_speedup:.2f}x, but its band "
            f"{band}x holds 1x: inconclusive")
