"""How an interval reads as text, written once: ``1.02–1.10`` (a 95% CI, a prediction's band), and a
speedup beside its CI, ``1.05x [1.02–1.10]``. The notebooks' text, the CLI and the predictor all use it
(``specnb.app.text.nb06_decision.ci_text`` brackets it and names the degenerate cases)."""

from __future__ import annotations


def interval_text(lo: float, hi: float, sep: str = "–") -> str:
    """``lo–hi`` to two decimals (``sep=", "`` where a table already reads ``[lo, hi]``)."""
    return f"{lo:.2f}{sep}{hi:.2f}"


def speedup_text(value: float, lo: float | None = None, hi: float | None = None, sep: str = "–") -> str:
    """``1.05x [1.02–1.10]``; the bare speedup when there is no CI (``lo`` None or NaN)."""
    if lo is None or lo != lo:  # NaN: no CI (one unit)
        return f"{value:.2f}x"
    return f"{value:.2f}x [{interval_text(lo, hi, sep)}]"
