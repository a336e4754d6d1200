"""What a serving engine is, and the one table of engines.

An engine is a server that takes OpenAI-style streamed completions under continuous batching —
llama.cpp's ``llama-server``, vLLM, an OpenAI-compatible endpoint someone else runs (SGLang, a vLLM
on a GPU box), or the simulated engine the tests and the method checks run on. Each built-in engine
is one module of its sub-folder that ends with ``register(ENGINE)``; ``engines()`` imports them. The
sweep, the predictor, the policy, the verdict text and notebook 08 ask the registered engine
(``engine_named``), never compare its name — as the decoding loop asks a ``DraftKind``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from specnb.serve.speculation import Launch


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
BUILT_IN = ("llama.engine_llama", "vllm.engine_vllm", "openai.engine_openai", "simulated.engine_simulated")


def register(engine: ServingEngine) -> ServingEngine:
    """Add ``engine`` to the table (registered again, it replaces the old one: tests swap engines in)."""
    ENGINES[engine.name] = engine
    return engine


def engines() -> dict[str, ServingEngine]:
    """The table, the built-in engines registered first (imported on first use: each engine's module
    imports ``register`` from this one)."""
    import importlib

    for module in BUILT_IN:
        importlib.import_module(f"specnb.serve.{module}")
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
