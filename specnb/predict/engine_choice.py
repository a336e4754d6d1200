"""Which engine to use instead of (or with) speculation: from the alternatives notebook's summary
(``specnb.measure.alternatives``), the best speculation on the eager fp32 verifier, the best method
that kept the fp32 verifier's output, and the fastest of all. The text that names them is
``specnb.app.text.nb07_alternatives`` and ``nb06_decision.instead_line``."""

from __future__ import annotations

import pandas as pd

from specnb.measure.alternatives import BASELINE_METHOD
from specnb.measure.analysis import ranked


def best(rows: pd.DataFrame):
    """The fastest row of those that win (``ranked``), or None when there is none."""
    return None if rows.empty else ranked(rows).iloc[0]


def choices(summary: pd.DataFrame) -> dict:
    """The rows a verdict names: the best speculation on the eager fp32 verifier, the best method
    whose greedy output stayed the fp32 verifier's on every prompt, and the fastest of all."""
    same = summary["identical_prompts"] == summary["prompts"]
    spec = summary[(summary["speculation"] != "") & (summary["engine"] == "PyTorch eager")
                   & (summary["precision"] == "fp32")]
    return {"speculation": best(spec), "lossless": best(summary[same & (summary["method"] != BASELINE_METHOD)]),
            "fastest": best(summary)}
