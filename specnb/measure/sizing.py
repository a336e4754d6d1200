"""How many timed generations a speedup needs: the spread of the paired log speedup on a pilot,
and the arithmetic from that spread to a 95% CI half-width and back.

A unit is what ``summarise`` resamples: one batch of prompts in one repeat, a candidate's run paired
with verifier-only's run on the same prompts. Its log speedup x = log(tok/s ÷ baseline tok/s)
varies from unit to unit with the prompts' acceptance and with timing noise (on a shared CPU one
slow baseline generation moves every candidate paired with it). The mean of n units has a standard
error sd / √n, so a 95% interval of relative half-width h needs

    n = ⌈(z · sd / log(1 + h))²⌉,  z = 1.96

(the normal approximation to the bootstrap interval ``summarise`` reports). The spread is pooled
over candidates (deviations from each candidate's own mean), since with a handful of prompts one
candidate's own SD is itself too noisy to size anything by. Cochran, *Sampling Techniques* (1977),
ch. 4, for the sample-size formula; Browne (1995) for sizing from a pilot's SD.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from specnb.core.errors import ParameterError
from specnb.measure.runs import BASELINE

Z95 = 1.96  # two-sided 95%, the level of every CI specnb reports


@dataclass(kw_only=True)
class Spread:
    """The pilot's spread of one unit's log speedup, pooled over candidates."""

    sd: float  # SD of one unit's log speedup
    df: int  # degrees of freedom behind it (units − candidates)
    units: int  # paired units in the pilot
    tokens_per_unit: float  # mean tokens one paired generation made (all its rows)
    wall_ms_per_unit: float  # mean wall time of one generation (one record), every candidate and the baseline


def unit_log_speedups(records: pd.DataFrame, baseline: str = BASELINE) -> pd.DataFrame:
    """One row per paired unit (candidate, batch size, repeat, prompts): its log speedup ``x``."""
    records = pd.DataFrame(records)
    keys = ["repeat", "prompt_ids", "batch_size"]
    base = records[records["candidate"] == baseline][keys + ["new_tokens", "wall_ms"]]
    paired = records[records["candidate"] != baseline].merge(base, on=keys, suffixes=("", "_base"))
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.log((paired["new_tokens"] / paired["wall_ms"]) / (paired["new_tokens_base"] / paired["wall_ms_base"]))
    return paired[["candidate", *keys, "new_tokens"]].assign(x=x.to_numpy())


def pooled_spread(records: pd.DataFrame, baseline: str = BASELINE) -> Spread:
    """The per-unit SD of the log speedup, pooled over candidates and batch sizes, from raw records
    of ``specnb.measure.runs.run_interleaved``; NaN with ``df`` 0 when no candidate has two units."""
    units = unit_log_speedups(records, baseline)
    units = units[np.isfinite(units["x"])]
    groups = units.groupby(["candidate", "batch_size"])["x"]
    df = int((groups.count() - 1).clip(lower=0).sum())
    deviations = units["x"] - groups.transform("mean")
    sd = math.sqrt((deviations**2).sum() / df) if df else float("nan")
    return Spread(sd=float(sd), df=df, units=len(units),
                  tokens_per_unit=float(units["new_tokens"].mean()),
                  wall_ms_per_unit=float(pd.DataFrame(records)["wall_ms"].mean()))


def half_width(sd: float, units: int, z: float = Z95) -> float:
    """Relative half-width of the 95% interval of a speedup averaged over ``units`` units:
    exp(z · sd / √units) − 1 (0.05: ±5%)."""
    if units < 1:
        return float("inf")
    return math.expm1(z * sd / math.sqrt(units))


def t95(df: int) -> float:
    """Two-sided 95% quantile of Student's t with ``df`` degrees of freedom (Cornish–Fisher
    expansion around the normal: within 0.5% of the exact value from df 8, low below that, e.g.
    3.06 at df 3 against 3.18)."""
    if df < 1:
        return float("nan")
    z = Z95
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def pooled_interval(speedup: float, spread: Spread, units: int) -> tuple[float, float]:
    """95% interval of a speedup measured on ``units`` units, from the spread pooled over the grid:
    speedup · exp(± t · sd / √units). With a handful of prompts this is the honest one: a bootstrap
    over 4 prompt batches covers about 80% and over 2 about 60%, not 95%."""
    if units < 1 or spread.df < 1:
        return float("nan"), float("nan")
    half = t95(spread.df) * spread.sd / math.sqrt(units)
    return speedup * math.exp(-half), speedup * math.exp(half)


def units_needed(sd: float, target: float, z: float = Z95) -> int:
    """Units a speedup needs for a 95% interval no wider than ±``target`` (relative): the inverse of
    ``half_width``, at least 2 (a bootstrap over one unit has no spread)."""
    if target <= 0:
        raise ParameterError(f"the target half-width must be > 0, got {target}")
    return max(2, math.ceil((z * sd / math.log1p(target)) ** 2))


def sd_at_tokens(sd: float, tokens_from: float, tokens_to: float) -> float:
    """A unit's SD at another generation length, if the spread is per token (timing noise and
    acceptance both averaged over the generation: variance ∝ 1 / tokens). Prompt-level effects do
    not shrink so, which makes this the optimistic end; the measured CIs are what a verdict reads."""
    return sd * math.sqrt(tokens_from / tokens_to)


def affordable_repeats(seconds: float, wall_ms_per_unit: float, runs_per_repeat: int) -> int:
    """How many more repeats of ``runs_per_repeat`` generations fit in ``seconds``."""
    if runs_per_repeat < 1 or wall_ms_per_unit <= 0:
        return 0
    return max(0, int(seconds * 1e3 // (wall_ms_per_unit * runs_per_repeat)))
