"""The simulated serving engine: continuous batching and speculation with no model, on a stated cost model.

Why: notebook 08 infers a speedup from timed requests and Prometheus counters. On a real engine the truth is unknown;
here the step time is a formula (``SimCost``), so the method — closed and open loops, TPOT, differenced counters, the
forward probe, a policy's schedule — can be checked where the answer is known (``expected_speedup``, ``crossover``).
For tests and for anyone checking the method: ``-p engine simulated``.

- **Cost** (``SimCost``): the step time, and what varies as on a real engine, each 0 by default (the engine is then
  exactly the formula): prompts differ in acceptance (``prompt_acceptance_spread``: each prompt's acceptance shifted
  in logit by its own draw, fixed by (seed, key), so a prompt resent in a later round accepts exactly as before, as a
  greedy prompt does), and launches differ in speed (``launch_jitter``: every step of one engine instance, one launch,
  scaled by one factor drawn from ``launch_seed``), so two launches of one configuration differ as two vLLM launches do.
- **Scheduler** (``SimEngine``), after vLLM's v1 scheduler: waiting requests are admitted first come first served up to
  ``max_num_seqs``; an admitted request is prefilled in that step (its prompt tokens join the step's batch) and gets its
  first token at the end of it; every running sequence decodes 1 + k tokens per step, k looked up by the running batch
  size as vLLM's ``num_speculative_tokens_per_batch_size`` does. Accepted drafts are Bernoulli per position (each
  position reached only if the ones before it were accepted), drawn from an RNG seeded by the request's key and token
  position, so one prompt accepts the same way at any load; the text depends only on the prompt (speculation is
  lossless, as greedy decoding is).
- **Counters** are vLLM's (``vllm/v1/spec_decode/metrics.py``: drafts, draft tokens, accepted, accepted per position;
  ``generation_tokens``, ``prompt_tokens``) so ``serving_load.parse_counters`` reads them unchanged;
  ``specnb_sim:batch_size_sum`` / ``specnb_sim:steps_total`` give the mean batch.
- **Drivers** in virtual time (``run_closed``, ``run_open``; ``drive_closed``: a running launch): no HTTP, no sleep.
- **HTTP face** (``serve``): an OpenAI-compatible server on asyncio's streams, minimal HTTP/1.1, one request per
  connection (``Connection: close`` on every response, a stream's body ends when the connection does). The engine runs
  as one task: while a request waits or runs it computes a step, sleeps its cost ÷ ``speed`` and then hands each
  request its tokens, one SSE chunk per step — so accepted drafts arrive as a burst, as they do from vLLM. Endpoints and
  their shapes follow vLLM's OpenAI server: ``GET /health``, ``GET /v1/models``, ``GET /metrics`` (Prometheus text in
  vLLM's counter names, labelled ``model_name``), ``POST /v1/chat/completions`` (streamed with
  ``stream_options.include_usage`` and ``continuous_usage_stats``, or one JSON) and ``POST /v1/completions`` (a prompt
  of token ids or text; what ``serving_load.probe_forward`` times). A prompt's length is its word count (or its
  number of token ids) and its key a CRC-32 of its text (``prompt_of``), so the same prompt gets the same text and the
  same acceptance whatever the load.
- **The engine behind the seam** (``SimulatedEngine``; ``python -m specnb.serve.simulated`` serves one launch):
  ``SimServer`` launches the HTTP face as every engine's server is launched, counts, is probed and writes a policy's
  launch as vLLM does. Its cost model is ``SimCost``'s defaults, or the JSON in ``SPECNB_SIM_COST`` (the fields of
  ``SimCost``). Every server started is a launch of its own: ``SimServer`` numbers its launches and mixes the number
  and the configuration's name into the cost's ``launch_seed`` (``launched_cost``), so with ``launch_jitter`` two
  launches of one configuration (spec-off and its A/A twin, or one configuration relaunched each round) differ in speed.

AIPerf's and GuideLLM's mock servers answer with fixed or sampled latencies per request; neither batches continuously
under a step-cost model nor speculates. This one does both.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import signal
import sys
import time
import zlib
from collections import deque
from dataclasses import asdict, dataclass, field, replace

import numpy as np

import specnb
from specnb.core.errors import ParameterError
from specnb.serve.engines import FREE_FAMILIES, EngineDefaults, RegisteredEngine, Speculation, parse_entry, register
from specnb.serve.processes import PACKAGE_ROOT, ServerProcess
from specnb.serve.vllm import VllmEngine

FAMILIES = ("ngram", "suffix", "eagle3", "draft_model")  # what an entry may name; all cost as the model says
PROMPT_STREAM, LAUNCH_STREAM = 1, 2  # seed-sequence words that keep these draws apart from the acceptance draws
STOP_BASE, STOP_SPREAD = 8, 56  # without ignore_eos a request stops after 8 + key % 56 tokens
COUNTERS = ("spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total",
            "spec_decode_num_accepted_tokens_total", "generation_tokens_total", "prompt_tokens_total",
            "batch_size_sum", "steps_total")  # vLLM's names; the last two are ours (specnb_sim:)
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}
PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"
MAX_HEADER_LINES = 100
LAUNCHES = itertools.count(1)  # this process's server launches, numbered: each its own launch_seed


# ------------------------------------------------------------------ the cost model


@dataclass(frozen=True, kw_only=True)
class SimCost:
    """The step-cost model, in ms of simulated time:

        step_ms = fixed_ms + per_token_ms · (decode sequences · (1 + k)) + prefill_per_token_ms · prompt tokens
                  + [speculating] (draft_ms + draft_per_token_ms · k · decode sequences)

    ``draft_ms`` is paid whenever the configuration speculates, k = 0 included (vLLM still runs its
    speculative path); ``draft_per_token_ms`` is a draft model's forward per drafted token (0 for
    n-gram). ``acceptance[j]``: probability draft position j is accepted given 0..j-1 were (the last
    value repeats). ``speed``: simulated seconds per real second, for the HTTP server only.

    ``prompt_acceptance_spread``: the sd of a per-prompt shift of every ``acceptance[j]`` in logit
    space (``prompt_acceptance``), so prompts differ as real ones do. ``launch_jitter``: the sd of
    log of a per-launch factor on every step (``launch_factor``, drawn from ``launch_seed``); a new
    ``SimEngine`` is a new launch, and the HTTP server gives each launch its own seed
    (``launched_cost``). ``expected_speedup`` is the truth without either."""

    fixed_ms: float = 10.0
    per_token_ms: float = 0.5
    prefill_per_token_ms: float | None = None  # None: per_token_ms
    draft_ms: float = 0.0
    draft_per_token_ms: float = 0.0
    acceptance: tuple[float, ...] = (0.7,)
    max_num_seqs: int = 64
    speed: float = 1.0
    seed: int = 0
    prompt_acceptance_spread: float = 0.0
    launch_jitter: float = 0.0
    launch_seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "acceptance", tuple(float(a) for a in self.acceptance))
        if not all(0.0 <= a <= 1.0 for a in self.acceptance):
            raise ParameterError(f"acceptance {self.acceptance} must be probabilities in [0, 1]")
        if self.max_num_seqs < 1 or self.speed <= 0:
            raise ParameterError(f"max_num_seqs ({self.max_num_seqs}) must be >= 1 and speed ({self.speed}) > 0")
        if self.prompt_acceptance_spread < 0 or self.launch_jitter < 0:
            raise ParameterError(f"prompt_acceptance_spread ({self.prompt_acceptance_spread}) and launch_jitter "
                                 f"({self.launch_jitter}) are standard deviations: use values >= 0")

    def accept_probability(self, position: int) -> float:
        return self.acceptance[min(position, len(self.acceptance) - 1)] if self.acceptance else 0.0

    def prompt_acceptance(self, key: int) -> tuple[float, ...]:
        """The acceptance per position of the prompt with ``key``: each ``acceptance[j]`` shifted in
        logit by one draw from N(0, ``prompt_acceptance_spread``) seeded by (seed, key); 0 and 1 stay."""
        if not self.prompt_acceptance_spread:
            return self.acceptance
        shift = np.random.default_rng([self.seed, key, PROMPT_STREAM]).normal(0.0, self.prompt_acceptance_spread)
        return tuple(a if a in (0.0, 1.0) else float(1.0 / (1.0 + np.exp(-(np.log(a / (1 - a)) + shift))))
                     for a in self.acceptance)

    def launch_factor(self) -> float:
        """What every step of one launch is scaled by: exp(N(0, ``launch_jitter``)) from ``launch_seed``."""
        if not self.launch_jitter:
            return 1.0
        return float(np.exp(np.random.default_rng([self.launch_seed, LAUNCH_STREAM]).normal(0.0, self.launch_jitter)))

    def step_ms(self, decode_tokens: int, prefill_tokens: int, sequences: int, k: int, speculative: bool) -> float:
        prefill_ms = self.per_token_ms if self.prefill_per_token_ms is None else self.prefill_per_token_ms
        draft = self.draft_ms + self.draft_per_token_ms * k * sequences if speculative else 0.0
        return self.fixed_ms + self.per_token_ms * decode_tokens + prefill_ms * prefill_tokens + draft


# ------------------------------------------------------------------ the step engine


def stop_length(key: int, max_tokens: int, ignore_eos: bool) -> int:
    """Tokens a request generates: ``max_tokens`` under ignore_eos, else a length fixed by its prompt."""
    return max_tokens if ignore_eos else min(max_tokens, STOP_BASE + key % STOP_SPREAD)


def token_text(key: int, index: int) -> str:
    """Token ``index`` of the prompt with ``key``: the same in every configuration (lossless)."""
    return f" w{(key * 7919 + index * 104729) % 10007}"


@dataclass(kw_only=True)
class SimRequest:
    id: int
    prompt_len: int
    max_tokens: int
    ignore_eos: bool = True
    key: int = 0
    emitted: int = 0  # tokens generated so far

    @property
    def length(self) -> int:
        return stop_length(self.key, self.max_tokens, self.ignore_eos)

    @property
    def finish_reason(self) -> str:
        return "length" if self.emitted >= self.max_tokens else "stop"


@dataclass(kw_only=True)
class SimStep:
    """One engine step: its cost, tokens each request got (id → count), who was prefilled, who finished."""

    duration_ms: float
    emitted: dict[int, int]
    prefilled: tuple[int, ...]
    finished: tuple[int, ...]
    batch: int  # running sequences that decoded (the scheduler's batch size, what k is looked up by)
    k: int
    waiting: int  # requests still waiting after admission


class SimEngine:
    """Continuous batching on a virtual clock (``now_ms``): ``add`` a request, ``step`` the engine.
    One instance is one launch: its steps all carry its ``launch_factor``."""

    def __init__(self, cost: SimCost, speculation: Speculation):
        self.cost, self.speculation = cost, speculation
        self.launch_factor = cost.launch_factor()
        self.acceptances: dict[int, tuple[float, ...]] = {}  # key → the prompt's acceptance per position
        self.now_ms = 0.0
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.counters = dict.fromkeys(COUNTERS, 0)
        positions = max([speculation.k, *(k for _, _, k in speculation.schedule or ())])
        self.accepted_per_pos = [0] * (positions if speculation.speculative else 0)
        self.next_id = 0

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, request: SimRequest) -> SimRequest:
        if request.max_tokens < 1 or request.prompt_len < 1:
            raise ParameterError(f"request {request.id}: max_tokens and prompt_len must be >= 1")
        self.waiting.append(request)
        return request

    def submit(self, *, prompt_len: int, max_tokens: int, ignore_eos: bool, key: int) -> SimRequest:
        """``add`` a request with the engine's next id (the server's way in)."""
        self.next_id += 1
        return self.add(SimRequest(id=self.next_id, prompt_len=prompt_len, max_tokens=max_tokens,
                                   ignore_eos=ignore_eos, key=key))

    def abort(self, request_id: int) -> None:
        """Drop a request wherever it is (a client that went away frees its slot)."""
        self.waiting = deque(r for r in self.waiting if r.id != request_id)
        self.running = [r for r in self.running if r.id != request_id]

    def text(self, request: SimRequest, start: int, stop: int) -> str:
        return "".join(token_text(request.key, i) for i in range(start, stop))

    def step(self) -> SimStep:
        decoding = list(self.running)  # [b] sequences that decode this step
        admitted = self.admit()  # prefilled this step, first token at its end
        k = self.speculation.k_at(len(decoding)) if decoding else 0  # k by the running batch
        emitted = {r.id: self.decode(r, k) for r in decoding}
        for request in admitted:
            request.emitted, emitted[request.id] = 1, 1
        prefill_tokens = sum(r.prompt_len for r in admitted)
        duration_ms = self.launch_factor * self.cost.step_ms(len(decoding) * (1 + k), prefill_tokens, len(decoding), k,
                                                             self.speculation.speculative)
        self.now_ms += duration_ms
        finished = tuple(r.id for r in self.running if r.emitted >= r.length)
        self.running = [r for r in self.running if r.emitted < r.length]
        self.count(decoding, prefill_tokens, emitted)
        return SimStep(duration_ms=duration_ms, emitted=emitted, prefilled=tuple(r.id for r in admitted),
                       finished=finished, batch=len(decoding), k=k, waiting=len(self.waiting))

    def admit(self) -> list[SimRequest]:
        admitted = []
        while self.waiting and len(self.running) < self.cost.max_num_seqs:
            admitted.append(self.waiting.popleft())
            self.running.append(admitted[-1])
        return admitted

    def decode(self, request: SimRequest, k: int) -> int:
        """Verify 1 + k tokens of ``request``; tokens emitted (accepted drafts + 1, capped at its length)."""
        accepted = self.accepted_drafts(request, k)
        tokens = min(accepted + 1, request.length - request.emitted)
        request.emitted += tokens
        if k:  # vLLM counts a draft per sequence per step that drafted, accepted before the stop check
            self.counters["spec_decode_num_drafts_total"] += 1
            self.counters["spec_decode_num_draft_tokens_total"] += k
            self.counters["spec_decode_num_accepted_tokens_total"] += accepted
            for j in range(accepted):
                self.accepted_per_pos[j] += 1
        return tokens

    def accepted_drafts(self, request: SimRequest, k: int) -> int:
        """Leading accepted drafts: position j reached only if 0..j-1 were accepted; the RNG is seeded
        by the request's key and token position, so the draw does not depend on the load."""
        if not k:
            return 0
        if request.key not in self.acceptances:
            self.acceptances[request.key] = self.cost.prompt_acceptance(request.key)
        accept = self.acceptances[request.key]
        draws = np.random.default_rng([self.cost.seed, request.key, request.emitted]).random(k)
        for j, u in enumerate(draws):
            if u >= (accept[min(j, len(accept) - 1)] if accept else 0.0):
                return j
        return k

    def count(self, decoding: list[SimRequest], prefill_tokens: int, emitted: dict[int, int]) -> None:
        self.counters["generation_tokens_total"] += sum(emitted.values())
        self.counters["prompt_tokens_total"] += prefill_tokens
        if decoding:
            self.counters["batch_size_sum"] += len(decoding)
            self.counters["steps_total"] += 1


