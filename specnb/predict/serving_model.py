"""Speculation under serving load: the engine's step cost against the tokens in its batch, what a
configuration should reach at a level, and what a trace of bursty arrivals does to each configuration.

**The step model** (one engine step serves every running sequence at once):

- Spec-off at concurrency b: each step runs one forward over b tokens, so its TPOT *is* the engine's
  cost of a forward with b tokens in the batch, t(b): its token-weighted TPOT over steady requests
  (``serving_stats.steady_tpot_ms``: Σ decode s ÷ Σ decode tokens, the time a step took per token
  it gave each sequence; the mean of per-request TPOTs drifts with the length mix). The spec-off
  sweep measures t at every level; between levels t is interpolated linearly in tokens, beyond them
  extended along the last segment (``step_cost``, ``step_ms``).
- A speculative configuration at concurrency b: each sequence's step verifies 1 + d tokens (d = draft
  tokens per step, from the counters) and yields τ' = generated tokens ÷ steps (steps = generated −
  accepted; τ' ≤ τ because steps without a draft count too). So
  TPOT(b) = (v(b) + δ(b)) ÷ τ', with δ the speculative step's cost beyond its verification — a draft
  model's forwards, and for any method the proposer's and rejection sampler's own work (an n-gram
  step on a 2-core AMD EPYC: 1–4 ms beyond a 28–30 ms verification on vLLM, 1–2 ms beyond 8 ms on
  llama-server) — calibrated at the first level and scaled like the verifier's step,
  δ(b) = δ(b₀)·t(b)/t(b₀) (``predict_serving``).
- The verification step v(b): with the engine's forward probe f(n) (one forward of n prompt tokens,
  the same matrix shapes as a step over n sequences: timed by llama.cpp itself, or on vLLM by the
  client as a one-token completion), spec-off's measured step plus the extra tokens' cost,
  v(b) = t(b) + f(b·(1 + d)) − f(b); this reaches past the levels measured, and it keeps out of the
  extra tokens' price what spec-off's TPOT carries besides the forward (other requests' prefills,
  which grow with the load when outputs are short). Without a probe (SGLang, an endpoint),
  v(b) = t(b·(1 + d)) from the spec-off curve.
- A schedule's k = 0 range is not spec-off: vLLM still takes the speculative path (the proposer is
  called, the scheduler and sampler take their speculative branches), so its step is spec-off's plus
  the method's δ(b) (``zero_range_speedup``; what an all-zero schedule measured against spec-off,
  ``benchmarks/vllm_k0.py``).
- Acceptance (d, τ') is taken at the calibration level only; the other levels are predictions, and
  ``validate_serving`` reports the median error there against the measured TPOT speedup.
  ``validate_held_out`` cross-fits on prompts (two folds with the same mix of categories, from
  llama.cpp's per-request draft counts, or from vLLM's counters over runs that held one fold's
  prompts only): every level, on prompts the predictor never saw.

Why speedup falls with load: t grows with the tokens in the batch once the machine stops being
memory-bound, and speculation multiplies those tokens by 1 + d while dividing steps only by τ'.

**The trace predictor** (``predict_trace``): a bursty trace spends its time at many batch sizes, the
sweep measured TPOT at a few. Whether speculation pays is decided by the load — the engine's running
batch — not by acceptance, which does not signal load (vllm#26504). If a configuration's TPOT is a
function of the batch alone, its TPOT over a trace follows from how long the trace holds each batch
(its occupancy, dt_b), and one function turns an occupancy into a prediction:

- **TPOT(b)** per configuration (``tpot_curve``, ``tpot_at``): its steady token-weighted TPOT against
  its measured batch (``serving_sweep.batch_of``: ``mean_batch``, else ``concurrency``), linear in
  log batch between measured batches and clamped — never extrapolated (as vLLM's proposed
  ``tune_speculative_k``, PR #49163) — beyond the ends, which ``clamped_share`` reports. TTFT(b) the
  same way from ``mean_ttft_ms``; with nothing decoding, batch 1's.
- **Token-weighted TPOT over the trace** (``predicted_tpot``): b·dt_b sequence-seconds at batch b
  decode b·dt_b ÷ TPOT(b) tokens, so TPOT = Σ_b b·dt_b ÷ Σ_b (b·dt_b ÷ TPOT(b)) — the Σ decode s ÷ Σ
  decode tokens that ``serving_stats.trace_check`` measures, since every decoding request is in the
  batch for exactly its decode time. Predicted trace speedup = spec-off's predicted TPOT ÷ the
  configuration's.
- **Adaptive** (a schedule launched as one server, its ``Launch``): at each batch, the TPOT and TTFT
  of the configuration its range runs there (``launch_curves``); in a k = 0 range spec-off's TPOT ÷
  the k = 0 price of the launch's method.

Where the occupancy comes from is the trace's arrival plan, either of two:

- **Planned** (``plan_trace`` → ``PlannedTrace``): a forecast, made before the trace is sent. The
  trace's arrivals and output lengths are seeded — per round, the arrivals ``send_open`` will draw
  (``serving_load.arrival_gaps`` at the load's rate, burstiness and ``Open.round_seed``) and the
  lengths the sweep will ask (``serving_sweep.request_lengths``: the same keys, the same seed) — and
  go through a continuous-batching queue (``simulate``), event-driven processor sharing: while b
  requests decode, each advances at 1 ÷ TPOT(b) tokens per second; a request that arrives waits
  TTFT(b) (b: those decoding at its arrival) for its first token, then decodes its other L − 1
  tokens. A faster configuration drains a burst sooner and so spends the trace at smaller batches,
  as on the engine. Left out: a cap on running sequences (``max_num_seqs``: the trace's bursts stay
  far below vLLM's), prefill slowing the decode steps beside it other than as the closed loop's
  turnover did, and how a step's tokens arrive (one chunk per step): TPOT is a rate here.
- **Sampled** (``SampledTrace``): a reconstruction, after the trace, from the engine's batch gauge
  sampled over each configuration's runs (``serving_sweep.occupancy``). A **diagnostic**, not a
  forecast: part of its agreement is the trace's own. It isolates the TPOT(b) curves: where the
  forecast misses and this does not, the miss is in how the forecast's queue filled.

``trace_prediction_table`` holds either prediction against the measured trace, ``trace_median_error``
sums it up.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from specnb.core.errors import ParameterError
from specnb.measure.serving_load import arrival_gaps, shape_of, steady_records
from specnb.measure.serving_stats import (
    decode_timed,
    paired_requests,
    row_rng,
    speedup_ci,
    steady_tpot_ms,
    weighted_tpot_ms,
)
from specnb.measure.serving_sweep import Sweep, batch_of, occupancy, request_lengths
from specnb.serve.engines import AA_TWIN_CONFIG, ADAPTIVE_CONFIG, BASELINE_CONFIG, Launch

TTFT_COLUMN = "mean_ttft_ms"
COUNTER_COLUMNS = ("tokens_predicted", "spec_decode_draft_tokens", "spec_decode_accepted_tokens")


# -- the step model: TPOT(b) from the engine's step cost, per level ----------------------------------------------


def require_steps(frame: pd.DataFrame) -> None:
    """Refuse a table whose level is not the sequences in an engine step (open-loop arrivals: a rate is
    not a batch): the predictor and policy price a step by the requests in it."""
    if not shape_of(frame).steps_batch:
        raise ParameterError("the serving predictor and policy price a step by the requests in it, so they need "
                             "closed-loop concurrency levels; this sweep ran open-loop arrivals (requests/s): "
                             "rerun with rates = [] for them")


def step_cost(summary: pd.DataFrame, baseline: str = BASELINE_CONFIG) -> pd.DataFrame:
    """The engine's step time t(b) in ms against tokens in the batch b, from spec-off's steady
    token-weighted TPOT (``steady_tpot_ms``)."""
    require_steps(summary)
    base = summary[summary["config"] == baseline].sort_values("concurrency")
    if base.empty:
        raise ParameterError(f"no {baseline!r} rows to price a step from")
    return pd.DataFrame({"tokens": base["concurrency"].astype(float), "step_ms": steady_tpot_ms(base)})


def step_ms(cost: pd.DataFrame, tokens: float) -> float:
    """t(tokens): linear between measured points, the last segment extended beyond them."""
    x, y = cost["tokens"].to_numpy(float), cost["step_ms"].to_numpy(float)
    if len(x) == 1 or tokens <= x[-1]:
        return float(np.interp(tokens, x, y))
    slope = (y[-1] - y[-2]) / (x[-1] - x[-2])
    return float(y[-1] + slope * (tokens - x[-1]))


def acceptance_of(row) -> tuple[float, float]:
    """(draft tokens per step d, generated tokens per step τ') from a summary row's counters."""
    steps = row["tokens_predicted"] - row["spec_decode_accepted_tokens"]
    if steps <= 0:
        return 0.0, 1.0
    return row["spec_decode_draft_tokens"] / steps, row["tokens_predicted"] / steps


def verify_ms(cost: pd.DataFrame, probe: pd.DataFrame | None, b: float, d: float) -> float:
    """A speculative step's verification at b sequences with d draft tokens each: with a forward
    probe, spec-off's measured step plus what the probe says the extra b·d tokens cost; without one,
    the spec-off curve read at b·(1 + d) tokens."""
    if probe is None or probe.empty:
        return step_ms(cost, b * (1 + d))
    forward = pd.DataFrame({"tokens": probe["tokens"], "step_ms": probe["forward_ms"]})
    return step_ms(cost, b) + step_ms(forward, b * (1 + d)) - step_ms(forward, b)


def predict_serving(summary: pd.DataFrame, config: str, levels, baseline: str = BASELINE_CONFIG,
                    probe: pd.DataFrame | None = None) -> pd.DataFrame:
    """Predicted TPOT and TPOT speedup of ``config`` at each of ``levels``, calibrated at its lowest
    level; ``probe``: the engine's forward cost against tokens (``specnb.measure.serving_load.probe_forward``)."""
    cost = step_cost(summary, baseline)
    rows = summary[summary["config"] == config].sort_values("concurrency")
    if rows.empty:
        raise ParameterError(f"no rows for configuration {config!r}")
    calib = rows.iloc[0]
    d, tau = acceptance_of(calib)
    b0 = float(calib["concurrency"])
    delta0 = max(0.0, float(steady_tpot_ms(rows).iloc[0]) * tau - verify_ms(cost, probe, b0, d))
    out = []
    for b in levels:
        delta = delta0 * step_ms(cost, b) / step_ms(cost, b0)
        tpot = (verify_ms(cost, probe, b, d) + delta) / tau
        out.append({"config": config, "concurrency": b, "draft_per_step": d, "tokens_per_step": tau,
                    "draft_ms": delta, "predicted_tpot_ms": tpot,
                    "predicted_speedup_tpot": step_ms(cost, b) / tpot, "calibrated_at": b0})
    return pd.DataFrame(out)


def zero_range_speedup(summary: pd.DataFrame, base: str, levels, baseline: str = BASELINE_CONFIG) -> pd.Series:
    """Per level, the TPOT speedup over spec-off of a launch built on configuration ``base`` where its
    schedule says k = 0: the step is spec-off's plus ``base``'s own cost beyond verification δ(b)
    (``predict_serving``'s ``draft_ms``, calibrated at its lowest level), since vLLM still takes the
    speculative path at k = 0 — for n-gram as for a head, whose first forward is only part of it."""
    cost = step_cost(summary, baseline)
    own = predict_serving(summary, base, list(levels), baseline).set_index("concurrency")["draft_ms"]
    return pd.Series({b: step_ms(cost, b) / (step_ms(cost, b) + own[b]) for b in levels}, name="zero_range_speedup")


# -- the step model held against the sweep: the same prompts, then prompts it never saw ---------------------------


def validate_serving(summary: pd.DataFrame, configs: Iterable[str], baseline: str = BASELINE_CONFIG,
                     probe: pd.DataFrame | None = None) -> pd.DataFrame:
    """Predicted against measured TPOT speedup at every measured level of each of ``configs`` (names);
    ``calibration`` marks the level each was calibrated on."""
    frames = []
    for config in configs:
        levels = sorted(summary.loc[summary["config"] == config, "concurrency"])
        pred = predict_serving(summary, config, levels, baseline, probe)
        measured = summary[summary["config"] == config][["concurrency", "speedup_tpot"]]
        frame = pred.merge(measured, on="concurrency")
        frame["error"] = (frame["predicted_speedup_tpot"] - frame["speedup_tpot"]).abs() / frame["speedup_tpot"]
        frame["calibration"] = frame["concurrency"] == frame["calibrated_at"]
        frame["prompts"] = "same"
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def request_summary(records: pd.DataFrame) -> pd.DataFrame:
    """Per (configuration, level), the predictor's inputs from per-request fields alone, over steady
    requests (``steady_records``: no filler, no ramp-up): token-weighted TPOT and llama.cpp's
    per-request draft counts (``draft_n``, ``draft_n_accepted``) in the counters' names, so any subset
    of prompts can calibrate."""
    steady = decode_timed(steady_records(records[records["success"]]))
    grouped = steady.groupby(["config", "concurrency"], sort=False)
    return pd.DataFrame({"tpot_weighted_ms": weighted_ms(grouped),
                         "tokens_predicted": grouped["output_tokens"].sum().astype(float),
                         "spec_decode_draft_tokens": grouped["draft_n"].sum().astype(float),
                         "spec_decode_accepted_tokens": grouped["draft_n_accepted"].sum().astype(float)}).reset_index()


def weighted_ms(grouped) -> pd.Series:
    """Token-weighted TPOT in ms per group of requests (``serving_stats.weighted_tpot_ms``, the summary's own)."""
    return pd.Series([weighted_tpot_ms(group) for _, group in grouped], index=grouped.size().index, dtype=float)


def folds(records: pd.DataFrame) -> pd.Series:
    """0 or 1 per request: prompts alternate between the two folds within each category, so both
    folds hold the same mix (acceptance depends on the kind of prompt far more than on the load)."""
    key = records["prompt_id"] if "prompt_id" in records else records["prompt_index"].astype(str)
    firsts = records.assign(_key=key).drop_duplicates("_key")
    rank = firsts.groupby("category", sort=False).cumcount() % 2
    return key.map(dict(zip(firsts["_key"], rank)))


def counter_summary(records: pd.DataFrame, runs: pd.DataFrame, in_fold: pd.Series) -> pd.DataFrame:
    """``request_summary`` for an engine that counts drafts per run, not per request (vLLM): the
    token-weighted TPOT of the fold's steady requests, the counters summed over the runs whose every
    request (fillers included: their drafts are in the counters) is in the fold (a run's counters
    cannot be split by request). A speculative configuration's level without such a run is left out,
    so it is calibrated at its lowest level that has one; spec-off keeps every level (only its TPOT
    prices a step)."""
    keys = ["config", "concurrency", "round", "chunk"]
    whole = records.assign(_in=in_fold.to_numpy()).groupby(keys, as_index=False)["_in"].all()
    inside = runs.merge(whole[whole["_in"]][keys], on=keys)
    counted = inside.groupby(["config", "concurrency"], as_index=False)[list(COUNTER_COLUMNS)].sum()
    steady = decode_timed(steady_records(records[in_fold & records["success"]]))
    tpot = weighted_ms(steady.groupby(["config", "concurrency"])).rename("tpot_weighted_ms").reset_index()
    frame = tpot.merge(counted, on=["config", "concurrency"], how="left")
    return frame[(frame["config"] == BASELINE_CONFIG) | frame["tokens_predicted"].notna()].reset_index(drop=True)


def per_request_counts(records: pd.DataFrame) -> bool:
    """Whether requests carry their own draft counts (llama.cpp's ``timings``)."""
    return records.get("draft_n", pd.Series(dtype=float)).fillna(0).sum() > 0


def validate_held_out(sweep: Sweep, configs: Iterable[str], baseline: str = BASELINE_CONFIG, n_boot: int = 500,
                      seed: int = 0) -> pd.DataFrame:
    """Two-fold cross-fit on the ``sweep``'s prompts: calibrate on one fold (``folds``), predict the
    TPOT speedup at every level (with the sweep's forward ``probe``) and compare with the one measured
    on the other fold, then the other way round — every prediction is for prompts the predictor never
    saw (``calibration`` False everywhere). Acceptance comes from per-request draft counts (llama.cpp)
    or from the engine's counters of the sweep's ``runs`` that held one fold's prompts only
    (``counter_summary``; vLLM); empty with neither."""
    records, runs, probe = sweep.records, sweep.runs, sweep.probe
    require_steps(records)
    by_request = per_request_counts(records)
    if not by_request and (runs is None or runs.empty or "chunk" not in records or "chunk" not in runs):
        return pd.DataFrame()
    fold = folds(records)
    frames = []
    for calibrate_on in (0, 1):
        calibration = request_summary(records[fold == calibrate_on]) if by_request else \
            counter_summary(records, runs, fold == calibrate_on)
        held = decode_timed(records[fold != calibrate_on])
        for config in configs:
            levels = sorted(held.loc[held["config"] == config, "concurrency"].unique())
            if not levels or config not in set(calibration["config"]):
                continue  # a fold without this configuration's prompts (fewer prompts than two per category)
            pred = predict_serving(calibration, config, levels, baseline, probe)
            measured = []
            for level in levels:
                paired = paired_requests(held, config, level, baseline)
                rng = row_rng(seed, config, level)  # a row's CI whatever rows come before it
                point, lo, hi = speedup_ci(paired, "decode_tokens", "decode_s", rng, n_boot) if len(paired) else \
                    (math.nan,) * 3
                measured.append({"concurrency": level, "speedup_tpot": point, "speedup_tpot_lo": lo,
                                 "speedup_tpot_hi": hi})
            frame = pred.merge(pd.DataFrame(measured), on="concurrency")
            frame["error"] = (frame["predicted_speedup_tpot"] - frame["speedup_tpot"]).abs() / frame["speedup_tpot"]
            frame["calibration"] = False
            frame["prompts"] = "held out"
            frame["fold"] = 1 - calibrate_on
            frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def median_error(validation: pd.DataFrame) -> float:
    """Median relative error of the predicted TPOT speedup over the levels not calibrated on."""
    held = validation[~validation["calibration"]] if len(validation) else validation
    return float(held["error"].median()) if len(held) else math.nan


# -- TPOT(b) and TTFT(b) read off the measured batches ----------------------------------------------------------


def batch_curve(summary: pd.DataFrame, config: str, column: str) -> tuple[np.ndarray, np.ndarray]:
    """(log batch, ``column``) of ``config``'s measured levels, ascending in batch (levels without a
    figure left out)."""
    rows = summary[summary["config"] == config]
    if rows.empty:
        raise ParameterError(f"no summary rows for {config!r}: the sweep did not measure it")
    if column not in rows:
        raise ParameterError(f"the summary has no {column!r} column: summarise the sweep with "
                             "serving_summary.summarise_sweep")
    frame = pd.DataFrame({"batch": batch_of(rows).to_numpy(), "value": rows[column].to_numpy(float)}).dropna()
    if frame.empty:
        raise ParameterError(f"no {column!r} figure for {config!r} at any level: none of its requests finished")
    frame = frame.groupby("batch", as_index=False)["value"].mean()
    return np.log(frame["batch"].to_numpy()), frame["value"].to_numpy()


def tpot_curve(summary: pd.DataFrame, config: str) -> tuple[np.ndarray, np.ndarray]:
    """(log batch, TPOT ms) of ``config``'s measured levels, ascending in batch: the token-weighted TPOT
    over steady requests (``serving_stats.steady_tpot_ms``), what the trace's token-weighted TPOT is
    made of."""
    return batch_curve(summary.assign(steady_tpot_ms=steady_tpot_ms(summary)), config, "steady_tpot_ms")


def tpot_at(curve: tuple[np.ndarray, np.ndarray], batch: float) -> tuple[float, bool]:
    """(TPOT ms — or any ``batch_curve``'s figure — at ``batch``, whether it lies outside the measured
    batches and was clamped to an end)."""
    x, y = curve
    at = math.log(batch)
    return float(np.interp(at, x, y)), bool(at < x[0] - 1e-12 or at > x[-1] + 1e-12)


@dataclass(frozen=True)
class Curves:
    """One configuration on a trace: ``tpot(b)`` → (ms, clamped) with b sequences decoding, and
    ``ttft(b)`` → ms for an arrival while b decode."""

    tpot: Callable[[float], tuple[float, bool]]
    ttft: Callable[[float], float]


def static_curves(summary: pd.DataFrame, config: str) -> Curves:
    """A measured configuration's curves. TTFT(b) is read only where a trace is simulated, so a
    reconstruction needs no TTFT column."""
    tpot = tpot_curve(summary, config)
    ttft = functools.cache(lambda: batch_curve(summary, config, TTFT_COLUMN))
    return Curves(tpot=lambda b: tpot_at(tpot, b), ttft=lambda b: tpot_at(ttft(), max(b, 1))[0])


def scheduled_k(launch: Launch, batch: float) -> int:
    """The k ``launch``'s ranges run at a running batch of ``batch`` (below its first range the
    first's, above its last the last's)."""
    ranges = sorted(launch.ranges)
    b = round(batch)
    return next((k for lo, hi, k in ranges if lo <= b <= hi), ranges[0][2] if b < ranges[0][0] else ranges[-1][2])


def launch_curves(summary: pd.DataFrame, launch: Launch, zero_speedup: float = 1.0,
                  baseline: str = BASELINE_CONFIG) -> Curves:
    """A schedule launched as one server: at each batch, the curves of the configuration its range
    runs there (``launch.by_k``); in a k = 0 range spec-off's TPOT ÷ ``zero_speedup``, the engine's
    own k = 0 price (``ServingEngine.zero_range``, what the verdict priced the range at: vLLM still
    takes its speculative path there)."""
    ks = {k for *_, k in launch.ranges}
    own = {k: static_curves(summary, launch.by_k[k] if k else baseline) for k in ks}

    def tpot(b: float) -> tuple[float, bool]:
        k = scheduled_k(launch, b)
        ms, clamped = own[k].tpot(b)
        return (ms, clamped) if k else (ms / zero_speedup, clamped)

    return Curves(tpot=tpot, ttft=lambda b: own[scheduled_k(launch, max(b, 1))].ttft(b))


# -- the trace's arrival plan: where its time goes, batch by batch ---------------------------------------------


def summed(parts: Iterable[pd.Series]) -> pd.Series:
    """Occupancies (seconds at each batch) added up batch by batch."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.Series(dtype=float, name="seconds")
    return pd.concat(parts).groupby(level=0).sum().rename("seconds")


@dataclass(frozen=True, kw_only=True)
class TraceRound:
    """One round of a trace as the sweep will send it: request i arrives ``arrivals_s[i]`` seconds
    after the round starts and asks ``output_lens[i]`` tokens."""

    arrivals_s: np.ndarray  # [n]
    output_lens: np.ndarray  # [n]


def simulate(trace: TraceRound, tpot_of: Callable[[float], tuple[float, bool]],
             ttft_of: Callable[[float], float]) -> pd.Series:
    """One round through the processor-sharing queue of the module docstring: the seconds it holds
    each batch of decoding requests (index: batch). ``tpot_of(b)`` → (ms, clamped) with b ≥ 1
    decoding; ``ttft_of(b)`` → ms for an arrival while b decode."""
    order = np.argsort(trace.arrivals_s, kind="stable")
    arrivals, lengths = trace.arrivals_s[order], trace.output_lens[order]
    held: dict[float, float] = {}
    now, i = 0.0, 0
    waiting: list[tuple[float, int]] = []  # (first token at s, decode tokens left)
    left = np.zeros(0)  # [b] decode tokens each decoding request has left
    while i < len(arrivals) or waiting or len(left):
        b = len(left)
        tpot_ms = tpot_of(b)[0] if b else math.nan
        finish = now + float(left.min()) * tpot_ms / 1e3 if b else math.inf
        ready = min((t for t, _ in waiting), default=math.inf)
        arrive = arrivals[i] if i < len(arrivals) else math.inf
        after = min(finish, ready, arrive)
        if b:  # each decoding request advances (after - now) ÷ TPOT(b) tokens
            dt = after - now
            left = np.where(after == finish, left - left.min(), left - dt * 1e3 / tpot_ms)
            held[float(b)] = held.get(float(b), 0.0) + dt
        now = after
        left = left[left > 1e-9]  # finished
        joined = [n for t, n in waiting if t <= now]
        waiting = [(t, n) for t, n in waiting if t > now]
        left = np.concatenate([left, np.array([n for n in joined if n > 0], float)])
        while i < len(arrivals) and arrivals[i] <= now:
            waiting.append((now + ttft_of(len(left)) / 1e3, int(lengths[i]) - 1))
            i += 1
    return pd.Series(held, dtype=float, name="seconds").sort_index()


@dataclass(frozen=True, kw_only=True)
class PlannedTrace:
    """A trace before it is sent: its rounds' seeded arrivals and lengths (``plan_trace``). Each
    configuration's occupancy is simulated from its own curves: a faster one drains a burst sooner."""

    rounds: tuple[TraceRound, ...]

    def occupancy(self, config: str, curves: Curves) -> pd.Series:
        return summed(simulate(one, curves.tpot, curves.ttft) for one in self.rounds)


@dataclass(frozen=True, kw_only=True)
class SampledTrace:
    """A trace after it ran: its runs, each with the engine's batch gauge sampled over it
    (``batch_trace``). A configuration that ran no trace has no occupancy (None)."""

    runs: pd.DataFrame

    def occupancy(self, config: str, curves: Curves) -> pd.Series | None:
        rows = self.runs[self.runs["config"] == config]
        if rows.empty:
            return None
        if "batch_trace" not in rows:
            raise ParameterError(f"no batch_trace for {config!r} among the trace's runs: its occupancy was not "
                                 "sampled")
        return summed(occupancy(t) for t in rows["batch_trace"])


def plan_trace(load, prompts: pd.DataFrame, rounds: int = 1, seed: int = 0) -> PlannedTrace:
    """The requests ``run_sweep(..., [load], rounds=rounds, seed=seed)`` will send on ``prompts``, per
    round: arrivals as ``Open.send`` draws them, lengths as ``run_level`` asks them."""
    prompts = prompts.reset_index(drop=True)
    out = []
    for r in range(rounds):
        lengths = np.array(request_lengths(load, prompts, r, seed))
        gaps = arrival_gaps(len(lengths), load.rate, load.burstiness, load.round_seed(r))
        out.append(TraceRound(arrivals_s=np.cumsum(gaps), output_lens=lengths))
    return PlannedTrace(rounds=tuple(out))


# -- the one trace predictor, and how far it was off -------------------------------------------------------------


def predicted_tpot(held: pd.Series, tpot_of: Callable[[float], tuple[float, bool]]) -> dict:
    """Token-weighted TPOT over an occupancy: Σ b·dt ÷ Σ b·dt ÷ TPOT(b); ``tpot_of(b)`` → (ms, clamped).
    ``clamped_share``: the share of sequence-seconds at batches read off a clamped end."""
    busy = held[held.index > 0]
    sequence_s = busy.index.to_numpy(float) * busy.to_numpy(float)  # [batches]: b·dt_b
    figures = [tpot_of(b) for b in busy.index]
    tpot_ms = np.array([f[0] for f in figures])
    clamped = np.array([f[1] for f in figures], bool)
    total = float(sequence_s.sum())
    if total <= 0:
        return {"predicted_tpot_ms": math.nan, "trace_mean_batch": math.nan, "clamped_share": math.nan}
    return {"predicted_tpot_ms": total / float((sequence_s / tpot_ms).sum()),
            "trace_mean_batch": total / float(busy.sum()),  # while anything decodes
            "clamped_share": float(sequence_s[clamped].sum() / total)}


def predict_trace(summary: pd.DataFrame, trace: PlannedTrace | SampledTrace, launch: Launch | None = None,
                  zero_speedup: float = 1.0, adaptive: str = ADAPTIVE_CONFIG,
                  baseline: str = BASELINE_CONFIG) -> pd.DataFrame:
    """Per configuration of the sweep's closed-loop ``summary`` that the ``trace`` runs (and
    ``adaptive``, where the schedule ``launch`` it runs drafts, its k = 0 ranges at ``zero_speedup``):
    its predicted TPOT over the trace
    (``predicted_tpot_ms``), speedup over ``baseline`` (``predicted_speedup_tpot``: each from its own
    occupancy), mean batch while decoding (``trace_mean_batch``) and ``clamped_share`` / ``clamped``:
    how much of it sat beyond the measured batches. The ``trace`` says where each configuration's time
    goes (``occupancy(config, curves)``): a ``PlannedTrace`` makes this a forecast (no trace record
    read), a ``SampledTrace`` a reconstruction from the batches the trace held."""
    if baseline not in set(summary["config"]):
        raise ParameterError(f"no {baseline!r} rows in the summary: nothing to predict a speedup over")
    curves = {c: static_curves(summary, c) for c in summary["config"].unique()
              if c not in (adaptive, AA_TWIN_CONFIG)}  # the twin measures launch noise: it runs no trace
    if launch is not None and launch.drafts:
        curves[adaptive] = launch_curves(summary, launch, zero_speedup, baseline)
    rows = []
    for config, own in curves.items():
        held = trace.occupancy(config, own)
        if held is not None:
            rows.append({"config": config, **predicted_tpot(held, own.tpot)})
    frame = pd.DataFrame(rows, columns=["config", "predicted_tpot_ms", "trace_mean_batch", "clamped_share"])
    if baseline not in set(frame["config"]):
        raise ParameterError(f"no {baseline!r} run with a batch_trace in the trace: nothing to predict a speedup "
                             "over")
    base_ms = float(frame.loc[frame["config"] == baseline, "predicted_tpot_ms"].iloc[0])
    frame["predicted_speedup_tpot"] = base_ms / frame["predicted_tpot_ms"]
    frame["clamped"] = frame["clamped_share"] > 0
    return frame


def trace_prediction_table(predicted: pd.DataFrame, trace_check_table: pd.DataFrame,
                           adaptive: str = ADAPTIVE_CONFIG, baseline: str = BASELINE_CONFIG) -> pd.DataFrame:
    """Per configuration, predicted (``predict_trace``) against measured trace TPOT speedup over
    ``baseline`` (``serving_stats.trace_check``: a static configuration's ``speedup_tpot``; the
    adaptive one's is the baseline row's ``adaptive_speedup_tpot``, adaptive over spec-off) with its
    95% CI, and ``error`` = |predicted − measured| ÷ measured (``trace_median_error`` over the table)."""
    check = trace_check_table.set_index("config")
    rows = []
    for row in predicted[predicted["config"] != baseline].to_dict("records"):
        config = row["config"]
        if config == adaptive and baseline in check.index:
            name, source = "adaptive_speedup_tpot", check.loc[baseline]
        elif config in check.index:
            name, source = "speedup_tpot", check.loc[config]
        else:
            continue
        measured = float(source[name])
        rows.append({"config": config, "predicted_speedup_tpot": row["predicted_speedup_tpot"],
                     "measured_speedup_tpot": measured, "measured_lo": float(source.get(f"{name}_lo", math.nan)),
                     "measured_hi": float(source.get(f"{name}_hi", math.nan)),
                     "error": abs(row["predicted_speedup_tpot"] - measured) / measured,
                     "clamped_share": row["clamped_share"]})
    return pd.DataFrame(rows, columns=["config", "predicted_speedup_tpot", "measured_speedup_tpot", "measured_lo",
                                       "measured_hi", "error", "clamped_share"])


def trace_median_error(table: pd.DataFrame) -> float:
    """The median relative error of the predicted trace speedups (``trace_prediction_table``)."""
    return float(table["error"].median()) if len(table) else math.nan
