"""Theory: closed forms against Monte Carlo, break-even and optimal-gamma properties, bad input."""

import numpy as np
import pandas as pd
import pytest

from specnb.core.errors import ParameterError
from specnb.core.theory import (
    break_even_alpha,
    expected_speedup,
    format_speedup,
    optimal_gamma,
    speedup_surface_alpha_c,
    speedup_surface_alpha_gamma,
    tokens_per_step,
    tokens_per_step_from_profile,
)

STEPS = 40_000


def simulate_tokens(profile: np.ndarray, steps: int, seed: int) -> np.ndarray:
    """Tokens per verifier step when position i is accepted with prob profile[i] given all before it were."""
    rng = np.random.default_rng(seed)
    accepted = rng.random((steps, len(profile))) < profile  # [steps, gamma]
    run_length = np.cumprod(accepted, axis=1).sum(axis=1)  # drafts accepted before the first rejection
    return run_length + 1  # + the verifier's bonus/correction token


def assert_within_standard_error(samples: np.ndarray, expected: float) -> None:
    standard_error = samples.std(ddof=1) / np.sqrt(len(samples))
    assert abs(samples.mean() - expected) < 4 * standard_error + 1e-12, (samples.mean(), expected, standard_error)


@pytest.mark.parametrize("alpha,gamma", [(0.0, 3), (0.392, 4), (0.6, 1), (0.8, 5), (0.95, 8)])
def test_tokens_per_step_matches_iid_simulation(alpha, gamma):
    samples = simulate_tokens(np.full(gamma, alpha), STEPS, seed=gamma)
    assert_within_standard_error(samples, tokens_per_step(alpha, gamma))


@pytest.mark.parametrize("profile", [[0.9, 0.7, 0.5, 0.3], [0.2, 0.95], [1.0, 0.5, 0.0, 0.9]])
def test_profile_matches_simulation(profile):
    samples = simulate_tokens(np.array(profile), STEPS, seed=len(profile))
    assert_within_standard_error(samples, tokens_per_step_from_profile(profile))


def test_profile_reduces_to_closed_form_and_broadcasts():
    alphas = np.array([0.1, 0.5, 0.9])
    profiles = np.repeat(alphas[:, None], 6, axis=1)  # [3, gamma=6]
    np.testing.assert_allclose(tokens_per_step_from_profile(profiles), tokens_per_step(alphas, 6))
    assert tokens_per_step_from_profile([0.0, 1.0]) == 1.0


def test_reference_speedup_prints_099x():
    speedup = expected_speedup(0.392, 4, 0.1601)
    assert format_speedup(speedup) == "0.99x"
    assert speedup == pytest.approx(tokens_per_step(0.392, 4) / (4 * 0.1601 + 1))


def test_speedup_limits():
    assert expected_speedup(0.0, 4, 0.25) == pytest.approx(1 / 2)  # every draft rejected: pure overhead
    assert expected_speedup(0.5, 3, 0.0) == pytest.approx(tokens_per_step(0.5, 3))  # free drafts


def test_break_even_spans_reference_range_for_c_05002():
    gammas = np.arange(3, 9)
    alphas = break_even_alpha(gammas, 0.5002)
    assert np.all(np.diff(alphas) > 0)  # longer drafts need better acceptance
    assert [round(100 * a) for a in alphas] == [69, 74, 78, 80, 83, 84]
    np.testing.assert_allclose(expected_speedup(alphas, gammas, 0.5002), 1.0, rtol=1e-12)


def test_break_even_closed_forms_and_edges():
    assert break_even_alpha(1, 0.3) == pytest.approx(0.3)  # (1 + a) / (1 + c) = 1
    assert break_even_alpha(2, 0.5) == pytest.approx((np.sqrt(5) - 1) / 2)  # a^2 + a - 1 = 0
    assert break_even_alpha(4, 0.0) == 0.0
    assert np.isnan(break_even_alpha(4, 1.0)) and np.isnan(break_even_alpha(3, 2.5))
    grid = break_even_alpha(np.arange(1, 9)[:, None], np.array([0.05, 0.2, 0.6]))  # [8, 3]
    assert grid.shape == (8, 3) and np.all(np.diff(grid, axis=1) > 0)


def test_optimal_gamma_beats_every_other_gamma():
    for alpha, c in [(0.392, 0.1601), (0.8, 0.05), (0.9, 0.01), (0.3, 0.6), (0.0, 0.1)]:
        gamma, best = optimal_gamma(alpha, c, max_gamma=32)
        all_speedups = expected_speedup(alpha, np.arange(1, 33), c)
        assert best == pytest.approx(all_speedups.max()) and gamma == all_speedups.argmax() + 1


def test_optimal_gamma_vectorised():
    alphas, cs = np.array([[0.5], [0.9]]), np.array([0.01, 0.1, 0.5])
    gammas, speedups = optimal_gamma(alphas, cs, max_gamma=16)
    assert gammas.shape == speedups.shape == (2, 3)
    assert np.all(gammas[1] >= gammas[0])  # better acceptance -> longer drafts
    np.testing.assert_allclose(speedups, expected_speedup(alphas, gammas, cs))


def test_surfaces_are_tidy():
    alpha_gamma = speedup_surface_alpha_gamma(0.16, alphas=[0.2, 0.5, 0.8], gammas=[1, 2, 4, 8])
    assert isinstance(alpha_gamma, pd.DataFrame) and len(alpha_gamma) == 12
    assert list(alpha_gamma.columns) == ["alpha", "gamma", "c", "tokens_per_step", "speedup"]
    row = alpha_gamma[(alpha_gamma.alpha == 0.5) & (alpha_gamma.gamma == 4)].iloc[0]
    assert row.speedup == pytest.approx(expected_speedup(0.5, 4, 0.16))
    alpha_c = speedup_surface_alpha_c(4)
    assert set(alpha_c.gamma) == {4} and alpha_c.c.nunique() > 5 and alpha_c.alpha.nunique() > 5
    assert np.isfinite(alpha_c.speedup).all()


@pytest.mark.parametrize("alpha", [-0.1, 1.0, 1.5, float("nan"), "high", [0.5, 1.0]])
def test_bad_alpha(alpha):
    with pytest.raises(ParameterError, match="alpha"):
        expected_speedup(alpha, 4, 0.1)


@pytest.mark.parametrize("gamma", [0, -2, 2.5, float("nan"), float("inf")])
def test_bad_gamma(gamma):
    with pytest.raises(ParameterError, match="gamma"):
        tokens_per_step(0.5, gamma)
    with pytest.raises(ParameterError, match="gamma"):
        break_even_alpha(gamma, 0.1)


@pytest.mark.parametrize("c", [-0.01, float("nan"), float("inf")])
def test_bad_c(c):
    with pytest.raises(ParameterError):
        expected_speedup(0.5, 4, c)
    with pytest.raises(ParameterError):
        optimal_gamma(0.5, c)


@pytest.mark.parametrize("profile", [[], [0.5, 1.2], [-0.1], [float("nan")], 0.5])
def test_bad_profile(profile):
    with pytest.raises(ParameterError):
        tokens_per_step_from_profile(profile)