# ------------------------------------------------------------------ virtual-time drivers and the truth


@dataclass(kw_only=True)
class _Timeline:
    """Per-request times in virtual ms, turned into vLLM bench's records (seconds)."""

    sent_ms: dict[int, float] = field(default_factory=dict)
    chunks_ms: dict[int, list[float]] = field(default_factory=dict)
    tokens: dict[int, int] = field(default_factory=dict)
    batches: dict[int, list[int]] = field(default_factory=dict)
    prompt_lens: dict[int, int] = field(default_factory=dict)
    batch_trace: list[list[float]] = field(default_factory=list)  # [t_s, batch] at each step's start, 0 when idle

    def sent(self, request: SimRequest, at_ms: float) -> None:
        self.sent_ms[request.id], self.prompt_lens[request.id] = at_ms, request.prompt_len
        self.chunks_ms[request.id], self.tokens[request.id], self.batches[request.id] = [], 0, []

    def record(self, step: SimStep, now_ms: float, busy: bool = True) -> None:
        self.batch_trace += [[(now_ms - step.duration_ms) / 1e3, step.batch]] + ([] if busy else [[now_ms / 1e3, 0]])
        for rid, n in step.emitted.items():
            self.chunks_ms[rid].append(now_ms)  # one streamed chunk per step: accepted drafts arrive as a burst
            self.tokens[rid] += n
            if rid not in step.prefilled:
                self.batches[rid].append(step.batch)

    def records(self) -> list[dict]:
        return [self.one(rid) for rid in sorted(self.sent_ms)]

    def one(self, rid: int) -> dict:
        start_ms, chunks, n = self.sent_ms[rid], self.chunks_ms[rid], self.tokens[rid]
        ttft, latency = (chunks[0] - start_ms) / 1e3, (chunks[-1] - start_ms) / 1e3
        return {"start_time": start_ms / 1e3, "ttft": ttft, "latency": latency, "output_tokens": n,
                "prompt_len": self.prompt_lens[rid], "tpot": (latency - ttft) / (n - 1) if n > 1 else float("nan"),
                "itl": list(np.diff(chunks) / 1e3), "batch_mean": float(np.mean(self.batches[rid] or [np.nan])),
                "success": True}


