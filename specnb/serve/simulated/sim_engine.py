"""A simulated serving engine: continuous batching and speculation with no model, on a stated cost model.

Why: notebook 08 infers a speedup from timed requests and Prometheus counters. On a real engine the truth is unknown;
here the step time is a formula (``SimCost``), so the method — closed and open loops, TPOT, differenced counters, the
forward probe, a policy's schedule — can be checked where the answer is known (``expected_speedup``, ``crossover``).

- **Scheduler** (``SimEngine``), after vLLM's v1 scheduler: waiting requests are admitted first come first served up to
  ``max_num_seqs``; an admitted request is prefilled in that step (its prompt tokens join the step's batch) and gets its
  first token at the end of it; every running sequence decodes 1 + k tokens per step, k looked up by the running batch
  size as vLLM's ``num_speculative_tokens_per_batch_size`` does. Accepted drafts are Bernoulli per position (each
  position reached only if the ones before it were accepted), drawn from an RNG seeded by the request's key and token
  position, so one prompt accepts the same way at any load; the text depends only on the prompt (speculation is
  lossless, as greedy decoding is).
- **Cost** (``simulated_cost.SimCost``): the step time, and what varies as on a real engine: prompts in acceptance,
  launches in speed (one instance of ``SimEngine`` is one launch).
- **Counters** are vLLM's (``vllm/v1/spec_decode/metrics.py``: drafts, draft tokens, accepted, accepted per position;
  ``generation_tokens``, ``prompt_tokens``) so ``serving_load.parse_counters`` reads them unchanged;
  ``specnb_sim:batch_size_sum`` / ``specnb_sim:steps_total`` give the mean batch.
- **Drivers** in virtual time (``run_closed``, ``run_open``; ``drive_closed``: a running launch): no HTTP, no sleep.
- **Server** (``simulated_http``; ``python -m specnb.serve.simulated.sim_engine``): OpenAI-compatible streaming on
  loopback, each step slept for its cost ÷ ``speed``; ``SimServer`` launches it as every engine is.

AIPerf's and GuideLLM's mock servers answer with fixed or sampled latencies per request; neither batches continuously
under a step-cost model nor speculates. This one does both.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from specnb.core.errors import ParameterError
from specnb.serve.engines import RegisteredEngine
from specnb.serve.simulated.simulated_cost import SimCost
from specnb.serve.simulated.simulated_http import SimServer, serve  # noqa: F401 (SimServer: launched beside SimConfig)
from specnb.serve.speculation import Speculation

STOP_BASE, STOP_SPREAD = 8, 56  # without ignore_eos a request stops after 8 + key % 56 tokens


def draft_length(speculation: Speculation, batch: int) -> int:
    """k at a running batch of ``batch`` sequences (``Speculation.k_at``: the inclusive (lo, hi, k)
    range holding it, else ``speculation.k``; 0 when not speculating)."""
    return speculation.k_at(batch)


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


COUNTERS = ("spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total",
            "spec_decode_num_accepted_tokens_total", "generation_tokens_total", "prompt_tokens_total",
            "batch_size_sum", "steps_total")  # vLLM's names; the last two are ours (specnb_sim:)


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
        k = draft_length(self.speculation, len(decoding)) if decoding else 0
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


@dataclass(frozen=True, kw_only=True)
class SimRequests:
    """The requests a closed loop may send, by index: prompt and output lengths, and each one's prompt
    (``keys``, default its index: a key sent again accepts as it did the first time)."""

    prompt_lens: list[int]
    output_lens: list[int]
    keys: list[int] | None = None


def run_closed(cost: SimCost, speculation: Speculation, requests: SimRequests, concurrency: int,
               with_batch_trace: bool = False, feed=None) -> list[dict] | tuple[list[dict], list]:
    """A closed loop in virtual time: ``concurrency`` workers, each sending the next request when its last one
    finished; one record per request sent, in list order (ignore_eos: each request generates its output length).
    ``feed`` says which request a free slot sends next (``next()``: an index into ``requests``, None to stop; told
    ``finished(index)`` once every request of a step is done), as ``serving_load.ClosedFeed`` does for a sweep's
    runs; default: list order (``InOrder``). ``with_batch_trace``: also the running batch as a gauge gives it,
    [t_s, batch] at each step's start, [t_s, 0] from where the engine idles."""
    timeline = drive_closed(SimEngine(cost, speculation), requests, concurrency, feed)
    return (timeline.records(), timeline.batch_trace) if with_batch_trace else timeline.records()


def drive_closed(engine: SimEngine, requests: SimRequests, concurrency: int, feed=None) -> _Timeline:
    """``run_closed`` on a launch that ran before (its clock and counters carry on, as a server's do): its timeline."""
    timeline, feed = _Timeline(), feed or InOrder(len(requests.prompt_lens))
    keys = range(len(requests.prompt_lens)) if requests.keys is None else requests.keys

    def send():
        index = feed.next()
        if index is not None:
            request = SimRequest(id=index, prompt_len=requests.prompt_lens[index],
                                 max_tokens=requests.output_lens[index], key=keys[index])
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
    k = draft_length(speculation, batch)
    off_ms = cost.step_ms(batch, 0, batch, 0, False)
    spec_ms = cost.step_ms(batch * (1 + k), 0, batch, k, speculation.speculative)
    return expected_tokens(cost, k) * off_ms / spec_ms


def crossover(cost: SimCost, speculation: Speculation, max_batch: int) -> int | None:
    """The smallest batch size up to ``max_batch`` where speculation is slower than spec-off (None if never)."""
    return next((b for b in range(1, max_batch + 1) if expected_speedup(cost, speculation, b) < 1.0), None)


# ------------------------------------------------------------------ the launched server


@dataclass(frozen=True, kw_only=True)
class SimConfig:
    """One simulated launch: a configuration's speculation and the engine's cost model."""

    engine = RegisteredEngine("simulated")  # ``engine_simulated.ENGINE`` (not a field)
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
    return SimCost(**json.loads(text))


def read_speculation(text: str) -> Speculation:
    fields = json.loads(text)
    schedule = fields.get("schedule")
    return Speculation(**fields | {"schedule": tuple(tuple(e) for e in schedule) if schedule else None})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specnb.serve.simulated.sim_engine",
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
