"""Expected speedup of speculative decoding under i.i.d. acceptance, vectorised for heatmaps.

References: Leviathan, Kalman & Matias 2023, "Fast Inference from Transformers via Speculative
Decoding" (Eq. 1: expected tokens per verifier step (1 − α^(γ+1)) / (1 − α); Theorem 3.8: expected
walltime improvement (1 − α^(γ+1)) / ((1 − α)(γc + 1))); Chen et al. 2023, "Accelerating Large
Language Model Decoding with Speculative Sampling" (the same loop, per-position acceptance).

Symbols: α = probability a drafted token is accepted, γ = draft tokens proposed per step, c = cost of
one draft forward ÷ one verifier forward. Every function takes scalars or numpy arrays and
broadcasts, so a notebook can pass a grid and draw the result; scalars in give numpy scalars out.
Bad input (α outside [0, 1), γ < 1 or non-integer, c < 0, NaN) raises ``ParameterError``.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from specnb.core.errors import ParameterError

DEFAULT_MAX_GAMMA = 32
_BISECTION_STEPS = 64  # halves [0, 1) to below 1e-19: exact to float precision
_BELOW_ONE = np.nextafter(1.0, 0.0)  # alpha = 1 would divide by zero


def _as_float_array(value, name: str) -> np.ndarray:
    if isinstance(value, (str, bytes)):
        raise ParameterError(f"{name} must be a number, got {value!r}")
    try:
        array = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a number or an array of numbers, got {value!r}") from None
    if np.isnan(array).any():
        raise ParameterError(f"{name} is NaN; pass a real number")
    return array


def validate_alpha(alpha) -> np.ndarray:
    """α as a float array; ParameterError unless every value is in [0, 1)."""
    array = _as_float_array(alpha, "alpha")
    if ((array < 0) | (array >= 1)).any():
        raise ParameterError(f"alpha must be in [0, 1) (an acceptance rate; 1 would mean infinite tokens), got "
                             f"{alpha!r}")
    return array


def validate_gamma(gamma) -> np.ndarray:
    """γ as an int array; ParameterError unless every value is a whole number ≥ 1."""
    array = _as_float_array(gamma, "gamma")
    if not np.isfinite(array).all() or (array != np.round(array)).any():
        raise ParameterError(f"gamma must be a whole number of draft tokens, got {gamma!r}")
    if (array < 1).any():
        raise ParameterError(f"gamma must be >= 1 (draft tokens per step), got {gamma!r}")
    return array.astype(np.int64)


def validate_c(c) -> np.ndarray:
    """c as a float array; ParameterError unless every value is finite and ≥ 0."""
    array = _as_float_array(c, "c")
    if not np.isfinite(array).all() or (array < 0).any():
        raise ParameterError(f"c (draft cost / verifier cost) must be a finite number >= 0, got {c!r}")
    return array


def _tokens(alpha: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def tokens_per_step(alpha, gamma):
    """Expected tokens emitted per verifier step, bonus token included: (1 − α^(γ+1)) / (1 − α)."""
    return _tokens(validate_alpha(alpha), validate_gamma(gamma))


def expected_speedup(alpha, gamma, c):
    """Leviathan et al.: (1 − α^(γ+1)) / ((1 − α)(γc + 1)); below 1 means slower than the verifier alone."""
    alpha, gamma, c = validate_alpha(alpha), validate_gamma(gamma), validate_c(c)
    return _tokens(alpha, gamma) / (gamma * c + 1.0)


def break_even_alpha(gamma, c):
    """Smallest α with expected speedup ≥ 1 for (γ, c); NaN where none exists (γc ≥ γ, i.e. c ≥ 1).

    The speedup rises monotonically in α from 1/(γc+1) at α=0 towards (γ+1)/(γc+1) as α→1, so a
    vectorised bisection on [0, 1) finds the root wherever c < 1.
    """
    gamma, c = np.broadcast_arrays(validate_gamma(gamma), validate_c(c))
    exists = c < 1.0
    c_search = np.where(exists, c, 0.0)  # keeps the search finite where no root exists
    low, high = np.zeros(gamma.shape), np.ones(gamma.shape)
    for _ in range(_BISECTION_STEPS):
        mid = np.minimum((low + high) / 2, _BELOW_ONE)
        fast = _tokens(mid, gamma) / (gamma * c_search + 1.0) >= 1.0
        high, low = np.where(fast, mid, high), np.where(fast, low, mid)
    already_fast = c_search == 0.0  # speedup is exactly 1 at alpha = 0 when drafting is free
    result = np.where(exists, np.where(already_fast, 0.0, high), np.nan)
    return result[()] if result.ndim == 0 else result


def break_even_c(alpha, gamma):
    """Largest cost ratio c at which (α, γ) still breaks even: (E[tokens per step] − 1) ÷ γ.

    Below it speculation wins; it is highest at γ = 1, where it equals α."""
    return (tokens_per_step(alpha, gamma) - 1.0) / validate_gamma(gamma)


def optimal_gamma(alpha, c, max_gamma: int = DEFAULT_MAX_GAMMA):
    """(γ*, speedup at γ*): the whole γ in 1..max_gamma with the highest expected speedup for (α, c)."""
    alpha, c = validate_alpha(alpha), validate_c(c)
    max_gamma = int(validate_gamma(max_gamma).max())
    gammas = np.arange(1, max_gamma + 1).reshape((-1,) + (1,) * np.broadcast(alpha, c).ndim)  # [G, ...]
    speedups = _tokens(alpha, gammas) / (gammas * c + 1.0)  # [G, ...]
    best = speedups.argmax(axis=0)
    best_speedup = np.take_along_axis(speedups, best[None], axis=0)[0]
    best_gamma = best + 1
    return (best_gamma[()], best_speedup[()]) if best_gamma.ndim == 0 else (best_gamma, best_speedup)


def tokens_per_step_from_profile(acceptance_by_position):
    """Expected tokens per step for conditional acceptances a_1..a_γ (last axis), bonus included.

    a_i = P(position i accepted | positions < i accepted), so P(at least k accepted) = a_1·…·a_k
    and E[tokens] = 1 + Σ_k Π_{i≤k} a_i. With every a_i = α this is (1 − α^(γ+1)) / (1 − α).
    """
    profile = _as_float_array(acceptance_by_position, "acceptance_by_position")
    if profile.ndim == 0 or profile.shape[-1] < 1:
        raise ParameterError("acceptance_by_position needs at least one position (a_1..a_gamma on the last axis)")
    if ((profile < 0) | (profile > 1)).any():
        raise ParameterError("acceptance probabilities must be in [0, 1]")
    result = 1.0 + np.cumprod(profile, axis=-1).sum(axis=-1)
    return result[()] if result.ndim == 0 else result


def _grid(alphas, gammas, cs) -> pd.DataFrame:
    rows = list(itertools.product(alphas, gammas, cs))
    frame = pd.DataFrame(rows, columns=["alpha", "gamma", "c"])
    frame["gamma"] = frame["gamma"].astype(int)
    frame["tokens_per_step"] = tokens_per_step(frame["alpha"].to_numpy(), frame["gamma"].to_numpy())
    frame["speedup"] = expected_speedup(frame["alpha"].to_numpy(), frame["gamma"].to_numpy(), frame["c"].to_numpy())
    return frame


def speedup_surface_alpha_gamma(c, alphas=None, gammas=None) -> pd.DataFrame:
    """Tidy table (alpha, gamma, c, tokens_per_step, speedup) over an α × γ grid at fixed c."""
    alphas = np.linspace(0.0, 0.95, 20) if alphas is None else np.ravel(validate_alpha(alphas))
    gammas = np.arange(1, 11) if gammas is None else np.ravel(validate_gamma(gammas))
    return _grid(alphas, gammas, np.ravel(validate_c(c)))


def speedup_surface_alpha_c(gamma, alphas=None, cs=None) -> pd.DataFrame:
    """Tidy table (alpha, gamma, c, tokens_per_step, speedup) over an α × c grid at fixed γ."""
    alphas = np.linspace(0.0, 0.95, 20) if alphas is None else np.ravel(validate_alpha(alphas))
    cs = np.linspace(0.0, 1.0, 21) if cs is None else np.ravel(validate_c(cs))
    return _grid(alphas, np.ravel(validate_gamma(gamma)), cs)


def break_even_table(cs: dict, gammas) -> pd.DataFrame:
    """Break-even α per γ for each labelled cost ratio (``cs``: label -> c), tidy: label, c, gamma,
    break_even_alpha (NaN where no α breaks even)."""
    return pd.DataFrame(
        [
            {"label": label, "c": float(c), "gamma": int(g), "break_even_alpha": float(break_even_alpha(g, c))}
            for label, c in cs.items()
            for g in gammas
        ]
    )


def format_speedup(speedup: float) -> str:
    """Speedup as people quote it: two decimals and an x (0.99x = 1% slower than the verifier alone)."""
    return f"{float(speedup):.2f}x"
