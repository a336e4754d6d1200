"""Speculate, or do something else? Every alternative measured the same way on the same prompts.

Why: the evaluation paper behind our second reference finds that "simple techniques like
continuous batching or quantization often provide comparable or better speedups without the
complexity". A user deciding whether to deploy speculation needs its speedup *next to* theirs,
measured the same way — and, for the lossy ones, what they cost in output. A ``Method`` is one way
to answer a prompt (an engine, a precision, with or without speculation); ``run_methods`` runs
them interleaved prompt by prompt, in an order rotated for every prompt, exactly as
``specnb.measure.runs`` interleaves speculative candidates, and ``summarise_methods`` reports tok/s,
speedup over the fp32 eager verifier with a bootstrap CI over prompts, tokens per verifier forward
and fidelity against the fp32 verifier's greedy tokens (``specnb.measure.fidelity``).

Two more questions live here because they need the same engines:

- **The tax, split** (``specnb.measure.tax_split``): notebook 02's fit t = t0 + k·n of forward time against tokens
  per forward, per engine and precision, next to the memory-bandwidth floor
  (``specnb.measure.bandwidth``): the same model and tokens through PyTorch eager, oneDNN and
  llama.cpp separates what the framework costs from what the machine costs.
- **Batching** (``measure_batching``): throughput and per-prompt latency of the verifier alone at
  several batch sizes — the alternative that also amortises each weight read over several tokens.

What was measured on a machine is kept (``save_measured``) so ``specnb predict`` and notebook 06 can
end their verdict with it.
"""

from __future__ import annotations

import copy
import gc
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from specnb.core.devices import describe_machine
from specnb.core.errors import ParameterError
from specnb.decode.generate import generate
from specnb.decode.settings import Decoding
from specnb.measure.fidelity import fidelity
from specnb.measure.runs import BASELINE, bootstrap_speedup, make_candidates, paired_speedup, run_interleaved
from specnb.models.cache import cache_dir
from specnb.models.embedded import embedded_draft_path
from specnb.models.gguf import embedded_gguf
from specnb.models.kernels import use_kernels
from specnb.models.precision import with_precision
from specnb.models.registry import EMBEDDED_VERIFIER
from specnb.models.trimmed_head import read_head_tokens
from specnb.native import llama_cpp
from specnb.native.isolation import EngineCrashed
from specnb.native.llama_cpp import Generated, IsolatedLlamaCpp, LlamaDraftSpec

BASELINE_METHOD = "verifier-only · PyTorch eager · fp32"
LLAMA_PRECISIONS = {"q4_1": "Q4_1", "f32": "F32", "f16": "F16"}


@dataclass(kw_only=True)
class Method:
    """One way to answer a prompt. ``run(prompt_ids, max_new_tokens)`` returns a ``Generated``
    (greedy, prefill included in its wall time). ``lossless``: the output is the fp32 verifier's
    by construction (speculation, or the same math on other kernels); the measured fidelity must
    then say identical, which the table checks rather than assumes."""

    name: str
    engine: str  # "PyTorch eager", "PyTorch oneDNN", "llama.cpp"
    precision: str  # "fp32", "bf16", "int8", "F32", "Q4_1"
    speculation: str  # "" (none), or what drafts: "prompt-lookup γ=4"
    lossless: bool
    run: Callable[[list[int], int], Generated]
    model: object = None  # the verifier it runs (a torch model or an ``IsolatedLlamaCpp``), for the tax split
    failure: str | None = None  # one line, set when its engine crashed: the method is then left out


@dataclass
class DraftChoice:
    """One speculative row of notebook 07's table: a draft name and γ, or a static tree. Not a serving
    configuration (``specnb.serve.engines.Speculation``): this one names a draft for ``generate``."""

    draft: str
    gamma: int = 4
    tree: tuple[int, ...] | None = None

    @property
    def label(self) -> str:
        return f"{self.draft} " + ("tree=" + "x".join(map(str, self.tree)) if self.tree else f"γ={self.gamma}")


