"""Load on one OpenAI-compatible server, and what is read off it: the load's shape, the requests,
the run's steady window and the engine's own batch, the spec-decode counters and the forward probe.

**The shape** is a record every request and summary row carries: how requests arrive, how long each
one is asked to be, and which of them saw the level sustained. GuideLLM makes each load profile a
strategy object the scheduler asks for the next request, never branching on a profile's name;
``vllm bench serve`` keeps request rate (Poisson or gamma arrivals, ``burstiness``) and max
concurrency as separate knobs and draws output lengths with a range ratio. Here a shape is a frozen
dataclass:

- ``Closed``: ``concurrency`` requests in flight, each worker sending its next when its last one
  finished (vLLM bench's ``max_concurrency``; its level column is ``concurrency``).
- ``Open``: arrivals at ``rate`` requests/s, exponential gaps at burstiness 1, gamma below (bursts
  with quiet spells between), none capped (``request_rate``).

Both carry the output-length rule (``Lengths``: drawn over [L/2, 3L/2] by default, as vLLM bench's
``--random-range-ratio 0.5``), the number of requests (0: as many as the shape needs) and the seed.
Lengths are drawn because equal ones make a closed loop run in lockstep: a level's requests start
together and drain together, so spec-off's successors prefill in one batch while speculation's,
desynchronised by acceptance, land in their neighbours' decode steps (issue 40).

``columns()`` is what a record carries, ``shape_of(frame)`` reads it back from a table — a new shape
(a replayed trace, open-loop steps) is a new record type and one line in ``SHAPES``, not a new string
branch. ``steps_batch`` says whether the level *is* the number of sequences in an engine step (a
closed loop), what the serving predictor and policy price a step by.

**Every prompt at every level**: a round measures each prompt the same number of times at every
level (``requests_for``: whole cycles of the prompts, enough that each slot turns over), its order
rotated round by round, so levels compare the same prompt mix and no prompt always sits at a run's
edge.

**The requests**, streamed (``send_closed``, ``send_open``): per request TTFT, the gaps between
streamed chunks (ITL) and E2E latency; TPOT = (E2E − TTFT) ÷ (output tokens − 1). Accepted draft
tokens arrive as a burst, so the ITLs are bimodal and TPOT, not mean ITL, is what speculation
changes. Token counts come from the server's ``usage`` (no tokenizer needed); llama.cpp adds
``timings.draft_n`` / ``draft_n_accepted``; SGLang, where it returns ``meta_info`` (its native
``/generate`` stream, or a non-streamed OpenAI response asked for ``return_meta_info``; a streamed
OpenAI one refuses it), ``spec_verify_ct`` and, in versions that report them,
``spec_draft_token_num`` / ``spec_accept_token_num``, read into the same two fields (``read_usage``).
Records use ``vllm bench serve``'s per-request names (``ttft``, ``itl``, ``latency``, ``tpot``,
``output_tokens``, ``prompt_len``, ``success``, ``error``, ``start_time``; seconds, as in its
``RequestFuncOutput``) so results compare directly.

**The steady state.** A closed loop is measured in its steady state only. A run sends
``concurrency`` **filler** requests first (one per slot: they absorb the ramp-up, when every slot
starts at once), then the measured requests, and keeps sending fillers while any measured request is
still in flight, then stops and drains (``ClosedFeed``): every measured request runs with
``concurrency`` requests in flight. Fillers are recorded (``filler`` True) but never paired or
summarised. The **steady window** (``window``) runs from the run's first completion to the first
completion after its last send, the moment the loop stopped holding its level; ``steady_flags``
checks each request against it, so a measured request outside it (fillers capped short by a failing
server) is marked, not counted. ``turnovers`` is how many measured requests each slot runs in a run.
An open loop's window is the whole trace: its rate holds throughout. Summaries pair only steady
requests (``steady_records``).

**The engine's own batch.** A closed loop's level is the client's concurrency, but what prices a
step is the batch the engine's scheduler runs, and the two part where a slot idles between a request
and its successor, or where requests queue. Every ``BATCH_EVERY_S`` a background thread reads the
engine's gauge (``ServingEngine.batch_gauge`` after its ``metrics_prefix``:
``vllm:num_requests_running``, ``llamacpp:requests_processing``, ``sglang:num_running_reqs``) and
keeps (seconds since the run's start, batch); an engine without such a gauge gives no samples (its
batch is NaN). A run's ``batch_mean`` is the mean of the busy samples inside its steady window
(``batch_samples`` of them: a sample of 0 is the engine idle between a request and its successor,
not a batch any step ran at) and ``batch_trace`` keeps every sample, so a trace's batch occupancy can
be read back; a level's ``mean_batch`` pools its runs' steady samples.

**The counters and the probe.** The spec-decode counters are the engine's Prometheus series under
its metrics prefix (``llamacpp:`` or ``vllm:``, the same names; SGLang's two gauges are read as they
are, never differenced: see ``serving_sweep``'s docstring for why a gauge is only a run's tail),
scraped before and after each run and differenced; ``reachable`` tells a dead server; the forward
probe times the engine's cost of one forward against tokens in the batch.

The sweep over levels and configurations is ``specnb.measure.serving_sweep``.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import numpy as np
import pandas as pd

from specnb.core.errors import ParameterError, SpecnbError
from specnb.serve.engines import SPEC_OFF, Speculation, engine_named, engines

FILLER_STREAM = 1  # the seed word fillers' lengths are drawn with (a trailing 0 would draw the measured ones')
FILLERS_PER_SLOT = 4  # a run's fillers are capped at this many per slot plus one per measured request
TIE_S = 1e-6  # instants this close are one: a completion and the send it frees a slot for (virtual time, rounded)
BATCH_EVERY_S = 0.25  # seconds between two reads of the engine's batch gauge


# ---------------------------------------------------------------------------- the load's shape


@dataclass(frozen=True, kw_only=True)
class Lengths:
    """Output tokens asked per request: drawn uniformly over [tokens·(1 − r), tokens·(1 + r)] per
    (prompt, round), seeded, as vLLM bench's ``--random-range-ratio`` (0.5 unless told), or ``tokens``
    each at ``range_ratio`` 0 — which makes a closed loop run in lockstep (see the module)."""

    tokens: int
    range_ratio: float = 0.5

    def check(self, context: int | None = None) -> Lengths:
        if not isinstance(self.tokens, int) or isinstance(self.tokens, bool) or self.tokens < 1:
            raise ParameterError(f"max_new_tokens must be a whole number >= 1, got {self.tokens!r}")
        if not 0.0 <= self.range_ratio < 1.0:
            raise ParameterError(f"length_range_ratio must be in [0, 1) (0: every request max_new_tokens long), "
                                 f"got {self.range_ratio!r}")
        if context is not None and self.longest > context:
            raise ParameterError(f"max_new_tokens {self.tokens} with length_range_ratio {self.range_ratio} asks up "
                                 f"to {self.longest} tokens, beyond the model's context of {context}")
        return self

    @property
    def longest(self) -> int:
        return int(math.floor(self.tokens * (1 + self.range_ratio)))

    def draw(self, prompt_ids: list[str], round_index: int, seed: int, filler: bool = False) -> list[int]:
        """Per request, its output length: the same for a (prompt, round) whatever the configuration,
        so requests pair exactly; at least 2 (a TPOT needs two tokens). ``filler``: drawn from a stream
        of their own (a fourth seed word), so no filler's key can draw a measured request's length."""
        if not self.range_ratio:
            return [self.tokens] * len(prompt_ids)
        lo, hi = max(2, math.ceil(self.tokens * (1 - self.range_ratio))), max(2, self.longest)
        stream = [FILLER_STREAM] if filler else []
        return [int(np.random.default_rng([seed, round_index, zlib.crc32(p.encode()), *stream]).integers(lo, hi + 1))
                for p in prompt_ids]

    def columns(self) -> dict:
        return {"max_tokens_asked": self.tokens, "range_ratio": self.range_ratio}


@dataclass(frozen=True, kw_only=True)
class Closed:
    """``concurrency`` requests in flight, each slot turning over ``turnovers`` times in the steady window."""

    concurrency: int
    lengths: Lengths = field(default_factory=lambda: Lengths(tokens=32))
    requests: int = 0
    turnovers: int = 3
    seed: int = 0
    name = "closed"
    column = "concurrency"
    unit = "concurrent requests"
    axis = "concurrency"
    level_format = "{:g} concurrent"
    steps_batch = True  # the level is the number of sequences a step serves

    def __post_init__(self):
        turnovers = self.turnovers
        if not isinstance(turnovers, int) or isinstance(turnovers, bool) or turnovers < 1:
            raise ParameterError(f"turnovers must be a whole number >= 1 (requests each slot runs in a run's steady "
                                 f"window; below 1 the window holds none), got {turnovers!r}")

    @property
    def level(self) -> float:
        return self.concurrency

    @property
    def run_requests(self) -> int:
        """Measured requests one run holds at least: ``turnovers`` per slot (its fillers come on top)."""
        return self.turnovers * self.concurrency

    @property
    def warm_concurrency(self) -> int:
        return self.concurrency

    def text(self) -> str:
        return self.level_format.format(self.concurrency)

    def send(self, target, texts: list[str], max_tokens: list[int], ignore_eos: bool, round_index: int,
             fillers: tuple[list[str], list[int]] = ((), ())):
        """The coroutine that sends ``texts`` as this load, ``fillers`` (texts, lengths) around them:
        (records: the measured in order, then the fillers sent; duration in s)."""
        return send_closed(target, texts, self.concurrency, max_tokens, ignore_eos, fillers=fillers)

    def requests_for(self, n_prompts: int, round_index: int = 0) -> list[int]:
        """The prompts (rows) one round measures, in the order sent: whole cycles of every prompt, as
        many as hold a run's worth (``run_requests``) and ``requests``, so each prompt is measured
        equally often at every level (the same mix); the order starts at prompt ``round_index``, so no
        prompt sits at the same place every round."""
        n = max(n_prompts, self.requests or 0, self.run_requests)
        n = -(-n // n_prompts) * n_prompts  # whole cycles
        return [(round_index + i) % n_prompts for i in range(n)]

    def fillers_for(self, n_prompts: int, round_index: int, measured: int) -> list[int]:
        """The prompts (rows) a run's fillers may use, in order: the cap on them, ``FILLERS_PER_SLOT``
        per slot plus one per measured request (a server that fails requests at once while one hangs
        cannot make the loop spin for ever); a run sends c of them, then as many as keep the level
        while its measured requests finish."""
        cap = FILLERS_PER_SLOT * self.concurrency + measured
        return [(round_index + j) % n_prompts for j in range(cap)]

    def pieces(self, n: int) -> list[list[int]]:
        """The request indices in the pieces each configuration runs in turn: as many runs of at least
        ``run_requests`` measured requests as ``n`` holds (the remainder spread over them). Configurations
        alternate run by run, so a slow spell of a shared machine lands on all of them, not on the one
        whose whole level it overlapped."""
        count = max(1, n // self.run_requests)
        return [part.tolist() for part in np.array_split(np.arange(n), count)]

    def window(self, sent_s: np.ndarray, finished_s: np.ndarray) -> tuple[float, float]:
        """(start, end) in s of the run's steady window: its first completion (the leading fillers'
        ramp-up is over), and the first completion after its last send (the loop stops sending where
        no measured request is left in flight: from there it drains). A completion is stamped before
        the send it frees a slot for (at the same instant in virtual time: ``TIE_S``), so the one that
        triggered the last send is not after it."""
        done = finished_s[np.isfinite(finished_s)]
        if not len(done):
            return math.inf, -math.inf
        last_send = float(np.max(sent_s))
        after = done[done > last_send + TIE_S]
        return float(done.min()), float(after.min()) if len(after) else last_send

    def columns(self) -> dict:
        return {"load": self.name, self.column: self.concurrency, "burstiness": math.nan, "requests": self.requests,
                "turnovers": self.turnovers, "load_seed": self.seed, **self.lengths.columns()}


@dataclass(frozen=True, kw_only=True)
class Open:
    """Arrivals at ``rate`` requests/s (Poisson at ``burstiness`` 1, gamma-shaped bursts below 1)."""

    rate: float
    burstiness: float = 1.0
    lengths: Lengths = field(default_factory=lambda: Lengths(tokens=32))
    requests: int = 0
    seed: int = 0
    name = "open"
    column = "request_rate"
    unit = "requests/s"
    axis = "request rate"
    level_format = "{:g} req/s"
    steps_batch = False

    @property
    def level(self) -> float:
        return self.rate

    def text(self) -> str:
        return self.level_format.format(self.rate)

    @property
    def warm_concurrency(self) -> int:
        return 1  # no level of requests in flight to warm up at

    def send(self, target, texts: list[str], max_tokens: list[int], ignore_eos: bool, round_index: int,
             fillers: tuple[list[str], list[int]] = ((), ())):
        """The coroutine that sends ``texts`` as this load, arrivals seeded per round (no fillers: the
        whole trace is measured)."""
        gaps = arrival_gaps(len(texts), self.rate, self.burstiness, self.round_seed(round_index))
        return send_open(target, texts, max_tokens, gaps, ignore_eos)

    def round_seed(self, round_index: int) -> int:
        """The seed of a round's arrivals (``arrival_gaps``): each round its own draw."""
        return self.seed + round_index

    def requests_for(self, n_prompts: int, round_index: int = 0) -> list[int]:
        """The prompts (rows) in the order they arrive: each once, or cycled to ``requests``."""
        return [i % n_prompts for i in range(self.requests or n_prompts)]

    def fillers_for(self, n_prompts: int, round_index: int, measured: int) -> list[int]:
        return []  # the whole trace is measured

    def pieces(self, n: int) -> list[list[int]]:
        """One piece: the arrival process spans the run."""
        return [list(range(n))]

    def window(self, sent_s: np.ndarray, finished_s: np.ndarray) -> tuple[float, float]:
        """The whole trace: its rate holds from the first arrival to the last."""
        return -math.inf, math.inf

    def columns(self) -> dict:
        return {"load": self.name, self.column: self.rate, "burstiness": self.burstiness, "requests": self.requests,
                "load_seed": self.seed, **self.lengths.columns()}


