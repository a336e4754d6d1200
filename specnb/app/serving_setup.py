"""Notebook 08's parameters turned into what it runs: llama-server configurations (embedded models
as GGUF) or vLLM configurations (the embedded models' HF folders), endpoint targets, which
configurations draft and how far, and the saver that keeps every finished run on disk. Every
parameter is checked here, before any server starts, and a bad one is a ``ParameterError`` naming the
parameter and what it accepts."""

from __future__ import annotations

import os
import re
from pathlib import Path

from specnb.core.errors import ParameterError
from specnb.engine.llama_server import SPEC_TYPES, ServerConfig, default_threads
from specnb.engine.vllm_server import VllmConfig
from specnb.measure.serving_summary import BASELINE_CONFIG
from specnb.measure.serving_sweep import Target

ENGINES = ("llama.cpp", "vllm", "sglang")
LAUNCHED = ("llama.cpp", "vllm")  # engines notebook 08 starts itself; sglang only as an endpoint
LLAMA_TYPES = tuple(t for t in SPEC_TYPES if t != "none" and not t.startswith("draft"))  # n-gram lookups
VLLM_TYPES = ("ngram", "suffix", "eagle3")  # vLLM methods without a distilled draft (eagle3: a head, see below)
FREE_METHODS = ("ngram", "suffix")  # methods that draft without a model: no draft folder, no forward to pay
DEFAULT_NGRAM = {"llama.cpp": "ngram-simple", "vllm": "ngram"}  # each engine's prompt lookup
# Each engine's default draft length for the verifier's EAGLE-3 head, run beside the n-gram where the head is in the
# standard layout: the k whose TPOT speedup at one request was the best in the 2026-12-02 sweeps (benchmarks/README.md).
DEFAULT_EAGLE3 = {"llama.cpp": "eagle3:2", "vllm": "eagle3:3"}
EAGLE3_HEAD = "smollm2-eagle3"  # what "eagle3:K" runs for the embedded verifier, on either engine (standard layout)

# ---------------------------------------------------------------- checks before anything starts


def check_engine(engine: str, endpoint: str = "") -> str:
    if engine not in ENGINES:
        raise ParameterError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if not endpoint and engine not in LAUNCHED:
        raise ParameterError(f"engine {engine!r} runs only as an endpoint here: pass -p endpoint URL, or use engine "
                             f"{' or '.join(LAUNCHED)}")
    return engine


def check_levels(levels, mode: str) -> list:
    """Concurrency levels are whole numbers ≥ 1, Poisson rates numbers > 0; at least one of them."""
    name = "rates" if mode == "poisson" else "concurrency"
    values = list(levels) if isinstance(levels, (list, tuple)) else None
    if not values:
        raise ParameterError(f"{name} must be a non-empty list, e.g. [1, 2, 4, 8], got {levels!r}")
    for value in values:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
        if name == "concurrency":
            ok = ok and float(value).is_integer() and value >= 1
        if not ok:
            accepted = "whole numbers >= 1 (requests in flight)" if name == "concurrency" else "numbers > 0 (req/s)"
            raise ParameterError(f"{name} levels must be {accepted}, got {value!r} in {values!r}")
    return [int(v) for v in values] if name == "concurrency" else values


def serving_speculation(engine: str, speculation, smoke: bool = False, verifier: str = "") -> list[str]:
    """The speculation entries to run: the ones given, or (None) the engine's n-gram at k = 4 (3 in a
    smoke run): ``ngram-simple`` on llama-server, ``ngram`` on vLLM, and beside it the verifier's EAGLE-3
    head (``DEFAULT_EAGLE3``) when it has one in the standard layout the engine can load
    (``eagle3_missing``), so the sweep shows where a drafting model stops paying next to a free n-gram.
    A smoke run keeps the n-gram alone: one server fewer."""
    if speculation is None:
        default = [f"{DEFAULT_NGRAM.get(engine, 'ngram')}:{3 if smoke else 4}"]
        with_head = default_head(engine, smoke, verifier) and not eagle3_missing(verifier, engine)
        return default + ([DEFAULT_EAGLE3[engine]] if with_head else [])
    if not isinstance(speculation, (list, tuple)) or not all(isinstance(s, str) for s in speculation):
        raise ParameterError(f"speculation must be a list of TYPE:K or DRAFT:K entries, e.g. [\"ngram:4\"], got "
                             f"{speculation!r}")
    return list(speculation)