class InOrder:
    """A closed loop's feed that sends the requests in list order and nothing else."""

    def __init__(self, n: int):
        self.left = deque(range(n))

    def next(self) -> int | None:
        return self.left.popleft() if self.left else None

    def finished(self, index: int) -> None:
        pass


def run_closed(cost: SimCost, speculation: Speculation, prompt_lens: list[int], output_lens: list[int],
               concurrency: int, keys: list[int] | None = None, feed=None, with_batch_trace: bool = False
               ) -> list[dict] | tuple[list[dict], list]:
    """A closed loop in virtual time: ``concurrency`` workers, each sending the next request when its last one
    finished; one record per request sent, in list order (ignore_eos: each request generates its output length).
    Request i has ``prompt_lens[i]`` and ``output_lens[i]`` tokens and its prompt's ``keys[i]`` (default i: a key
    sent again accepts as it did the first time). ``feed`` says which request a free slot sends next (``next()``: an
    index into the lists, None to stop; told ``finished(index)`` once every request of a step is done), as
    ``serving_load.ClosedFeed`` does for a sweep's runs; default: list order (``InOrder``). ``with_batch_trace``: also
    the running batch as a gauge gives it, [t_s, batch] at each step's start, [t_s, 0] from where the engine idles."""
    timeline = drive_closed(SimEngine(cost, speculation), prompt_lens, output_lens, concurrency, keys, feed)
    return (timeline.records(), timeline.batch_trace) if with_batch_trace else timeline.records()