@dataclass(frozen=True, kw_only=True)
class LlamaRows:
    """The llama.cpp rows: one per precision (``LLAMA_PRECISIONS``' keys; none: no rows), Q4_1 also with
    ``draft`` (a distilled draft exported to GGUF) when one is named; ``threads`` None: torch's."""

    precisions: tuple[str, ...] = ("q4_1", "f32")
    draft: str | None = None
    threads: int | None = None
    n_ctx: int = 1024


def torch_method(model, decoding: Decoding, *, name: str, engine: str, precision: str, lossless: bool = True,
                 draft=None, draft_name: str = "") -> Method:
    """A method named ``name`` in the table that runs specnb's own ``generate`` (batch 1) on ``model``,
    speculative with ``draft``; ``decoding``: its ``Decoding`` (γ or tree, EOS, vocabulary), the token
    budget set per run."""
    def run(prompt: list[int], max_new_tokens: int) -> Generated:
        result = generate(model, torch.tensor([prompt]), draft=draft,
                          decoding=replace(decoding, max_new_tokens=max_new_tokens))
        return Generated(result.tokens[0], result.wall_ms, result.verifier_forwards)

    shape = "tree=" + "x".join(map(str, decoding.tree)) if decoding.tree else f"γ={decoding.gamma}"
    return Method(name=name, engine=engine, precision=precision,
                  speculation=f"{draft_name} {shape}" if draft is not None else "", lossless=lossless,
                  run=run, model=model)


def llama_cpp_method(model, eos=(), *, name: str, precision: str, speculation: str = "",
                     lossless: bool = False) -> Method:
    """A method that runs a ``specnb.native.llama_cpp.IsolatedLlamaCpp`` (with its draft, if it has one)."""
    return Method(name=name, engine="llama.cpp", precision=precision, speculation=speculation, lossless=lossless,
                  run=lambda prompt, max_new_tokens: model.generate(prompt, max_new_tokens, eos), model=model)


def add_compiled(methods: list[Method], pair) -> str:
    """Append the fp32 verifier with its forward under ``torch.compile`` (dynamic shapes: one graph for
    every cache length), compiled now on a short generation; returns the note that reports the
    compile time (kept out of the tok/s) or why it could not compile."""
    model = copy.deepcopy(pair.verifier)
    model.forward = torch.compile(model.forward, dynamic=True)
    method = torch_method(model, Decoding(gamma=4, eos_token_id=pair.tokenizer.eos_token_id),
                          name="verifier-only · PyTorch compiled · fp32", engine="PyTorch compiled", precision="fp32")
    t0 = time.perf_counter()
    try:
        method.run([1, 2, 3, 4], 4)
        method.run([1, 2, 3, 4, 5, 6], 4)  # a second length: the dynamic graph must not recompile per length
    except Exception as err:  # inductor needs a C++ toolchain; dynamo refuses some models
        return f"could not compile the verifier: {str(err).splitlines()[0][:160]}"
    methods.append(method)
    return f"compiled in {time.perf_counter() - t0:.0f} s (not counted in its tok/s)"