SHAPES = {shape.name: shape for shape in (Closed, Open)}


def shape_of(frame) -> type:
    """The shape a table's rows were measured under, from its ``load`` column; a table without one
    (nothing measured yet) reads as closed loop, the default load."""
    names = set(frame["load"].dropna()) if "load" in getattr(frame, "columns", ()) else set()
    if len(names) > 1:
        raise ParameterError(f"one table holds several load shapes ({', '.join(sorted(names))}): summarise each apart")
    return SHAPES[names.pop()] if names else Closed


def steady_flags(load, sent_s, finished_s) -> np.ndarray:
    """Per request of one run, whether its whole life lies in the load's steady window (``window``):
    sent at or after its start, finished at or before its end (within ``TIE_S``: a finish is a send
    plus a latency, rounded); a request that never finished is not."""
    sent_s, finished_s = np.asarray(sent_s, float), np.asarray(finished_s, float)
    start, end = load.window(sent_s, finished_s)
    return (sent_s >= start - TIE_S) & (finished_s <= end + TIE_S)  # NaN finished: False


def level_text(shape: type, value) -> str:
    """A level as text in ``shape``'s unit: "4 concurrent" or "2 req/s"."""
    return shape.level_format.format(value)


# ---------------------------------------------------------------------------- the requests