def drive_closed(engine: SimEngine, prompt_lens: list[int], output_lens: list[int], concurrency: int,
                 keys: list[int] | None = None, feed=None) -> _Timeline:
    """``run_closed`` on a launch that ran before (its clock and counters carry on, as a server's do): its timeline."""
    timeline, feed = _Timeline(), feed or InOrder(len(prompt_lens))
    keys = range(len(prompt_lens)) if keys is None else keys

    def send():
        index = feed.next()
        if index is not None:
            request = SimRequest(id=index, prompt_len=prompt_lens[index], max_tokens=output_lens[index],
                                 key=keys[index])
            timeline.sent(engine.add(request), engine.now_ms)

    for _ in range(concurrency):
        send()
    while engine.busy:
        step = engine.step()
        for rid in step.finished:
            feed.finished(rid)
        for _ in step.finished:
            send()
        timeline.record(step, engine.now_ms, engine.busy)
    return timeline


def run_open(cost: SimCost, speculation: Speculation, arrivals_s: list[float], prompt_lens: list[int],
             output_lens: list[int], with_batch_trace: bool = False) -> list[dict] | tuple[list[dict], list]:
    """An open loop in virtual time: request i arrives at ``arrivals_s[i]`` (seconds from the start),
    whatever is in flight; a request arriving during a step waits for the next (``with_batch_trace``: as run_closed)."""
    engine, timeline = SimEngine(cost, speculation), _Timeline()
    order = sorted(range(len(arrivals_s)), key=lambda i: arrivals_s[i])
    pending = deque((1e3 * arrivals_s[i], SimRequest(id=i, prompt_len=prompt_lens[i], max_tokens=output_lens[i],
                                                     key=i)) for i in order)
    while pending or engine.busy:
        if not engine.busy:  # idle: the clock jumps to the next arrival
            engine.now_ms = max(engine.now_ms, pending[0][0])
        while pending and pending[0][0] <= engine.now_ms:
            at_ms, request = pending.popleft()
            timeline.sent(engine.add(request), at_ms)
        step = engine.step()
        timeline.record(step, engine.now_ms, engine.busy)
    return (timeline.records(), timeline.batch_trace) if with_batch_trace else timeline.records()


