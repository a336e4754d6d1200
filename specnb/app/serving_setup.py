"""Notebook 08's parameters turned into what it runs: llama-server configurations (embedded models
as GGUF), endpoint targets, which configurations draft and how far, and the saver that keeps every
finished run on disk."""

from __future__ import annotations

import os
import re

from specnb.core.errors import ParameterError
from specnb.engine.llama_server import SPEC_TYPES, ServerConfig, default_threads
from specnb.measure.serving_summary import BASELINE_CONFIG
from specnb.measure.serving_sweep import Target

ENGINES = ("llama.cpp", "vllm", "sglang")

# ---------------------------------------------------------------- configurations


def server_configs(verifier: str, precision: str, speculation: list[str], slots: int, ctx_per_slot: int,
                   threads: int = 0) -> list[ServerConfig]:
    """spec-off, then one server per ``speculation`` entry: ``"ngram-simple:4"`` (an n-gram type and
    its draft length) or ``"smollm2-draft-s:3"`` (an embedded draft, exported to GGUF, at k = 3)."""
    from specnb.models.gguf import embedded_gguf

    model = str(embedded_gguf(verifier, precision))
    common = {"model": model, "slots": slots, "ctx_per_slot": ctx_per_slot, "threads": threads or default_threads()}
    configs = [ServerConfig(name=BASELINE_CONFIG, **common)]
    for spec in speculation:
        kind, _, k = spec.rpartition(":")
        if not kind or not k.isdigit() or int(k) < 1:
            raise ParameterError(f"speculation entry {spec!r} must be TYPE:K or DRAFT:K with K >= 1, e.g. "
                                 "ngram-simple:4 or smollm2-draft-s:3")
        if kind in SPEC_TYPES:
            configs.append(ServerConfig(name=f"{kind} k={k}", spec_type=kind, n_max=int(k), **common))
        else:
            draft = str(embedded_gguf(kind, "q4_1" if precision == "q4_1" else "f32"))
            configs.append(ServerConfig(name=f"{kind} k={k}", spec_type="draft-simple", draft=draft, n_max=int(k),
                                        **common))
    return configs


def endpoint_targets(endpoint: str, engine: str) -> list[Target]:
    """``URL`` (one configuration, named spec-off) or ``name=URL,name=URL`` (one per configuration;
    the one named spec-off is the baseline). Non-loopback hosts are refused unless
    ``SPECNB_ALLOW_REMOTE=1``: only loopback by default."""
    if engine not in ENGINES:
        raise ParameterError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
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


def probe_upto(levels, configs: list[ServerConfig]) -> int:
    """The largest verification batch the sweep can reach: the top level × (1 + the longest draft)."""
    return int(max(levels) * (1 + max([c.n_max for c in configs if c.spec_type != "none"] + [0])))


def draft_lengths(names, configs: list[ServerConfig]) -> dict[str, int]:
    """Draft length per speculative configuration: from the launches, or (endpoints) from a
    ``k=N`` in the configuration's name, as the README's examples name them."""
    if configs:
        return {c.name: c.n_max for c in configs if c.spec_type != "none"}
    found = {name: re.search(r"\bk=(\d+)", name) for name in names if name != BASELINE_CONFIG}
    return {name: int(m.group(1)) for name, m in found.items() if m}


def draft_kinds(names, configs: list[ServerConfig]) -> dict[str, bool]:
    """Whether each speculative configuration drafts with a model (n-grams cost no forward); endpoints
    named ``ngram…`` are n-grams, every other named with ``k=N`` a model (EAGLE, MTP, a draft)."""
    if configs:
        return {c.name: c.spec_type.startswith("draft") for c in configs if c.spec_type != "none"}
    return {name: not name.startswith("ngram") for name in draft_lengths(names, configs)}


def vllm_method(config: str) -> str:
    name = config.lower()
    return next((m for m in ("eagle3", "eagle", "mtp", "ngram", "suffix") if m in name), "draft_model")


def saver(rec, commit: str | None):
    """A callback for ``run_sweep``'s ``on_run``: writes the per-request and per-run tables (with the
    commit) after every run, so an interrupted sweep keeps what it measured."""
    def save(sweep) -> None:
        rec.table("requests", sweep.records.assign(commit=commit or ""))
        rec.table("runs", sweep.runs.assign(commit=commit or ""))
    return save