@dataclass(kw_only=True)
class Target:
    """One configuration's server: its base ``url``, the ``engine`` it is (a registered name:
    "llama.cpp", "vllm", "sglang", ...), the ``model`` name requests carry and what it drafts
    (``speculation``; its display name, "spec-off" or "ngram k=4", is ``name``); ``launch``: which
    start of its server this is, numbered by a sweep that relaunches (0: the first), what the
    records carry so launch noise can be told from the prompts' (``measure.serving_stats``);
    ``virtual``: an engine that answers this target's requests and counters in virtual time instead of
    a server at ``url`` (``serving_sweep.VirtualEngine``: a simulated launch, no HTTP, no sleeping),
    so a whole sweep runs in seconds where the truth is known; None: the server at ``url``."""

    url: str
    engine: str = "llama.cpp"
    model: str = ""
    speculation: Speculation = SPEC_OFF
    launch: int = 0
    virtual: object | None = None

    @property
    def name(self) -> str:
        return self.speculation.name


@dataclass(frozen=True, kw_only=True)
class Requests:
    """Requests to send in one run: ``texts[i]`` asking ``max_tokens[i]`` output tokens."""

    texts: list[str] = field(default_factory=list)
    max_tokens: list[int] = field(default_factory=list)


@dataclass(kw_only=True)
class RequestRecord:
    """One request, named as in vLLM's ``RequestFuncOutput`` (times in seconds)."""

    success: bool = False
    error: str = ""
    prompt_len: int = 0
    output_tokens: int = 0
    ttft: float = float("nan")
    itl: list[float] = field(default_factory=list)
    latency: float = float("nan")
    tpot: float = float("nan")
    start_time: float = 0.0
    generated_text: str = ""
    draft_n: int = 0  # draft tokens: llama.cpp's per-request timings, SGLang's meta_info; 0 elsewhere
    draft_n_accepted: int = 0
    spec_verify_ct: int = 0  # SGLang's verification steps (meta_info); 0 elsewhere