def expected_tokens(cost: SimCost, k: int) -> float:
    """Tokens per verification with k drafts: 1 + Σ_{j<k} Π_{i≤j} acceptance_i."""
    tokens, reach = 1.0, 1.0
    for j in range(k):
        reach *= cost.accept_probability(j)
        tokens += reach
    return tokens


def expected_speedup(cost: SimCost, speculation: Speculation, batch: int) -> float:
    """The steady-state TPOT speedup over spec-off at a constant decode batch (no prefill):
    E[tokens per step] · step_off(b) ÷ step_spec(b, k(b))."""
    k = speculation.k_at(batch)
    off_ms = cost.step_ms(batch, 0, batch, 0, False)
    spec_ms = cost.step_ms(batch * (1 + k), 0, batch, k, speculation.speculative)
    return expected_tokens(cost, k) * off_ms / spec_ms


def crossover(cost: SimCost, speculation: Speculation, max_batch: int) -> int | None:
    """The smallest batch size up to ``max_batch`` where speculation is slower than spec-off (None if never)."""
    return next((b for b in range(1, max_batch + 1) if expected_speedup(cost, speculation, b) < 1.0), None)


# ------------------------------------------------------------------ the HTTP face


class BadRequest(ValueError):
    """The request cannot be served; the message is the 400 answer's."""


def head(status: int, content_type: str, length: int | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status} {REASONS[status]}", f"Content-Type: {content_type}", "Connection: close"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def json_response(status: int, payload: dict) -> bytes:
    body = json.dumps(payload).encode()
    return head(status, "application/json", len(body)) + body


def error_response(status: int, message: str) -> bytes:
    return json_response(status, {"object": "error", "message": message, "code": status})


def sse(payload: dict) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


async def read_request(reader: asyncio.StreamReader) -> tuple[str, str, bytes]:
    """(method, path without query, body) of one HTTP/1.1 request."""
    request_line = (await reader.readline()).decode("latin-1").split()
    if len(request_line) != 3:
        raise BadRequest("malformed request line")
    headers = {}
    for _ in range(MAX_HEADER_LINES):
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length") or 0)
    body = await reader.readexactly(length) if length else b""
    return request_line[0], request_line[1].split("?")[0], body


def prompt_of(body: dict, chat: bool) -> tuple[int, int]:
    """(prompt length in tokens, key): words of every message (chat) or of the prompt text, or the
    number of token ids; the key is a CRC-32 of the prompt."""
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list")
        text = "\n".join(str(m.get("content") or "") for m in messages if isinstance(m, dict))
        return max(1, len(text.split())), zlib.crc32(text.encode())
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return len(prompt), zlib.crc32(json.dumps(prompt).encode())
    if isinstance(prompt, str):
        return max(1, len(prompt.split())), zlib.crc32(prompt.encode())
    raise BadRequest("prompt must be text or a non-empty list of token ids")


