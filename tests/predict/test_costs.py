"""costs: the cost model's two pieces, the robust line, and a profile's JSON that fails in one line."""

import numpy as np
import pandas as pd
import pytest

from specnb.core.errors import ParameterError
from specnb.predict import costs


def test_the_curve_prices_one_token_at_its_own_time_and_more_on_a_line():
    measured = [[1, 1, 5.0], [2, 1, 9.0], [4, 1, 10.0], [8, 1, 12.0], [2, 2, 10.0]]
    model = costs.CostModel(t0_ms=4.0, ms_per_token=1.0, measured=measured)
    one, (t0, slope) = model.pieces()
    assert one == 5.0 and slope == pytest.approx(0.5) and t0 == pytest.approx(8.0)
    assert model.forward_ms(1) == 5.0 and model.forward_ms(6) == pytest.approx(11.0)
    assert model.curve(batch_size=2)(3) == pytest.approx(11.0)  # M = n · b = 6


def test_without_enough_points_the_fitted_line_stands_in():
    model = costs.CostModel(t0_ms=2.0, ms_per_token=0.5, measured=[[2, 1, 3.0]])
    assert model.pieces() == (2.5, (2.0, 0.5))


def test_theil_sen_ignores_one_slow_cell_and_never_slopes_down():
    x = np.arange(2.0, 12.0)
    y = 3.0 + 0.5 * x
    y[-1] += 40.0  # one cell timed in a slow spell
    assert costs.theil_sen(x, y) == pytest.approx((3.0, 0.5))
    assert costs.theil_sen(x, 10.0 - x)[1] == 0.0


def test_fit_needs_two_sizes():
    grid = pd.DataFrame({"n_tokens": [1, 2, 4], "batch_size": [1, 1, 1], "median_ms": [3.0, 4.0, 6.0]})
    fit = costs.fit_cost_model(grid)
    assert fit.ms_per_token == pytest.approx(1.0, abs=0.1) and fit.n_points == 3 and len(fit.measured) == 3
    with pytest.raises(ParameterError, match="at least two sizes"):
        costs.fit_cost_model(grid.iloc[:1])


def test_a_malformed_profile_is_one_line(tmp_path):
    path = tmp_path / "p.json"
    path.write_text("{not json")
    with pytest.raises(ParameterError, match="not valid JSON"):
        costs.load_profile(path)
    path.write_text('{"format": "something else"}')
    with pytest.raises(ParameterError, match="malformed"):
        costs.load_profile(path)
    with pytest.raises(ParameterError, match="cannot read profile"):
        costs.load_profile(tmp_path / "missing.json")
