"""Which kernel a model's linear layers run on the CPU: PyTorch's default, or oneDNN with weights
prepacked once — chosen by measurement (``kernels="auto"``) unless named.

Why: decoding a small model on a CPU is memory-bound, so a forward of 2–9 tokens should cost about
what one token costs (the weights are read once either way). PyTorch's default fp32 linear goes to
MKL: for one row a matrix-vector kernel at streaming bandwidth, for two rows or more its GEMM
path, which on some CPUs packs the weight into its panel layout on every call and runs small M far
below both bandwidth and arithmetic peak, so verifying 2 tokens costs about twice one. That jump is
a kernel's tax, not physics. oneDNN's brgemm on a weight reordered once
(``torch.ops.mkldnn._reorder_linear_weight``) streams each weight block once for all rows, so its
cost grows far more slowly with the row count (measured in benchmarks/README.md, "Kernel paths for
one linear layer"). It is fp32 throughout, so decoding stays exact up to float rounding.

Which path wins depends on the CPU, the thread count, the model's shapes and the row count (what
each CPU measured is in benchmarks/README.md, "A whole decode forward on each path"), so ``kernels="auto"`` measures
it per model (``choose_kernels``): every bias-free linear layer of the model, in order, at the row
counts the loop runs (``AUTO_WIDTHS``: one row, what verifier-only and a draft's chain run; a
draft's catch-up or a short verify; a verify of γ ≥ 3), both paths interleaved and rotated, each
timed sweep right after an untimed one of its own (as a decode step follows the last), rounds
repeated for ``AUTO_BUDGET_S`` (1 to 25), the fastest kept (``time_paths`` says why). One row is
timed like the others because the baseline must run the fastest path too: a speedup measured
against a verifier-only run denied a faster kernel is partly that kernel's. The rule (``decide``):
oneDNN counts as clearly faster at a width when its fastest round takes at most ``AUTO_MARGIN`` of
the default's; the row counts it wins are sent to it
(``PackedLinear.spans``: a row count between two timed widths goes to oneDNN only when both win,
one past the widest timed width follows it), the rest to MKL. Clearly faster at every width:
"onednn"; at some: "mixed"; otherwise, on a tie or in noise, "default". Off the CPU and for dtypes
other than float32, auto is the default without timing. The decision is cached per machine
(``$SPECNB_CACHE/kernels.json``, keyed by the layers' shapes, dtype, widths, torch version, CPU
model and thread count) so a notebook does not re-time each load; every ``KernelChoice`` records
what was asked, the path, why, and the timings behind it.

``use_kernels(model, "onednn")`` swaps every bias-free ``nn.Linear`` (the LM head included) for a
``PackedLinear``: 1 to ``max_rows`` rows go to oneDNN, more (a prefill) back to MKL's GEMM, which is
efficient there.
The packed copy doubles the linear weights' memory (while auto times, too).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from specnb.core.devices import cpu_name
from specnb.core.errors import ParameterError
from specnb.models.cache import cache_dir

KERNELS = ("auto", "default", "onednn")  # what a caller may ask for
PATHS = ("default", "onednn", "mixed")  # what a model can run on ("mixed": only auto chooses it)
TIMED = ("default", "onednn")  # the two kernels timed against each other
AUTO_WIDTHS = (1, 2, 4)  # rows per forward timed: a decode step, a catch-up / short verify, verifying γ = 3
AUTO_REPEATS = 3  # rounds a decision needs to be cached (fewer: a busy machine, re-timed next load)
AUTO_MAX_REPEATS = 25
AUTO_MARGIN = 0.9  # oneDNN must take at most 90% of the default's time to be chosen
AUTO_BUDGET_S = 1.0  # timed sweeps per model, at least one round (their lead-ins and packing come on top)
MAX_ROWS = 64  # more rows than this (a prefill) go to MKL's GEMM on every path
RULE = (f"per width, oneDNN wins if its fastest round <= {AUTO_MARGIN} x MKL's; the rows it wins go to it; "
        "wins at every width: onednn; at some: mixed; else default")
CACHE_FILE = "kernels.json"
_CACHE_VERSION = 4  # bump when the rule or what is timed changes: old decisions are then ignored


@dataclass(kw_only=True)
class KernelChoice:
    """What ``kernels=`` decided for one model. ``reason``: "timed", "cached" (a timed decision read
    back), "asked" (named by the caller), "not fp32 on the CPU", "no linear layers", "shared with the
    verifier" (an early exit), "too busy to time" (the default). ``min_rows``: the fewest rows a
    forward sends to oneDNN (0: none); ``spans``: every row count sent to it, as inclusive
    (first, last) ranges. ``ms``: kernel -> the fastest round's ms of all the model's linear layers
    at each of ``widths`` rows (empty unless timed)."""

    model: str
    path: str
    asked: str
    reason: str
    min_rows: int = 0
    spans: tuple[tuple[int, int], ...] = ()
    widths: tuple[int, ...] = ()
    ms: dict[str, list[float]] = field(default_factory=dict)
    repeats: int = 0
    decide_s: float = 0.0  # seconds spent timing (0 when not timed now)
    threads: int = 0
    rule: str = ""

    def as_dict(self) -> dict:
        return {**asdict(self), "widths": list(self.widths), "spans": [list(s) for s in self.spans]}

    @classmethod
    def from_dict(cls, data: dict) -> KernelChoice:
        return cls(**{**data, "widths": tuple(data.get("widths", ())),
                      "spans": tuple(tuple(s) for s in data.get("spans", ()))})

    def label(self) -> str:
        """The path in a few words, for a table's column: "default", "onednn", "mixed (oneDNN 4–64 rows)"."""
        return spans_label(self.spans)

    def onednn_ratios(self) -> list[float]:
        """oneDNN's time ÷ MKL's at each timed width (empty: not timed)."""
        return [o / d for o, d in zip(self.ms.get("onednn", []), self.ms.get("default", []))]

    def text(self) -> str:
        """One line: "smollm2-135m: mixed (oneDNN 4–64 rows) (auto, timed: oneDNN ÷ MKL 0.97x at 1 rows,
        1.24x at 2 rows, 0.78x at 4 rows, 1 thread(s), 25 rounds; 1.2 s)". The rounds say how much to
        trust it: one or two on a small model mean every round was slow, the cores busy throughout."""
        detail = self.reason
        if self.ms:
            ratios = ", ".join(f"{r:.2f}x at {n} rows" for r, n in zip(self.onednn_ratios(), self.widths))
            spent = f"; {self.decide_s:.1f} s" if self.reason == "timed" else ""
            detail += f": oneDNN ÷ MKL {ratios}, {self.threads} thread(s), {self.repeats} rounds{spent}"
        return f"{self.model}: {self.label()} ({self.asked}, {detail})"