def metrics_text(engine: SimEngine, model: str) -> str:
    """The engine's counters as vLLM exposes them (spec-decode series only when it speculates, as vLLM
    registers them only with a speculative config)."""
    escaped = model.replace("\\", "\\\\").replace('"', '\\"')  # Prometheus label value escaping
    label, c = f'model_name="{escaped}"', engine.counters
    series = [("counter", "vllm:generation_tokens_total", c["generation_tokens_total"]),
              ("counter", "vllm:prompt_tokens_total", c["prompt_tokens_total"]),
              ("gauge", "vllm:num_requests_running", len(engine.running)),
              ("gauge", "vllm:num_requests_waiting", len(engine.waiting)),
              ("counter", "specnb_sim:batch_size_sum", c["batch_size_sum"]),
              ("counter", "specnb_sim:steps_total", c["steps_total"])]
    if engine.speculation.speculative:
        series += [("counter", f"vllm:{name}", c[name]) for name in (
            "spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total",
            "spec_decode_num_accepted_tokens_total")]
    lines = []
    for kind, name, value in series:
        lines += [f"# TYPE {name} {kind}", f"{name}{{{label}}} {float(value)}"]
    if engine.speculation.speculative:
        name = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
        lines.append(f"# TYPE {name} counter")
        lines += [f'{name}{{{label},position="{j}"}} {float(v)}' for j, v in enumerate(engine.accepted_per_pos)]
    return "\n".join(lines) + "\n"


class Service:
    """The server's state: the engine, a queue per request in flight, the tasks to cancel at the end."""

    def __init__(self, engine: SimEngine, *, model: str, speed: float):
        self.engine, self.model, self.speed = engine, model, speed
        self.queues: dict[int, asyncio.Queue] = {}
        self.work = asyncio.Event()  # set when a request arrives: the engine loop wakes
        self.handlers: set[asyncio.Task] = set()

    async def run_engine(self) -> None:
        while True:
            if not self.engine.busy:
                self.work.clear()
                await self.work.wait()
                continue
            step = self.engine.step()
            await asyncio.sleep(step.duration_ms / 1e3 / self.speed)  # the step's cost, then its tokens
            for rid, n in step.emitted.items():
                if rid in self.queues:
                    self.queues[rid].put_nowait((n, rid in step.finished))

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.handlers.add(asyncio.current_task())
        try:
            method, path, body = await read_request(reader)
            await self.route(method, path, body, writer)
        except BadRequest as err:
            writer.write(error_response(400, str(err)))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away
        finally:
            self.handlers.discard(asyncio.current_task())
            with contextlib.suppress(ConnectionError):
                await writer.drain()
            writer.close()

    async def route(self, method: str, path: str, raw: bytes, writer: asyncio.StreamWriter) -> None:
        gets = {"/health": lambda: head(200, "text/plain", 0),
                "/v1/models": lambda: json_response(200, {"object": "list", "data": [
                    {"id": self.model, "object": "model", "owned_by": "specnb"}]}),
                "/metrics": self.metrics}
        posts = {"/v1/chat/completions": True, "/v1/completions": False}  # path → chat
        if method == "GET" and path in gets:
            writer.write(gets[path]())
        elif method == "POST" and path in posts:
            try:
                body = json.loads(raw or b"{}")
            except ValueError as err:
                raise BadRequest(f"body is not JSON: {err}") from None
            if not isinstance(body, dict):
                raise BadRequest("body must be a JSON object")
            await self.generate(body, posts[path], writer)
        elif path in gets or path in posts:
            writer.write(error_response(405, f"{method} {path} is not served"))
        else:
            writer.write(error_response(404, f"{path} not found"))

    def metrics(self) -> bytes:
        body = metrics_text(self.engine, self.model).encode()
        return head(200, PROMETHEUS, len(body)) + body

    async def generate(self, body: dict, chat: bool, writer: asyncio.StreamWriter) -> None:
        prompt_len, key = prompt_of(body, chat)
        try:
            max_tokens = int(body.get("max_tokens") or 16)
        except (TypeError, ValueError):
            raise BadRequest("max_tokens must be an integer") from None
        if max_tokens < 1:
            raise BadRequest("max_tokens must be >= 1")
        request = self.engine.submit(prompt_len=prompt_len, max_tokens=max_tokens,
                                     ignore_eos=bool(body.get("ignore_eos")), key=key)
        self.queues[request.id] = asyncio.Queue()
        self.work.set()
        reply = Reply(request=request, chat=chat, model=self.model, created=int(time.time()))
        try:
            if body.get("stream"):
                await self.stream(reply, body.get("stream_options") or {}, writer)
            else:
                await self.answer(reply, writer)
        finally:  # done, or the client went away: its slot is freed
            self.queues.pop(request.id, None)
            self.engine.abort(request.id)

    async def tokens(self, reply: Reply):
        """Each step's text for this request, until it finishes."""
        queue = self.queues[reply.request.id]
        while True:
            n, done = await queue.get()
            text = self.engine.text(reply.request, reply.sent, reply.sent + n)
            reply.sent += n
            yield text, done
            if done:
                return

    async def stream(self, reply: Reply, options: dict, writer: asyncio.StreamWriter) -> None:
        writer.write(head(200, "text/event-stream"))
        if reply.chat:  # vLLM's first chunk names the role, with no content
            writer.write(sse(reply.chunk("", None, role=True)))
        async for text, done in self.tokens(reply):
            chunk = reply.chunk(text, reply.request.finish_reason if done else None)
            writer.write(sse(chunk | ({"usage": reply.usage()} if options.get("continuous_usage_stats") else {})))
            await writer.drain()
        if options.get("include_usage"):
            writer.write(sse(reply.chunk(None, None) | {"choices": [], "usage": reply.usage()}))
        writer.write(b"data: [DONE]\n\n")

    async def answer(self, reply: Reply, writer: asyncio.StreamWriter) -> None:
        text = "".join([t async for t, _ in self.tokens(reply)])
        choice = ({"message": {"role": "assistant", "content": text}} if reply.chat else {"text": text})
        writer.write(json_response(200, {
            "id": reply.id, "object": "chat.completion" if reply.chat else "text_completion",
            "created": reply.created, "model": self.model, "usage": reply.usage(),
            "choices": [{"index": 0, **choice, "finish_reason": reply.request.finish_reason}]}))


