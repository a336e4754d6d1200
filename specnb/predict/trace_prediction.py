"""A trace's TPOT, reconstructed from the closed-loop sweep and the batch the engine actually ran.

Why: a bursty trace spends its time at many batch sizes, the sweep measured TPOT at a few. Whether
speculation pays is decided by the load — the engine's running batch — not by acceptance, which does
not signal load (vllm#26504). If a configuration's TPOT is a function of the batch alone, its TPOT over
a trace follows from how long the trace held each batch, and the sweep's figures are checked where it
matters: on the trace the policy was built for.

A **diagnostic**, not a forecast: it reads the batches the trace run itself held, so it can only be
made after the trace and part of its agreement is the trace's own. It isolates the TPOT(b) curves:
where the forecast (``trace_forecast``, made before the trace from the per-level figures alone) misses
and this does not, the miss is in how the forecast's queue filled, not in TPOT(b).

- **TPOT(b)** per configuration (``tpot_at``): its steady token-weighted TPOT
  (``serving_stats.steady_tpot_ms``) against its measured batch
  (``serving_rounds.batch_of``: ``mean_batch``, else ``concurrency``), linear in log batch between
  measured batches and clamped — never extrapolated (as vLLM's proposed ``tune_speculative_k``,
  PR #49163) — beyond the ends, which ``clamped_share`` reports.
- **Occupancy** (``serving_rounds.occupancy``): from the engine's gauge samples over the trace
  ([t_s, batch], each holding until the next: a run row's ``batch_trace``), dt_b, the seconds spent
  at each batch b. Each configuration's own: a faster one drains a burst sooner, at smaller batches.
- **Token-weighted TPOT over the trace**: b·dt_b sequence-seconds at batch b decode b·dt_b ÷ TPOT(b)
  tokens, so TPOT = Σ_b b·dt_b ÷ Σ_b (b·dt_b ÷ TPOT(b)) — the Σ decode s ÷ Σ decode tokens that
  ``serving_stats.trace_check`` measures, since every decoding request is in the batch for exactly
  its decode time. Predicted trace speedup = predicted spec-off TPOT ÷ the configuration's.
- **Adaptive** (the policy as one launch): at each batch, the TPOT of the configuration its schedule
  runs there (``serving_policy.scheduled_config``). Where the schedule says k = 0 that is spec-off's
  curve: on vLLM a k = 0 range still takes the speculative path (``serving_launch.zero_range_speedup``
  prices it), so the prediction is optimistic there by that step cost.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from specnb.core.errors import ParameterError
from specnb.measure.serving_rounds import batch_of, occupancy
from specnb.measure.serving_stats import steady_tpot_ms
from specnb.predict.policy_record import Policy
from specnb.predict.serving_policy import scheduled_config
from specnb.serve.speculation import ADAPTIVE_CONFIG, BASELINE_CONFIG


def trace_occupancy(runs: pd.DataFrame, config: str) -> pd.Series:
    """A configuration's occupancy over every one of its trace runs (``batch_trace`` on its run rows)."""
    rows = runs[runs["config"] == config]
    if rows.empty or "batch_trace" not in rows:
        raise ParameterError(f"no batch_trace for {config!r} among the trace's runs: its occupancy was not sampled")
    held = pd.concat([occupancy(t) for t in rows["batch_trace"]])
    return held.groupby(level=0).sum().rename("seconds")


def batch_curve(summary: pd.DataFrame, config: str, column: str) -> tuple[np.ndarray, np.ndarray]:
    """(log batch, ``column``) of ``config``'s measured levels, ascending in batch (levels without a
    figure left out)."""
    rows = summary[summary["config"] == config]
    if rows.empty:
        raise ParameterError(f"no summary rows for {config!r}: the sweep did not measure it")
    if column not in rows:
        raise ParameterError(f"the summary has no {column!r} column: summarise the sweep with "
                             "serving_stats.summarise_sweep")
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


def predicted_tpot(held: pd.Series, tpot_of) -> dict:
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


def predict_trace(summary: pd.DataFrame, runs: pd.DataFrame, policy: Policy | None = None,
                  adaptive: str = ADAPTIVE_CONFIG, baseline: str = BASELINE_CONFIG) -> pd.DataFrame:
    """Per configuration of the trace's ``runs`` (each with its ``batch_trace``): its predicted TPOT over
    the trace from the sweep's ``summary`` (``predicted_tpot_ms``), the predicted speedup over
    ``baseline`` (``predicted_speedup_tpot``: each from its own occupancy), the mean batch while
    decoding (``trace_mean_batch``) and ``clamped_share`` / ``clamped``: how much of it sat beyond the
    measured batches. The ``adaptive`` configuration, given the ``policy`` it launched, reads each
    batch's TPOT off the configuration its schedule runs there; without a policy it is left out."""
    curves = {c: tpot_curve(summary, c) for c in summary["config"].unique() if c != adaptive}
    rows = []
    for config in runs["config"].unique():
        if config == adaptive:
            if policy is None:
                continue
            tpot_of = lambda b: tpot_at(curves[scheduled_config(policy, b)], b)  # noqa: E731
        elif config in curves:
            tpot_of = lambda b, curve=curves[config]: tpot_at(curve, b)  # noqa: E731
        else:
            continue
        rows.append({"config": config, **predicted_tpot(trace_occupancy(runs, config), tpot_of)})
    frame = pd.DataFrame(rows)
    if frame.empty or baseline not in set(frame["config"]):
        raise ParameterError(f"no {baseline!r} run with a batch_trace in the trace: nothing to predict a speedup over")
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
