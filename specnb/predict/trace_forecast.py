"""A trace's TPOT speedups, forecast before the trace is sent, from the per-level figures alone.

Why: ``trace_prediction`` reconstructs a trace's TPOT from the batches the trace run itself held, so
its agreement is partly the trace's own. A forecast has to say what the trace will do before any of
it runs: which batches its bursts will pile up to, on each configuration, and what TPOT each holds
there. Everything it needs is known once the closed-loop levels are measured: the trace's arrivals
and output lengths are seeded, and TPOT(b) and TTFT(b) were measured at the levels.

- **The trace's requests** (``trace_rounds``): per round, the arrivals ``send_open`` will draw
  (``serving_load.arrival_gaps`` at the load's rate, burstiness and ``Open.round_seed``) and the
  output lengths the sweep will ask (``serving_sweep.request_lengths``: the same keys, the same seed).
- **A continuous-batching queue** (``simulate``), event-driven processor sharing: while b requests
  decode, each advances at 1 ÷ TPOT(b) tokens per second; a request that arrives waits TTFT(b) (b:
  those decoding at its arrival) for its first token, then decodes its other L − 1 tokens. A faster
  configuration drains a burst sooner and so spends the trace at smaller batches, as on the engine.
- **TPOT(b) and TTFT(b)** per configuration (``trace_prediction.batch_curve``): its steady TPOT
  (``trace_prediction.tpot_column``) and mean TTFT against its measured batch, linear in log batch
  between measured batches and clamped beyond them — never extrapolated; ``clamped_share`` reports
  the share of sequence-seconds read off a clamped end. TTFT with nothing decoding is batch 1's.
- **Adaptive** (the policy as one launch): TPOT(b) and TTFT(b) of the configuration its schedule
  runs at b (``serving_policy.scheduled_config``); in a k = 0 range spec-off's TPOT ÷ the k = 0
  price (``serving_launch.zero_range_speedup``: vLLM still takes its speculative path there).
- **Over the trace**: TPOT = Σ decode s ÷ Σ decode tokens over every round, what
  ``serving_stats.trace_check`` measures; forecast speedup = spec-off's forecast TPOT ÷ the
  configuration's. The columns are ``predict_trace``'s, so ``trace_prediction_table`` holds either
  against the measured trace.

What it leaves out: a cap on running sequences (``max_num_seqs``: the trace's bursts stay far below
vLLM's), prefill slowing the decode steps beside it other than as the closed loop's turnover did, and
how a step's tokens arrive (one chunk per step): TPOT is a rate here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from specnb.core.errors import ParameterError
from specnb.measure.serving_load import arrival_gaps
from specnb.measure.serving_rounds import batch_of
from specnb.measure.serving_stats import draft_lengths
from specnb.measure.serving_sweep import request_lengths
from specnb.predict.policy_record import Policy
from specnb.predict.serving_launch import families, zero_range_speedup
from specnb.predict.serving_policy import scheduled_config
from specnb.predict.trace_prediction import batch_curve, tpot_at, tpot_curve
from specnb.serve.speculation import AA_TWIN_CONFIG, ADAPTIVE_CONFIG, BASELINE_CONFIG

TTFT_COLUMN = "mean_ttft_ms"


@dataclass(frozen=True, kw_only=True)
class TraceRound:
    """One round of a trace as the sweep will send it: request i arrives ``arrivals_s[i]`` seconds
    after the round starts and asks ``output_lens[i]`` tokens."""

    arrivals_s: np.ndarray  # [n]
    output_lens: np.ndarray  # [n]


def trace_rounds(load, prompts: pd.DataFrame, rounds: int = 1, seed: int = 0) -> list[TraceRound]:
    """The requests ``run_sweep(..., [load], rounds=rounds, seed=seed)`` will send on ``prompts``, per
    round: arrivals as ``Open.send`` draws them, lengths as ``run_level`` asks them."""
    prompts = prompts.reset_index(drop=True)
    out = []
    for r in range(rounds):
        lengths = np.array(request_lengths(load, prompts, r, seed))
        gaps = arrival_gaps(len(lengths), load.rate, load.burstiness, load.round_seed(r))
        out.append(TraceRound(arrivals_s=np.cumsum(gaps), output_lens=lengths))
    return out


@dataclass(kw_only=True)
class Queue:
    """What one simulated round adds up: sequence-seconds (Σ b·dt: every decoding request is in the
    batch for its whole decode, so this is Σ decode s), decode tokens, the seconds anything decoded,
    and the sequence-seconds read off a clamped TPOT."""

    decode_tokens: float = 0.0
    sequence_s: float = 0.0
    busy_s: float = 0.0
    clamped_s: float = 0.0

    def add(self, other: Queue) -> Queue:
        return Queue(**{k: getattr(self, k) + getattr(other, k) for k in vars(self)})


def simulate(trace: TraceRound, tpot_of: Callable[[int], tuple[float, bool]],
             ttft_of: Callable[[int], float]) -> Queue:
    """One round through the processor-sharing queue of the module docstring. ``tpot_of(b)`` → (ms,
    clamped) with b ≥ 1 decoding; ``ttft_of(b)`` → ms for an arrival while b decode."""
    order = np.argsort(trace.arrivals_s, kind="stable")
    arrivals, lengths = trace.arrivals_s[order], trace.output_lens[order]
    queue, now, i = Queue(), 0.0, 0
    waiting: list[tuple[float, int]] = []  # (first token at s, decode tokens left)
    left = np.zeros(0)  # [b] decode tokens each decoding request has left
    while i < len(arrivals) or waiting or len(left):
        b = len(left)
        tpot_ms, clamped = tpot_of(b) if b else (math.nan, False)
        finish = now + float(left.min()) * tpot_ms / 1e3 if b else math.inf
        ready = min((t for t, _ in waiting), default=math.inf)
        arrive = arrivals[i] if i < len(arrivals) else math.inf
        after = min(finish, ready, arrive)
        if b:  # each decoding request advances (after - now) ÷ TPOT(b) tokens
            dt = after - now
            left = np.where(after == finish, left - left.min(), left - dt * 1e3 / tpot_ms)
            queue.sequence_s += b * dt
            queue.busy_s += dt
            queue.clamped_s += b * dt if clamped else 0.0
        now = after
        left = left[left > 1e-9]  # finished
        joined = [n for t, n in waiting if t <= now]
        waiting = [(t, n) for t, n in waiting if t > now]
        left = np.concatenate([left, np.array([n for n in joined if n > 0], float)])
        while i < len(arrivals) and arrivals[i] <= now:
            waiting.append((now + ttft_of(len(left)) / 1e3, int(lengths[i]) - 1))
            queue.decode_tokens += max(int(lengths[i]) - 1, 0)
            i += 1
    return queue


def launch_base(summary: pd.DataFrame, policy: Policy, baseline: str = BASELINE_CONFIG) -> str | None:
    """The static configuration an adaptive launch of ``policy`` is built on: the largest k of the
    family its drafting levels run (as ``policy_run.run_policy`` launches it); None: none drafts."""
    drafting = [level.config for level in policy.levels if level.k and level.config != baseline]
    if not drafting:
        return None
    family_of, lengths = families(summary), draft_lengths(summary, baseline)
    members = {c: k for c, k in lengths.items() if family_of.get(c) == family_of.get(drafting[0])}
    return max(members, key=members.get) if members else drafting[0]


def zero_curve(summary: pd.DataFrame, base: str, baseline: str = BASELINE_CONFIG) -> tuple[np.ndarray, np.ndarray]:
    """(log batch, speedup) of a k = 0 range on a launch built on ``base`` at spec-off's measured
    batches (``zero_range_speedup``, priced at its levels)."""
    rows = summary[summary["config"] == baseline].sort_values("concurrency")
    zero = zero_range_speedup(summary, base, list(rows["concurrency"]), baseline)
    frame = pd.DataFrame({"batch": batch_of(rows).to_numpy(), "value": zero.to_numpy(float)})
    frame = frame.groupby("batch", as_index=False)["value"].mean()
    return np.log(frame["batch"].to_numpy()), frame["value"].to_numpy()


def static_readers(summary: pd.DataFrame, config: str) -> tuple[Callable, Callable]:
    """(tpot_of, ttft_of) of one measured configuration."""
    tpot, ttft = tpot_curve(summary, config), batch_curve(summary, config, TTFT_COLUMN)
    return (lambda b: tpot_at(tpot, b)), (lambda b: tpot_at(ttft, max(b, 1))[0])


def adaptive_readers(summary: pd.DataFrame, policy: Policy, baseline: str = BASELINE_CONFIG) \
        -> tuple[Callable, Callable]:
    """(tpot_of, ttft_of) of ``policy`` launched as one server: at each batch, the configuration its
    schedule runs there; spec-off's TPOT ÷ the k = 0 price where that is spec-off."""
    configs = set(summary["config"]) - {ADAPTIVE_CONFIG}
    readers = {c: static_readers(summary, c) for c in configs}
    base = launch_base(summary, policy, baseline)
    zero = zero_curve(summary, base, baseline) if base else None

    def tpot_of(b: int) -> tuple[float, bool]:
        config = scheduled_config(policy, b)
        ms, clamped = readers[config][0](b)
        return (ms / tpot_at(zero, b)[0], clamped) if config == baseline and zero is not None else (ms, clamped)

    return tpot_of, lambda b: readers[scheduled_config(policy, max(b, 1))][1](b)