def build_methods(pair, drafts: dict, speculation: list[DraftChoice], *, precisions=("int8", "bf16"),
                  kernels=("onednn",), llama: LlamaRows | None = None) -> tuple[list[Method], list[str]]:
    """The methods of notebook 07, baseline first, and one-line notes on what had to be left out.

    - each ``speculation`` on the eager fp32 verifier (``drafts``: the loaded draft objects);
    - the verifier on other ``kernels`` and at lower ``precisions``, alone and combined with the
      first speculation (the one the reader cares most about: the predictor's pick);
    - llama.cpp at each of ``llama``'s precisions, alone, with its own prompt lookup, and at Q4_1
      with its draft (a distilled draft exported to GGUF) when one is named (``LlamaRows``; None: its defaults).
    """
    if getattr(pair.verifier, "kernels", "default") != "default":  # it would not be the eager baseline it is named
        raise ParameterError(f"the alternatives are measured against PyTorch's default kernels, but the verifier runs "
                             f"on {pair.verifier.kernels!r}; load the pair with kernels='default'")
    eos = pair.tokenizer.eos_token_id
    llama = llama if llama is not None else LlamaRows()
    notes: list[str] = []

    def alone(name, engine, precision, model, lossless=True) -> Method:
        return torch_method(model, Decoding(gamma=4, eos_token_id=eos), name=name, engine=engine,
                            precision=precision, lossless=lossless)

    def spec(name, engine, precision, model, s: DraftChoice, lossless=True) -> Method:
        decoding = Decoding(gamma=s.gamma, tree=s.tree, eos_token_id=eos, vocab_size=pair.vocab_size)
        return torch_method(model, decoding, name=f"{s.label} · {name}", engine=engine, precision=precision,
                            lossless=lossless, draft=drafts[s.draft], draft_name=s.draft)

    methods = [alone(BASELINE_METHOD, "PyTorch eager", "fp32", pair.verifier)]
    methods += [spec("PyTorch eager · fp32", "PyTorch eager", "fp32", pair.verifier, s) for s in speculation]
    first = speculation[:1]
    for kind in kernels:
        model = use_kernels(copy.deepcopy(pair.verifier), kind)
        engine = f"PyTorch {kind}"
        methods.append(alone(f"verifier-only · {engine} · fp32", engine, "fp32", model))
        methods += [spec(f"{engine} · fp32", engine, "fp32", model, s) for s in first]
    for precision in precisions:
        model = with_precision(pair.verifier, precision)
        methods.append(alone(f"verifier-only · PyTorch eager · {precision}", "PyTorch eager", precision, model,
                             lossless=False))
        methods += [spec(f"PyTorch eager · {precision}", "PyTorch eager", precision, model, s, lossless=False)
                    for s in first if precision == "int8"]
    missing = llama_cpp.missing_note()
    if llama.precisions and missing:
        notes.append(missing)
    elif llama.precisions:
        lookup_gammas = [s.gamma for s in speculation if s.draft == "prompt-lookup"][:1] or [4]
        methods += llama_methods(pair, replace(llama, threads=llama.threads or torch.get_num_threads()),
                                 lookup_gammas, notes)
    return methods, notes


def llama_methods(pair, llama: LlamaRows, lookup_gammas, notes: list) -> list[Method]:
    """llama.cpp rows on the embedded models' GGUF files (see ``build_methods``), each model in its
    own child process: one that cannot even load here (a crash at load) becomes a note."""
    if pair.verifier_name != EMBEDDED_VERIFIER:
        notes.append(f"llama.cpp rows need a GGUF of {pair.verifier_name}; specnb exports only the embedded "
                     "models (convert yours with llama.cpp's convert_hf_to_gguf.py)")
        return []
    eos = [pair.tokenizer.eos_token_id]
    methods = []

    def add(path, draft: LlamaDraftSpec | None = None, *, name: str, **row):
        try:
            model = IsolatedLlamaCpp(path, llama.threads, llama.n_ctx, draft)
        except (EngineCrashed, RuntimeError) as err:
            notes.append(f"{name}: left out, {err}")
            return
        methods.append(llama_cpp_method(model, eos, name=name, **row))

    llama_draft = llama.draft
    for key in llama.precisions:
        label = LLAMA_PRECISIONS[key]
        path = embedded_gguf(EMBEDDED_VERIFIER, key)
        lossless = key == "f32"  # same fp32 weights and math; Q4_1 also quantizes activations to 8 bits
        add(path, name=f"verifier-only · llama.cpp · {label}", precision=label, lossless=lossless)
        for g in lookup_gammas:
            add(path, LlamaDraftSpec(gamma=g), name=f"prompt-lookup γ={g} · llama.cpp · {label}", precision=label,
                speculation=f"prompt-lookup γ={g}", lossless=lossless)
        if llama_draft and key == "q4_1":
            draft_path = embedded_gguf(llama_draft, "q4_1")
            head = read_head_tokens(embedded_draft_path(llama_draft))
            g = lookup_gammas[0]
            spec = LlamaDraftSpec(gamma=g, path=str(draft_path),
                                  head_tokens=tuple(int(t) for t in head) if head is not None else None)
            add(path, spec, name=f"{llama_draft} γ={g} · llama.cpp · {label}", precision=label,
                speculation=f"{llama_draft} γ={g}", lossless=lossless)
    return methods


