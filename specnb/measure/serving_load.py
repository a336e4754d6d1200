"""The load itself: streamed requests to an OpenAI-compatible server, timed one by one.

- **Closed loop** (``send_closed``): ``concurrency`` requests in flight, each worker sending its next
  prompt when its last one finished, filler requests around the measured ones holding the level
  from their first to their last (``ClosedFeed``). **Open loop** (``send_open``): Poisson (or gamma, bursty)
  arrivals at ``rate`` per second, seeded, none capped. Which one a run sends, and what its tables
  call the level, is the load shape's (``specnb.measure.load_shapes``): a record the data carries.
- **Per request**, streaming: TTFT, the gaps between streamed chunks (ITL) and E2E latency; TPOT =
  (E2E − TTFT) ÷ (output tokens − 1). Accepted draft tokens arrive as a burst, so the ITLs are
  bimodal and TPOT, not mean ITL, is what speculation changes. Token counts come from the server's
  ``usage`` (no tokenizer needed); llama.cpp adds ``timings.draft_n`` / ``draft_n_accepted``; SGLang,
  where it returns ``meta_info`` (its native ``/generate`` stream, or a non-streamed OpenAI response
  asked for ``return_meta_info``; a streamed OpenAI one refuses it), ``spec_verify_ct`` and, in
  versions that report them, ``spec_draft_token_num`` / ``spec_accept_token_num``, read into the
  same two fields (``read_usage``).
- **Records** use ``vllm bench serve``'s per-request names (``ttft``, ``itl``, ``latency``, ``tpot``,
  ``output_tokens``, ``prompt_len``, ``success``, ``error``, ``start_time``; seconds, as in its
  ``RequestFuncOutput``) so results compare directly.

The sweep over levels and configurations, and the engine's counters, are in ``specnb.measure.serving_sweep``.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from specnb.serve.engines import engines
from specnb.serve.speculation import SPEC_OFF, Speculation


@dataclass(kw_only=True)
class Target:
    """One configuration's server: its base ``url``, the ``engine`` it is (a registered name:
    "llama.cpp", "vllm", "sglang", ...), the ``model`` name requests carry and what it drafts
    (``speculation``; its display name, "spec-off" or "ngram k=4", is ``name``); ``launch``: which
    start of its server this is, numbered by a sweep that relaunches (0: the first), what the
    records carry so launch noise can be told from the prompts' (``measure.serving_stats``);
    ``virtual``: an engine that answers this target's requests and counters in virtual time instead of
    a server at ``url`` (``serving_virtual.VirtualEngine``: a simulated launch, no HTTP, no sleeping),
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
    import httpx

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
    import httpx

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