def request_body(target: Target, prompt: str, max_tokens: int, ignore_eos: bool) -> dict:
    """Greedy chat completion, streamed with usage (and ``ignore_eos``: every request is ``max_tokens`` long,
    as vLLM bench sends it). ``continuous_usage_stats`` is vLLM's (and SGLang's) ask for usage on every
    chunk, so a stream cut short still says how many tokens it carried; llama-server ignores it and
    sends usage in its last chunk for ``include_usage``. The target's engine adds its own fields
    (``ServingEngine.request_extra``: llama-server's ``cache_prompt: false``)."""
    usage = {"include_usage": True, "continuous_usage_stats": True}
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "temperature": 0.0,
            "stream": True, "stream_options": usage, "ignore_eos": ignore_eos}
    return body | ({"model": target.model} if target.model else {}) | request_extra(target.engine)


def request_extra(engine: str) -> dict:
    """What ``engine`` adds to every request body ({} for an engine not in the table)."""
    found = engines().get(engine)
    return dict(found.request_extra) if found else {}


async def stream_one(client, target: Target, prompt: str, max_tokens: int, ignore_eos: bool, t0: float
                     ) -> RequestRecord:
    """Send one streamed request and time its chunks. Its token count is the last ``usage`` the
    server sent, never the chunks counted: an accepted draft burst arrives as one chunk, so counting
    them undercounts exactly the speculative runs; a stream with no usage is a failed request."""
    record, text, last = RequestRecord(), [], None
    start = time.perf_counter()
    record.start_time = start - t0
    try:
        async with client.stream("POST", f"{target.url}/v1/chat/completions",
                                 json=request_body(target, prompt, max_tokens, ignore_eos)) as response:
            if response.status_code != 200:
                record.error = f"HTTP {response.status_code}: {(await response.aread())[:200]!r}"
                return record
            async for line in response.aiter_lines():
                if not line.startswith("data:") or line.strip() == "data: [DONE]":
                    continue
                chunk = json.loads(line[5:])
                now = time.perf_counter()
                delta = "".join((c.get("delta") or {}).get("content") or "" for c in chunk.get("choices") or [])
                if delta:
                    if last is None:
                        record.ttft = now - start
                    else:
                        record.itl.append(now - last)
                    last = now
                    text.append(delta)
                read_usage(record, chunk)
        record.latency = time.perf_counter() - start
    except Exception as err:  # connection refused or reset (a dead server), a malformed stream
        record.error = f"{type(err).__name__}: {err}"[:300]
        return record
    record.generated_text = "".join(text)
    if record.output_tokens > 1 and last is not None:
        record.tpot = (record.latency - record.ttft) / (record.output_tokens - 1)
    record.success = last is not None and record.output_tokens > 0
    record.error = ("" if record.success else "no tokens streamed" if last is None
                    else "no token counts (usage) in the stream")
    return record


