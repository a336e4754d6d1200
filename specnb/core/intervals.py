"""How an interval reads, written once: as text, ``1.02–1.10`` (a 95% CI, a prediction's band), and a
speedup beside its CI, ``1.05x [1.02–1.10]`` (``specnb.app.text.nb06_decision.ci_text`` brackets it and
names the degenerate cases); and as a verdict, the word a sentence uses for it (``verdict``: wins /
inconclusive / loses, or pays / no measurable difference / loses), so no sentence says "wins" of a
speedup whose CI holds 1x. The notebooks' text, the CLI, the tables and the predictor all use it.
"""

from __future__ import annotations

import math


def interval_text(lo: float, hi: float, sep: str = "–") -> str:
    """``lo–hi`` to two decimals (``sep=", "`` where a table already reads ``[lo, hi]``)."""
    return f"{lo:.2f}{sep}{hi:.2f}"


def speedup_text(value: float, lo: float | None = None, hi: float | None = None, sep: str = "–") -> str:
    """``1.05x [1.02–1.10]``; the bare speedup when there is no CI (``lo`` None or NaN)."""
    if lo is None or lo != lo:  # NaN: no CI (one unit)
        return f"{value:.2f}x"
    return f"{value:.2f}x [{interval_text(lo, hi, sep)}]"


VERDICTS = ("wins", "inconclusive", "loses")  # a speedup's words, best first (``rank``)
PAYS = ("pays", "no measurable difference", "loses")  # the same verdict, said of a setting that costs something


def verdict(value: float, lo: float | None = None, hi: float | None = None, words=VERDICTS, at: float = 1.0) -> str:
    """``words[0]`` when the interval [lo, hi] lies wholly above ``at`` (1x: no change), ``words[2]``
    when wholly below, else ``words[1]``. Without an interval (``lo``/``hi`` None or NaN: one prompt
    batch, one unit) the point ``value`` decides, and a point exactly at ``at`` is ``words[1]``."""
    if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi):
        return words[0] if lo > at else words[2] if hi < at else words[1]
    return words[0] if value > at else words[2] if value < at else words[1]


def rank(word: str, words=VERDICTS) -> int:
    """0 for the best word of ``words`` (wins), 2 for the worst (loses): "best" sorts by this first."""
    return words.index(word)