class Reply:
    """What one request's chunks and usage say (OpenAI's shapes, as vLLM fills them)."""

    def __init__(self, *, request: SimRequest, chat: bool, model: str, created: int):
        self.request, self.chat, self.model, self.created = request, chat, model, created
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{request.id}"
        self.sent = 0  # tokens delivered (the engine's count may be a step ahead: it steps while we write)

    def usage(self) -> dict:
        prompt, done = self.request.prompt_len, self.sent
        return {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}

    def chunk(self, text: str | None, finish_reason: str | None, role: bool = False) -> dict:
        if self.chat:
            delta = {"role": "assistant", "content": ""} if role else {"content": text}
            choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish_reason}
        return {"id": self.id, "object": "chat.completion.chunk" if self.chat else "text_completion",
                "created": self.created, "model": self.model, "choices": [choice]}


async def serve(engine: SimEngine, *, host: str, port: int, model: str, speed: float) -> None:
    """Serve ``engine`` until SIGTERM or SIGINT; every task is ended before returning."""
    service, stop = Service(engine, model=model, speed=speed), asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = await asyncio.start_server(service.handle, host, port)
    print(f"simulated engine serving {model!r} on http://{host}:{port}", flush=True)
    engine_task = asyncio.create_task(service.run_engine())
    await stop.wait()
    server.close()
    tasks = [engine_task, *service.handlers]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await server.wait_closed()
    print("simulated engine stopped", flush=True)


# ------------------------------------------------------------------ the engine behind the seam, launched as a server


@dataclass(frozen=True, kw_only=True)
class SimConfig:
    """One simulated launch: a configuration's speculation and the engine's cost model."""

    engine = RegisteredEngine("simulated")  # ``ENGINE`` below (not a field)
    speculation: Speculation
    cost: SimCost
    model: str = "simulated"

    @property
    def name(self) -> str:
        return self.speculation.name

    @property
    def speculative(self) -> bool:
        return self.speculation.speculative

    @property
    def draft_length(self) -> int:
        return self.speculation.k

    @property
    def drafts_with_model(self) -> bool:
        return self.speculation.uses_model


def read_cost(text: str) -> SimCost:
    """``SimCost`` from its fields as JSON (``cost_json``'s form)."""
    return SimCost(**json.loads(text))


def read_speculation(text: str) -> Speculation:
    """``Speculation`` from its fields as JSON (``speculation_json``'s form)."""
    fields = json.loads(text)
    schedule = fields.get("schedule")
    return Speculation(**fields | {"schedule": tuple(tuple(e) for e in schedule) if schedule else None})


def cost_json(cost: SimCost) -> str:
    return json.dumps(asdict(cost))


def speculation_json(speculation: Speculation) -> str:
    return json.dumps(asdict(speculation))


def launched_cost(cost: SimCost, name: str, launch: int) -> SimCost:
    """``cost`` as one launch runs it: its ``launch_seed`` mixed with the configuration's name and the
    launch's number, so every server started is a launch of its own (its own ``launch_factor``), as
    two starts of one vLLM configuration are, while a sweep repeated in a fresh process draws the same."""
    return replace(cost, launch_seed=zlib.crc32(f"{cost.launch_seed}:{name}:{launch}".encode()))


