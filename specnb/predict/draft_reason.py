"""Why a draft won or paid the speculation tax, in Leviathan's terms (Leviathan et al. 2023): its
wall-clock c against the break-even c at its best γ and against its per-token α (the break-even c
at γ = 1, the highest of all γ), and whether the measured speedup agrees with the formula. The
sentence that says it is ``specnb.app.text.nb04_draft_size.explain_draft``."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from specnb.core.intervals import VERDICTS, verdict


class DraftOutcome(Enum):
    """Which comparison decides a draft's fate."""

    UNKNOWN = "unknown"  # it drafted no tokens: c and α are unknown
    NO_GAMMA_PAYS = "no γ pays"  # c ≥ per-token α, the break-even c at γ = 1
    ABOVE_BREAK_EVEN = "above break-even"  # c ≥ the break-even c at its best γ
    LOST_TO_OVERHEAD = "lost to overhead"  # c below the break-even c, yet its CI lies below 1x
    BELOW_BREAK_EVEN = "below break-even"  # c below the break-even c, and it paid


@dataclass(frozen=True, kw_only=True)
class DraftReason:
    """A draft's outcome and whether its measurement contradicts the formula (the formula says it
    cannot pay, yet it wins: its CI lies above 1x, a sign of noise)."""

    outcome: DraftOutcome
    disagrees: bool = False


def draft_reason(row) -> DraftReason:
    """The rule for a ``draft_table`` row (``c_wall``, ``alpha_token``, ``break_even_c``, ``speedup``
    and its CI ``speedup_lo``/``speedup_hi``, read by ``specnb.core.intervals.verdict``)."""
    c, alpha, be = row["c_wall"], row["alpha_token"], row["break_even_c"]
    measured = verdict(row["speedup"], row.get("speedup_lo"), row.get("speedup_hi"))
    if not (np.isfinite(c) and np.isfinite(alpha)):
        return DraftReason(outcome=DraftOutcome.UNKNOWN)
    if c >= alpha:
        return DraftReason(outcome=DraftOutcome.NO_GAMMA_PAYS, disagrees=measured == VERDICTS[0])
    if c >= be:
        return DraftReason(outcome=DraftOutcome.ABOVE_BREAK_EVEN, disagrees=measured == VERDICTS[0])
    if measured == VERDICTS[2]:
        return DraftReason(outcome=DraftOutcome.LOST_TO_OVERHEAD)
    return DraftReason(outcome=DraftOutcome.BELOW_BREAK_EVEN)
