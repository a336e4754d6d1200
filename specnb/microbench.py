"""Forward-pass microbenchmarks and FLOPs tables: what one forward costs, by model and size.

Dispatch overhead: a forward costs a fixed launch/framework time plus a compute or bandwidth term,
t = t0 + k·FLOPs; ``fit_dispatch`` fits it across models. A large t0 is why a draft with 6x fewer
FLOPs can be only ~2.8x faster per token, and why the wall-clock cost ratio c differs from the
FLOPs c used by Leviathan et al. 2023 ("Fast Inference from Transformers via Speculative Decoding").
Notebook 05 reuses the grid across batch sizes to find where the verifier stops being memory-bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from specnb.errors import ParameterError


def exit_layers(name: str, verifier: str) -> int | None:
    """K for ``exit:K``, or for an embedded exit of the embedded verifier itself; else None."""
    from specnb.models import EMBEDDED_EXITS, EMBEDDED_VERIFIER

    if name in EMBEDDED_EXITS and verifier == EMBEDDED_VERIFIER:
        return EMBEDDED_EXITS[name]
    if not name.startswith("exit:"):
        return None
    try:
        return int(name.split(":", 1)[1])
    except ValueError:
        raise ParameterError(f"early-exit draft {name!r} must look like exit:K with an integer K, e.g. exit:4") from None


def draft_config(verifier_config, name: str):
    """Config of a draft for FLOPs counting; early exits are the verifier cut to K layers; None for
    prompt lookup (no model, no FLOPs)."""
    from specnb.flops import resolve_config
    from specnb.models import EMBEDDED_EXITS, PROMPT_LOOKUP, exit_config

    if name == PROMPT_LOOKUP:
        return None
    if name in EMBEDDED_EXITS:
        return exit_config(verifier_config, EMBEDDED_EXITS[name])
    if name.startswith("exit:"):
        return exit_config(verifier_config, exit_layers(name, ""))
    return resolve_config(name)


def flops_table(verifier: str, drafts: list[str], context: int = 128) -> pd.DataFrame:
    """FLOPs per token (seed convention, and with attention over ``context`` cached tokens),
    parameters and the FLOPs cost ratio c of each draft against ``verifier``; from configs only."""
    from specnb.flops import analytic_flops, resolve_config

    v_config = resolve_config(verifier)
    v = analytic_flops(v_config, context)
    rows = [{"model": verifier, "role": "verifier", "layers": v.layers, "hidden_size": v.hidden_size,
             "params": v.params, "flops_per_token": v.flops_per_token, "flops_at_context": v.flops_per_token_at_context}]
    for name in drafts:
        config = draft_config(v_config, name)
        d = analytic_flops(config, context) if config is not None else None
        rows.append({"model": name, "role": "draft", "layers": d.layers if d else 0,
                     "hidden_size": d.hidden_size if d else 0, "params": d.params if d else 0,
                     "flops_per_token": d.flops_per_token if d else 0,
                     "flops_at_context": d.flops_per_token_at_context if d else 0})
    frame = pd.DataFrame(rows)
    frame["c_flops"] = frame["flops_per_token"] / v.flops_per_token
    frame["c_flops_at_context"] = frame["flops_at_context"] / v.flops_per_token_at_context
    frame.attrs["context"] = context
    return frame


def measure_forward_grid(model, n_tokens=(1, 2, 4, 8), batch_sizes=(1,), context_len: int = 128, repeats: int = 5,
                         name: str | None = None, device=None, warmup: int = 2) -> pd.DataFrame:
    """Median ms of one forward for every (tokens per forward, batch size), on a ``context_len`` cache
    (one model; see ``measure_forward_grids``)."""
    shapes = [GridShapes(name or type(model).__name__, model, tuple(n_tokens))]
    return measure_forward_grids(shapes, batch_sizes, context_len, repeats, device, warmup)


@dataclass
class GridShapes:
    """One model's shapes in a forward grid: tokens per forward, and the logits each keeps (None: all)."""

    name: str
    model: object
    n_tokens: tuple
    keep: int | None = None


def measure_forward_grids(shapes: list[GridShapes], batch_sizes=(1,), context_len: int = 128, repeats: int = 5,
                          device=None, warmup: int = 2) -> pd.DataFrame:
    """Median ms of one forward for every (model, tokens per forward, batch size), on a
    ``context_len`` cache.

    Within a batch size every shape of every model is timed interleaved, one forward of each in
    turn, ``repeats`` times. Why: on a shared machine a slow spell of a few seconds would otherwise
    land on whichever shape (or model) was being timed then and show up as a shape effect or as a
    cost ratio c; interleaved, it slows every forward alike, and the differences between shapes
    and models (what γ and the choice of draft trade against) survive it. Interleaving the models
    also times a draft's forward the way the loop runs it: after the verifier's, not after its own.
    """
    from specnb.timing import ForwardProbe

    rows = []
    for b in batch_sizes:
        probes = [(s.name, ForwardProbe(s.model, int(n), int(b), context_len, device, s.keep))
                  for s in shapes for n in s.n_tokens]
        for _ in range(warmup):
            for _, probe in probes:
                probe.time_ms()
        samples = [[] for _ in probes]
        for _ in range(repeats):
            for (_, probe), got in zip(probes, samples):
                got.append(probe.time_ms())
        for (name, probe), got in zip(probes, samples):
            t = probe.timing(got)
            rows.append({"model": name, "n_tokens": t.n_tokens, "batch_size": t.batch_size,
                         "context_len": t.context_len, "median_ms": t.median_ms,
                         "min_ms": min(got), "max_ms": max(got), "samples_ms": got})
        del probes  # free the caches before the next batch size
    return pd.DataFrame(rows)


