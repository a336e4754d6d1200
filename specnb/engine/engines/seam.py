"""What a serving engine is, what a configuration drafts, and the one table of engines.

An engine is a server that takes OpenAI-style streamed completions under continuous batching —
llama.cpp's ``llama-server``, vLLM, an OpenAI-compatible endpoint someone else runs (SGLang, a vLLM
on a GPU box), or the simulated engine the tests and the method checks run on. Each built-in engine
is one module of this folder that ends with ``register(ENGINE)``; ``specnb.engine.engines`` imports
them. The sweep, the predictor, the policy, the verdict text and notebook 08 ask the registered
engine (``engine_named``), never compare its name — as the decoding loop asks a ``DraftKind``.

A configuration's identity is a ``Speculation`` record: what the user asked for (``entry``, e.g.
"ngram", "ngram-simple", "eagle3", "smollm2-draft-s"), its draft length ``k``, whether it drafts
with a model (a forward to pay, unlike an n-gram lookup), the engine's ``method`` and, for a policy
launched as one server, its per-batch-size ``schedule``. Its display name is derived from it
(``name``), never parsed back.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

BASELINE_CONFIG = "spec-off"  # the display name of a configuration that does not speculate
ADAPTIVE_CONFIG = "adaptive"  # the display name of a policy launched as one server (its schedule)
AA_TWIN_CONFIG = "spec-off-aa"  # spec-off launched a second time: an A/A pair that measures launch noise
NOT_CANDIDATES = (ADAPTIVE_CONFIG, AA_TWIN_CONFIG)  # measured beside the static ones, never a policy's choice


@dataclass(frozen=True, kw_only=True)
class Speculation:
    """What one configuration drafts. ``entry`` "" is spec-off."""

    entry: str = ""
    k: int = 0
    method: str = "none"  # the engine's own name for it (vLLM ``method``, llama-server ``--spec-type``)
    family: str = "none"  # the same in words every engine shares, vLLM's: ngram, suffix, eagle3, draft_model, ...
    uses_model: bool = False
    schedule: tuple[tuple[int, int, int], ...] | None = None
    adaptive: bool = False  # the policy as one launch: named ``ADAPTIVE_CONFIG`` whatever its k
    aa_twin: bool = False  # spec-off's second launch (``AA_TWIN_CONFIG``), only what launch noise is measured by

    @property
    def speculative(self) -> bool:
        return bool(self.entry)

    @property
    def name(self) -> str:
        if self.adaptive:
            return ADAPTIVE_CONFIG
        if self.entry:
            return f"{self.entry} k={self.k}"
        return AA_TWIN_CONFIG if self.aa_twin else BASELINE_CONFIG

    def k_at(self, batch: float) -> int:
        """The draft length at a scheduler batch size: the ``schedule`` range that holds it (vLLM's
        ``num_speculative_tokens_per_batch_size``), else ``k``; 0 for spec-off."""
        if not self.entry:
            return 0
        return next((k for lo, hi, k in self.schedule or () if lo <= round(batch) <= hi), self.k)

    def columns(self) -> dict:
        """What every record and summary row of this configuration carries about it."""
        return {"config": self.name, "method": self.method, "family": self.family,
                "k": self.k if self.entry else 0, "uses_model": self.uses_model, "adaptive": self.adaptive,
                "schedule": json.dumps([list(r) for r in self.schedule]) if self.schedule else ""}


SPEC_OFF = Speculation()


@dataclass(frozen=True, kw_only=True)
class Launch:
    """A per-load policy as one launch would carry it: inclusive ``(lo, hi, k)`` load ranges, the
    configuration each k was measured as (``by_k``), the method family the launch drafts with and
    the folder of its head or draft model ("" for a method that drafts without one)."""

    ranges: tuple[tuple[int, int, int], ...]
    by_k: dict[int, str]
    family: str = "ngram"
    draft: str = ""

    @property
    def drafts(self) -> bool:
        return any(k for *_, k in self.ranges)


@dataclass(frozen=True, kw_only=True)
class ServingEngine:
    """One serving engine. Callables a launch-only or endpoint-only engine lacks are None.

    - ``configs(verifier, precision, entries, max_level, threads)``: spec-off then one launch
      configuration per speculation entry ("ngram:4"), each with a ``speculation`` record; checked
      before anything starts (``ParameterError``).
    - ``server(config, timeout_s)``: the (not yet started) ``ServerProcess`` of one configuration.
    - ``missing()``: None where the engine can start here, else one line saying why not.
    - ``machine(configs)``: what ran where, for the notebook's first line.
    - ``probe(client, target, ids, clock)``: the engine's cost in ms of one forward over the token
      ids ``ids`` (None: could not tell), what the serving predictor prices extra tokens with.
    - ``launch_text(config)``: the speculation of one configuration as a user pastes it (vLLM's
      ``--speculative-config`` JSON, llama-server's flags); "" for spec-off.
    - ``launch_json(launch)``: a ``Launch`` as one ``--speculative-config`` (an engine that changes k
      with the batch size, ``schedules``); "" where it drafts nowhere or the engine cannot.
    - ``policy_lines(launch, configs)``: a ``Launch`` as lines for an engine whose speculation is
      fixed per launch (one line per load range); [] where ``launch_json`` says it all.
    - ``default_entries(smoke, verifier)``: the speculation a run measures when none is named
      (``default_note``: why it left something out, "" if nothing).
    - ``scheduled(config, k, schedule)``: ``config`` launched as the policy (``adaptive``) at draft
      length ``k`` with the ``(lo, hi, k)`` batch-size ranges ``schedule`` (None: static at k), for
      an engine that can change k with the batch size; None for one that cannot.

    What a sweep asks of a running engine, as data: ``batch_gauge``, the gauge (after the prefix) that
    says how many requests its scheduler runs now — sampled during every run, so a level's batch is
    the engine's own word, not the client's concurrency ("" where the engine has none: the batch is
    NaN); ``request_extra``, fields merged into every request body (llama-server's
    ``cache_prompt: false``, so a repeated prompt prefix is prefilled every time, as on vLLM launched
    without prefix caching); ``context``, the tokens one request may hold in the launch notebook 08
    starts (None at an endpoint: not known), what drawn output lengths are checked against;
    ``relaunch_each_round``: whether a sweep should start fresh servers for every round
    (``serving_sweep.sweep_servers(relaunch=...)``), so each round is its own launch and launch-to-launch
    noise is sampled, not frozen into every round (``measure.launch_noise``): cheap where a start takes
    seconds (llama-server, the simulated engine), not where it takes minutes (vLLM).
    """

    name: str  # what ``-p engine`` says and records carry
    label: str  # how prose names it ("llama-server", "vLLM")
    metrics_prefix: str  # its Prometheus counters' prefix ("llamacpp", "vllm", "sglang")
    launched: bool = False  # notebook 08 can start it itself (else only as ``-p endpoint``)
    configs: Callable[..., list] | None = None
    server: Callable[..., Any] | None = None
    missing: Callable[[], str | None] = lambda: None
    machine: Callable[[list], str] = lambda configs: ""
    probe: Callable[..., float | None] | None = None
    launch_text: Callable[[Any], str] = lambda config: ""
    launch_json: Callable[[Launch], str] = lambda launch: ""
    policy_lines: Callable[..., list[str]] = lambda launch, configs: []
    default_entries: Callable[[bool, str], list[str]] = lambda smoke, verifier: ["ngram:4"]
    default_note: Callable[[bool, str], str] = lambda smoke, verifier: ""
    scheduled: Callable[..., Any] | None = None
    batch_gauge: str = ""  # "num_requests_running" (vLLM), "requests_processing" (llama-server), ...
    request_extra: dict = field(default_factory=dict)
    context: int | None = None
    relaunch_each_round: bool = False

    @property
    def schedules(self) -> bool:
        """One launch can change k with the batch size, so a policy runs as one server (``scheduled``)."""
        return self.scheduled is not None


ENGINES: dict[str, ServingEngine] = {}
BUILT_IN = ("engine_llama", "engine_vllm", "engine_openai", "engine_simulated")


def register(engine: ServingEngine) -> ServingEngine:
    """Add ``engine`` to the table (registered again, it replaces the old one: tests swap engines in)."""
    ENGINES[engine.name] = engine
    return engine


def engines() -> dict[str, ServingEngine]:
    """The table, the built-in engines registered first (imported here, on first use: their launch
    configurations import ``Speculation`` from this module)."""
    import importlib

    for module in BUILT_IN:
        importlib.import_module(f"specnb.engine.engines.{module}")
    return ENGINES


def engine_named(name: str) -> ServingEngine:
    """The registered engine of that name, or ``ParameterError`` listing the known ones."""
    from specnb.core.errors import ParameterError

    known = engines()
    if name not in known:
        raise ParameterError(f"engine must be one of {', '.join(known)}, got {name!r}")
    return known[name]


def engine_of(config) -> ServingEngine:
    """The engine a launch configuration belongs to (each configuration class names it in ``engine``)."""
    return engine_named(config.engine)


def parse_entry(spec: str, accepted: tuple[str, ...]) -> tuple[str, int]:
    """``TYPE:K`` or ``DRAFT:K`` split, K ≥ 1, TYPE or DRAFT among ``accepted``: how a user names a
    configuration to launch (``-p speculation``) or one at an endpoint (``-p endpoint TYPE:K=URL``)."""
    from specnb.core.errors import ParameterError

    kind, _, k = str(spec).rpartition(":")
    if not kind or not k.isdigit() or int(k) < 1:
        raise ParameterError(f"speculation entry {spec!r} must be TYPE:K or DRAFT:K with K >= 1, e.g. "
                             f"{accepted[0]}:4; TYPE or DRAFT one of {', '.join(accepted)}")
    if kind not in accepted:
        raise ParameterError(f"speculation entry {spec!r}: unknown type {kind!r}; this engine takes "
                             f"{', '.join(accepted)} (each as TYPE:K)")
    return kind, int(k)


def model_drafts() -> list[str]:
    """The embedded drafts that are models of their own (not heads): what an engine loads as a draft."""
    from specnb.engine.kinds.by_name import kind_of_name
    from specnb.models.registry import embedded_draft_names

    return [name for name in embedded_draft_names() if not kind_of_name(name).reads_features]


def range_text(start: int, end: int, last: bool) -> str:
    """A policy range of loads as prose: "1", "2–3", "16 or more"."""
    return f"{start} or more" if last else f"{start}" if start == end else f"{start}–{end}"