# SGLang's meta_info names → RequestRecord fields (values are cumulative per request: the last one seen wins)
SGLANG_META = {"spec_verify_ct": "spec_verify_ct", "spec_draft_token_num": "draft_n",
               "spec_accept_token_num": "draft_n_accepted", "completion_tokens": "output_tokens",
               "prompt_tokens": "prompt_len"}


def read_usage(record: RequestRecord, chunk: dict) -> None:
    """Token counts from one chunk: OpenAI's ``usage``, llama.cpp's ``timings``, SGLang's ``meta_info``
    (at the top of a native ``/generate`` chunk, or per choice in an OpenAI response)."""
    usage, timings = chunk.get("usage") or {}, chunk.get("timings") or {}
    record.prompt_len = usage.get("prompt_tokens", record.prompt_len)
    record.output_tokens = usage.get("completion_tokens", record.output_tokens)
    record.draft_n = timings.get("draft_n", record.draft_n)
    record.draft_n_accepted = timings.get("draft_n_accepted", record.draft_n_accepted)
    metas = [chunk.get("meta_info")] + [c.get("meta_info") for c in chunk.get("choices") or []]
    for meta in filter(None, metas):
        for name, attr in SGLANG_META.items():
            if meta.get(name) is not None:
                setattr(record, attr, int(meta[name]))


class ClosedFeed:
    """Which request a closed loop's free slot sends next: an index into the measured requests
    (0..measured − 1) then the fillers (measured onward), or None: the slot stops.

    First ``concurrency`` fillers, one per slot: every slot starts at once, and that ramp-up is
    theirs. Then the measured requests in order. Then fillers again while any measured request is
    in flight, so every measured request runs with ``concurrency`` in flight to its end; at most
    ``fillers`` in all. No fillers: the measured requests in order, nothing else (a warm-up). The
    virtual-time driver (``simulated.run_closed``) takes the same feed, so the run formation is
    proven where the truth is known."""

    def __init__(self, measured: int, fillers: int, concurrency: int):
        self.waiting = deque(range(measured))
        self.first_filler, self.fillers = measured, fillers
        self.lead = min(concurrency, fillers)
        self.fillers_sent = 0
        self.in_flight: set[int] = set()  # measured requests sent and not yet finished

    def next(self) -> int | None:
        keeping = not self.waiting and self.in_flight and self.fillers_sent < self.fillers
        if self.fillers_sent < self.lead or keeping:
            self.fillers_sent += 1
            return self.first_filler + self.fillers_sent - 1
        if self.waiting:
            self.in_flight.add(self.waiting[0])
            return self.waiting.popleft()
        return None

    def finished(self, index: int) -> None:
        self.in_flight.discard(index)


async def send_closed(target: Target, prompts: list[str], concurrency: int, max_tokens: list[int],
                      ignore_eos: bool = True, fillers: tuple[list[str], list[int]] = ((), ())
                      ) -> tuple[list[RequestRecord], float]:
    """Every prompt once (request i asking ``max_tokens[i]`` tokens), ``concurrency`` in flight, with
    ``fillers`` (texts, lengths) around them as ``ClosedFeed`` sends them; (records: the prompts' in
    order, then the fillers sent, in order; duration in s).

    A new connection per request: llama-server may close a kept-alive connection after a stream,
    and a request sent on it then fails with "disconnected without sending a response"."""
    texts, tokens = list(prompts) + list(fillers[0]), list(max_tokens) + list(fillers[1])
    feed = ClosedFeed(len(prompts), len(fillers[0]), concurrency)
    records: list[RequestRecord | None] = [None] * len(texts)

    async def worker(client, t0):
        while (index := feed.next()) is not None:
            records[index] = await stream_one(client, target, texts[index], tokens[index], ignore_eos, t0)
            feed.finished(index)  # the next send's clock starts after this one's end: the window's rule

    limits = httpx.Limits(max_connections=concurrency + 1, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=10.0), limits=limits) as client:
        t0 = time.perf_counter()  # after the client's setup (its SSL context alone takes ~0.1 s)
        await asyncio.gather(*(worker(client, t0) for _ in range(concurrency)))
    return records[:len(prompts) + feed.fillers_sent], time.perf_counter() - t0