def rows_text(spans) -> str:
    """"1 and 4–64 rows" for spans ((1, 1), (4, 64))."""
    parts = [f"{lo}" if lo == hi else f"{lo}–{hi}" for lo, hi in spans]
    return (" and ".join([", ".join(parts[:-1]), parts[-1]]) if len(parts) > 1 else parts[0]) + " rows"


def spans_label(spans) -> str:
    """"default" (no row to oneDNN), "onednn" (every row from 1 to ``MAX_ROWS``) or "mixed (oneDNN …)"."""
    spans = tuple(tuple(s) for s in spans)
    if not spans:
        return "default"
    return "onednn" if spans == ((1, MAX_ROWS),) else f"mixed (oneDNN {rows_text(spans)})"


def route_breaks(model) -> tuple[int, ...]:
    """The row counts at which ``model``'s linear layers change kernel (2 always: MKL's
    matrix-vector kernel gives way to its GEMM there, and oneDNN's may too), e.g. (2, 4, 65) for
    oneDNN at 1 and 4–64 rows; a cost model prices each stretch between two on its own."""
    breaks = {2}
    for m in model.modules() if isinstance(model, torch.nn.Module) else ():
        if isinstance(m, PackedLinear):
            breaks |= {b for lo, hi in m.spans for b in (lo, hi + 1) if b > 1}
    return tuple(sorted(breaks))


