"""sizing: the arithmetic from a pilot's spread to a CI half-width and back, on records with known answers."""

import math

import numpy as np
import pandas as pd
import pytest

from specnb.core.errors import ParameterError
from specnb.measure import sizing


def test_units_needed_is_the_inverse_of_the_half_width():
    # (1.96 · 0.1 / log 1.05)² = 16.14: 17 units give ±4.9%, 16 would give ±5.02%
    assert sizing.units_needed(0.1, 0.05) == 17
    assert sizing.half_width(0.1, 17) <= 0.05 < sizing.half_width(0.1, 16)
    assert sizing.half_width(0.1, 17) == pytest.approx(math.expm1(1.96 * 0.1 / math.sqrt(17)))
    assert sizing.units_needed(0.001, 0.05) == 2  # a bootstrap needs two units whatever the spread
    assert sizing.units_needed(0.2, 0.05) == 65  # twice the spread, four times the units (16.14 · 4 = 64.6)
    with pytest.raises(ParameterError, match="> 0"):
        sizing.units_needed(0.1, 0.0)


def test_spread_per_token_and_time_arithmetic():
    assert sizing.sd_at_tokens(0.2, 16, 64) == pytest.approx(0.1)  # four times the tokens, half the SD
    assert sizing.affordable_repeats(60, 500.0, 10) == 12  # 60 s ÷ (10 runs × 0.5 s)
    assert sizing.affordable_repeats(4, 500.0, 10) == 0 and sizing.affordable_repeats(60, 500.0, 0) == 0


def records(x_by_candidate: dict[str, list[float]]) -> pd.DataFrame:
    """Verifier-only at 100 ms per token on every prompt; each candidate's run on prompt i is
    exp(x) times as fast, so its log speedup there is x."""
    rows = []
    for i in range(len(next(iter(x_by_candidate.values())))):
        rows.append({"candidate": "verifier-only", "repeat": 0, "prompt_ids": f"p{i}", "batch_size": 1,
                     "new_tokens": 16, "wall_ms": 1600.0})
        for name, xs in x_by_candidate.items():
            rows.append({"candidate": name, "repeat": 0, "prompt_ids": f"p{i}", "batch_size": 1,
                         "new_tokens": 16, "wall_ms": 1600.0 / math.exp(xs[i])})
    return pd.DataFrame(rows)


def test_pooled_spread_pools_deviations_from_each_candidates_own_mean():
    # a: deviations −0.1, 0, +0.1 around 0.2; b: −0.2, +0.2 around −0.5 → Σ dev² = 0.02 + 0.08, df = 2 + 1
    frame = records({"a": [0.1, 0.2, 0.3], "b": [-0.7, -0.3, np.nan]}).dropna()
    spread = sizing.pooled_spread(frame)
    assert spread.df == 3 and spread.units == 5
    assert spread.sd == pytest.approx(math.sqrt(0.10 / 3))
    assert spread.tokens_per_unit == 16 and spread.wall_ms_per_unit == pytest.approx(frame["wall_ms"].mean())
    units = sizing.unit_log_speedups(frame).set_index(["candidate", "prompt_ids"])["x"]
    assert units[("a", "p2")] == pytest.approx(0.3)
    one_each = sizing.pooled_spread(records({"a": [0.1]}))
    assert one_each.df == 0 and math.isnan(one_each.sd)


def test_the_pooled_interval_uses_students_t_at_the_pooled_df():
    assert sizing.t95(24) == pytest.approx(2.064, abs=0.002) and sizing.t95(8) == pytest.approx(2.306, abs=0.01)
    assert math.isnan(sizing.t95(0))
    spread = sizing.Spread(sd=0.2, df=24, units=32, tokens_per_unit=16, wall_ms_per_unit=500.0)
    lo, hi = sizing.pooled_interval(1.1, spread, 4)  # ± t · 0.2 / 2 on the log scale
    assert lo == pytest.approx(1.1 * math.exp(-sizing.t95(24) * 0.1)) and hi * lo == pytest.approx(1.1**2)
    one_unit = sizing.Spread(sd=float("nan"), df=0, units=1, tokens_per_unit=16, wall_ms_per_unit=1.0)
    assert all(math.isnan(v) for v in sizing.pooled_interval(1.1, one_unit, 4))
