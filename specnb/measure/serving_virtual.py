"""A sweep's target in virtual time: the simulated engine answering the sweep's own calls, no HTTP, no sleeping.

Why: the serving verdict (sweep, A/A twin, summary, launch noise, policy, chooser) can only be judged
for stability over hundreds of sweeps on known truths, and over HTTP the simulated engine runs in real
time (its HTTP face sleeps every step). A ``Target`` whose ``virtual`` is a ``VirtualEngine``
is sent by the sweep's own code (``serving_sweep.run_sweep``: levels, rounds, pieces, fillers,
rotation, screening), and answers its three calls — a run (``serving_steady.send_sampled``), the
counters (``serving_endpoint.scrape``) and a warm-up (``serving_sweep.warm_up``) — from a
``simulated.SimEngine`` driven by ``simulated.drive_closed`` with the run's own ``ClosedFeed``: the
same ``RequestRecord`` rows (seconds of virtual time), the counters parsed from the same Prometheus
text the HTTP server serves (``simulated.metrics_text`` → ``parse_counters``), the running batch
sampled every ``BATCH_EVERY_S`` as the real sampler reads its gauge. A prompt's length and key are the
HTTP server's (``simulated.prompt_of``), so a prompt accepts the same way on either face.

One ``VirtualEngine`` is one launch: every run on it shares its launch factor
(``SimCost.launch_factor``), its clock and its counters. ``level_costs`` prices a level's runs with a
cost of their own (a truth given per level, as ``benchmarks/verdict_stability.py`` calibrates it);
every other level runs on ``cost``. Closed loops only: an open-loop trace is not simulated here.
"""

from __future__ import annotations

import numpy as np

from specnb.core.errors import ParameterError
from specnb.measure.serving_endpoint import Counters, parse_counters
from specnb.measure.serving_load import ClosedFeed, RequestRecord, Requests
from specnb.measure.serving_steady import BATCH_EVERY_S, Run
from specnb.serve.engines import Speculation
from specnb.serve.simulated import SimCost, SimEngine, drive_closed, metrics_text, prompt_of, token_text


class VirtualEngine:
    """One launch of a simulated configuration, answering a sweep in virtual time (see the module docstring)."""

    def __init__(self, cost: SimCost, speculation: Speculation, model: str = "simulated",
                 level_costs: dict[float, SimCost] | None = None):
        self.cost, self.model, self.level_costs = cost, model, dict(level_costs or {})
        self.engine = SimEngine(cost, speculation)

    def counters(self) -> Counters:
        """The counters as a scrape of the HTTP server would read them now."""
        return parse_counters(metrics_text(self.engine, self.model))

    def requests(self, texts: list[str], max_tokens: list[int]) -> dict:
        """``texts`` as the HTTP server reads a chat request (its length in words and its key): ``drive_closed``'s
        ``prompt_lens``, ``output_lens`` and ``keys``."""
        read = [prompt_of({"messages": [{"role": "user", "content": t}]}, chat=True) for t in texts]
        return {"prompt_lens": [n for n, _ in read], "output_lens": list(max_tokens), "keys": [k for _, k in read]}

    def send(self, load, requests: Requests, ignore_eos: bool, round_index: int, fillers: Requests) -> Run:
        """One closed-loop run as ``send_sampled`` sends it: the measured requests, then the fillers
        ``ClosedFeed`` sent, with the duration and the batch samples, in virtual seconds from the run's start."""
        if not getattr(load, "steps_batch", False) or not ignore_eos:
            raise ParameterError("a virtual target runs closed loops with ignore_eos only (the trace is not simulated)")
        self.engine.cost = self.level_costs.get(load.level, self.cost)
        texts, tokens = requests.texts + fillers.texts, requests.max_tokens + fillers.max_tokens
        feed = ClosedFeed(len(requests.texts), len(fillers.texts), load.concurrency)
        sim = self.requests(texts, tokens)
        start_s = self.engine.now_ms / 1e3
        timeline = drive_closed(self.engine, concurrency=load.concurrency, feed=feed, **sim)
        rows, trace = timeline.records(), timeline.batch_trace
        done = [self.record(row, sim["keys"][i], start_s) for i, row in enumerate(rows)]
        duration = self.engine.now_ms / 1e3 - start_s
        return Run(done=done, duration=duration, samples=sampled(trace, start_s, duration))

    def warm(self, texts: list[str], concurrency: int, max_tokens: list[int]) -> None:
        """A warm-up run: sent and not recorded (the engine's clock and counters move on, as a server's do)."""
        sim = self.requests(texts, max_tokens)
        drive_closed(self.engine, concurrency=concurrency, **sim)

    def record(self, row: dict, key: int, start_s: float) -> RequestRecord:
        """A driver's record as the streaming client keeps it (its text the tokens the server streams)."""
        n = row["output_tokens"]
        return RequestRecord(success=True, prompt_len=row["prompt_len"], output_tokens=n, ttft=row["ttft"],
                             itl=row["itl"], latency=row["latency"], tpot=row["tpot"],
                             start_time=row["start_time"] - start_s,
                             generated_text="".join(token_text(key, i) for i in range(n)))


def sampled(trace: list, start_s: float, duration_s: float, every_s: float = BATCH_EVERY_S
            ) -> list[tuple[float, float]]:
    """The running batch every ``every_s`` from the run's start, as ``BatchSampler`` reads the gauge:
    at each instant the batch of the step then running (``trace``: [t_s, batch] at each step's start)."""
    if not trace:
        return []
    times = np.array([t for t, _ in trace], float) - start_s
    batches = [b for _, b in trace]
    at = np.arange(0.0, duration_s, every_s)
    return [(round(float(t), 4), float(batches[max(i, 0)])) for t, i in
            zip(at, np.searchsorted(times, at, side="right") - 1)]