def kernel_label(model) -> str:
    """What a model's bias-free linear layers run on, read from the layers themselves (an early exit
    or a head borrowing the verifier's layers says what they run): ``spans_label`` of each distinct
    routing, joined by "; "; "" for a draft without layers (prompt lookup)."""
    if not isinstance(model, torch.nn.Module):
        return ""
    routes = {m.spans if isinstance(m, PackedLinear) else () for m in model.modules()
              if isinstance(m, PackedLinear) or (type(m) is torch.nn.Linear and m.bias is None)}
    return "; ".join(spans_label(s) for s in sorted(routes)) or "default"


class PackedLinear(torch.nn.Module):
    """A bias-free fp32 linear with a oneDNN-prepacked copy of its weight, used for the row counts in
    ``spans`` (inclusive (first, last) ranges; by default ``min_rows`` to ``max_rows``), MKL's kernels
    for any other. x [*, K] -> [*, N]"""

    def __init__(self, weight: torch.Tensor, max_rows: int = MAX_ROWS, min_rows: int = 1, spans=None):
        super().__init__()
        self.weight = weight  # [N, K], shared with the module it replaces (a tied embedding stays tied)
        self.max_rows = max_rows
        self.spans = tuple(tuple(s) for s in spans) if spans is not None else ((min_rows, max_rows),)
        with torch.no_grad():
            self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), 16)

    @property
    def min_rows(self) -> int:
        return self.spans[0][0] if self.spans else 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        if not any(lo <= rows <= hi for lo, hi in self.spans):
            return F.linear(x, self.weight)
        return self.run(x.reshape(rows, x.shape[-1]), "onednn").reshape(*x.shape[:-1], self.weight.shape[0])

    def run(self, x: torch.Tensor, path: str) -> torch.Tensor:
        """x [rows, K] -> [rows, N] on ``path`` ("default": MKL, "onednn") whatever ``spans`` say:
        what auto times is then the kernel named, not the routing the layer had at the time."""
        if path == "default":
            return F.linear(x, self.weight)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "none", [], "")


def check_kernels(kernels: str) -> str:
    if kernels not in KERNELS:
        raise ParameterError(f"unknown kernels {kernels!r}; use one of {', '.join(KERNELS)}")
    return kernels


def use_kernels(model, kernels: str = "default", max_rows: int = MAX_ROWS, min_rows: int = 1, spans=None):
    """``model`` with its linear layers on ``kernels`` (in place; returns it). "onednn" needs fp32 on
    the CPU (``min_rows`` to ``max_rows`` rows go to it, or the row ranges ``spans`` that auto chose);
    "auto" decides by ``choose_kernels``; "default" leaves the model as it is."""
    if check_kernels(kernels) == "auto":
        choose_kernels(model)
        return model
    if kernels == "default":
        return model
    weight = next(model.parameters())
    if not on_cpu_fp32(model):
        raise ParameterError(f"kernels='onednn' is for fp32 models on the CPU, got {weight.dtype} on {weight.device}")
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is torch.nn.Linear and child.bias is None:
                setattr(module, name, PackedLinear(child.weight, max_rows, min_rows, spans))
    model.kernels = kernels
    return model


def unpack(model):
    """Undo ``use_kernels(model, "onednn")``: plain ``nn.Linear``s on the same weights (ties kept)."""
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, PackedLinear):
                with torch.device("meta"):
                    linear = torch.nn.Linear(child.weight.shape[1], child.weight.shape[0], bias=False)
                linear.weight = child.weight
                setattr(module, name, linear)
    model.kernels = "default"
    return model


def on_cpu_fp32(model) -> bool:
    weight = next(model.parameters(), None)
    return weight is not None and weight.device.type == "cpu" and weight.dtype == torch.float32


