"""What a serving engine is, what one configuration of it drafts, and the one table of engines.

An engine is a server that takes OpenAI-style streamed completions under continuous batching —
llama.cpp's ``llama-server``, vLLM, an OpenAI-compatible endpoint someone else runs (SGLang, a vLLM
on a GPU box), or the simulated engine the tests and the method checks run on. What the package may ask
of one is the ``ServingEngine`` protocol; each built-in engine is a class on ``EngineDefaults`` in one
module of ``specnb.serve`` (``llama``, ``vllm``, ``simulated``; the endpoint-only ``OpenAIEngine`` is
here) that ends with ``register(ENGINE)``, and ``engines()`` imports them. The sweep, the predictor,
the policy, the verdict text and notebook 08 ask the engine a configuration holds (``config.engine``)
or the registered one a user names (``engine_named``), never compare its name — as the decoding loop
asks a ``DraftKind``.

A configuration's identity is a ``Speculation`` record: what the user asked for (``entry``, e.g.
"ngram", "ngram-simple", "eagle3", "smollm2-draft-s"), its draft length ``k``, whether it drafts
with a model (a forward to pay, unlike an n-gram lookup), the engine's ``method`` and, for a policy
launched as one server, its per-batch-size ``schedule``. Its display name is derived from it
(``name``), never parsed back. A per-load policy as one launch carries it is a ``Launch``; how a user
names a configuration, ``parse_entry``. The verifier's EAGLE-3 head, as both launched engines load
it, is named and checked here too (``eagle3_missing``: one line before any server starts).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from specnb.core.errors import ParameterError
from specnb.native import llama_build

BASELINE_CONFIG = "spec-off"  # the display name of a configuration that does not speculate
ADAPTIVE_CONFIG = "adaptive"  # the display name of a policy launched as one server (its schedule)
AA_TWIN_CONFIG = "spec-off-aa"  # spec-off launched a second time: an A/A pair that measures launch noise
NOT_CANDIDATES = (ADAPTIVE_CONFIG, AA_TWIN_CONFIG)  # measured beside the static ones, never a policy's choice
# The families (``Speculation.family``) that draft without a model, an n-gram or suffix lookup: no
# draft to load, no forward to pay (``uses_model`` False). vLLM's method names are these families.
FREE_FAMILIES = ("ngram", "suffix")


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


def parse_entry(spec: str, accepted: tuple[str, ...]) -> tuple[str, int]:
    """``TYPE:K`` or ``DRAFT:K`` split, K ≥ 1, TYPE or DRAFT among ``accepted``: how a user names a
    configuration to launch (``-p speculation``) or one at an endpoint (``-p endpoint TYPE:K=URL``)."""
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
    # deferred: the draft registry and the kinds' table import torch
    from specnb.decode.kinds.by_name import kind_of_name
    from specnb.models.registry import embedded_draft_names

    return [name for name in embedded_draft_names() if not kind_of_name(name).reads_features]


def range_text(start: int, end: int, last: bool) -> str:
    """A policy range of loads as prose: "1", "2–3", "16 or more"."""
    return f"{start} or more" if last else f"{start}" if start == end else f"{start}–{end}"


# ------------------------------------------------------------------ the engine seam and the table


class ServingEngine(Protocol):
    """What the sweep, the predictor, the policy, the verdict text and notebook 08 may ask an engine.

    - ``configs(verifier, precision, entries, max_level, threads)``: spec-off then one launch
      configuration per speculation entry ("ngram:4"), each with a ``speculation`` record and its
      ``engine`` (this object); checked before anything starts (``ParameterError``).
    - ``server(config, timeout_s)``: the (not yet started) ``ServerProcess`` of one configuration.
    - ``missing()``: None where the engine can start here, else one line saying why not.
    - ``machine(configs)``: what ran where, for the notebook's first line.
    - ``probe(client, target, ids, clock)``: the engine's cost in ms of one forward over the token
      ids ``ids`` (None: could not tell), what the serving predictor prices extra tokens with; the
      attribute is None for an engine that cannot time a forward.
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
      an engine that can change k with the batch size; the attribute is None for one that cannot.

    What a sweep asks of a running engine, as data: ``batch_gauge``, the gauge (after the prefix) that
    says how many requests its scheduler runs now — sampled during every run, so a level's batch is
    the engine's own word, not the client's concurrency ("" where the engine has none: the batch is
    NaN); ``request_extra``, fields merged into every request body (llama-server's
    ``cache_prompt: false``, so a repeated prompt prefix is prefilled every time, as on vLLM launched
    without prefix caching); ``context``, the tokens one request may hold in the launch notebook 08
    starts (None at an endpoint: not known), what drawn output lengths are checked against;
    ``relaunch_each_round``: whether a sweep should start fresh servers for every round
    (``serving_sweep.sweep_servers(relaunch=...)``), so each round is its own launch and launch-to-launch
    noise is sampled, not frozen into every round (``measure.serving_stats``): cheap where a start takes
    seconds (llama-server, the simulated engine), not where it takes minutes (vLLM).
    """

    name: str  # what ``-p engine`` says and records carry
    version: str  # the engine's version where it knows it cheaply ("" where not): launch noise is stored per version
    label: str  # how prose names it ("llama-server", "vLLM")
    metrics_prefix: str  # its Prometheus counters' prefix ("llamacpp", "vllm", "sglang")
    launched: bool  # notebook 08 can start it itself (else only as ``-p endpoint``)
    batch_gauge: str  # "num_requests_running" (vLLM), "requests_processing" (llama-server), ...
    request_extra: dict
    context: int | None
    relaunch_each_round: bool
    probe: Callable[..., tuple[int, float] | None] | None
    scheduled: Callable[..., Any] | None

    def configs(self, verifier: str, precision: str, entries: list[str], max_level: int, threads: int = 0
                ) -> list: ...
    def server(self, config, timeout_s: float | None = None) -> Any: ...
    def missing(self) -> str | None: ...
    def machine(self, configs: list) -> str: ...
    def launch_text(self, config) -> str: ...
    def launch_json(self, launch: Launch) -> str: ...
    def policy_lines(self, launch: Launch, configs: list) -> list[str]: ...
    def default_entries(self, smoke: bool, verifier: str) -> list[str]: ...
    def default_note(self, smoke: bool, verifier: str) -> str: ...

    @property
    def schedules(self) -> bool: ...


class EngineDefaults:
    """What an engine says when its class does not: nothing launched or probed, no schedule, "" for
    every text, [] policy lines, ``ngram:4`` measured by default. A subclass sets ``name``, ``label``
    and ``metrics_prefix`` and overrides what its engine can do."""

    name: ClassVar[str]
    label: ClassVar[str]
    metrics_prefix: ClassVar[str]
    version: ClassVar[str] = ""  # what launch noise is stored under, with the machine and threads
    launched: ClassVar[bool] = False
    batch_gauge: ClassVar[str] = ""
    request_extra: ClassVar[dict] = {}
    context: ClassVar[int | None] = None
    relaunch_each_round: ClassVar[bool] = False
    zero_range: ClassVar[dict[str, tuple[float, float, float]]] = {}  # family: a k = 0 range's TPOT speedup (lo, hi)
    probe: ClassVar[Callable[..., tuple[int, float] | None] | None] = None
    scheduled: ClassVar[Callable[..., Any] | None] = None

    def configs(self, verifier: str, precision: str, entries: list[str], max_level: int, threads: int = 0
                ) -> list:
        raise NotImplementedError(f"{self.label} is measured at an endpoint only: nothing to launch")

    def server(self, config, timeout_s: float | None = None) -> Any:
        raise NotImplementedError(f"{self.label} is measured at an endpoint only: no server to start")

    def missing(self) -> str | None:
        return None

    def machine(self, configs: list) -> str:
        return ""

    def launch_text(self, config) -> str:
        return ""

    def launch_json(self, launch: Launch) -> str:
        return ""

    def policy_lines(self, launch: Launch, configs: list) -> list[str]:
        return []

    def default_entries(self, smoke: bool, verifier: str) -> list[str]:
        return ["ngram:4"]

    def default_note(self, smoke: bool, verifier: str) -> str:
        return ""

    @property
    def schedules(self) -> bool:
        """One launch can change k with the batch size, so a policy runs as one server (``scheduled``)."""
        return self.scheduled is not None


ENGINES: dict[str, ServingEngine] = {}
# Each built-in engine's name and the module of ``specnb.serve`` that registers it, in the order lists name them.
BUILT_IN = {"llama.cpp": "llama", "vllm": "vllm", "sglang": "engines", "simulated": "simulated"}


def register(engine: ServingEngine) -> ServingEngine:
    """Add ``engine``, an instance of its class, to the table (registered again, it replaces the old
    one: tests swap engines in)."""
    ENGINES[engine.name] = engine
    return engine


def engines() -> dict[str, ServingEngine]:
    """The table, the built-in engines first in ``BUILT_IN``'s order whichever module was imported
    first (imported on first use: each engine's module imports ``register`` from this one), then any
    other registered engine; so the engines a message lists are listed the same way every time."""
    for module in dict.fromkeys(BUILT_IN.values()):
        importlib.import_module(f"specnb.serve.{module}")
    return {name: ENGINES[name] for name in [*BUILT_IN, *ENGINES] if name in ENGINES}


class RegisteredEngine:
    """A launch-configuration class's ``engine``: the registered engine of that name, looked up when
    asked, so a configuration's module need not import its engine's (which imports it) and an engine
    registered again in its place is the one asked."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, config, owner=None) -> ServingEngine:
        return engine_named(self.name)


def engine_named(name: str) -> ServingEngine:
    """The registered engine of that name, or ``ParameterError`` listing the known ones."""
    known = engines()
    if name not in known:
        raise ParameterError(f"engine must be one of {', '.join(known)}, got {name!r}")
    return known[name]


# ------------------------------------------------------------------ an engine met at an endpoint only


class OpenAIEngine(EngineDefaults):
    """An OpenAI-compatible server someone else runs, measured at ``-p endpoint``: SGLang (its counters
    are ``sglang:`` gauges, read as the sweep reads them), or any other engine that streams chat
    completions. Nothing is launched or probed; its policy is written per load range, since no such
    engine is known to change k with the batch size."""

    name = "sglang"
    label = "SGLang"
    metrics_prefix = "sglang"
    batch_gauge = "num_running_reqs"

    def policy_lines(self, launch: Launch, configs: list) -> list[str]:
        """One line per load range naming the configuration to run there (spec-off where k = 0)."""
        lines = []
        for i, (start, end, k) in enumerate(launch.ranges):
            what = "spec-off" if k == 0 else launch.by_k.get(k, f"k = {k}")
            lines.append(f"{range_text(start, end, i == len(launch.ranges) - 1)} concurrent: {what}")
        return lines


OPENAI = register(OpenAIEngine())


# ------------------------------------------------------------------ the EAGLE-3 head the engines load


EAGLE3_HEAD = "smollm2-eagle3"  # what "eagle3:K" runs for the embedded verifier, on either engine (standard layout)


def eagle3_missing(verifier: str, needs_converter: bool = False, head: str | None = None) -> str:
    """"" where ``verifier`` has an EAGLE-3 head in the standard layout, else why not: another
    verifier, a head folder in another layout (``head_export.what_it_is`` says which) or, where the
    engine loads GGUF (``needs_converter``), no llama.cpp converter to make it."""
    # deferred: the draft registry and the head's layout check import torch
    from specnb.models.registry import EMBEDDED_VERIFIER, draft_folder
    from specnb.native.head_export import is_standard_head, what_it_is

    head = head or EAGLE3_HEAD
    if verifier != EMBEDDED_VERIFIER:
        return f"no EAGLE-3 head for {verifier!r} here"
    folder = draft_folder(head)
    if not is_standard_head(folder):
        return f"{head} is not an EAGLE-3 head in the standard layout vLLM loads ({what_it_is(folder)})"
    if needs_converter and not llama_build.converter_path().is_file():
        return f"no llama.cpp converter to write {head}'s GGUF ({llama_build.converter_path()} is missing: make setup)"
    return ""


def wants_head(smoke: bool, verifier: str) -> bool:
    """Whether an engine's default speculation looks for the verifier's EAGLE-3 head: not in a smoke
    run (one server fewer), and only where a verifier is named."""
    return not smoke and bool(verifier)


def eagle3_folder(verifier: str, alternatives: str) -> Path:
    """The folder an engine's ``eagle3`` loads for ``verifier`` (the standard layout, as it is); where
    there is none, one line saying why and naming ``alternatives``."""
    from specnb.models.registry import draft_folder  # deferred: it imports torch

    why = eagle3_missing(verifier)
    if why:
        raise ParameterError(f"speculation eagle3: {why}; use {alternatives}")
    return draft_folder(EAGLE3_HEAD)


def eagle_heads() -> list[str]:
    """The embedded EAGLE heads, by name: what a llama-server entry may name besides ``eagle3``."""
    # deferred: the draft registry and the kinds' table import torch
    from specnb.decode.kinds.by_name import kind_of_name
    from specnb.models.registry import embedded_draft_names

    return [name for name in embedded_draft_names() if kind_of_name(name).name == "eagle"]
