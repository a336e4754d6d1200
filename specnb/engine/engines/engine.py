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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

BASELINE_CONFIG = "spec-off"  # the display name of a configuration that does not speculate
ADAPTIVE_CONFIG = "adaptive"  # the display name of a policy launched as one server (its schedule)


@dataclass(frozen=True, kw_only=True)
class Speculation:
    """What one configuration drafts. ``entry`` "" is spec-off."""

    entry: str = ""
    k: int = 0
    method: str = "none"  # the engine's own name for it (vLLM ``method``, llama-server ``--spec-type``)
    uses_model: bool = False
    schedule: tuple[tuple[int, int, int], ...] | None = None
    adaptive: bool = False  # the policy as one launch: named ``ADAPTIVE_CONFIG`` whatever its k

    @property
    def speculative(self) -> bool:
        return bool(self.entry)

    @property
    def name(self) -> str:
        if self.adaptive:
            return ADAPTIVE_CONFIG
        return f"{self.entry} k={self.k}" if self.entry else BASELINE_CONFIG

    def columns(self) -> dict:
        """What every record and summary row of this configuration carries about it."""
        return {"config": self.name, "method": self.method, "k": self.k if self.entry else 0,
                "uses_model": self.uses_model, "adaptive": self.adaptive}


SPEC_OFF = Speculation()


@dataclass(frozen=True, kw_only=True)
class Engine:
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
    - ``policy_text(policy, configs)``: a per-load policy as the engine takes it: a list of lines.
    - ``default_entries(smoke, verifier)``: the speculation a run measures when none is named.
    """

    name: str  # what ``-p engine`` says and records carry
    label: str  # how prose names it ("llama-server", "vLLM")
    metrics_prefix: str  # its Prometheus counters' prefix ("llamacpp", "vllm", "sglang")
    launched: bool = False  # notebook 08 can start it itself (else only as ``-p endpoint``)
    schedules: bool = False  # one launch can change k with the batch size (a policy runs as one server)
    configs: Callable[..., list] | None = None
    server: Callable[..., Any] | None = None
    missing: Callable[[], str | None] = lambda: None
    machine: Callable[[list], str] = lambda configs: ""
    probe: Callable[..., float | None] | None = None
    launch_text: Callable[[Any], str] = lambda config: ""
    policy_text: Callable[..., list[str]] = lambda policy, configs: []
    default_entries: Callable[[bool, str], list[str]] = lambda smoke, verifier: ["ngram:4"]
    default_note: Callable[[bool, str], str] = lambda smoke, verifier: ""


ENGINES: dict[str, Engine] = {}


def register(engine: Engine) -> Engine:
    """Add ``engine`` to the table (registered again, it replaces the old one: tests swap engines in)."""
    ENGINES[engine.name] = engine
    return engine


def engine_named(name: str) -> Engine:
    """The registered engine of that name, or ``ParameterError`` listing the known ones."""
    from specnb.core.errors import ParameterError

    if name not in ENGINES:
        raise ParameterError(f"engine must be one of {', '.join(ENGINES)}, got {name!r}")
    return ENGINES[name]


def engine_of(config) -> Engine:
    """The engine a launch configuration belongs to (each configuration class names it in ``engine``)."""
    return engine_named(config.engine)