def default_head(engine: str, smoke: bool, verifier: str) -> bool:
    """Whether the default speculation looks for the verifier's EAGLE-3 head: an engine started here that
    runs one (llama-server, vLLM), not a smoke run."""
    return engine in DEFAULT_EAGLE3 and not smoke and bool(verifier)


def speculation_note(engine: str, speculation, smoke: bool, verifier: str) -> str:
    """"" unless the default speculation left the EAGLE-3 head out: then why, in one line."""
    why = eagle3_missing(verifier, engine) if speculation is None and default_head(engine, smoke, verifier) else ""
    name = "vLLM" if engine == "vllm" else "llama-server"
    return f"{DEFAULT_EAGLE3[engine]} left out of {name}'s default speculation: {why}" if why else ""


def speculation_entry(spec: str, accepted: tuple[str, ...]) -> tuple[str, int]:
    """``TYPE:K`` or ``DRAFT:K`` split, K ≥ 1, TYPE or DRAFT among ``accepted``."""
    kind, _, k = str(spec).rpartition(":")
    if not kind or not k.isdigit() or int(k) < 1:
        raise ParameterError(f"speculation entry {spec!r} must be TYPE:K or DRAFT:K with K >= 1, e.g. "
                             f"{accepted[0]}:4; TYPE or DRAFT one of {', '.join(accepted)}")
    if kind not in accepted:
        raise ParameterError(f"speculation entry {spec!r}: unknown type {kind!r}; this engine takes "
                             f"{', '.join(accepted)} (each as TYPE:K)")
    return kind, int(k)


def distilled_drafts() -> list[str]:
    """The embedded drafts that are models of their own (not heads): what an engine can load as a draft."""
    from specnb.app.defaults import distilled_draft_names

    return distilled_draft_names()


# ---------------------------------------------------------------- configurations


def launch_configs(engine: str, verifier: str, precision: str, speculation: list[str], levels: list,
                   threads: int = 0) -> list:
    """The configurations notebook 08 starts itself: spec-off first, then one per ``speculation`` entry."""
    if engine == "vllm":
        return vllm_configs(verifier, speculation, max_num_seqs=int(max(levels)), threads=threads)
    return server_configs(verifier, precision, speculation, slots=int(max(levels)), ctx_per_slot=512, threads=threads)


def server_configs(verifier: str, precision: str, speculation: list[str], slots: int, ctx_per_slot: int,
                   threads: int = 0) -> list[ServerConfig]:
    """spec-off, then one server per ``speculation`` entry: ``"ngram-simple:4"`` (an n-gram type and
    its draft length), ``"smollm2-draft-s:3"`` (an embedded draft, exported to GGUF, at k = 3) or
    ``"eagle3:3"`` / ``"smollm2-eagle3:3"`` (the EAGLE-3 head, ``draft-eagle3``, exported to GGUF by
    llama.cpp's converter and cached per head file hash, ``specnb.engine.head_export.head_gguf``).
    Every entry and head is checked before anything is exported."""
    from specnb.engine.head_export import head_gguf
    from specnb.models.gguf import embedded_gguf

    heads = eagle_heads()
    entries = [speculation_entry(spec, (*LLAMA_TYPES, *distilled_drafts(), "eagle3", *heads)) for spec in speculation]
    head_of = {kind: llama_head(kind, verifier) for kind, _ in entries if kind == "eagle3" or kind in heads}
    model = str(embedded_gguf(verifier, precision))
    common = {"model": model, "slots": slots, "ctx_per_slot": ctx_per_slot, "threads": threads or default_threads()}
    configs = [ServerConfig(name=BASELINE_CONFIG, **common)]
    for kind, k in entries:
        if kind in LLAMA_TYPES:
            configs.append(ServerConfig(name=f"{kind} k={k}", spec_type=kind, n_max=k, **common))
        elif kind in head_of:
            draft = str(head_gguf(head_of[kind], verifier))
            configs.append(ServerConfig(name=f"{kind} k={k}", spec_type="draft-eagle3", draft=draft, n_max=k, **common))
        else:
            draft = str(embedded_gguf(kind, "q4_1" if precision == "q4_1" else "f32"))
            configs.append(ServerConfig(name=f"{kind} k={k}", spec_type="draft-simple", draft=draft, n_max=k, **common))
    return configs


