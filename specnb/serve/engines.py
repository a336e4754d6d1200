"""What a serving engine is, and the one table of engines.

An engine is a server that takes OpenAI-style streamed completions under continuous batching —
llama.cpp's ``llama-server``, vLLM, an OpenAI-compatible endpoint someone else runs (SGLang, a vLLM
on a GPU box), or the simulated engine the tests and the method checks run on. What the package may ask
of one is the ``ServingEngine`` protocol; each built-in engine is a class in one module of its
sub-folder (on ``EngineDefaults``) that ends with ``register(ENGINE)``, and ``engines()`` imports them.
The sweep, the predictor, the policy, the verdict text and notebook 08 ask the engine a configuration
holds (``config.engine``) or the registered one a user names (``engine_named``), never compare its
name — as the decoding loop asks a ``DraftKind``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Protocol

from specnb.serve.speculation import Launch


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
BUILT_IN = ("llama.engine_llama", "vllm.engine_vllm", "openai.engine_openai", "simulated.engine_simulated")


def register(engine: ServingEngine) -> ServingEngine:
    """Add ``engine``, an instance of its class, to the table (registered again, it replaces the old
    one: tests swap engines in)."""
    ENGINES[engine.name] = engine
    return engine


def engines() -> dict[str, ServingEngine]:
    """The table, the built-in engines first in ``BUILT_IN``'s order whichever module was imported
    first (imported on first use: each engine's module imports ``register`` from this one), then any
    other registered engine; so the engines a message lists are listed the same way every time."""
    import importlib

    built_in = [importlib.import_module(f"specnb.serve.{module}").ENGINE.name for module in BUILT_IN]
    return {name: ENGINES[name] for name in [*built_in, *ENGINES] if name in ENGINES}


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
    from specnb.core.errors import ParameterError

    known = engines()
    if name not in known:
        raise ParameterError(f"engine must be one of {', '.join(known)}, got {name!r}")
    return known[name]