def arrival_gaps(n: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> np.ndarray:
    """Seconds between ``n`` arrivals at ``rate`` requests/s on average, as ``vllm bench serve`` draws
    them: exponential (Poisson arrivals) at burstiness 1, else gamma with shape ``burstiness`` and the
    same mean, so below 1 requests come in bursts with quiet spells between them.

    Rescaled, as vLLM bench rescales its gamma arrivals, so the ``n`` arrivals span exactly ``n / rate``
    seconds: 16 raw draws at 1.14 req/s realize anywhere from 0.9 to 1.5 req/s, and a trace run at
    "1.14" would then load the engine at another rate each seed. One common factor leaves the gaps'
    shape (their coefficient of variation, the burstiness) as drawn."""
    rng = np.random.default_rng(seed)
    if burstiness == 1.0:
        gaps = rng.exponential(1.0 / rate, size=n)
    else:
        gaps = rng.gamma(burstiness, 1.0 / (rate * burstiness), size=n)
    return gaps * (n / rate / gaps.sum())


async def send_open(target: Target, prompts: list[str], max_tokens: list[int], gaps: np.ndarray,
                    ignore_eos: bool = True) -> tuple[list[RequestRecord], float]:
    """Every prompt once (request i asking ``max_tokens[i]`` tokens), request i arriving ``gaps[i]`` s
    after the one before it (``arrival_gaps``: a Poisson or gamma process, drawn by the caller so a
    forecast can draw the same); no cap in flight."""
    async def one(client, t0, at, prompt, tokens):
        await asyncio.sleep(max(0.0, at - (time.perf_counter() - t0)))
        return await stream_one(client, target, prompt, tokens, ignore_eos, t0)

    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=10.0),
                                 limits=httpx.Limits(max_connections=None, max_keepalive_connections=0)) as client:
        t0 = time.perf_counter()
        records = await asyncio.gather(*(one(client, t0, at, p, n) for at, p, n in zip(np.cumsum(gaps), prompts,
                                                                                         max_tokens)))
    return list(records), time.perf_counter() - t0


def run_async(coroutine):
    """Run a coroutine to completion on its own loop in a thread: a Jupyter kernel already runs one."""
    box = {}

    def main():
        try:
            box["result"] = asyncio.run(coroutine)
        except BaseException as err:  # handed to the caller
            box["error"] = err

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.1)  # short joins: Ctrl-C reaches the caller at once
    if "error" in box:
        raise box["error"]
    return box["result"]


# ---------------------------------------------------------------------------- a run's steady state and batch


def gauge_name(engine: str) -> str:
    """The full name of ``engine``'s running-batch gauge ("" where it has none or is not registered)."""
    found = engines().get(engine)
    return f"{found.metrics_prefix}:{found.batch_gauge}" if found and found.batch_gauge else ""


def read_gauge(text: str, name: str) -> float | None:
    """The gauge ``name`` in Prometheus text, summed over its label sets (vLLM labels one per engine
    core); None where it is absent."""
    pattern = re.compile(rf"^{re.escape(name)}(?:\{{[^}}]*\}})?\s+([-+0-9.eE]+)\s*$")
    values = [float(m.group(1)) for m in map(pattern.match, text.splitlines()) if m]
    return float(sum(values)) if values else None


class BatchSampler:
    """Reads a target's running batch every ``every_s`` from a background thread while the ``with``
    block runs, and stops (joined) however the block ends. ``samples``: (clock s, batch)."""

    def __init__(self, target, every_s: float | None = None, clock: Callable[[], float] = time.perf_counter):
        self.url, self.gauge, self.clock = target.url, gauge_name(target.engine), clock
        self.every_s = BATCH_EVERY_S if every_s is None else every_s
        self.samples: list[tuple[float, float]] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.poll, daemon=True) if self.gauge else None

    def __enter__(self) -> BatchSampler:
        if self.thread:
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        if self.thread:
            self.thread.join()

    def poll(self) -> None:
        with httpx.Client(timeout=2.0) as client:
            while not self.stopping.is_set():
                before = self.clock()
                try:
                    batch = read_gauge(client.get(f"{self.url}/metrics").text, self.gauge)
                except (httpx.HTTPError, ValueError):  # a server going down is the run's to report, not the sampler's
                    batch = None
                if batch is not None:
                    self.samples.append(((before + self.clock()) / 2, batch))
                self.stopping.wait(self.every_s)

    def since(self, start: float) -> list[tuple[float, float]]:
        """The samples as (s since ``start``, batch): the run's own clock."""
        return [(round(at - start, 4), batch) for at, batch in self.samples]


@dataclass(kw_only=True)
class Run:
    """One run as sent: its requests' records, its duration (s) and the engine's batch samples
    (s since the run's start, batch)."""

    done: list[RequestRecord]
    duration: float
    samples: list[tuple[float, float]]

    def steady(self, load) -> tuple[np.ndarray, dict]:
        """Which requests are steady (``steady_flags``) and the run's batch columns
        (``batch_columns``), both by the load shape's steady window over this run's requests."""
        sent_s = np.array([d.start_time for d in self.done], float)
        finished_s = sent_s + np.array([d.latency if d.success else np.nan for d in self.done], float)
        return steady_flags(load, sent_s, finished_s), batch_columns(self.samples, load.window(sent_s, finished_s))