def apply_kernels(model, kernels: str = "auto", name: str = "model") -> KernelChoice:
    """Put ``model``'s linear layers on ``kernels`` ("auto": ``choose_kernels``) in place; sets
    ``model.kernels`` (the path) and ``model.kernel_choice`` and returns the choice."""
    if check_kernels(kernels) == "auto":
        return choose_kernels(model, name)
    use_kernels(model, kernels)
    spans = ((1, MAX_ROWS),) if kernels == "onednn" else ()
    return _remember(model, KernelChoice(model=name, path=kernels, asked=kernels, reason="asked",
                                         min_rows=1 if spans else 0, spans=spans))


def choose_kernels(model, name: str = "model", widths=AUTO_WIDTHS, budget_s: float = AUTO_BUDGET_S,
                   cache: bool = True) -> KernelChoice:
    """Time the model's linear layers on both paths and keep the faster by the module docstring's
    rule (a cached decision for the same shapes on this machine is reused; one timed in fewer than
    ``AUTO_REPEATS`` rounds, on a busy machine, is used but not cached); returns the choice."""
    if not on_cpu_fp32(model):
        return _remember(model, KernelChoice(model=name, path="default", asked="auto", reason="not fp32 on the CPU"))
    layers = [m for m in model.modules() if type(m) is torch.nn.Linear and m.bias is None]
    if not layers:
        return _remember(model, KernelChoice(model=name, path="default", asked="auto", reason="no linear layers"))
    key = _cache_key(layers, tuple(widths))
    known = _read_cache().get(key) if cache else None
    if known is not None:
        choice = KernelChoice.from_dict({**known, "model": name, "reason": "cached"})
        if choice.spans:
            use_kernels(model, "onednn", spans=choice.spans)
        return _remember(model, choice)
    use_kernels(model, "onednn")  # timed in place: the packed weights are kept if oneDNN wins anywhere
    started = time.perf_counter()
    packed = [m for m in model.modules() if isinstance(m, PackedLinear)]
    ms, done = time_paths(packed, tuple(widths), budget_s)
    path, spans = decide(ms, tuple(widths)) if done else ("default", ())
    choice = KernelChoice(model=name, path=path, asked="auto", reason="timed" if done else "too busy to time",
                          min_rows=spans[0][0] if spans else 0,
                          spans=spans, widths=tuple(widths), ms=ms, repeats=done,
                          decide_s=time.perf_counter() - started, threads=torch.get_num_threads(), rule=RULE)
    if path == "default":
        unpack(model)
    else:
        for m in packed:
            m.spans = spans
    if cache and done >= AUTO_REPEATS:  # a decision squeezed into fewer rounds is not trusted for later loads
        _write_cache(key, choice)
    return _remember(model, choice)


def decide(ms: dict[str, list[float]], widths: tuple[int, ...] = AUTO_WIDTHS,
           max_rows: int = MAX_ROWS) -> tuple[str, tuple[tuple[int, int], ...]]:
    """The rule (``RULE``): (path, the row ranges sent to oneDNN). oneDNN gets every timed width at
    which it is clearly faster; a row count between two timed widths goes to it only when both win
    (MKL's is the path to keep where the timings say nothing), one past the widest timed width up to
    ``max_rows`` when that width wins. "onednn" when that is every row count from 1."""
    wins = [o <= AUTO_MARGIN * d for o, d in zip(ms["onednn"], ms["default"])]
    spans: list[tuple[int, int]] = []
    for i, (n, won) in enumerate(zip(widths, wins)):
        if not won:
            continue
        last = max_rows if i == len(widths) - 1 else n
        if spans and i > 0 and wins[i - 1]:
            spans[-1] = (spans[-1][0], last)
        else:
            spans.append((n, last))
    if not spans:
        return "default", ()
    return ("onednn" if spans == [(1, max_rows)] else "mixed"), tuple(spans)


