"""The per-forward tax, split into what the framework costs and what the machine costs (notebook 07).

Notebook 02's fit t = t0 + k·n of forward time against tokens per forward, per engine and precision,
next to the memory-bandwidth floor (``specnb.measure.bandwidth``): the same model and tokens through
PyTorch eager, oneDNN and llama.cpp separate the framework's share from the machine's. An engine
whose child process crashes (``specnb.native.isolation``) is left out with a note.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from specnb.measure.alternatives import BASELINE_METHOD, Method
from specnb.measure.bandwidth import step_bytes
from specnb.measure.forward import GridShapes, fit_line, measure_forward_grids
from specnb.models.gguf import gguf_bytes
from specnb.native.isolation import EngineCrashed
from specnb.native.llama_cpp import IsolatedLlamaCpp


@dataclass
class Engine:
    """A verifier forward to time for the tax split: a torch model or a llama.cpp model, and the
    bytes one of its decoding steps streams."""

    name: str
    model: object
    step_bytes: int


def tax_split(engines: list[Engine], bandwidth, n_tokens=(1, 2, 4, 8), context_len: int = 128,
              repeats: int = 5, notes: list[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Forward time against tokens per forward for every engine, all logits kept (the verification
    shape), interleaved; and per engine the fit t = t0 + k·n, t(2)/t(1), the bytes a step streams
    and the memory-bandwidth floor in tok/s. Returns (grid, fits). An engine whose process crashes
    is left out (one line in ``notes``) and the grid is timed again without it."""
    while True:
        try:
            grid = measure_forward_grids([GridShapes(name=e.name, model=e.model,
                                                     n_tokens=tuple(n_tokens)) for e in engines],
                                         context_len=context_len, repeats=repeats)
            break
        except EngineCrashed as err:
            crashed = [e for e in engines if getattr(e.model, "crash", None)]  # an IsolatedLlamaCpp's
            if not crashed:
                raise
            engines = [e for e in engines if e not in crashed]
            if notes is not None:
                notes += [f"tax split, {e.name}: left out, {err}" for e in crashed]
    rows = []
    for engine in engines:
        points = grid[grid["model"] == engine.name].sort_values("n_tokens")
        t0, k, r2 = fit_line(points["n_tokens"], points["median_ms"])
        t = points.set_index("n_tokens")["median_ms"]
        rows.append({"engine": engine.name, "t1_ms": float(t.iloc[0]),
                     "t2_over_t1": float(t.get(2, np.nan) / t.iloc[0]), "t0_ms": t0, "ms_per_token": k, "r2": r2,
                     "step_mb": engine.step_bytes / 1e6, "floor_tok_s": bandwidth.floor_tok_s(engine.step_bytes),
                     "floor_ms": engine.step_bytes / (bandwidth.matvec_gbs * 1e9) * 1e3})
    return grid, pd.DataFrame(rows)


def tax_engines(methods: list[Method]) -> list[Engine]:
    """The verifiers of the verifier-only methods other than the baseline, as tax-split engines."""
    engines = []
    for m in methods:
        if m.speculation or m.name == BASELINE_METHOD or m.model is None or m.failure:
            continue
        size = gguf_bytes(m.model.path) if isinstance(m.model, IsolatedLlamaCpp) else step_bytes(m.model)
        engines.append(Engine(f"{m.engine} · {m.precision}", m.model, size))
    return engines