async def finished_at(coroutine):
    """The coroutine's result and the clock just after it returned."""
    return await coroutine, time.perf_counter()


def send_sampled(target: Target, load, requests: Requests, ignore_eos: bool, round_index: int,
                 fillers: Requests | None = None) -> Run:
    """Send one run as ``load`` (with a closed loop's ``fillers``: texts, lengths) while sampling the
    engine's running batch; ``done`` holds the requests' records, then the fillers sent. The run's
    start is its end less its duration: the instant its requests' ``start_time`` counts from. A
    virtual target's engine sends it in virtual time, its batch read off every step (``Target.virtual``)."""
    fillers = fillers or Requests()
    if target.virtual is not None:
        return target.virtual.send(load, requests, ignore_eos, round_index, fillers)
    with BatchSampler(target) as sampler:
        sent = load.send(target, requests.texts, requests.max_tokens, ignore_eos, round_index,
                         (fillers.texts, fillers.max_tokens))
        (done, duration), end = run_async(finished_at(sent))
    return Run(done=done, duration=duration, samples=sampler.since(end - duration))


def batch_columns(samples: list[tuple[float, float]], window: tuple[float, float]) -> dict:
    """A run's batch: the mean of its busy samples (batch > 0) inside the steady ``window`` (s; NaN if
    none), how many they are, and every sample as JSON [[s, batch], ...]. Idle samples are left out:
    a step is priced by the batch it runs, and a gap with nothing running (a slot between a request
    and its successor; at 1 concurrent, every such gap) runs no step."""
    inside = [batch for at, batch in samples if window[0] <= at <= window[1] and batch > 0]
    return {"batch_mean": float(np.mean(inside)) if inside else math.nan, "batch_samples": len(inside),
            "batch_trace": json.dumps([list(s) for s in samples])}


def level_batch(runs: pd.DataFrame) -> float:
    """A level's mean batch over its runs' steady samples (each run weighted by its samples); NaN
    where no run has any (an engine without a gauge, tables from before it was sampled)."""
    if "batch_samples" not in runs:
        return math.nan
    weights = runs["batch_samples"].fillna(0).to_numpy(float)
    return float(np.dot(runs["batch_mean"].fillna(0), weights) / weights.sum()) if weights.sum() else math.nan


def measured_records(records: pd.DataFrame) -> pd.DataFrame:
    """The requests a level measured: every one but a closed loop's fillers (``filler``), which only
    held the level around them; every one where the records have no such column."""
    return records[~records["filler"].fillna(False).astype(bool)] if "filler" in records else records


def steady_records(records: pd.DataFrame) -> pd.DataFrame:
    """The requests a level's speedups are taken over: the steady ones where the records say
    (``steady``), every one where they do not (a vLLM bench file, tables from before the column)."""
    return records[records["steady"].fillna(False).astype(bool)] if "steady" in records else records


# ---------------------------------------------------------------------------- the counters and the probe


class EndpointError(SpecnbError, RuntimeError):
    """An endpoint is unreachable or does not speak the OpenAI API; the message says which and why."""


@dataclass(kw_only=True)
class Counters:
    """Spec-decode counters of one scrape (or the difference of two)."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    accepted_per_pos: list[float] = field(default_factory=list)
    n_decode: float = 0.0  # llama.cpp: llama_decode() calls of the verifier
    tokens_predicted: float = 0.0
    accept_rate_gauge: float = float("nan")  # SGLang's gauges: read as they are, never differenced
    accept_length_gauge: float = float("nan")

    def minus(self, before: Counters) -> Counters:
        """The counters' difference since ``before``; the gauges as they are now."""
        n = max(len(self.accepted_per_pos), len(before.accepted_per_pos))
        pad = lambda v: list(v) + [0.0] * (n - len(v))  # noqa: E731
        return Counters(**{k: getattr(self, k) - getattr(before, k) for k in
                           ("drafts", "draft_tokens", "accepted", "n_decode", "tokens_predicted")},
                        accepted_per_pos=[a - b for a, b in zip(pad(self.accepted_per_pos),
                                                                pad(before.accepted_per_pos))],
                        accept_rate_gauge=self.accept_rate_gauge, accept_length_gauge=self.accept_length_gauge)


COUNTER_NAMES = {"spec_decode_num_drafts_total": "drafts", "spec_decode_num_draft_tokens_total": "draft_tokens",
                 "spec_decode_num_accepted_tokens_total": "accepted", "n_decode_total": "n_decode",
                 "tokens_predicted_total": "tokens_predicted", "generation_tokens_total": "tokens_predicted"}
GAUGE_NAMES = {"spec_accept_rate": "accept_rate_gauge", "spec_accept_length": "accept_length_gauge"}  # sglang:


def metric_line() -> re.Pattern:
    """A Prometheus sample of any registered engine's prefix: (name, labels, value)."""
    prefixes = "|".join(sorted({re.escape(e.metrics_prefix) for e in engines().values()}))
    return re.compile(rf"^(?:{prefixes}):(\w+?)(?:\{{([^}}]*)\}})?\s+([-+0-9.eE]+|NaN)\s*$")