def time_paths(layers: list[PackedLinear], widths: tuple[int, ...], budget_s: float = AUTO_BUDGET_S,
               now=time.perf_counter) -> tuple[dict[str, list[float]], int]:
    """The fastest round's ms of running every layer once, in order (each weight streamed as in a
    forward), per path and width, interleaved with the order rotated each round, rounds repeated
    until the timed sweeps have taken ``budget_s`` (at least one round, at most
    ``AUTO_MAX_REPEATS``; the lead-ins below double the wall time). Returns ({path: [ms per width]},
    rounds done), or ({}, 0) when the first round alone overruns twice the budget (on busy cores one
    sweep can take fifty times its quiet time): too busy to tell. ``now``: the clock in seconds (a
    test scripts it).

    Each timed sweep comes right after an untimed one of the same path and width (its lead-in), so
    it starts where the decode step before it on that path leaves it: its own weights just read,
    OpenMP's workers awake if the kernel forks onto them. A real forward forks on either path (its
    attention does), so neither pays the workers' wake-up in a linear. Without the lead-in oneDNN's
    one-row sweep followed MKL's, whose one-row kernel runs a small model's shapes on the calling
    thread alone, and paid that wake-up; on cores another process holds, every forking call can
    wait 10+ ms for its second thread. Why the fastest round and not the median: scheduler delays
    only add time, a stretch of rounds can be stalled together, the stall hits only the paths that
    fork, and the decision is cached for the machine, so it must follow the kernels, not the stall."""
    inputs = {n: {k: torch.randn(n, k) for k in {m.weight.shape[1] for m in layers}} for n in widths}

    def run_all(path: str, n: int) -> None:
        for m in layers:
            m.run(inputs[n][m.weight.shape[1]], path)

    def sweep(path: str, n: int) -> float:
        run_all(path, n)  # the lead-in, untimed
        start = now()
        run_all(path, n)
        return (now() - start) * 1e3

    runs = [(path, n) for n in widths for path in TIMED]
    samples: dict[tuple[str, int], list[float]] = {run: [] for run in runs}
    timed_s, rounds = 0.0, 0
    with torch.inference_mode():
        while rounds < AUTO_MAX_REPEATS and (rounds == 0 or timed_s < budget_s):
            for path, n in runs[rounds % len(runs):] + runs[: rounds % len(runs)]:
                samples[path, n].append(sweep(path, n))
                timed_s += samples[path, n][-1] / 1e3
                if rounds == 0 and timed_s > 2 * budget_s:  # OpenMP threads fighting for cores
                    return {}, 0
            rounds += 1
    return {path: [round(min(samples[path, n]), 4) for n in widths] for path in TIMED}, rounds


def describe_kernels(choices: dict[str, dict]) -> str:
    """One line per model of what ``load_drafts`` recorded (``Pair.kernels``), for a notebook to show."""
    return "\n".join("linear kernels: " + KernelChoice.from_dict(c).text() for c in choices.values())


def _remember(model, choice: KernelChoice) -> KernelChoice:
    model.kernels = choice.path
    model.kernel_choice = choice
    return choice


# ---------------------------------------------------------------- the per-machine cache

def _cache_path() -> Path:
    return cache_dir() / CACHE_FILE


def _cache_key(layers, widths: tuple[int, ...]) -> str:
    shapes = sorted(Counter(tuple(m.weight.shape) for m in layers).items())
    digest = hashlib.sha256(repr(shapes).encode()).hexdigest()[:16]
    return (f"v{_CACHE_VERSION}|{digest}|{layers[0].weight.dtype}|{widths}|torch {torch.__version__}|{cpu_name()}|"
            f"{torch.get_num_threads()} threads")


def _read_cache() -> dict:
    try:
        data = json.loads(_cache_path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_cache(key: str, choice: KernelChoice) -> None:
    """Add one decision (written atomically; an unwritable cache only costs a re-timing next load)."""
    path = _cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {**_read_cache(), key: choice.as_dict()}
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)
    except OSError:
        pass