@dataclass
class DispatchFit:
    """t_forward = t0 + k·FLOPs across models: fixed dispatch cost plus a compute/bandwidth term."""

    t0_ms: float
    ms_per_gflop: float
    r2: float
    n_points: int

    def predict_ms(self, flops) -> np.ndarray:
        return self.t0_ms + self.ms_per_gflop * np.asarray(flops, dtype=float) / 1e9


def forward_flops(grid: pd.DataFrame, flops_per_token) -> np.ndarray:
    """FLOPs of each grid row's forward: per-token FLOPs of its model × tokens × batch size."""
    if isinstance(flops_per_token, dict):
        missing = set(grid["model"]) - set(flops_per_token)
        if missing:
            raise ParameterError(f"no FLOPs/token given for models {sorted(missing)}")
        per_token = grid["model"].map(flops_per_token).to_numpy(dtype=float)
    else:
        per_token = np.full(len(grid), float(flops_per_token))
    return per_token * grid["n_tokens"].to_numpy() * grid["batch_size"].to_numpy()


def fit_dispatch(grid: pd.DataFrame, flops_per_token) -> DispatchFit:
    """Least-squares fit of median forward ms on forward GFLOPs (``flops_per_token``: a number, or
    a dict from the grid's ``model`` names to FLOPs/token)."""
    x = forward_flops(grid, flops_per_token) / 1e9
    y = grid["median_ms"].to_numpy(dtype=float)
    if len(np.unique(x)) < 2:
        raise ParameterError("fit_dispatch needs forwards of at least two different sizes (tokens or models)")
    design = np.stack([np.ones_like(x), x], axis=1)  # [N, 2]
    (t0, k), *_ = np.linalg.lstsq(design, y, rcond=None)
    residual = y - design @ np.array([t0, k])
    total = np.sum((y - y.mean()) ** 2)
    r2 = 1.0 - np.sum(residual ** 2) / total if total > 0 else 1.0
    return DispatchFit(float(t0), float(k), float(r2), len(y))


def wall_clock_c(grid: pd.DataFrame, draft: str, verifier: str, n_tokens: int = 1, batch_size: int = 1) -> float:
    """c by wall clock: the draft's ÷ the verifier's median time of one ``n_tokens`` forward."""
    def median(model):
        rows = grid[(grid["model"] == model) & (grid["n_tokens"] == n_tokens) & (grid["batch_size"] == batch_size)]
        if rows.empty:
            raise ParameterError(f"no timing for {model!r} at n_tokens={n_tokens}, batch_size={batch_size}")
        return float(rows["median_ms"].median())

    return median(draft) / median(verifier)


def smaller_vs_faster(fit: DispatchFit, verifier_flops: float,
                      factors=(1, 1.5, 2, 3, 4, 6, 8, 12, 16, 32)) -> pd.DataFrame:
    """Why s-times fewer FLOPs is not s-times faster: under the fitted t = t0 + k·FLOPs a forward of
    verifier_flops / s costs (t0 + kF) / (t0 + kF/s) times less, which tends to 1 + kF/t0, not s."""
    factors = np.asarray(factors, dtype=float)
    if np.any(factors <= 0):
        raise ParameterError(f"FLOPs reduction factors must be positive, got {factors.tolist()}")
    verifier_ms = float(fit.predict_ms(verifier_flops))
    return pd.DataFrame({"flops_smaller": factors,
                         "times_faster": verifier_ms / fit.predict_ms(verifier_flops / factors)})


def forward_scaling(grid: pd.DataFrame) -> pd.DataFrame:
    """Each forward of one model's grid against its one-token, batch-1 forward: ``tokens`` in the
    forward (n_tokens × batch_size), ``ms_per_token`` and ``times_one_token`` (how many one-token
    forwards' time it costs). While memory- or dispatch-bound, tokens ride along almost free."""
    one = grid[(grid["n_tokens"] == 1) & (grid["batch_size"] == 1)]["median_ms"]
    if one.empty:
        raise ParameterError("forward_scaling needs a forward of 1 token at batch size 1 in the grid")
    tokens = grid["n_tokens"] * grid["batch_size"]
    return grid.assign(tokens=tokens, ms_per_token=grid["median_ms"] / tokens,
                       times_one_token=grid["median_ms"] / float(one.median())).sort_values(["tokens", "batch_size"])


def batch_knee(grid: pd.DataFrame, ratio: float = 2.0) -> float:
    """Fewest tokens in one forward that cost at least ``ratio`` one-token forwards: below it the
    verifier is memory/dispatch-bound (verifying γ + 1 tokens per row costs about one forward),
    from there on compute grows with the tokens. NaN when no measured forward got that slow."""
    scaled = forward_scaling(grid)
    slow = scaled[scaled["times_one_token"] >= ratio]
    return float(slow["tokens"].min()) if len(slow) else float("nan")