def failures(methods: list[Method]) -> list[str]:
    """One note per method whose engine crashed during the run (it is left out of every table)."""
    return [f"{m.name}: left out, {m.failure}" for m in methods if m.failure]


def close_methods(methods: list[Method]) -> None:
    """End the child processes of the methods that run in one (llama.cpp); safe to call twice."""
    for m in methods:
        close = getattr(m.model, "close", None)
        if close is not None:
            close()


def run_methods(methods: list[Method], prompts: pd.DataFrame, prompt_ids: list[list[int]], *, repeats: int = 1,
                max_new_tokens: int = 48, warmup: bool = True, progress: bool = True) -> pd.DataFrame:
    """One record per (repeat, prompt, method): new tokens, wall ms, verifier forwards and the tokens.

    The methods run interleaved per prompt, their order rotated from prompt to prompt, so a slow
    spell of the machine lands on all of them alike. ``warmup`` first runs each on a few tokens so
    one-time costs (allocator growth, kernel selection, llama.cpp's first graph) land on no one.
    The garbage collector is paused during each run, as ``timeit`` does. A method whose engine
    crashes (``EngineCrashed``) is dropped with its records and its ``failure`` set; the others go on.
    """
    if not methods or methods[0].name != BASELINE_METHOD:
        raise ParameterError(f"the first method must be the baseline {BASELINE_METHOD!r}")
    if len({m.name for m in methods}) != len(methods):
        raise ParameterError("method names must be unique")
    def attempt(method: Method, ids: list[int], n: int) -> Generated | None:
        try:
            return method.run(ids, n)
        except EngineCrashed as err:
            method.failure = str(err)
            return None

    if warmup:
        for method in methods:
            attempt(method, prompt_ids[0], 4)
    records = []
    with tqdm(total=repeats * len(prompt_ids) * len(methods), desc="alternatives", unit="run",
              disable=not progress) as bar:
        for repeat in range(repeats):
            for i, (row, ids) in enumerate(zip(prompts.itertuples(index=False), prompt_ids)):
                shift = (repeat * len(prompt_ids) + i) % len(methods)
                for method in methods[shift:] + methods[:shift]:
                    if method.failure:
                        bar.update()
                        continue
                    collecting = gc.isenabled()
                    gc.disable()
                    try:
                        out = attempt(method, ids, max_new_tokens)
                    finally:
                        if collecting:
                            gc.enable()
                    if out is None:
                        bar.update()
                        continue
                    records.append({"method": method.name, "repeat": repeat, "prompt_ids": str(row.id),
                                    "category": row.category, "prompt_tokens": len(ids),
                                    "new_tokens": len(out.tokens), "wall_ms": out.wall_ms,
                                    "verifier_forwards": out.verifier_forwards, "tokens": list(out.tokens)})
                    bar.update()
    records = pd.DataFrame.from_records(records)
    crashed = [m.name for m in methods if m.failure]
    if crashed and not records.empty:
        records = records[~records["method"].isin(crashed)].reset_index(drop=True)
    return records