class SimServer(ServerProcess):
    """The simulated engine as a launched server (``ServerProcess``): ``config`` is a
    ``SimConfig`` (its speculation, cost model and served ``model`` name). Each instance is
    one launch, numbered in this process (``LAUNCHES``), its cost's ``launch_seed`` its own (``launched_cost``)."""

    engine = "simulated"

    def __init__(self, config: SimConfig, timeout_s: float = 30.0, port: int = 0):
        self.config = config
        self.cost = launched_cost(config.cost, config.name, next(LAUNCHES))
        super().__init__(config.name, timeout_s, port)

    @property
    def model(self) -> str:
        return self.config.model

    def command(self) -> list[str]:
        return [sys.executable, "-m", "specnb.serve.simulated",
                "--host", "127.0.0.1", "--port", str(self.port),
                "--cost", cost_json(self.cost), "--speculation", speculation_json(self.config.speculation),
                "--model", self.config.model]

    def environment(self) -> dict[str, str]:
        path = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), os.environ.get("PYTHONPATH")]))
        return {**os.environ, "PYTHONPATH": path}

    def is_error_line(self, line: str) -> bool:
        return line.startswith("error:") or "Error" in line


def cost_model() -> SimCost:
    """``SimCost`` from ``SPECNB_SIM_COST`` (JSON), else its defaults; one line when it is malformed."""
    text = os.environ.get("SPECNB_SIM_COST", "")
    try:
        return read_cost(text) if text else SimCost()
    except (TypeError, ValueError) as err:
        raise ParameterError(f"SPECNB_SIM_COST must be a JSON object of SimCost fields, e.g. "
                             f'{{"fixed_ms": 10, "per_token_ms": 0.5, "acceptance": [0.7]}}: {err}') from None


class SimulatedEngine(EngineDefaults):
    """The simulated engine: launched here, relaunched every round (a start takes a moment); it counts,
    is probed and writes a policy's launch as vLLM does."""

    name = "simulated"
    label = "the simulated engine"
    metrics_prefix = "vllm"
    launched = True
    batch_gauge = "num_requests_running"
    relaunch_each_round = True
    version = specnb.__version__  # its cost model is specnb's own
    probe = VllmEngine.probe
    launch_json = VllmEngine.launch_json

    def configs(self, verifier: str, precision: str, entries: list[str], max_level: int, threads: int = 0
                ) -> list[SimConfig]:
        """spec-off, then one simulated server per entry (``ngram:4``, ``eagle3:3``, ...), every one on the
        same cost model with ``max_level`` sequences at most (vLLM's ``max_num_seqs``)."""
        cost = replace(cost_model(), max_num_seqs=int(max_level))
        out = [SimConfig(speculation=Speculation(), cost=cost)]
        for family, k in (parse_entry(spec, FAMILIES) for spec in entries):
            out.append(SimConfig(speculation=Speculation(entry=family, k=k, method=family, family=family,
                                                         uses_model=family not in FREE_FAMILIES), cost=cost))
        return out

    def server(self, config: SimConfig, timeout_s: float | None = None) -> SimServer:
        return SimServer(config) if timeout_s is None else SimServer(config, timeout_s)

    def machine(self, configs: list) -> str:
        cost = configs[0].cost
        return (f"simulated engine (no model): a step costs {cost.fixed_ms:g} ms + {cost.per_token_ms:g} ms per "
                f"token in the batch, speculation {cost.draft_ms:g} ms + {cost.draft_per_token_ms:g} ms per drafted "
                f"token, acceptance per position {list(cost.acceptance)}, run at {cost.speed:g}x real time"
                + (f", prompts' acceptance spread {cost.prompt_acceptance_spread:g} in logit" if
                   cost.prompt_acceptance_spread else "")
                + (f", launches' speed spread {cost.launch_jitter:g} in log" if cost.launch_jitter else ""))

    def launch_text(self, config: SimConfig) -> str:
        """The speculation in vLLM's ``--speculative-config`` form, the engine the simulation counts like."""
        spec = config.speculation
        if not spec.speculative:
            return ""
        schedule = [list(r) for r in spec.schedule] if spec.schedule else None
        return json.dumps({"method": spec.family, "num_speculative_tokens": spec.k}
                          | ({"num_speculative_tokens_per_batch_size": schedule} if schedule else {}))

    def default_entries(self, smoke: bool, verifier: str) -> list[str]:
        return [f"ngram:{3 if smoke else 4}"]

    def scheduled(self, config: SimConfig, k: int, schedule) -> SimConfig:
        ranges = tuple(tuple(int(x) for x in r) for r in schedule) if schedule else None
        return replace(config, speculation=replace(config.speculation, adaptive=True, k=k, schedule=ranges))


ENGINE = register(SimulatedEngine())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specnb.serve.simulated",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cost", default="{}", help="SimCost as JSON")
    parser.add_argument("--speculation", default="{}", help="Speculation as JSON")
    parser.add_argument("--model", default="simulated")
    args = parser.parse_args(argv)
    try:
        cost, speculation = read_cost(args.cost), read_speculation(args.speculation)
    except (TypeError, ValueError) as err:
        print(f"error: {err}", flush=True)
        return 2
    engine = SimEngine(cost, speculation)
    try:
        asyncio.run(serve(engine, host=args.host, port=args.port, model=args.model, speed=cost.speed))
    except OSError as err:  # the port is taken: ServerProcess retries another when it picked this one
        print(f"error: cannot bind {args.host}:{args.port}: {err}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
