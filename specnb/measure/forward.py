"""Forward-pass microbenchmarks: what one forward costs, by model, tokens per forward and batch size.

Dispatch overhead: a forward costs a fixed launch/framework time plus a compute or bandwidth term,
t = t0 + k·FLOPs; ``fit_dispatch`` fits it across models. A large t0 is why a draft with 6x fewer
FLOPs can be only ~2.8x faster per token, and why the wall-clock cost ratio c differs from the
FLOPs c used by Leviathan et al. 2023 ("Fast Inference from Transformers via Speculative Decoding").
Notebook 05 reuses the grid across batch sizes to find where the verifier stops being memory-bound.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from specnb.core.errors import ParameterError
from specnb.decode.kvcache import crop_cache, forward_arguments
from specnb.decode.timing import synchronize


@dataclass(kw_only=True)
class ForwardTiming:
    """Per-forward latency of ``n_tokens`` new tokens on top of ``context_len`` cached tokens."""

    n_tokens: int
    batch_size: int
    context_len: int
    median_ms: float
    samples_ms: list[float] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class ForwardShape:
    """One forward to time: ``n_tokens`` new tokens per row, ``batch_size`` rows, on ``context_len`` cached
    tokens, with the logits of the last ``keep`` columns (None: all ``n_tokens``)."""

    n_tokens: int = 1
    batch_size: int = 1
    context_len: int = 128
    keep: int | None = None


@dataclass(frozen=True, kw_only=True)
class TimingPlan:
    """How a forward is timed: ``warmup`` untimed forwards, then ``repeats`` timed ones, on ``device``
    (None: the model's own)."""

    repeats: int = 5
    warmup: int = 2
    device: object = None


class ForwardProbe:
    """One forward shape ``[batch_size, n_tokens]`` on a ``context_len`` KV cache, timed on demand.

    Why a cache: a decoding step (verifier-only: 1 token; verification: gamma+1 tokens) always runs
    against a KV cache, and its cost depends on it. The cache is cropped back after every forward so
    each sample sees the same context. Random token ids: cost does not depend on their values.
    Several probes alive at once let a grid be timed one forward of each shape after another.

    ``keep``: logits of the last ``keep`` columns only (``logits_to_keep``), as the decoding loop
    asks for them; None computes all ``n_tokens``. Why it matters: with a 49k vocabulary the LM head
    is most of a small draft's forward, so the draft's 2-token catch-up forward (keep 1) costs far
    less than a 2-token forward with both columns' logits; verification needs them all.
    """

    def __init__(self, model, shape: ForwardShape | None = None, device=None, share: ForwardProbe | None = None):
        """``shape``: None is one token at batch 1 on 128 cached tokens (``ForwardShape()``). ``share``: a
        probe of the same model and batch size whose cache this one reuses (every forward crops the cache
        back, so probes timed one after another can share it), which keeps a grid's memory at one cache
        per model and batch size."""
        from transformers import DynamicCache

        shape = shape if shape is not None else ForwardShape()
        n_tokens, batch_size, context_len, keep = shape.n_tokens, shape.batch_size, shape.context_len, shape.keep
        self.model, self.n_tokens, self.batch_size = model, n_tokens, batch_size
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        self.keep = keep
        gen = torch.Generator().manual_seed(0)
        self.features = hasattr(model, "feature_inputs")  # an EAGLE draft: (features, ids) in, features out
        vocab = model.config.vocab_size
        context = torch.randint(0, vocab, (batch_size, max(context_len, 1)), generator=gen).to(self.device)
        self.context_len = context.shape[1]
        if share is not None and (share.model is not model or share.batch_size != batch_size
                                  or share.context_len != self.context_len):
            raise ParameterError("a probe can only share the cache of a probe of the same model, batch and context")
        self.new = torch.randint(0, vocab, (batch_size, n_tokens), generator=gen).to(self.device)  # [B, n]
        self.positions = torch.arange(self.context_len, self.context_len + n_tokens,
                                      device=self.device).expand(batch_size, -1)  # [B, n]
        if self.features:
            self.cache = share.cache if share else DynamicCache(config=model.config.llama_config())
            self.kwargs = {"cache": self.cache}
            if share is None:
                with torch.inference_mode():
                    model(**model.feature_inputs(context, gen), **self.kwargs)
            self.new_inputs = model.feature_inputs(self.new, gen)
            return
        self.cache = share.cache if share else DynamicCache(config=model.config)
        cache_arg, keeps_logits = forward_arguments(model)
        self.kwargs = {cache_arg: self.cache, "use_cache": True}
        if share is None:
            with torch.inference_mode():
                model(input_ids=context, **self.kwargs)
        if keep is not None and keeps_logits:
            self.kwargs["logits_to_keep"] = int(keep)

    def time_ms(self) -> float:
        with torch.inference_mode():
            synchronize(self.device)
            t0 = time.perf_counter()
            if self.features:  # the draft's forward, then its head on the columns the loop scores
                out = self.model(**self.new_inputs, position_ids=self.positions, **self.kwargs)
                self.model.logits(out[:, -(self.keep or self.n_tokens):])
            else:
                self.model(input_ids=self.new, position_ids=self.positions, **self.kwargs)
            synchronize(self.device)
            elapsed = (time.perf_counter() - t0) * 1e3
        crop_cache(self.cache, self.n_tokens)
        return elapsed

    def timing(self, samples_ms: list[float]) -> ForwardTiming:
        return ForwardTiming(n_tokens=self.n_tokens, batch_size=self.batch_size, context_len=self.context_len,
                             median_ms=statistics.median(samples_ms),
                             samples_ms=list(samples_ms))


def measure_forward_ms(model, shape: ForwardShape | None = None, timing: TimingPlan | None = None) -> ForwardTiming:
    """Median wall time of one forward of ``[batch_size, n_tokens]`` after a ``context_len`` prefill
    (see ``ForwardProbe``); ``timing`` None: 10 timed forwards after 2 untimed."""
    timing = timing if timing is not None else TimingPlan(repeats=10)
    probe = ForwardProbe(model, shape, timing.device)
    for _ in range(timing.warmup):
        probe.time_ms()
    return probe.timing([probe.time_ms() for _ in range(timing.repeats)])


def measure_forward_grid(model, n_tokens=(1, 2, 4, 8), batch_sizes=(1,), context_len: int = 128, *,
                         name: str | None = None, timing: TimingPlan | None = None) -> pd.DataFrame:
    """Median ms of one forward for every (tokens per forward, batch size), on a ``context_len`` cache
    (one model; see ``measure_forward_grids``); ``timing`` None: ``TimingPlan()``."""
    timing = timing if timing is not None else TimingPlan()
    shapes = [GridShapes(name=name or type(model).__name__, model=model, n_tokens=tuple(n_tokens))]
    return measure_forward_grids(shapes, batch_sizes, context_len, timing.repeats, timing.device, timing.warmup)


def make_probe(model, shape: ForwardShape, device=None, share: ForwardProbe | None = None):
    """A ``ForwardProbe`` for a torch model (sharing ``share``'s cache when given); another
    engine's own probe when the model brings one (``specnb.native.llama_cpp.LlamaCpp.probe``:
    batch 1, all logits)."""
    if hasattr(model, "probe"):
        if shape.batch_size != 1:
            raise ParameterError(f"{type(model).__name__} forwards are timed at batch 1 only, got {shape.batch_size}")
        return model.probe(shape.n_tokens, shape.context_len)
    return ForwardProbe(model, shape, device, share)


@dataclass(kw_only=True)
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

    Every shape of every model at every batch size is timed interleaved, one forward of each in
    turn, ``repeats`` times. Why: on a shared machine a slow spell of a few seconds would otherwise
    land on whichever shape, model or batch size was being timed then, and show up as a shape
    effect, a cost ratio c or a batch-size ratio; interleaved, it slows every forward alike, and
    the differences that γ, the draft and the batch size trade against survive it (the predictor
    prices batch 2 against batch 1 from this grid). Interleaving the models also times a draft's
    forward the way the loop runs it: after the verifier's, not after its own. The shapes of one
    model and batch size share one cache.
    """
    probes, first = [], {}
    for b in batch_sizes:
        for s in shapes:
            for n in s.n_tokens:
                key = (id(s.model), int(b))
                shape = ForwardShape(n_tokens=int(n), batch_size=int(b), context_len=context_len, keep=s.keep)
                probe = make_probe(s.model, shape, device, first.get(key))
                first.setdefault(key, probe if isinstance(probe, ForwardProbe) else None)
                probes.append((s.name, probe))
    for _ in range(warmup):
        for _, probe in probes:
            probe.time_ms()
    samples = [[] for _ in probes]
    for _ in range(repeats):
        for (_, probe), got in zip(probes, samples):
            got.append(probe.time_ms())
    rows = [{"model": name, "n_tokens": probe.n_tokens, "batch_size": probe.batch_size,
             "context_len": probe.context_len, "median_ms": statistics.median(got),
             "min_ms": min(got), "max_ms": max(got), "samples_ms": got}
            for (name, probe), got in zip(probes, samples)]
    return pd.DataFrame(rows)


@dataclass(kw_only=True)
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


def fit_line(x, y) -> tuple[float, float, float]:
    """Least squares y = a + b·x: (a, b, R²). The fits of the forward-cost notebooks and of the
    predictor's cost model (``specnb.predict.costs``) are all this line."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(np.unique(x)) < 2:
        raise ParameterError(f"a line needs points at two or more x values, got {sorted(set(x.tolist()))}")
    design = np.stack([np.ones_like(x), x], axis=1)  # [N, 2]
    (a, b), *_ = np.linalg.lstsq(design, y, rcond=None)
    total = np.sum((y - y.mean()) ** 2)
    r2 = 1.0 - np.sum((y - design @ np.array([a, b])) ** 2) / total if total > 0 else 1.0
    return float(a), float(b), float(r2)


def fit_dispatch(grid: pd.DataFrame, flops_per_token) -> DispatchFit:
    """Least-squares fit of median forward ms on forward GFLOPs (``flops_per_token``: a number, or
    a dict from the grid's ``model`` names to FLOPs/token)."""
    x = forward_flops(grid, flops_per_token) / 1e9
    if len(np.unique(x)) < 2:
        raise ParameterError("fit_dispatch needs forwards of at least two different sizes (tokens or models)")
    t0, k, r2 = fit_line(x, grid["median_ms"])
    return DispatchFit(t0_ms=t0, ms_per_gflop=k, r2=r2, n_points=len(x))


def wall_clock_c(grid: pd.DataFrame, draft: str, verifier: str, n_tokens: int = 1, batch_size: int = 1) -> float:
    """c by wall clock: the draft's ÷ the verifier's median time of one ``n_tokens`` forward."""
    def median(model):
        rows = grid[(grid["model"] == model) & (grid["n_tokens"] == n_tokens) & (grid["batch_size"] == batch_size)]
        if rows.empty:
            raise ParameterError(f"no timing for {model!r} at n_tokens={n_tokens}, batch_size={batch_size}")
        return float(rows["median_ms"].median())

    return median(draft) / median(verifier)


def cost_ratios(grid: pd.DataFrame, flops: dict[str, float], fit: DispatchFit, verifier: str) -> pd.DataFrame:
    """Per draft in ``grid``: c by FLOPs (``flops``: model -> FLOPs/token), by wall clock (one-token
    forwards, ``wall_clock_c``) and by the fitted line, the one-token ms of draft and verifier, and
    how many times fewer FLOPs (``flops_smaller``) against how many times faster (``times_faster``)."""
    one = grid[(grid["n_tokens"] == 1) & (grid["batch_size"] == 1)].groupby("model")["median_ms"].median()
    rows = [
        {
            "draft": name,
            "flops_c": flops[name] / flops[verifier],
            "wall_clock_c": wall_clock_c(grid, name, verifier),
            "fit_c": float(fit.predict_ms(flops[name]) / fit.predict_ms(flops[verifier])),
            "draft_ms": one[name],
            "verifier_ms": one[verifier],
        }
        for name in dict.fromkeys(grid["model"])
        if name != verifier
    ]
    ratios = pd.DataFrame(rows, columns=["draft", "flops_c", "wall_clock_c", "fit_c", "draft_ms", "verifier_ms"])
    return ratios.assign(flops_smaller=1 / ratios["flops_c"], times_faster=1 / ratios["wall_clock_c"])


def smaller_vs_faster(
    fit: DispatchFit, verifier_flops: float, factors=(1, 1.5, 2, 3, 4, 6, 8, 12, 16, 32)
) -> pd.DataFrame:
    """Why s-times fewer FLOPs is not s-times faster: under the fitted t = t0 + k·FLOPs a forward of
    verifier_flops / s costs (t0 + kF) / (t0 + kF/s) times less, which tends to 1 + kF/t0, not s."""
    factors = np.asarray(factors, dtype=float)
    if np.any(factors <= 0):
        raise ParameterError(f"FLOPs reduction factors must be positive, got {factors.tolist()}")
    verifier_ms = float(fit.predict_ms(verifier_flops))
    return pd.DataFrame(
        {"flops_smaller": factors, "times_faster": verifier_ms / fit.predict_ms(verifier_flops / factors)}
    )


def forward_scaling(grid: pd.DataFrame) -> pd.DataFrame:
    """Each forward of one model's grid against its one-token, batch-1 forward: ``tokens`` in the
    forward (n_tokens × batch_size), ``ms_per_token`` and ``times_one_token`` (how many one-token
    forwards' time it costs). While memory- or dispatch-bound, tokens ride along almost free."""
    one = grid[(grid["n_tokens"] == 1) & (grid["batch_size"] == 1)]["median_ms"]
    if one.empty:
        raise ParameterError("forward_scaling needs a forward of 1 token at batch size 1 in the grid")
    tokens = grid["n_tokens"] * grid["batch_size"]
    return grid.assign(
        tokens=tokens, ms_per_token=grid["median_ms"] / tokens, times_one_token=grid["median_ms"] / float(one.median())
    ).sort_values(["tokens", "batch_size"])


def batch_knee(grid: pd.DataFrame, ratio: float = 2.0) -> float:
    """Fewest tokens in one forward that cost at least ``ratio`` one-token forwards: below it the
    verifier is memory/dispatch-bound (verifying γ + 1 tokens per row costs about one forward),
    from there on compute grows with the tokens. NaN when no measured forward got that slow."""
    scaled = forward_scaling(grid)
    slow = scaled[scaled["times_one_token"] >= ratio]
    return float(slow["tokens"].min()) if len(slow) else float("nan")


def tree_widths(grid: pd.DataFrame, chain_tokens=(2, 4), tolerance: float = 0.1) -> pd.DataFrame:
    """Which static tree a verification can afford: for each chain of ``chain_tokens`` tokens per
    forward (γ + 1), the most tokens one forward can carry for at most ``tolerance`` more time
    (a tree of that many nodes, root included, verifies at the chain's price) and for the next size
    up. The grid holds one model's batch-1 forwards (tokens per forward, median ms)."""
    rows = grid[grid["batch_size"] == 1].groupby("n_tokens")["median_ms"].median().sort_index()
    out = []
    for base in chain_tokens:
        if base not in rows.index:
            continue
        budget = rows[base] * (1 + tolerance)
        fits = rows[rows <= budget]
        widest = int(fits.index.max())
        after = rows[rows.index > widest]
        out.append({"chain_tokens": base, "chain_ms": float(rows[base]), "tolerance": tolerance,
                    "widest_tokens": widest, "widest_ms": float(rows[widest]),
                    "next_tokens": int(after.index[0]) if len(after) else None,
                    "next_ms": float(after.iloc[0]) if len(after) else float("nan")})
    return pd.DataFrame(out)