def summarise_methods(records: pd.DataFrame, methods: list[Method], n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Per method: tok/s, speedup over the baseline with a 95% bootstrap CI over prompts, tokens per
    verifier forward, and fidelity to the baseline's greedy tokens (prompts identical, prefix share,
    median first divergence)."""
    rng = np.random.default_rng(seed)
    keys = ["repeat", "prompt_ids"]
    base = records[records["method"] == BASELINE_METHOD]
    rows = []
    for method in methods:
        group = records[records["method"] == method.name]
        if group.empty or method.failure:
            continue
        paired = group.merge(base, on=keys, suffixes=("", "_base"))
        totals = paired[["new_tokens", "wall_ms", "new_tokens_base", "wall_ms_base"]].sum().to_numpy()
        lo, hi = bootstrap_speedup(paired, paired["prompt_ids"].unique(), rng, n_boot)
        agree = fidelity(list(zip(paired["tokens_base"], paired["tokens"])))
        rows.append({
            "method": method.name, "engine": method.engine, "precision": method.precision,
            "speculation": method.speculation, "lossless": method.lossless,
            "tok_s": group["new_tokens"].sum() / group["wall_ms"].sum() * 1e3,
            "speedup": float(paired_speedup(totals)), "speedup_lo": lo, "speedup_hi": hi,
            "tokens_per_forward": group["new_tokens"].sum() / group["verifier_forwards"].sum(),
            "identical_prompts": agree.identical, "prompts": agree.prompts, "prefix_share": agree.prefix_share,
            "median_first_divergence": agree.median_first_divergence,
        })
    return pd.DataFrame(rows)


def measure_batching(pair, prompts: pd.DataFrame, batch_sizes=(1, 4, 8), *, max_new_tokens: int = 48,
                     progress: bool = True) -> pd.DataFrame:
    """Verifier-only at each batch size on the same prompts: throughput (generated tokens ÷ summed
    wall time), the latency every prompt of a batch waits for (the batch's wall time), and that
    latency per generated token of a prompt. Rows that finish early keep being computed: the waste
    is part of the price."""
    candidates = make_candidates({}, [])
    rows = []
    for b in batch_sizes:
        records = run_interleaved(pair, prompts, candidates, batch_size=int(b), max_new_tokens=max_new_tokens,
                                  progress=progress).query(f"batch_size == {int(b)} and candidate == '{BASELINE}'")
        if records.empty:
            raise ParameterError(f"batch size {b} needs at least {b} prompts, got {len(prompts)}")
        tokens_per_row = records["new_tokens"] / records["batch_size"]
        rows.append({"batch_size": int(b), "batches": len(records),
                     "throughput_tok_s": records["new_tokens"].sum() / records["wall_ms"].sum() * 1e3,
                     "latency_ms": float(records["wall_ms"].median()),
                     "latency_ms_per_token": float((records["wall_ms"] / tokens_per_row).median())})
    table = pd.DataFrame(rows)
    table["throughput_x"] = table["throughput_tok_s"] / table["throughput_tok_s"].iloc[0]
    table["latency_x"] = table["latency_ms"] / table["latency_ms"].iloc[0]
    return table


# ---------------------------------------------------------------- kept for predict and notebook 06

def measured_path(verifier: str):
    return cache_dir() / "alternatives" / f"{verifier.replace('/', '--')}.json"


def machine_key() -> dict:
    machine = describe_machine()
    return {k: machine[k] for k in ("cpu", "cpu_count", "torch_threads", "gpu")}


def save_measured(verifier: str, summary: pd.DataFrame, max_new_tokens: int) -> None:
    """Keep this machine's alternatives table for ``specnb predict`` and notebook 06."""
    path = measured_path(verifier)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = json.loads(summary.to_json(orient="records"))
    path.write_text(json.dumps({"verifier": verifier, "machine": machine_key(), "max_new_tokens": max_new_tokens,
                                "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                "rows": rows}, indent=1))


def load_measured(verifier: str) -> dict | None:
    """The alternatives last measured for ``verifier`` on this machine (same CPU, cores, threads), or None."""
    try:
        data = json.loads(measured_path(verifier).read_text())
    except (OSError, ValueError):
        return None
    return data if data.get("machine") == machine_key() else None

