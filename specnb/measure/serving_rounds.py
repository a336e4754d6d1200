"""Per round and per batch: what a decision that knows its noise, and is keyed on the engine's own batch,
is made of.

- One figure per round (``round_speedups``), so a median and a spread over rounds can be taken
  (``relative_mad``): vLLM's proposed ``tune_speculative_k`` (PR #49163) takes the median of >= 3
  runs and rejects a measurement whose relative MAD is above 0.1; a summary's one pooled figure per
  level cannot say how much of a difference is noise.
- The engine's own batch (``batch_of``): vLLM looks k up by the scheduler's running batch, not by the
  client's concurrency, and it is the load, not acceptance, that says whether speculation pays
  (vllm#26504). Over a run the engine's gauge gives [t_s, batch] samples (a run row's
  ``batch_trace``): the seconds held at each batch (``occupancy``) and their time average
  (``mean_batch``, what a summary row's ``mean_batch`` is).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from specnb.measure.load_shapes import shape_of
from specnb.measure.serving_stats import decode_timed, paired_requests
from specnb.serve.speculation import BASELINE_CONFIG


def batch_of(frame: pd.DataFrame) -> pd.Series:
    """Each row's batch: the engine's measured running batch (``mean_batch``, sampled from its gauge)
    where the row has one, else its level (``concurrency``). vLLM looks k up by the scheduler's batch
    (``num_speculative_tokens_per_batch_size``), which is below the client's concurrency whenever
    requests wait on a prefill or a client's next send; a sweep from before ``mean_batch`` falls
    back to the level."""
    level = frame[shape_of(frame).column].astype(float)
    if "mean_batch" not in frame:
        return level.rename("batch")
    return frame["mean_batch"].astype(float).where(frame["mean_batch"].notna() & (frame["mean_batch"] > 0),
                                                   level).rename("batch")


def round_speedups(records: pd.DataFrame, baseline: str = BASELINE_CONFIG) -> pd.DataFrame:
    """Per (configuration, level, round): the TPOT speedup over ``baseline`` from that round alone,
    each request paired with the baseline's on (round, prompt) as ``paired_requests`` pairs them:
    (Σ decode tokens ÷ Σ decode s) ÷ the baseline's, i.e. Σ baseline decode s ÷ Σ decode s for the
    same tokens. One figure per round is what a median and a spread over rounds are taken of
    (``serving_policy.noise_aware_policy``)."""
    column = shape_of(records).column
    timed = decode_timed(records)
    rows = []
    for (config, level), _ in timed[timed["config"] != baseline].groupby(["config", column], sort=True):
        paired = paired_requests(timed, config, level, baseline)
        for round_index, pairs in paired.groupby("round", sort=True):
            ours = pairs["decode_tokens"].sum() / pairs["decode_s"].sum()
            base = pairs["decode_tokens_base"].sum() / pairs["decode_s_base"].sum()
            rows.append({"config": config, column: level, "round": round_index, "speedup_tpot": float(ours / base),
                         "paired_requests": len(pairs)})
    return pd.DataFrame(rows, columns=["config", column, "round", "speedup_tpot", "paired_requests"])


def relative_mad(values) -> float:
    """median(|x − median|) ÷ median: the spread PR #49163 rejects a measurement by (above 0.1)."""
    x = np.asarray(values, float)
    centre = float(np.median(x))
    return float(np.median(np.abs(x - centre)) / abs(centre)) if centre else math.inf


def samples_of(batch_trace) -> np.ndarray:
    """[n, 2] (t_s, batch) from a run row's ``batch_trace`` (its JSON text, or the list itself)."""
    samples = json.loads(batch_trace) if isinstance(batch_trace, str) else batch_trace
    return np.asarray(samples, float).reshape(-1, 2)


def occupancy(batch_trace) -> pd.Series:
    """Seconds spent at each batch size (index: batch) over one trace: each gauge sample holds until
    the next; the last one closes the trace."""
    samples = samples_of(batch_trace)
    if len(samples) < 2:
        return pd.Series(dtype=float, name="seconds")
    dt = np.diff(samples[:, 0])  # [n - 1]
    return pd.Series(dt, index=samples[:-1, 1]).groupby(level=0).sum().rename("seconds")


def mean_batch(batch_trace) -> float:
    """The time-weighted mean of the running batch over a trace, idle spells included: what a gauge
    sampled through a run averages to (``mean_batch`` on a summary row)."""
    held = occupancy(batch_trace)
    return float((held.index * held).sum() / held.sum()) if held.sum() > 0 else math.nan
