"""costs: the cost model's two pieces, the robust line, and a profile's JSON that fails in one line."""

import json
from dataclasses import asdict

import numpy as np
import pandas as pd
import pytest
from helpers import DRAFT, synthetic_profile

from specnb.core.errors import ParameterError
from specnb.predict import costs


def test_the_curve_prices_one_token_at_its_own_time_and_more_on_a_line():
    measured = [[1, 1, 5.0], [2, 1, 9.0], [4, 1, 10.0], [8, 1, 12.0], [2, 2, 10.0]]
    model = costs.CostModel(t0_ms=4.0, ms_per_token=1.0, measured=measured)
    assert model.forward_ms(1) == 5.0  # the measured one-token forward, not the line's 5.5
    assert model.forward_ms(6) == pytest.approx(11.0)  # the Theil-Sen line over M >= 2: 8 + 0.5 M
    assert model.curve(batch_size=2)(3) == pytest.approx(11.0)  # M = n · b = 6


def test_without_points_the_fitted_line_stands_in():
    model = costs.CostModel(t0_ms=2.0, ms_per_token=0.5, measured=[[2, 1, 3.0]])
    assert model.forward_ms(1) == pytest.approx(2.5)  # no one-token point: t0 + 1 · slope
    assert model.forward_ms(2) == pytest.approx(3.0)  # one measured M: its time


def test_theil_sen_ignores_one_slow_cell_and_never_slopes_down():
    x = np.arange(2.0, 12.0)
    y = 3.0 + 0.5 * x
    y[-1] += 40.0  # one cell timed in a slow spell
    assert costs.theil_sen(x, y) == pytest.approx((3.0, 0.5))
    assert costs.theil_sen(x, 10.0 - x)[1] == 0.0


def test_a_fit_keeps_its_points_and_needs_two_sizes():
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


def test_fit_recovers_known_coefficients():
    rng = np.random.default_rng(0)
    n, b = np.meshgrid(np.arange(1, 10), [1, 2, 4])
    true_ms = 42.0 + 3.5 * n * b
    grid = pd.DataFrame(
        {
            "n_tokens": n.ravel(),
            "batch_size": b.ravel(),
            "median_ms": (true_ms * (1 + 0.01 * rng.standard_normal(true_ms.shape))).ravel(),
        }
    )
    fit = costs.fit_cost_model(grid)
    assert fit.t0_ms == pytest.approx(42.0, rel=0.03)
    assert fit.ms_per_token == pytest.approx(3.5, rel=0.03)
    assert fit.r2 > 0.99 and fit.n_points == 27
    measured = grid.set_index(["n_tokens", "batch_size"])["median_ms"]
    assert fit.forward_ms(1, 1) == pytest.approx(measured[(1, 1)])  # the one-token forward as measured
    assert fit.forward_ms(5, 2) == pytest.approx(42.0 + 35.0, rel=0.01)  # the pooled line, not one noisy cell
    assert fit.forward_ms(20, 2) == pytest.approx(42.0 + 140.0, rel=0.03)  # the line extrapolates
    assert fit.forward_ms(5, 3) == pytest.approx(42.0 + 52.5, rel=0.01)  # an unmeasured batch size: by tokens


def test_cost_model_prices_by_tokens_in_all_and_one_slow_cell_moves_little():
    # past the one-token jump, forwards of 2..8 tokens cost alike in whichever rows they sit; one cell
    # timed in a slow spell (b=2, n=1: 130 ms) must not set the price of batch 2's one-token step
    grid = pd.DataFrame({"n_tokens": [1, 2, 4, 1, 2, 4], "batch_size": [1, 1, 1, 2, 2, 2],
                         "median_ms": [60.0, 100, 100, 130, 100, 100]})
    fit = costs.fit_cost_model(grid)
    assert fit.forward_ms(1, 1) == 60.0
    assert fit.forward_ms(1, 2) == pytest.approx(fit.forward_ms(2, 1))  # two tokens in all, either way
    assert fit.forward_ms(1, 2) == pytest.approx(100.0)  # the 130 ms cell is outvoted by the other four


def test_cost_model_keeps_a_jump_the_line_smooths_away():
    # a CPU-like forward: 2 tokens cost 1.7x one (matrix-vector -> matrix-matrix), then ~linear
    grid = pd.DataFrame({"n_tokens": [1, 2, 3, 4, 5], "batch_size": 1, "median_ms": [60.0, 102, 104, 106, 108]})
    fit = costs.fit_cost_model(grid)
    assert fit.forward_ms(np.array([1, 2, 2.5])) == pytest.approx([60.0, 102.0, 103.0])
    assert fit.t0_ms + fit.ms_per_token * 1 > 70  # what the line alone would say for 1 token
    restored = costs.CostModel(**json.loads(json.dumps(asdict(fit))))
    assert restored.forward_ms(2) == pytest.approx(102.0)


def test_profile_json_round_trip(tmp_path):
    profile = synthetic_profile()
    path = costs.save_profile(profile, tmp_path / "p.json")
    loaded = costs.load_profile(path)
    assert costs.save_profile(loaded, tmp_path / "again.json").read_text() == path.read_text()
    assert (
        loaded.verifier_decode.t0_ms == 60.0 and loaded.acceptance[DRAFT].reached == profile.acceptance[DRAFT].reached
    )
    assert loaded.traces[DRAFT] == profile.traces[DRAFT]


@pytest.mark.parametrize(
    "text,match",
    [
        ("{not json", "not valid JSON"),
        ('{"format": "other"}', "malformed"),
        ('{"format": "specnb-hardware-profile/2"}', "malformed"),
        ('{"format": "specnb-hardware-profile/1"}', "malformed"),
    ],
)
def test_malformed_profile_is_a_clear_error(tmp_path, text, match):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ParameterError, match=match):
        costs.load_profile(path)