def eagle_heads() -> list[str]:
    """The embedded EAGLE heads, by name: what a llama-server entry may name besides ``eagle3``."""
    from specnb.app.defaults import head_draft_names
    from specnb.engine.kinds.by_name import kind_of_name

    return [name for name in head_draft_names() if kind_of_name(name).name == "eagle"]


def llama_head(kind: str, verifier: str) -> str:
    """The head a llama-server entry runs: ``eagle3`` is the embedded verifier's own (``EAGLE3_HEAD``),
    a head's name that head; it must be in the standard EAGLE-3 layout (one line otherwise)."""
    from specnb.engine.head_export import head_folder
    from specnb.models.registry import EMBEDDED_VERIFIER

    if kind == "eagle3" and verifier != EMBEDDED_VERIFIER:
        raise ParameterError(f"speculation eagle3: no EAGLE-3 head for {verifier!r} here; use an n-gram type "
                             f"({', '.join(LLAMA_TYPES)}) as TYPE:K")
    head = EAGLE3_HEAD if kind == "eagle3" else kind
    head_folder(head)
    return head


def vllm_configs(verifier: str, speculation: list[str], max_num_seqs: int, max_model_len: int = 1024,
                 threads: int = 0) -> list[VllmConfig]:
    """spec-off, then one vLLM per ``speculation`` entry: ``"ngram:4"`` (prompt lookup),
    ``"suffix:8"`` (suffix decoding, at most 8 tokens), ``"smollm2-draft-xs:3"`` (a distilled
    draft, ``draft_model``, from its HF folder; vLLM computes its full tied head, where specnb's own
    loop restricts it to the trimmed head's tokens, so its proposals can differ) or ``"eagle3:3"``
    (the embedded EAGLE-3 head, ``eagle3_head``). vLLM's CPU build may refuse a method at start:
    the sweep then leaves that configuration out with vLLM's own line."""
    entries = [speculation_entry(spec, (*VLLM_TYPES, *distilled_drafts())) for spec in speculation]
    model = str(hf_folder(verifier))
    common = {"model": model, "max_num_seqs": max_num_seqs, "max_model_len": max_model_len, "threads": threads}
    configs = [VllmConfig(name=BASELINE_CONFIG, **common)]
    for kind, k in entries:
        if kind in FREE_METHODS:
            configs.append(VllmConfig(name=f"{kind} k={k}", method=kind, k=k, **common))
        else:  # a head (eagle3) or a distilled draft, from its folder
            method, draft = ("eagle3", eagle3_head(verifier)) if kind == "eagle3" else ("draft_model", hf_folder(kind))
            configs.append(VllmConfig(name=f"{kind} k={k}", method=method, draft=str(draft), k=k, **common))
    return configs


def hf_folder(name: str) -> Path:
    """An embedded model's HF folder (built into the cache on first use), or a local checkpoint folder
    (``specnb.models.embedded.hf_folder``; the launch tests replace this one)."""
    from specnb.models.embedded import hf_folder as folder_of

    return folder_of(name)


def eagle3_head(verifier: str) -> Path:
    """The folder vLLM's ``eagle3`` loads for ``verifier``: its embedded EAGLE-3 head (``EAGLE3_HEAD``) as
    it is, since the standard layout (``config.json`` + ``model.safetensors``, ``specnb.models.eagle3``)
    is the one vLLM reads; where there is none, one line saying why, before any server starts."""
    from specnb.models.registry import draft_folder

    why = eagle3_missing(verifier)
    if why:
        raise ParameterError(f"speculation eagle3: {why}; use ngram:K, suffix:K or a distilled draft "
                             f"({', '.join(distilled_drafts())}) as DRAFT:K")
    return draft_folder(EAGLE3_HEAD)