def parse_counters(text: str) -> Counters:
    """Counters from Prometheus text; series with several label sets (vLLM's per-model) are summed,
    gauges averaged. SGLang's gauges read 0 on a server that never speculated: taken as absent."""
    found, per_pos, gauges, pattern = Counters(), {}, {}, metric_line()
    for line in text.splitlines():
        match = pattern.match(line.strip())
        if not match:
            continue
        name, labels, value = match.group(1), match.group(2) or "", float(match.group(3))
        if name == "spec_decode_num_accepted_tokens_per_pos_total":
            position = int(re.search(r'position="(\d+)"', labels).group(1))
            per_pos[position] = per_pos.get(position, 0.0) + value
        elif name in COUNTER_NAMES:
            setattr(found, COUNTER_NAMES[name], getattr(found, COUNTER_NAMES[name]) + value)
        elif name in GAUGE_NAMES:
            gauges.setdefault(GAUGE_NAMES[name], []).append(value)
    found.accepted_per_pos = [per_pos.get(i, 0.0) for i in range(max(per_pos) + 1)] if per_pos else []
    if np.mean(gauges.get("accept_length_gauge", [0.0])) > 0:  # speculating: τ ≥ 1
        for attr, values in gauges.items():
            setattr(found, attr, float(np.mean(values)))
    return found


def scrape(target: Target, timeout_s: float = 10.0) -> Counters:
    """The target's spec-decode counters now (zeros when it exposes no ``/metrics``; a virtual
    target's from its engine, ``Target.virtual``)."""
    if target.virtual is not None:
        return target.virtual.counters()

    try:
        response = httpx.get(f"{target.url}/metrics", timeout=timeout_s)
    except httpx.HTTPError as err:
        raise EndpointError(f"{target.name}: cannot read {target.url}/metrics: {err}") from err
    return parse_counters(response.text) if response.status_code == 200 else Counters()


def check_target(target: Target, timeout_s: float = 10.0) -> Target:
    """Fail with one line unless ``target`` answers ``/v1/models`` like an OpenAI server; fills in
    ``model`` with the first model it serves when none was given."""
    try:
        response = httpx.get(f"{target.url}/v1/models", timeout=timeout_s)
        models = [m["id"] for m in response.json()["data"]]
    except httpx.HTTPError as err:
        raise EndpointError(f"{target.name}: {target.url} is unreachable ({err}); start the server or fix "
                            "-p endpoint") from err
    except (ValueError, KeyError, TypeError) as err:
        raise EndpointError(f"{target.name}: {target.url}/v1/models is not an OpenAI-compatible answer "
                            f"(HTTP {response.status_code})") from err
    return Target(url=target.url, engine=target.engine, model=target.model or (models[0] if models else ""),
                  speculation=target.speculation)


def reachable(target: Target, timeout_s: float = 5.0) -> bool:
    """Whether the target still answers ``/v1/models`` (how a sweep on an endpoint tells a dead server)."""
    try:
        return httpx.get(f"{target.url}/v1/models", timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


def probe_tokens(max_tokens: int) -> list[int]:
    """1, 2, 3, 4, 6, 8, 12, ... up to the first size at or above ``max_tokens``."""
    sizes, n = [1, 2, 3], 4
    while sizes[-1] < max_tokens:
        sizes += [n, n * 3 // 2]
        n *= 2
    return [x for i, x in enumerate(sizes) if i == 0 or sizes[i - 1] < max_tokens]


def probe_forward(target: Target, sizes: list[int], repeats: int = 3, seed: int = 0,
                  clock: Callable[[], float] = time.perf_counter) -> pd.DataFrame:
    """The engine's cost of one forward with n tokens in the batch, for n in ``sizes``: a prompt of n
    random token ids evaluated in one batch, the same matrix shapes as one decode step over n
    sequences, timed as the target's engine can (``ServingEngine.probe``: llama.cpp times it itself, vLLM by
    the client). Sizes interleaved, ``repeats`` each; median ms. ``clock``: seconds (a test passes its own)."""
    probe = engine_named(target.engine).probe
    rng = np.random.default_rng(seed)
    rows = []
    with httpx.Client(timeout=120.0) as client:
        for r in range(repeats):
            for n in sizes[r % len(sizes):] + sizes[:r % len(sizes)]:
                timed = probe(client, target, rng.integers(1000, 20000, size=n).tolist(), clock)
                if timed is not None:
                    rows.append({"tokens": timed[0], "forward_ms": timed[1]})
    frame = pd.DataFrame(rows, columns=["tokens", "forward_ms"])
    return frame.groupby("tokens", as_index=False)["forward_ms"].median()


def probed_target(targets: list[Target]) -> Target | None:
    """The first target whose engine can time a forward (None: none can)."""
    return next((t for t in targets if engine_named(t.engine).probe is not None), None)