def forecast_trace(summary: pd.DataFrame, trace: list[TraceRound], policy: Policy | None = None,
                   adaptive: str = ADAPTIVE_CONFIG, baseline: str = BASELINE_CONFIG) -> pd.DataFrame:
    """Per configuration of the sweep's closed-loop ``summary`` (and ``adaptive`` where the ``policy``
    it launches is given): its forecast TPOT over the ``trace`` (``trace_rounds``; ``predicted_tpot_ms``),
    speedup over ``baseline`` (``predicted_speedup_tpot``), mean batch while decoding
    (``trace_mean_batch``), ``clamped_share`` / ``clamped``, as ``predict_trace``'s columns. Reads no
    trace record: made before the trace is sent."""
    if baseline not in set(summary["config"]):
        raise ParameterError(f"no {baseline!r} rows in the summary: nothing to forecast a speedup over")
    readers = {c: static_readers(summary, c) for c in summary["config"].unique()
               if c not in (adaptive, AA_TWIN_CONFIG)}  # the twin measures launch noise: it runs no trace
    if policy is not None and policy.drafts():
        readers[adaptive] = adaptive_readers(summary, policy, baseline)
    rows = []
    for config, (tpot_of, ttft_of) in readers.items():
        total = Queue()
        for one in trace:
            total = total.add(simulate(one, tpot_of, ttft_of))
        rows.append({"config": config, "predicted_tpot_ms": 1e3 * total.sequence_s / total.decode_tokens
                     if total.decode_tokens else math.nan,
                     "trace_mean_batch": total.sequence_s / total.busy_s if total.busy_s else math.nan,
                     "clamped_share": total.clamped_s / total.sequence_s if total.sequence_s else math.nan})
    frame = pd.DataFrame(rows)
    base_ms = float(frame.loc[frame["config"] == baseline, "predicted_tpot_ms"].iloc[0])
    frame["predicted_speedup_tpot"] = base_ms / frame["predicted_tpot_ms"]
    frame["clamped"] = frame["clamped_share"] > 0
    return frame