def eagle3_missing(verifier: str, engine: str = "vllm") -> str:
    """"" where ``verifier`` has an EAGLE-3 head ``engine`` loads, else why not: another verifier, a head
    folder in another layout (``specnb.engine.head_export.what_it_is`` says which) or, for llama-server,
    no llama.cpp converter to make its GGUF."""
    from specnb.engine.head_export import is_standard_head, what_it_is
    from specnb.engine.llama_build import converter_path
    from specnb.models.registry import EMBEDDED_VERIFIER, draft_folder

    if verifier != EMBEDDED_VERIFIER:
        return f"no EAGLE-3 head for {verifier!r} here"
    folder = draft_folder(EAGLE3_HEAD)
    if not is_standard_head(folder):
        return f"{EAGLE3_HEAD} is not an EAGLE-3 head in the standard layout vLLM loads ({what_it_is(folder)})"
    if engine == "llama.cpp" and not converter_path().is_file():
        return f"no llama.cpp converter to write {EAGLE3_HEAD}'s GGUF ({converter_path()} is missing: make setup)"
    return ""


def missing_note(engine: str) -> str | None:
    """None when the engine notebook 08 starts is here, else one line saying why it is not."""
    if engine == "vllm":
        from specnb.engine.vllm_server import missing_note as vllm_missing
        return vllm_missing()
    from specnb.engine.llama_server import missing_note as llama_missing
    return llama_missing()


def machine_line(engine: str, configs: list, endpoint: str = "") -> str:
    """What ran where: the CPU's name and the engine (with its threads when launched here)."""
    from specnb.core.devices import cpu_name
    from specnb.engine.vllm_build import VERSION

    if endpoint or not configs:
        return f"{cpu_name()}, {engine} (a running server at the endpoint)"
    if engine == "vllm":
        from specnb.engine.vllm_server import default_threads as vllm_threads
        threads = f"{configs[0].threads} unbound" if configs[0].threads else f"{vllm_threads()} bound"
        return f"{cpu_name()}, vLLM {VERSION} (CPU) with {threads} torch thread(s)"
    return f"{cpu_name()}, llama-server with {configs[0].threads} thread(s)"


def endpoint_targets(endpoint: str, engine: str) -> list[Target]:
    """``URL`` (one configuration, named spec-off) or ``name=URL,name=URL`` (one per configuration;
    the one named spec-off is the baseline). Non-loopback hosts are refused unless
    ``SPECNB_ALLOW_REMOTE=1``: only loopback by default."""
    check_engine(engine, endpoint)
    targets = []
    for i, part in enumerate(p.strip() for p in endpoint.split(",") if p.strip()):
        name, _, url = part.rpartition("=") if "=" in part.split("://")[0] else ("", "", part)
        url = url.rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise ParameterError(f"endpoint {url!r} must start with http:// or https://, e.g. http://127.0.0.1:8000")
        host = url.split("://", 1)[1].split("/")[0].rsplit(":", 1)[0].strip("[]")
        if host not in ("127.0.0.1", "localhost", "::1") and os.environ.get("SPECNB_ALLOW_REMOTE") != "1":
            raise ParameterError(f"endpoint host {host!r} is not loopback; set SPECNB_ALLOW_REMOTE=1 to measure it")
        targets.append(Target(name=name or (BASELINE_CONFIG if i == 0 else f"config {i + 1}"), url=url, engine=engine))
    if not targets:
        raise ParameterError("endpoint is empty; pass http://host:port or name=URL,name=URL")
    return targets


def probe_upto(levels, configs: list) -> int:
    """The largest verification batch the sweep can reach: the top level × (1 + the longest draft)."""
    return int(max(levels) * (1 + max([c.draft_length for c in configs if c.speculative] + [0])))


def draft_lengths(names, configs: list) -> dict[str, int]:
    """Draft length per speculative configuration: from the launches, or (endpoints) from a
    ``k=N`` in the configuration's name, as the README's examples name them."""
    if configs:
        return {c.name: c.draft_length for c in configs if c.speculative}
    found = {name: re.search(r"\bk=(\d+)", name) for name in names if name != BASELINE_CONFIG}
    return {name: int(m.group(1)) for name, m in found.items() if m}


def draft_kinds(names, configs: list) -> dict[str, bool]:
    """Whether each speculative configuration drafts with a model (n-grams cost no forward); endpoints
    named ``ngram…`` or ``suffix…`` draft without one, every other named with ``k=N`` a model (EAGLE, MTP, a draft)."""
    if configs:
        return {c.name: c.drafts_with_model for c in configs if c.speculative}
    return {name: not name.startswith(FREE_METHODS) for name in draft_lengths(names, configs)}


