"""A run's steady state: the engine's own running batch, sampled while the run is sent, and which
requests and samples a level's figures are taken over.

Why: a closed loop's level is the client's concurrency, but what prices a step is the batch the
engine's scheduler runs, and the two part where a slot idles between a request and its successor,
or where requests queue. Every ``BATCH_EVERY_S`` a background thread reads the engine's gauge
(``ServingEngine.batch_gauge`` after its ``metrics_prefix``: ``vllm:num_requests_running``,
``llamacpp:requests_processing``, ``sglang:num_running_reqs``) and keeps (seconds since the run's
start, batch). An engine without such a gauge gives no samples: its batch is NaN.

The run's steady window is its load shape's (``load_shapes``: a closed loop's first completion to the
first completion after its last send, an open loop's whole trace). Measured requests wholly inside
it are ``steady`` (a closed loop's fillers never are); the run's ``batch_mean`` is the mean of the
busy samples inside it (``batch_samples`` of them: a sample of 0 is the engine idle between a
request and its successor, not a batch any step ran at) and ``batch_trace`` keeps every sample, so
a trace's batch occupancy can be read back; a level's ``mean_batch`` pools its runs' steady
samples. Summaries pair only steady requests (``steady_records``).
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from specnb.measure.load_shapes import steady_flags
from specnb.measure.serving_load import RequestRecord, Requests, Target, run_async

BATCH_EVERY_S = 0.25  # seconds between two reads of the engine's batch gauge


def gauge_name(engine: str) -> str:
    """The full name of ``engine``'s running-batch gauge ("" where it has none or is not registered)."""
    from specnb.serve.engines import engines

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
        import httpx

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
        """Which requests are steady (``load_shapes.steady_flags``) and the run's batch columns
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
