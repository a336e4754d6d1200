"""Speculation under serving load, predicted from the engine's own step cost, and the policy that follows.

The model (one engine step serves every running sequence at once):

- Spec-off at concurrency b: each step runs one forward over b tokens, so its TPOT *is* the engine's
  cost of a forward with b tokens in the batch, t(b): its token-weighted TPOT over steady requests
  (``serving_stats.steady_tpot_ms``: Σ decode s ÷ Σ decode tokens, the time a step took per token
  it gave each sequence; the mean of per-request TPOTs drifts with the length mix). The spec-off
  sweep measures t at every level; between levels t is interpolated linearly in tokens, beyond them
  extended along the last segment.
- A speculative configuration at concurrency b: each sequence's step verifies 1 + d tokens (d = draft
  tokens per step, from the counters) and yields τ' = generated tokens ÷ steps (steps = generated −
  accepted; τ' ≤ τ because steps without a draft count too). So
  TPOT(b) = (v(b) + δ(b)) ÷ τ', with δ the speculative step's cost beyond its verification — a draft
  model's forwards, and for any method the proposer's and rejection sampler's own work (an n-gram
  step on a 2-core AMD EPYC: 1–4 ms beyond a 28–30 ms verification on vLLM, 1–2 ms beyond 8 ms on
  llama-server) — calibrated at the first level and scaled like the verifier's step,
  δ(b) = δ(b₀)·t(b)/t(b₀).
- The verification step v(b): with the engine's forward probe f(n) (one forward of n prompt tokens,
  the same matrix shapes as a step over n sequences: timed by llama.cpp itself, or on vLLM by the
  client as a one-token completion), spec-off's measured step plus the extra tokens' cost,
  v(b) = t(b) + f(b·(1 + d)) − f(b); this reaches past the levels measured, and it keeps out of the
  extra tokens' price what spec-off's TPOT carries besides the forward (other requests' prefills,
  which grow with the load when outputs are short). Without a probe (SGLang, an endpoint),
  v(b) = t(b·(1 + d)) from the spec-off curve.
- Acceptance (d, τ') is taken at the calibration level only; the other levels are predictions, and
  ``validate_serving`` reports the median error there against the measured TPOT speedup.
  ``validate_held_out`` cross-fits on prompts (two folds with the same mix of categories, from
  llama.cpp's per-request draft counts, or from vLLM's counters over runs that held one fold's
  prompts only): every level, on prompts the predictor never saw.

Why speedup falls with load: t grows with the tokens in the batch once the machine stops being
memory-bound, and speculation multiplies those tokens by 1 + d while dividing steps only by τ'.

The policy that follows from these figures is ``specnb.predict.serving_policy``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import pandas as pd

from specnb.core.errors import ParameterError
from specnb.measure.load_shapes import shape_of
from specnb.measure.serving_stats import decode_timed, steady_tpot_ms
from specnb.measure.serving_steady import steady_records
from specnb.measure.serving_sweep import Sweep
from specnb.serve.speculation import BASELINE_CONFIG


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
    level; ``probe``: the engine's forward cost against tokens (``specnb.measure.serving_endpoint.probe_forward``)."""
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
    """Token-weighted TPOT in ms per group of ``decode_timed`` requests: Σ decode s ÷ Σ decode tokens."""
    return grouped["decode_s"].sum() / grouped["decode_tokens"].sum() * 1e3


def folds(records: pd.DataFrame) -> pd.Series:
    """0 or 1 per request: prompts alternate between the two folds within each category, so both
    folds hold the same mix (acceptance depends on the kind of prompt far more than on the load)."""
    key = records["prompt_id"] if "prompt_id" in records else records["prompt_index"].astype(str)
    firsts = records.assign(_key=key).drop_duplicates("_key")
    rank = firsts.groupby("category", sort=False).cumcount() % 2
    return key.map(dict(zip(firsts["_key"], rank)))


COUNTER_COLUMNS = ("tokens_predicted", "spec_decode_draft_tokens", "spec_decode_accepted_tokens")


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
    from specnb.measure.serving_stats import paired_requests, row_rng, speedup_ci

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