def vllm_method(config: str) -> str:
    name = config.lower()
    return next((m for m in ("eagle3", "eagle", "mtp", "ngram", "suffix") if m in name), "draft_model")


def vllm_policy(summary, policy, lengths: dict[str, int]):
    """(method, policy) for one vLLM server, which runs one speculative method: each method's launch
    (``serving_predictor.launch_policy``: its own schedule, drafting where that beats its k = 0 range)
    priced per level (``adaptive_expected``), and vLLM without speculation (k = 0 everywhere) beside
    them; the one whose worst level comes closest to the best static configuration there wins, ties
    to the higher mean, then to the method ``policy`` (the one over every configuration) chose most.
    Where ``policy`` drafts at no level (none paid within ``POLICY_FLOOR``), no launch drafts either.
    Where vLLM without speculation wins, ``method`` is the best speculative method's name (for
    ``no_launch_why``) and the policy is all k = 0."""
    from specnb.predict.serving_predictor import adaptive_expected, launch_policy

    methods = sorted({vllm_method(c) for c in lengths})
    if not methods:
        return "ngram", policy
    chosen = [c for c in policy["config"] if c != BASELINE_CONFIG] or list(lengths)
    best_static = summary[summary["config"] != BASELINE_CONFIG].groupby("concurrency")["speedup_tpot"].max() \
        .clip(lower=1.0)
    ranked = []
    for method in methods:
        family = {c: k for c, k in lengths.items() if vllm_method(c) == method}
        own = launch_policy(summary, family)
        ratio = adaptive_expected(summary, own, max(family, key=family.get)) / best_static.reindex(own["concurrency"])
        votes = sum(vllm_method(c) == method for c in chosen)
        ranked.append((round(float(ratio.min()), 6), round(float(ratio.mean()), 6), votes, method, own))
    worst, mean, _, method, own = max(ranked, key=lambda r: r[:3])
    spec_off = 1.0 / best_static.reindex(own["concurrency"])  # vLLM without speculation, against the same
    if not (policy["k"] > 0).any() or (round(float(spec_off.min()), 6), round(float(spec_off.mean()), 6)) > \
            (worst, mean):
        return method, own.assign(config=BASELINE_CONFIG, k=0, speedup_tpot=1.0)
    return method, own


def no_launch_why(policy, method: str) -> str:
    """Why the vLLM policy is "no ``--speculative-config``", given the policy over every configuration."""
    if not (policy["k"] > 0).any():
        return f"{method} did not pay at any level measured"
    return (f"{method} pays at some levels, but its schedule's k = 0 ranges elsewhere cost more than that gains "
            "(vLLM still takes the speculative path at k = 0), judged at its worst level against the best static "
            "configuration")


def policy_model(policy, method: str, configs: list) -> str:
    """The ``model`` a pasted vLLM policy names for ``method``: the folder of the launched configuration
    its levels chose most (an EAGLE-3 head's, a draft model's); a placeholder where the sweep ran on an
    endpoint, whose folder only its operator knows; "" for a method that drafts without one."""
    from specnb.engine.vllm_server import NEEDS_MODEL

    drafts = {c.name: str(c.draft) for c in configs if isinstance(c, VllmConfig) and c.method == method and c.draft}
    if drafts:
        chosen = [c for c in policy["config"] if c in drafts] or list(drafts)
        return drafts[max(sorted(set(chosen)), key=chosen.count)]
    return f"<the {method} model's folder>" if method in (*NEEDS_MODEL, "eagle") else ""


def saver(rec, commit: str | None, phase: str = ""):
    """A callback for ``run_sweep``'s ``on_run``: writes the per-request and per-run tables (with the
    commit) after every run, so an interrupted sweep keeps what it measured; a ``phase`` of the
    closed loop other than its first sweep ("check", "trace") prefixes the tables' names."""
    prefix = f"{phase}_" if phase and phase != "sweep" else ""

    def save(sweep) -> None:
        rec.table(f"{prefix}requests", sweep.records.assign(commit=commit or ""))
        rec.table(f"{prefix}runs", sweep.runs.assign(commit=commit or ""))
    return save


def phase_savers(rec, commit: str | None):
    """``serving_loop.closed_loop``'s ``on_run``: one ``saver`` per phase."""
    return lambda phase: saver(rec, commit, phase)
