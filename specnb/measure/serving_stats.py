"""The statistics of a serving sweep: its summaries, the launch noise, CIs simultaneous over what a
verdict reads, the policy measured, and vLLM's own client beside ours.

**Summaries** (``summarise_sweep``). Names follow ``vllm bench serve``'s result JSON (``completed``,
``request_throughput``, ``output_throughput``, ``mean_/median_/p90_/p99_`` of ``ttft_ms``, ``tpot_ms``,
``itl_ms``, ``e2el_ms``, ``request_goodput``, ``spec_decode_acceptance_length``), so a table here and a
vLLM result file line up (``from_vllm_bench`` reads such a file into the same shape). A closed loop's
fillers (``filler``: they held the level around the measured requests) are never summarised
(``serving_load.measured_records``). The latency statistics, ``tpot_weighted_ms`` (Σ decode s ÷ Σ
decode tokens, what an engine step is priced by) and a closed loop's throughput are taken over steady
requests (``serving_load.steady_records``; ``steady_requests`` counts them, ``prompts_measured`` of
``prompts_total`` says how many prompts they cover, ``mean_batch`` is the engine's own batch there).
Speedups pair each steady request with spec-off's on the same prompt, cycle, round and level (greedy
and lossless: the same tokens). TPOT speedup = Σ spec-off decode time ÷ Σ decode time per output
token; E2E speedup the same with whole latencies; the bootstrap resamples prompts, each with all its
rounds (``speedup_ci``). Output throughput at a fixed concurrency is concurrency × tokens ÷ latency
over steady requests (Little's law, ``level_throughput``), so its speedup's CI is the E2E one, scaled.

**Launch noise.** A serving speedup is a ratio of two servers, each its own launch. Two launches of
the same configuration are not equally fast (two identical vLLM n-gram launches differed by 5%, with a
request-level CI that excluded 1): whatever a launch fixes for its life (memory placement, graphs
captured, clocks, the threads' cores) scales every request it serves, at every level. A bootstrap over
requests, or over prompts, never sees it, since every request of a launch shares it. Left out, an A/A
pair "pays" or "loses". A launch pair's offset is shared by every level it serves, so the unit of
evidence is the pair, not the (level, launch) cell: an A/A pair (spec-off and its twin,
``AA_TWIN_CONFIG``) gives per level its log TPOT speedup d_l and the bootstrap's variance v_l of it
(``AaPair``, ``aa_pairs``). sigma, the sd of log(speedup) between two launches of one configuration,
is estimated from P pairs as s² = mean_p ū_p², ū_p = mean_l d_l (about 0, not the pairs' mean; the
pairs' own sampling is not subtracted, so s² is conservative by mean(v)/levels), with P degrees of
freedom (``noise_from``).

**Simultaneous CIs** (``critical``, ``simultaneous``). Every row of a family is a contrast of two
launches X over Y. With each launch's offset a ~ N(0, σ²/2) (averaged over the launch numbers a
configuration's records carry, L), sampling e ~ N(0, v_row), T = (a_X − a_Y + e) / sqrt(v_row + s²/L);
c is the 95% quantile of max |T| over the family's rows, simulated (``DRAWS`` draws, fixed seed), with
σ² drawn as s²·P/χ²_P less the pairs' own sampling variance — the law σ has given s — rather than
plugged in as s: the studentized T's law depends on the unknown σ/√v, and a plug-in c read 85% where
95% was asked with one pair (``tests/measure/test_serving_stats.py``); with v → 0 it is Student's t_P.
A row's CI is point·exp(∓c·sqrt(se_side² + s²/L)), se_side each side's bootstrap se in log, so a
skewed interval stays skewed (``widened``). A summary's speculative rows (every configuration but
spec-off and its twin, at every level) are one family (``add_speedups``), so "pays" or "loses" read off
any of them is false for at most 5% of studies, over all configurations and levels together; the
twin's own row is its raw bootstrap CI (``ci``: "raw A/A twin"), never widened by a noise measured from
it. With no pair measured (P = 0) there is no launch term and ``LaunchNoise.text`` says
"launch-to-launch noise not measured": such a CI is about the prompts only, never "beyond the noise".

**The store** (``save_pairs``, ``stored_pairs``): one JSON file per ``NoiseKey`` (machine, engine,
engine version, threads; an endpoint's engine and host) under ``$SPECNB_LAUNCH_NOISE``, else the specnb
cache's ``launch-noise/``, holding every pair measured there with its date and id (a pair is added
once, however many callers save it). It keeps growing; ``with_twin`` adds spec-off's twin to a sweep
while the store holds fewer than ``MIN_PAIRS`` pairs, none from the last ``FRESH_DAYS`` days, or when
asked; ``noise_for`` after the sweep: the stored pairs and the sweep's own.

**The policy measured**: per level the best static configuration (``best_static``, the one home of
"best static, else spec-off at 1.00x"), each configuration's k (``draft_lengths``), an adaptive
schedule held against the best static one per level (``adaptive_check``), and a bursty trace's paired
speedups (``trace_check``) at the rate that keeps a load in flight (``trace_rate``); each check's CIs
simultaneous over its own family.

**vLLM's own load client**, ``vllm bench serve``, against a server our sweep measured: the check of our
client (``specnb.measure.serving_load``) on the same server, prompts and concurrency. It runs in vLLM's
environment (``VllmBench.command``: the environment's ``vllm`` command line up to its arguments, e.g.
``specnb.native.vllm_build.command("bench", "serve")``; its ``custom`` dataset needs pandas there). The
prompts go as its ``custom`` dataset (a JSONL of ``prompt``), unshuffled, without its chat template (our
client sends each prompt as one user message and the server applies the template, as ``openai-chat``
does), greedy, ``--ignore-eos`` at our ``max_tokens``; ``--save-result --save-detailed`` keeps the
per-request lists that ``from_vllm_bench`` reads into the sweep's tables. Where the two clients'
timings differ by design: vLLM bench's latency ends at the last content chunk and ours at the end of
the stream (the usage chunk after it); both take TTFT at the first content chunk and TPOT = (latency
− TTFT) ÷ (output tokens − 1).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import subprocess
import zlib
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime, timedelta, timezone
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from specnb.core.devices import cpu_name, gpu_name
from specnb.core.errors import ParameterError, SpecnbError
from specnb.measure.acceptance import Fallback, counter_rates
from specnb.measure.runs import bootstrap_speedup, paired_speedup
from specnb.measure.serving_load import Closed, Open, Target, level_batch, measured_records, shape_of, steady_records
from specnb.models.cache import cache_dir
from specnb.serve.engines import AA_TWIN_CONFIG, ADAPTIVE_CONFIG, BASELINE_CONFIG, NOT_CANDIDATES

# What each summary row carries from its records: the load's shape and the configuration's identity.
CARRIED = ("load", "burstiness", "turnovers", "max_tokens_asked", "range_ratio", "method", "family", "k",
           "uses_model", "adaptive", "schedule")
TIMES = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "latency"}
Z95 = 1.959964  # the 95% two-sided normal quantile the bootstrap intervals are read with
LEVEL = 0.95  # the family-wise confidence of a family's CIs
DRAWS = 20_000  # simulated studies behind one critical value
MIN_PAIRS = 3  # a sweep adds the A/A twin while the store holds fewer pairs ...
FRESH_DAYS = 7  # ... or none measured in this many days
NOT_MEASURED = "launch-to-launch noise not measured"


def latency_stats(records: pd.DataFrame) -> dict:
    """mean, median, p90 and p99 of TTFT, TPOT, ITL (every gap) and E2E latency, in ms."""
    out = {}
    for name, column in TIMES.items():
        if name == "itl":
            values = np.array([x for s in records["itl"] for x in (json.loads(s) if isinstance(s, str) else s)])
        else:
            values = records[column].dropna().to_numpy(float)
        values = values * 1e3
        for stat, fn in (("mean", np.mean), ("median", np.median), ("p90", lambda v: np.percentile(v, 90)),
                         ("p99", lambda v: np.percentile(v, 99))):
            out[f"{stat}_{name}_ms"] = float(fn(values)) if len(values) else math.nan
    return out


def summarise_sweep(records: pd.DataFrame, runs: pd.DataFrame, baseline: str = BASELINE_CONFIG,
                    slo_tpot_ms: float = 0.0, *, n_boot: int = 1000, seed: int = 0,
                    noise: LaunchNoise | None = None) -> pd.DataFrame:
    """One row per (configuration, level): vLLM bench's statistics, α/τ/per-position from the counters,
    goodput under ``slo_tpot_ms`` (0: none) and speedups over ``baseline`` with CIs simultaneous over the
    speculative rows (``add_speedups``: ``n_boot`` resamples from ``seed``, the launch ``noise`` counted;
    None: not measured). The level column is the records' load shape's
    (``serving_load.shape_of``): ``concurrency`` or ``request_rate``."""
    shape = shape_of(records)
    column = shape.column
    if records.empty:  # no engine, or one that died before its first request: nothing to summarise
        return pd.DataFrame(columns=["engine", "config", column, "completed", "failed", "partial"])
    marked = "steady" in records  # our own sweep's records, not a vLLM bench file's
    records = measured_records(records)
    prompt = prompt_column(records)
    prompts_total = records[prompt].nunique()
    rows = []
    for (config, level), group in records.groupby(["config", column], sort=False):
        run = runs[(runs["config"] == config) & (runs[column] == level)]
        ok = group[group["success"]]
        steady = steady_records(ok)
        duration = float(run["duration"].sum())
        at = level if shape.steps_batch and marked else None  # a closed loop's steady state, as measured
        request_rate, output_rate = level_throughput(ok, steady, duration, at)
        per_pos = summed_lists([json.loads(p) for p in run["accepted_per_pos"]])
        drafts, draft_tokens, accepted = (float(run[c].sum()) for c in (
            "spec_decode_num_drafts", "spec_decode_draft_tokens", "spec_decode_accepted_tokens"))
        rates = counter_rates(drafts, draft_tokens, accepted, per_pos, level_acceptance(run))
        row = {"engine": group["engine"].iloc[0], "config": config, column: level,
               **{name: group[name].iloc[0] for name in CARRIED if name in group},
               "completed": len(ok), "failed": len(group) - len(ok), "partial": bool(group["partial"].any()),
               "steady_requests": len(steady), "prompts_measured": steady[prompt].nunique(),
               "prompts_total": prompts_total, "mean_batch": level_batch(run),
               "duration": duration, "total_output_tokens": int(ok["output_tokens"].sum()),
               "request_throughput": request_rate, "output_throughput": output_rate,
               **latency_stats(steady), "tpot_weighted_ms": weighted_tpot_ms(steady),
               "request_goodput": goodput(steady, slo_tpot_ms, request_rate),
               "spec_decode_num_drafts": drafts, "spec_decode_draft_tokens": draft_tokens,
               "spec_decode_accepted_tokens": accepted, "alpha": rates.alpha, "tau": rates.tau,
               "acceptance_source": rates.source,
               "spec_decode_acceptance_length": rates.tau, "per_position": json.dumps(rates.per_position),
               "n_decode": float(run["n_decode"].sum()), "tokens_predicted": float(run["tokens_predicted"].sum())}
        rows.append(row)
    summary = pd.DataFrame(rows)
    if baseline not in set(summary["config"]):
        return summary
    return add_speedups(summary, records, baseline, seed, n_boot, noise)


def prompt_column(records: pd.DataFrame) -> str:
    """What names a request's prompt: ``prompt_id`` where the records carry one, else ``prompt_index``."""
    return "prompt_id" if "prompt_id" in records else "prompt_index"


def weighted_tpot_ms(steady: pd.DataFrame) -> float:
    """Token-weighted TPOT in ms over steady requests with a TPOT: Σ decode s ÷ Σ decode tokens. A
    step serves every sequence in the batch once, so the time per token the engine's steps took is
    this ratio; the mean of per-request TPOTs weighs a 20-token request's as much as a 50-token
    one's, and so drifts with the length mix (the serving predictor prices a step by this one)."""
    timed = decode_timed(steady[steady["output_tokens"] > 1]) if len(steady) else steady
    tokens = float(timed["decode_tokens"].sum()) if len(timed) else 0.0
    return float(timed["decode_s"].sum()) / tokens * 1e3 if tokens else math.nan


def level_throughput(ok: pd.DataFrame, steady: pd.DataFrame, duration: float, concurrency=None
                     ) -> tuple[float, float]:
    """(requests/s, output tokens/s) at a level. At a ``concurrency`` (a closed loop whose records
    mark steady requests) by Little's law over the steady ones: c requests are always in flight, so
    requests complete at c ÷ mean latency, L = λ·W, and tokens at c · Σ tokens ÷ Σ latency. The
    run's wall clock would count the leading fillers' ramp-up and the drain, where fewer than c run,
    and the fillers' tokens; the gap a slot spends between a request and its successor is left out
    (a client's turnaround, sub-millisecond beside a request). Otherwise (an open loop, whose whole
    trace is steady; a vLLM bench file) every successful request over the runs' duration, as vLLM
    bench counts it."""
    if concurrency is not None:
        seconds = float(steady["latency"].sum()) / float(concurrency)
        return (len(steady) / seconds, float(steady["output_tokens"].sum()) / seconds) if seconds else (math.nan,) * 2
    if not duration:
        return math.nan, math.nan
    return len(ok) / duration, float(ok["output_tokens"].sum()) / duration


def steady_tpot_ms(rows: pd.DataFrame) -> pd.Series:
    """The TPOT (ms) a summary's rows price an engine step at: ``tpot_weighted_ms`` (token-weighted, over
    steady requests), the mean TPOT where a table has none (one saved before it, a hand-made one)."""
    mean = rows["mean_tpot_ms"] if "mean_tpot_ms" in rows else pd.Series(math.nan, index=rows.index)
    return rows["tpot_weighted_ms"].fillna(mean) if "tpot_weighted_ms" in rows else mean


def level_acceptance(run: pd.DataFrame) -> Fallback:
    """``counter_rates``' other inputs over a level's runs: summed verification steps and their output
    tokens; the gauges (one reading per run, each that run's tail) averaged. Absent columns (records
    from before these fields, a vLLM bench file) read as nothing reported."""
    total = lambda name: float(run[name].sum()) if name in run else 0.0  # noqa: E731
    mean = lambda name: float(run[name].mean()) if name in run and run[name].notna().any() else math.nan  # noqa: E731
    return Fallback(verify_steps=total("spec_verify_ct"), verified_tokens=total("verified_output_tokens"),
                    gauges=(mean("spec_accept_rate_gauge"), mean("spec_accept_length_gauge")))


def summed_lists(lists: list[list[float]]) -> list[float]:
    """Element-wise sum of lists of different lengths (missing entries count as 0)."""
    width = max((len(x) for x in lists), default=0)
    return np.sum([list(x) + [0.0] * (width - len(x)) for x in lists], axis=0).tolist() if width else []


def goodput(steady: pd.DataFrame, slo_tpot_ms: float, request_rate: float) -> float:
    """Requests per second that met the TPOT SLO: the level's request rate times the share of its
    steady requests that met it (every one when there is no SLO)."""
    met = steady if not slo_tpot_ms else steady[steady["tpot"].fillna(0) * 1e3 <= slo_tpot_ms]
    return request_rate * len(met) / len(steady) if len(steady) else math.nan


def paired_requests(records: pd.DataFrame, config: str, level, baseline: str) -> pd.DataFrame:
    """A configuration's successful steady requests at one level (``steady_records``) joined to the
    baseline's on (round, prompt, cycle): a pair is two steady requests of the same prompt asking the
    same length. Never on the position sent: the order rotates round by round. Records without a
    ``cycle`` (tables from before it, a vLLM bench file) pair on (round, ``prompt_index``), which there
    numbers the requests in the order sent."""
    column = shape_of(records).column
    keys = ["round", prompt_column(records), "cycle"] if "cycle" in records else ["round", "prompt_index"]
    pick = lambda name: steady_records(records[(records["config"] == name) & (records[column] == level)  # noqa: E731
                                               & records["success"]])
    return pick(config).merge(pick(baseline), on=keys, suffixes=("", "_base"))


def decode_timed(records: pd.DataFrame) -> pd.DataFrame:
    """``records`` with each request's decode phase, what a TPOT speedup is taken over: the tokens
    after the first (``decode_tokens``) and the seconds they took (``decode_s``)."""
    return records.assign(decode_tokens=records["output_tokens"] - 1, decode_s=records["latency"] - records["ttft"])


def row_rng(seed: int, config: str, level) -> np.random.Generator:
    """The bootstrap's generator for one (configuration, level) row, seeded from the three: a row's CI
    is then the same whatever rows come before it, or whether they are there at all (one generator
    shared by every row made each CI depend on the table's row order)."""
    return np.random.default_rng([seed, zlib.crc32(config.encode()), int(round(float(level) * 1000))])


def speedup_ci(paired: pd.DataFrame, tokens: str, time: str, rng, n_boot: int) -> tuple[float, float, float]:
    """(speedup, lo, hi) of tokens per time over the baseline's, the CI resampling prompts as clusters.

    A prompt is the unit: every request of it — each round, each copy cycled to fill a level, each
    repeat in a trace — moves with it. Rounds resend the same prompts greedily to the same servers,
    so they repeat the same tokens and the same acceptance: counted as independent draws, as (prompt,
    round) units were, three rounds narrowed a CI by √3 with nothing new learnt. Rounds are not also
    resampled inside a prompt: each prompt's totals already carry its rounds' spread, and a second
    stage would count it twice (Davison & Hinkley 1997, §3.8: resample the top stage only). The
    prompt is ``prompt_id`` where the records carry one, else ``prompt_index``; clusters are numbered
    in sorted order, so row order never moves a draw.

    The interval is the bootstrap's alone, at 95% for one row: a family's rows are read together
    with the launch noise added (``simultaneous``)."""
    prompt = paired["prompt_id"] if "prompt_id" in paired else paired["prompt_index"]
    totals = ["tokens", "seconds", "tokens_base", "seconds_base"]  # paired_speedup's order
    frame = pd.DataFrame({"unit": prompt.groupby(prompt).ngroup(),
                          "tokens": paired[tokens], "seconds": paired[time],
                          "tokens_base": paired[f"{tokens}_base"], "seconds_base": paired[f"{time}_base"]})
    point = float(paired_speedup(frame[totals].sum().to_numpy()))
    lo, hi = bootstrap_speedup(frame, np.unique(frame["unit"]), rng, n_boot, columns=totals, unit="unit")
    return point, lo, hi


def add_speedups(summary: pd.DataFrame, records: pd.DataFrame, baseline: str, seed: int, n_boot: int,
                 launch_noise: LaunchNoise | None = None) -> pd.DataFrame:
    """Each row's TPOT, E2E and output-throughput speedups over ``baseline`` at its level with 95% CIs.

    The speculative rows (every configuration but the baseline and its A/A twin, at every level) are
    one family: their CIs are simultaneous over it, the launch noise included (``simultaneous``:
    one critical value ``critical`` for the three metrics; ``tpot_log_var``, ``launch_sigma``,
    ``launch_pairs``, ``launches`` say what each CI rests on, so two rows can be compared: the
    difference of their log speedups has variance v_A + v_B + s²·(1/L), read at the same c). The
    baseline's own row is 1 against itself; the twin's row is its raw bootstrap CI (``ci``: "raw A/A
    twin"), never widened by a noise measured from it."""
    records = decode_timed(records)
    rows, column = [], shape_of(summary).column
    for row in summary.to_dict("records"):
        rng = row_rng(seed, row["config"], row[column])
        paired = paired_requests(records, row["config"], row[column], baseline)
        base = summary[(summary["config"] == baseline) & (summary[column] == row[column])]
        if paired.empty or base.empty:
            rows.append(row)
            continue
        row["speedup_tpot"], row["speedup_tpot_lo"], row["speedup_tpot_hi"] = speedup_ci(
            paired, "decode_tokens", "decode_s", rng, n_boot)
        e2e, lo, hi = speedup_ci(paired, "output_tokens", "latency", rng, n_boot)
        row["speedup_e2el"], row["speedup_e2el_lo"], row["speedup_e2el_hi"] = e2e, lo, hi
        row["speedup_output_throughput"] = row["output_throughput"] / float(base["output_throughput"].iloc[0])
        row["identical_outputs"] = int((paired["generated_text"] == paired["generated_text_base"]).sum())
        row["paired_requests"] = len(paired)
        row["launches"] = launches_in(paired)
        row["over"] = baseline
        rows.append(row)
    table = pd.DataFrame(rows)
    if "over" not in table:
        return table
    family = table["over"].notna() & ~table["config"].isin([baseline, AA_TWIN_CONFIG])
    table["ci"] = np.where(family, "simultaneous", np.where(table["config"] == AA_TWIN_CONFIG, "raw A/A twin", ""))
    if family.any():
        widened = simultaneous(table[family], launch_noise, ("speedup_tpot", "speedup_e2el"), seed)
        for name in widened:
            table.loc[family, name] = widened[name]
    raw = table["over"].notna() & ~family
    table.loc[raw, "tpot_log_var"] = [log_var(p, lo, hi) for p, lo, hi in table.loc[
        raw, ["speedup_tpot", "speedup_tpot_lo", "speedup_tpot_hi"]].itertuples(index=False)]
    table.loc[raw, ["launch_sigma", "launch_pairs", "critical"]] = [0.0, 0, Z95]
    scale = table["speedup_output_throughput"] / table["speedup_e2el"]  # Little's law: the E2E CI, scaled
    table["speedup_output_throughput_lo"] = table["speedup_e2el_lo"] * scale
    table["speedup_output_throughput_hi"] = table["speedup_e2el_hi"] * scale
    return table.drop(columns="over")


def log_cross(levels: np.ndarray, values: np.ndarray) -> float:
    """The level where ``values`` falls below 1 for good (the stretch below 1 that runs to the top
    level: a dip that recovers is no crossover), interpolated in log2 of the level; NaN if the top
    level is at or above 1, the first level if every level is below."""
    above = np.flatnonzero(~(values < 1.0))  # NaN (no CI bound) is not below 1
    if len(above) == 0:
        return float(levels[0])
    i = above[-1] + 1  # the first level of the stretch below 1 to the top
    if i == len(values):
        return math.nan
    a, b = np.log2(levels[i - 1]), np.log2(levels[i])
    frac = (values[i - 1] - 1.0) / (values[i - 1] - values[i])
    return float(2 ** (a + frac * (b - a)))


def pay_verdict(levels: np.ndarray, values: np.ndarray) -> tuple[str, float, float]:
    """(verdict, first and last level of a losing stretch that recovers): "never pays" (below 1
    everywhere), "pays at every level measured", "stops paying" (below 1 from some level to the top)
    or "loses between X and Y" (below 1 from X to Y, above it again at the top)."""
    below = values < 1.0
    if below.all():
        return "never pays", math.nan, math.nan
    if not below.any():
        return "pays at every level measured", math.nan, math.nan
    if below[-1]:
        return "stops paying", math.nan, math.nan
    lo, hi = float(levels[below].min()), float(levels[below].max())
    return f"loses between {lo:g} and {hi:g}", lo, hi


def excludes_one(row, metric: str) -> bool:
    """Whether a level's 95% CI of ``metric`` lies wholly above or below 1: only then does it pay or
    lose; a CI holding 1 is no measurable difference."""
    return bool(row[f"{metric}_lo"] > 1.0 or row[f"{metric}_hi"] < 1.0)


def crossover(summary: pd.DataFrame, metric: str = "speedup_output_throughput",
              baseline: str = BASELINE_CONFIG) -> pd.DataFrame:
    """Per configuration: the level (a concurrency, or a request rate for Poisson arrivals: ``level``
    names which) where ``metric`` falls below 1.0 for good (log-interpolated), with a CI from where its
    lower and upper 95% bounds do; ``verdict`` says which case it is (``pay_verdict``: a dip that
    recovers is "loses between", ``loses_from`` to ``loses_to``, not "stops paying"). Whether the
    lowest and top levels' CIs exclude 1 (``ci_excludes_1_lowest``, ``_top``; ``dip_ci_below_1``: a
    level of the dip's does) says where the point estimates are more than noise. Spec-off's A/A twin
    (``AA_TWIN_CONFIG``) is no configuration to judge: it measures the launch noise."""
    if metric not in summary:
        raise ParameterError(f"no {metric} in the summary: the sweep needs a {baseline!r} configuration")
    rows, shape = [], shape_of(summary)
    column = shape.column
    for config, group in summary[~summary["config"].isin([baseline, AA_TWIN_CONFIG])].groupby("config", sort=False):
        group = group.sort_values(column)
        levels = group[column].to_numpy(float)
        point, lo, hi = (log_cross(levels, group[c].to_numpy(float)) for c in (metric, f"{metric}_lo",
                                                                                  f"{metric}_hi"))
        verdict, loses_from, loses_to = pay_verdict(levels, group[metric].to_numpy(float))
        dip = group[(group[column] >= loses_from) & (group[column] <= loses_to)]
        rows.append({"config": config, "metric": metric, "crossover": point, "crossover_lo": lo,
                     "crossover_hi": hi, "verdict": verdict, "min_level": float(levels.min()),
                     "max_level": float(levels.max()), "level": column, "load": shape.name, "loses_from": loses_from,
                     "loses_to": loses_to, "ci_excludes_1_lowest": excludes_one(group.iloc[0], metric),
                     "ci_excludes_1_top": excludes_one(group.iloc[-1], metric),
                     "dip_ci_below_1": bool((dip[f"{metric}_hi"] < 1.0).any())})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------ launch noise and simultaneous CIs


@dataclass(frozen=True, kw_only=True)
class AaPair:
    """One A/A launch pair as stored: per level its log TPOT speedup ``d`` (twin over spec-off) and the
    bootstrap's variance ``v`` of it; ``id`` tells the same pair saved twice apart; ``date`` UTC ISO."""

    id: str
    date: str
    levels: list[float]
    d: list[float]
    v: list[float]


@dataclass(frozen=True, kw_only=True)
class LaunchNoise:
    """sigma: the sd of log(speedup) between two launches of one configuration (s); ``pairs``: the
    independent A/A launch pairs it rests on (P, its degrees of freedom; 0: not measured);
    ``first``/``last``: their dates; ``source``: where they come from (a store, a twin URL, a sweep);
    ``sampling_var``: the pairs' mean sampling variance of ū (Σ_l v_l ÷ levels²), which s² includes."""

    sigma: float
    pairs: int
    source: str
    first: str = ""
    last: str = ""
    sampling_var: float = 0.0

    def record(self) -> dict:
        """What a run's results keep of it (``launch_noise`` in ``<run_name>.results.json``)."""
        return asdict(self)

    def text(self) -> str:
        """One line a notebook prints: what every CI carries for launch noise, and what it rests on."""
        if not self.pairs:
            return f"{NOT_MEASURED} ({self.source}): every CI is about the prompts only"
        dates = self.first[:10] if self.first[:10] == self.last[:10] else f"{self.first[:10]}–{self.last[:10]}"
        return (f"launch noise σ = {self.sigma:.3f} in log speedup from {self.pairs} A/A launch pair(s) measured "
                f"{dates} ({self.source}); CIs simultaneous over each table's configurations and levels")


def noise_from(pairs: list[AaPair], source: str) -> LaunchNoise:
    """s from independent pairs: s² = mean over pairs of (mean over the pair's levels of d)², P = pairs."""
    pairs = [p for p in pairs if p.d]
    if not pairs:
        return LaunchNoise(sigma=0.0, pairs=0, source=source)
    means = [float(np.mean(p.d)) for p in pairs]
    sampling = [float(np.sum(p.v)) / len(p.v) ** 2 for p in pairs]
    dates = sorted(p.date for p in pairs)
    return LaunchNoise(sigma=math.sqrt(float(np.mean(np.square(means)))), pairs=len(means), source=source,
                       first=dates[0], last=dates[-1], sampling_var=float(np.mean(sampling)))


# ------------------------------------------------------------------ simultaneous CIs


def boot_se(point: float, bound: float) -> float:
    """One side's bootstrap standard error in log space: |log(bound ÷ point)| ÷ 1.96."""
    return abs(math.log(bound / point)) / Z95


def log_var(point: float, lo: float, hi: float) -> float:
    """The bootstrap's variance of a log speedup, from its 95% CI: the mean of the two sides' se, squared
    (NaN where there is no interval)."""
    if not all(x > 0 for x in (point, lo, hi)):
        return math.nan
    return ((boot_se(point, lo) + boot_se(point, hi)) / 2) ** 2


def launch_share(launches_x: float, launches_y: float) -> float:
    """The share of s² a contrast of X over Y carries: each side's offset has variance s²/2 ÷ its launches."""
    return 0.5 / max(launches_x, 1) + 0.5 / max(launches_y, 1)


def critical(rows: pd.DataFrame, noise: LaunchNoise | None, level: float = LEVEL, draws: int = DRAWS,
             seed: int = 0) -> float:
    """The family's critical value c: the ``level`` quantile of max |T| over ``rows`` (columns ``config``,
    ``over``: the two launches a row contrasts; ``log_var``: its bootstrap variance; ``launches``: launch
    numbers per side), T as in the module docstring. Rows without a variance (no interval) are no part
    of the family; none left: 1.96."""
    rows = rows[rows["log_var"].notna()]
    if rows.empty:
        return Z95
    rng = np.random.default_rng(seed)
    s2, pairs = (noise.sigma ** 2, noise.pairs) if noise is not None and noise.pairs else (0.0, 0)
    names = sorted(set(rows["config"]) | set(rows["over"]))
    index = {name: i for i, name in enumerate(names)}
    launches = rows["launches"].to_numpy(float) if "launches" in rows else np.ones(len(rows))
    x, y = rows["config"].map(index).to_numpy(), rows["over"].map(index).to_numpy()
    share = np.array([launch_share(n, n) for n in launches])  # [R]
    var = rows["log_var"].to_numpy(float)  # [R]
    # σ² as the P pairs leave it: s²·P/χ²_P less their own sampling (v alone when nothing is measured)
    floor = noise.sampling_var if pairs else 0.0
    true = np.maximum(s2 * pairs / rng.chisquare(pairs, size=(draws, 1)) - floor, 0.0) if pairs \
        else np.zeros((draws, 1))  # [D, 1]
    offsets = rng.standard_normal((draws, len(names))) * np.sqrt(true / 2)  # [D, N], one launch each
    launch = (offsets[:, x] - offsets[:, y]) / np.sqrt(launches)  # [D, R]: averaged over the row's launches
    sampling = rng.standard_normal((draws, len(rows))) * np.sqrt(var)  # [D, R]
    t = (launch + sampling) / np.sqrt(var + s2 * share)  # [D, R]
    return float(np.quantile(np.abs(t).max(axis=1), level))


def widened(point: float, lo: float, hi: float, term: float, c: float = Z95) -> tuple[float, float]:
    """(lo, hi) read at critical value ``c`` with the launch ``term`` (sd in log) added: each side's
    half-width in log space c·sqrt(se² + term²), se that side's bootstrap one (``boot_se``), so a
    skewed interval stays skewed; NaN stays NaN."""
    if any(not (x > 0) for x in (point, lo, hi)):
        return lo, hi
    side = lambda bound: c * math.hypot(boot_se(point, bound), term)  # noqa: E731
    return point * math.exp(-side(lo)), point * math.exp(side(hi))


def simultaneous(rows: pd.DataFrame, noise: LaunchNoise | None, metrics: tuple[str, ...] = ("speedup_tpot",),
                 seed: int = 0) -> pd.DataFrame:
    """``rows`` (one family: ``config``, ``over``, ``launches`` and each metric's raw bootstrap
    ``metric``, ``metric_lo``, ``metric_hi``) with every metric's CI made simultaneous over the family
    (``critical`` from the first metric's variances, the same c for the others: they are read together)
    and the columns a chooser compares two rows with: ``tpot_log_var`` (the first metric's bootstrap
    variance of its log), ``launch_sigma`` (s), ``launch_pairs`` (P), ``launches`` and ``critical`` (c)."""
    rows = rows.copy()
    first = metrics[0]
    rows["tpot_log_var"] = [log_var(p, lo, hi) for p, lo, hi in
                            zip(rows[first], rows[f"{first}_lo"], rows[f"{first}_hi"])]
    if "launches" not in rows:
        rows["launches"] = 1
    c = critical(rows.rename(columns={"tpot_log_var": "log_var"}), noise, seed=seed)
    s = noise.sigma if noise is not None and noise.pairs else 0.0
    for metric in metrics:
        bounds = [widened(p, lo, hi, s * math.sqrt(launch_share(n, n)), c) for p, lo, hi, n in
                  zip(rows[metric], rows[f"{metric}_lo"], rows[f"{metric}_hi"], rows["launches"])]
        rows[f"{metric}_lo"], rows[f"{metric}_hi"] = [b[0] for b in bounds], [b[1] for b in bounds]
    rows["launch_sigma"], rows["launch_pairs"] = s, noise.pairs if noise is not None else 0
    rows["critical"] = c
    return rows


def launches_in(paired: pd.DataFrame) -> int:
    """Independent launch pairs a paired table spans: its distinct ``launch`` numbers (a sweep that
    relaunches each round numbers them), 1 where records carry none (one launch per configuration)."""
    return max(int(paired["launch"].nunique()), 1) if "launch" in paired else 1


# ------------------------------------------------------------------ an A/A pair from a sweep's records


def aa_pairs(records: pd.DataFrame, n_boot: int = 200, seed: int = 0, now: datetime | None = None
             ) -> list[AaPair]:
    """The A/A pairs of a sweep's records: spec-off and its twin are one configuration launched twice,
    so every log TPOT speedup d of the twin over spec-off is noise. One pair per launch number (a sweep
    that relaunches each round measures a pair per round), with per level d — the rounds that ran on
    that pair pooled, as a configuration's CI pools them — and the bootstrap's variance v of it
    (prompts resampled with their rounds, ``speedup_ci``). Its id hashes the pair's
    requests, so the same sweep saved twice is one pair."""
    names = set(records["config"]) if "config" in records else set()
    if not {AA_TWIN_CONFIG, BASELINE_CONFIG} <= names:
        raise ParameterError(f"an A/A pair needs records of both {AA_TWIN_CONFIG!r} and {BASELINE_CONFIG!r}, got "
                             f"{sorted(names)}: sweep with serving_stats.with_twin(configs) to launch spec-off twice")
    timed, column = decode_timed(records), shape_of(records).column
    cells: dict = {}  # launch -> [(level, d, v, requests)]
    for level in sorted(timed.loc[timed["config"] == AA_TWIN_CONFIG, column].unique()):
        paired = paired_requests(timed, AA_TWIN_CONFIG, level, BASELINE_CONFIG)
        by_launch = paired.groupby("launch", sort=True) if "launch" in paired else [(0, paired)]
        for launch, cell in by_launch:
            rng = row_rng(seed, f"{AA_TWIN_CONFIG} over {BASELINE_CONFIG} launch {launch}", level)
            point, lo, hi = speedup_ci(cell, "decode_tokens", "decode_s", rng, n_boot)
            if point > 0:
                v = log_var(point, lo, hi)
                times = np.append(cell[["decode_s", "decode_s_base"]].to_numpy(float).ravel(), [float(level), launch])
                cells.setdefault(int(launch), []).append((float(level), math.log(point), 0.0 if math.isnan(v) else v,
                                                          times))
    if not cells:
        raise ParameterError(f"{AA_TWIN_CONFIG!r} and {BASELINE_CONFIG!r} share no successful request: "
                             "no A/A speedup to read")
    date = (now or datetime.now(timezone.utc)).isoformat(timespec="seconds")
    out = []
    for _, rows in sorted(cells.items()):
        digest = hashlib.sha1(np.concatenate([r[3] for r in rows]).round(9).tobytes()).hexdigest()[:16]
        out.append(AaPair(id=digest, date=date, levels=[r[0] for r in rows], d=[r[1] for r in rows],
                          v=[r[2] for r in rows]))
    return out


# ------------------------------------------------------------------ the store


@dataclass(frozen=True, kw_only=True)
class NoiseKey:
    """What launch noise is measured for: a machine (CPU model and cores, and the GPU torch sees; an
    endpoint's host), an engine, its version and its threads (0: the engine's default)."""

    machine: str
    engine: str
    version: str = ""
    threads: int = 0

    def slug(self) -> str:
        text = f"{self.engine} {self.version} {self.threads}t {self.machine}".lower()
        return re.sub(r"[^a-z0-9.]+", "-", text).strip("-")


@cache
def machine_name() -> str:
    """This machine for launch noise: the CPU model, its cores and the GPU torch sees (if any)."""
    gpu = gpu_name()  # imports torch (deferred there): once per process
    return f"{cpu_name()} {os.cpu_count()}c" + (f" {gpu}" if gpu else "")


def noise_key(configs: list) -> NoiseKey:
    """The store a sweep of ``configs`` (one engine's, spec-off first) reads and adds to: this machine,
    ``config.engine``'s name and ``version``, the configurations' threads."""
    first = configs[0]
    engine = first.engine
    return NoiseKey(machine=machine_name(), engine=engine.name, version=str(getattr(engine, "version", "") or ""),
                    threads=int(getattr(first, "threads", 0) or 0))


def endpoint_key(engine: str, host: str) -> NoiseKey:
    """The store of an endpoint's launch noise: its engine on its host (not this client's machine)."""
    return NoiseKey(machine=f"endpoint {host}", engine=engine)


def noise_path(key: NoiseKey) -> Path:
    """``$SPECNB_LAUNCH_NOISE`` (a test suite's own folder: its simulated launches are not this
    machine's), else ``launch-noise/`` in specnb's cache; one file per key."""
    folder = os.environ.get("SPECNB_LAUNCH_NOISE") or cache_dir() / "launch-noise"
    return Path(folder) / f"{key.slug()}.json"


def stored_pairs(key: NoiseKey) -> list[AaPair]:
    """The pairs stored for ``key`` ([]: none yet, or unreadable)."""
    try:
        saved = json.loads(noise_path(key).read_text())
        names = {f.name for f in fields(AaPair)}
        return [AaPair(**{k: v for k, v in pair.items() if k in names}) for pair in saved["pairs"]]
    except (OSError, ValueError, TypeError, KeyError):
        return []


def save_pairs(key: NoiseKey, pairs: list[AaPair]) -> list[AaPair]:
    """Add ``pairs`` to ``key``'s store, each once (by id); every pair stored after."""
    stored = stored_pairs(key)
    known = {p.id for p in stored}
    stored += [p for p in pairs if p.id not in known and not known.add(p.id)]
    path = noise_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps({"key": asdict(key), "pairs": [asdict(p) for p in stored]}, indent=1))
    partial.replace(path)  # never seen half-written
    return stored


def store_source(key: NoiseKey) -> str:
    """How a text names the store: what it is keyed on."""
    version = f" {key.version}" if key.version else ""
    threads = f", {key.threads} threads" if key.threads else ""
    return f"stored for {key.engine}{version}{threads} on {key.machine}"


def stored_noise(key: NoiseKey) -> LaunchNoise:
    """The launch noise of ``key``'s stored pairs (P = 0: none yet, and its source says so)."""
    pairs = stored_pairs(key)
    return noise_from(pairs, store_source(key) if pairs else f"no A/A pair {store_source(key)}")


# ------------------------------------------------------------------ how a sweep gets its A/A pair


def twin_of(config):
    """``config`` (spec-off) launched a second time, named ``AA_TWIN_CONFIG``: the same engine settings."""
    names = {f.name for f in fields(config)}
    if "aa_twin" in names:  # a launch configuration whose speculation is derived from its flags
        return replace(config, aa_twin=True)
    return replace(config, speculation=replace(config.speculation, aa_twin=True))  # one that holds it


def wants_twin(key: NoiseKey, now: datetime | None = None) -> bool:
    """Whether a sweep should measure an A/A pair: the store holds fewer than ``MIN_PAIRS`` pairs, or
    none from the last ``FRESH_DAYS`` days (a machine's noise drifts with its updates and load)."""
    pairs = stored_pairs(key)
    since = (now or datetime.now(timezone.utc)) - timedelta(days=FRESH_DAYS)
    return len(pairs) < MIN_PAIRS or not any(datetime.fromisoformat(p.date) >= since for p in pairs)


def with_twin(configs: list, aa_twin: bool = False, now: datetime | None = None) -> list:
    """``configs`` (spec-off first, as every engine's ``configs`` gives them) with spec-off's twin last
    when ``aa_twin`` asks or ``wants_twin`` says so; as they are otherwise."""
    if not configs or configs[0].name != BASELINE_CONFIG:
        raise ParameterError(f"the first configuration must be {BASELINE_CONFIG!r} to have an A/A twin, got "
                             f"{configs[0].name if configs else 'none'!r}")
    if any(c.name == AA_TWIN_CONFIG for c in configs) or not (aa_twin or wants_twin(noise_key(configs), now)):
        return list(configs)
    return [*configs, twin_of(configs[0])]


def noise_for(records: pd.DataFrame, key: NoiseKey, n_boot: int = 200, seed: int = 0) -> LaunchNoise:
    """The launch noise to summarise a sweep with: the stored pairs, plus the sweep's own where its
    records hold the A/A twin (added to the store once, whoever asks first)."""
    if "config" in records and AA_TWIN_CONFIG in set(records["config"]):
        pairs = save_pairs(key, aa_pairs(records, n_boot=n_boot, seed=seed))
        return noise_from(pairs, store_source(key) + ", this sweep's twin included")
    return stored_noise(key)

# ------------------------------------------------------------------ the policy measured


def best_static(summary: pd.DataFrame, baseline: str = BASELINE_CONFIG) -> pd.DataFrame:
    """Per level, the static configuration with the best TPOT speedup, and spec-off at 1.00x where
    none beats it: what a schedule launched as its own server is held against (``adaptive_check``),
    and the verdict's candidates before it (their ``shortfall``, ``serving_verdict.price``)."""
    column = shape_of(summary).column
    static = summary[~summary["config"].isin([baseline, *NOT_CANDIDATES])]
    rows = []
    for level in sorted(summary[column].unique()):
        here = static[static[column] == level].sort_values("speedup_tpot")
        best = here.iloc[-1] if len(here) else None
        paying = best is not None and best["speedup_tpot"] >= 1.0
        rows.append({column: level, "config": best["config"] if paying else baseline,
                     "speedup_tpot": float(best["speedup_tpot"]) if paying else 1.0})
    return pd.DataFrame(rows, columns=[column, "config", "speedup_tpot"])


def draft_lengths(summary: pd.DataFrame, baseline: str = BASELINE_CONFIG) -> dict[str, int]:
    """Each speculative static configuration's draft length, as its records carry it (``k``)."""
    rows = summary[~summary["config"].isin([baseline, *NOT_CANDIDATES])]
    if "k" not in rows:
        return {}
    return {c: int(k) for c, k in zip(rows["config"], rows["k"]) if k and not pd.isna(k)}


def adaptive_check(summary: pd.DataFrame, adaptive: str = ADAPTIVE_CONFIG, baseline: str = BASELINE_CONFIG,
                   target: float = 0.95, records: pd.DataFrame | None = None, *, n_boot: int = 1000, seed: int = 0,
                   noise: LaunchNoise | None = None) -> pd.DataFrame:
    """Per level: the adaptive configuration's TPOT speedup against the best static configuration's
    at that level (``best_static``: spec-off counts as 1.00x), their ratio and whether it reaches
    ``target``. With the pass's ``records``, also the ratio's CI: adaptive's requests paired with the
    best static one's on the same prompts (``ratio_lo``, ``ratio_hi``; prompts resampled with their
    rounds, ``n_boot`` from ``seed``), simultaneous over the levels with the launch ``noise`` counted
    (``simultaneous``: two launches a level), so a miss inside the pass's noise shows;
    ``launch_sigma``, ``launch_pairs`` and ``critical`` say what it rests on."""
    column = shape_of(summary).column
    if adaptive not in set(summary.get("config", [])) or "speedup_tpot" not in summary:
        return pd.DataFrame()
    timed = None if records is None else decode_timed(records)
    best = best_static(summary, baseline).set_index(column)
    rows = []
    for level, group in summary.groupby(column):
        own = group[group["config"] == adaptive]
        if own.empty:
            continue
        best_config, best_x = best.loc[level, "config"], float(best.loc[level, "speedup_tpot"])
        x = float(own["speedup_tpot"].iloc[0])
        paired = paired_requests(timed, adaptive, level, best_config) if timed is not None else pd.DataFrame()
        ratio = speedup_ci(paired, "decode_tokens", "decode_s", row_rng(seed, adaptive, level), n_boot) \
            if len(paired) else (math.nan,) * 3
        rows.append({column: level, "speedup_tpot": x, "speedup_tpot_lo": float(own["speedup_tpot_lo"].iloc[0]),
                     "speedup_tpot_hi": float(own["speedup_tpot_hi"].iloc[0]), "best_static": best_config,
                     "best_static_speedup_tpot": best_x, "ratio": x / best_x, "meets": x / best_x >= target,
                     **ci_columns("paired_ratio", ratio), "config": adaptive, "over": best_config,
                     "launches": launches_in(paired) if len(paired) else 1})
    if not rows:
        return pd.DataFrame()
    table = simultaneous(pd.DataFrame(rows), noise, ("paired_ratio",), seed)
    table = table.rename(columns={"paired_ratio_lo": "ratio_lo", "paired_ratio_hi": "ratio_hi"})
    return table.drop(columns=["paired_ratio", "config", "over", "tpot_log_var"])


def trace_check(records: pd.DataFrame, adaptive: str = ADAPTIVE_CONFIG, n_boot: int = 1000,
                seed: int = 0, baseline: str = BASELINE_CONFIG, noise: LaunchNoise | None = None) -> pd.DataFrame:
    """Over one trace (every request of a Poisson or bursty run), per other configuration: its paired
    TPOT speedup over ``baseline`` (``speedup_tpot``), adaptive's over it (``adaptive_speedup_tpot``) and
    its own over the trace's fastest configuration, adaptive included (``best``, the lowest TPOT over
    the trace's tokens; ``speedup_over_best``), each with a CI resampling prompts with all their
    requests, simultaneous over the trace's configurations (each of the three columns a family of its
    own, ``simultaneous``) with the launch ``noise`` counted (``launch_sigma``,
    ``launch_pairs``, ``critical``: the ``adaptive_speedup_tpot`` family's); mean TPOT as read.
    ``beats``: adaptive's CI against it lies above 1, since a mean lower by a millisecond or two is
    noise, not a win (``serving_verdict.with_trace`` reads the trace with these). A trace without
    adaptive (a static launch, no schedule to run) compares the static configurations alone: the
    adaptive columns NaN, ``beats`` False."""
    ok = records[records["success"]] if len(records) else records
    if ok.empty or ok["config"].nunique() < 2:
        return pd.DataFrame()
    ran = adaptive in set(ok["config"])
    timed, mean_ms = decode_timed(ok), ok.groupby("config")["tpot"].mean() * 1e3
    pooled = timed.groupby("config")[["decode_s", "decode_tokens"]].sum()
    best = (pooled["decode_s"] / pooled["decode_tokens"]).idxmin()
    ks = ok.groupby("config")["k"].first().to_dict() if "k" in ok else {}  # what each drafts, as recorded
    speedup = lambda config, over: trace_speedup(timed, config, over, seed, n_boot)  # noqa: E731
    configs = [c for c in ok["config"].unique() if c != adaptive]
    rows = [{"config": config, "k": ks.get(config, math.nan), "mean_tpot_ms": float(mean_ms[config]),
             "adaptive_mean_tpot_ms": float(mean_ms[adaptive]) if ran else math.nan, "best": best,
             "launches": launches_in(ok[ok["config"] == config])} for config in configs]
    families = {"speedup_tpot": lambda config: (config, baseline),
                "adaptive_speedup_tpot": lambda config: (adaptive, config) if ran else None,
                "speedup_over_best": lambda config: (config, best)}
    table = pd.DataFrame(rows)
    for name, contrast in families.items():
        pairs = [contrast(config) for config in configs]
        values = [speedup(*pair) if pair else (math.nan,) * 3 for pair in pairs]
        family = pd.DataFrame([{"config": pair[0], "over": pair[1], "launches": n, **ci_columns(name, value)}
                               for pair, value, n in zip(pairs, values, table["launches"])
                               if pair and pair[0] != pair[1]])
        widened = simultaneous(family, noise, (name,), seed) if len(family) else family
        at = {row["over"] if name == "adaptive_speedup_tpot" else row["config"]: row  # the row's configuration
              for row in widened.to_dict("records")}
        for j, column in enumerate(ci_columns(name, (0, 0, 0))):  # point, lo, hi
            table[column] = [at[config][column] if config in at else value[j] for config, value in zip(configs, values)]
        if name == "adaptive_speedup_tpot":
            table["launch_sigma"] = noise.sigma if noise is not None and noise.pairs else 0.0
            table["launch_pairs"] = noise.pairs if noise is not None else 0
            table["critical"] = float(widened["critical"].iloc[0]) if len(widened) else math.nan
    table["beats"] = table["adaptive_speedup_tpot_lo"] > 1.0
    return table.drop(columns="launches")


def ci_columns(name: str, values: tuple[float, float, float]) -> dict:
    """(point, lo, hi) as the columns ``name``, ``name_lo``, ``name_hi``."""
    return dict(zip([name, f"{name}_lo", f"{name}_hi"], values))


def trace_speedup(timed: pd.DataFrame, config: str, over: str, seed: int, n_boot: int) -> tuple[float, float, float]:
    """``config``'s paired TPOT speedup over ``over`` across every level of a trace, with its raw 95%
    bootstrap CI (NaN where they share no request): a prompt is one cluster across the trace's levels
    and rounds (``speedup_ci``); its own generator per pair (``row_rng``)."""
    column = shape_of(timed).column
    levels = timed[column].unique()
    paired = pd.concat([paired_requests(timed, config, level, over) for level in levels])
    if paired.empty:
        return (math.nan,) * 3
    return speedup_ci(paired, "decode_tokens", "decode_s", row_rng(seed, f"{config} over {over}", 0), n_boot)


def trace_rate(summary: pd.DataFrame, concurrency: float, baseline: str = BASELINE_CONFIG) -> float:
    """The arrival rate (requests/s) that keeps about ``concurrency`` requests in flight on spec-off:
    its closed-loop request throughput there (Little's law), interpolated in log concurrency."""
    base = summary[summary["config"] == baseline].sort_values("concurrency")
    levels, rates = np.log2(base["concurrency"].to_numpy(float)), base["request_throughput"].to_numpy(float)
    return float(np.interp(math.log2(concurrency), levels, rates))


def scheduled_k(row: dict, column: str) -> int | None:
    """The k a scheduled configuration drafts at a summary row's load: its schedule's range holding the
    row's measured mean batch (else its level); None for a configuration without a schedule. Where it
    is 0 the row's counters are not the schedule's acceptance: the few drafts in them came from moments
    the batch dipped into a drafting range (ramp-up, drain), so α and τ there are shown as such."""
    schedule = row.get("schedule")
    if not isinstance(schedule, str) or not schedule:
        return None
    batch = row.get("mean_batch")
    batch = row[column] if batch is None or pd.isna(batch) else batch
    return next((int(k) for lo, hi, k in json.loads(schedule) if lo <= round(float(batch)) <= hi), 0)

# ------------------------------------------------------------------ vLLM's own load client beside ours


ERROR_LINE = re.compile(r"^[\w.]*(Error|Exception): ")  # a Python exception's last line
CHECKED = {"ttft": "ttft", "tpot": "tpot"}  # metric -> record column, compared by their medians


class BenchFailed(SpecnbError, RuntimeError):
    """``vllm bench serve`` exited with an error or wrote no result; the message has its last line."""


def write_dataset(prompts: list[str], path: Path) -> Path:
    """The prompts as vLLM bench's ``custom`` dataset: one ``{"prompt": ...}`` per line."""
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    return path


@dataclass(frozen=True, kw_only=True)
class VllmBench:
    """How ``vllm bench serve`` is run: ``command``, the environment's ``vllm`` command line up to its
    arguments; ``tokenizer``, the model's folder it counts tokens with; ``timeout_s`` per level."""

    command: list[str]
    tokenizer: str
    timeout_s: float = 900.0


@dataclass(frozen=True, kw_only=True)
class BenchLevel:
    """One closed-loop level as vLLM bench sends it: ``n_prompts`` prompts, each once, ``concurrency``
    in flight, each asking ``max_tokens``."""

    n_prompts: int
    concurrency: int
    max_tokens: int


def bench_args(target: Target, tokenizer: str, dataset: Path, result: Path, level: BenchLevel) -> list[str]:
    """``vllm bench serve``'s arguments for one closed-loop level: every prompt once, ``concurrency``
    in flight, as our client sends them (see the module docstring)."""
    n_prompts, concurrency, max_tokens = level.n_prompts, level.concurrency, level.max_tokens
    return ["--backend", "openai-chat", "--base-url", target.url, "--endpoint", "/v1/chat/completions",
            "--model", target.model, "--tokenizer", tokenizer, "--dataset-name", "custom",
            "--dataset-path", str(dataset), "--disable-shuffle", "--skip-chat-template",
            "--custom-output-len", str(max_tokens), "--num-prompts", str(n_prompts), "--ignore-eos",
            "--temperature", "0", "--request-rate", "inf", "--max-concurrency", str(concurrency),
            "--num-warmups", "0", "--percentile-metrics", "ttft,tpot,itl,e2el", "--disable-tqdm",
            "--save-result", "--save-detailed", "--result-dir", str(result.parent),
            "--result-filename", result.name]


def run_bench(bench: VllmBench, target: Target, prompts: list[str], concurrency: int, max_tokens: int,
              folder: Path) -> dict:
    """Run ``vllm bench serve`` (``bench``, see the module docstring) on ``target`` and return the
    result JSON it saved; one line with its exception (or its last output line) when it fails."""
    folder.mkdir(parents=True, exist_ok=True)
    dataset = write_dataset(prompts, folder / f"prompts-c{concurrency}.jsonl")
    result = folder / f"vllm-bench-c{concurrency}.json"
    result.unlink(missing_ok=True)
    level = BenchLevel(n_prompts=len(prompts), concurrency=concurrency, max_tokens=max_tokens)
    argv = [*bench.command, *bench_args(target, bench.tokenizer, dataset, result, level)]
    timeout_s = bench.timeout_s
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as err:
        raise BenchFailed(f"vllm bench serve ran past {timeout_s:.0f} s at concurrency {concurrency}; "
                          "give it fewer prompts or tokens") from err
    if done.returncode or not result.exists():
        lines = [x.strip() for x in (done.stderr + "\n" + done.stdout).splitlines() if x.strip()]
        causes = [x for x in lines if ERROR_LINE.match(x)]
        last = causes[-1] if causes else (lines[-1] if lines else "no output")
        raise BenchFailed(f"vllm bench serve failed at concurrency {concurrency} (exit {done.returncode}): {last}")
    return json.loads(result.read_text())


def client_check(ours: pd.DataFrame, theirs: pd.DataFrame, tolerance: float = 0.10) -> pd.DataFrame:
    """Median TTFT and TPOT (ms) of our client's requests against vLLM bench's on the same server and
    level: one row per metric with their ratio and whether it is within ``tolerance``."""
    rows = []
    for metric, column in CHECKED.items():
        a = float(np.median(ours.loc[ours["success"], column].dropna())) * 1e3
        b = float(np.median(theirs.loc[theirs["success"], column].dropna())) * 1e3
        rows.append({"metric": f"median_{metric}_ms", "specnb": a, "vllm_bench": b, "ratio": a / b,
                     "within": abs(a / b - 1.0) <= tolerance})
    return pd.DataFrame(rows)


# The fields ``vllm bench serve --save-result --save-detailed`` writes, as in vLLM's
# vllm/benchmarks/serve.py: ``benchmark()``'s result dict (duration, completed, failed, totals; the
# per-request lists input_lens, output_lens, ttfts, itls, latencies, start_times, generated_texts,
# errors; spec_decode_num_drafts, _draft_tokens, _accepted_tokens and
# _per_position_acceptance_rates, the counters differenced around the run) merged into
# ``main_async``'s result_json (request_rate, a number or "inf"; burstiness; max_concurrency, a number
# or null). Without --save-detailed, input_lens, output_lens, start_times, ttfts, itls, generated_texts
# and errors are deleted before saving.
VLLM_LISTS = ("ttfts", "itls", "latencies", "output_lens", "input_lens", "errors")


def vllm_level(result: dict) -> dict:
    """The load columns of a vLLM bench run (``load_shapes``): a finite ``request_rate`` is open-loop
    arrivals at that rate (capped or not by ``max_concurrency``); otherwise the concurrency cap, or
    every request at once when there is none."""
    rate = result.get("request_rate", "inf")
    if rate not in (None, "inf") and math.isfinite(float(rate)):
        return {"load": Open.name, Open.column: float(rate), "burstiness": float(result.get("burstiness", 1.0))}
    return {"load": Closed.name, Closed.column: float(result.get("max_concurrency") or len(result["latencies"]))}


def from_vllm_bench(result: dict, config: str, engine: str = "vllm") -> tuple[pd.DataFrame, pd.DataFrame]:
    """(records, runs) from the JSON ``vllm bench serve --save-result --save-detailed`` writes: its
    per-request lists become rows, its spec-decode figures the run's counters (per position: its
    rates × drafts). A file saved without --save-detailed has no per-request lists: ParameterError."""
    missing = [name for name in VLLM_LISTS if name not in result]
    if missing:
        raise ParameterError(f"the vLLM bench result has no {', '.join(missing)}: save it with "
                             "`vllm bench serve --save-result --save-detailed`")
    n = len(result["latencies"])
    load = vllm_level(result)
    errors = [str(e or "") for e in result["errors"]]
    records = pd.DataFrame({
        "engine": engine, "config": config, **load, "round": 0, "prompt_index": range(n),
        "category": "", "partial": False,
        "success": [not e and bool(k) for e, k in zip(errors, result["output_lens"])],
        "error": errors, "prompt_len": result["input_lens"], "output_tokens": result["output_lens"],
        "ttft": result["ttfts"], "itl": result["itls"], "latency": result["latencies"],
        "start_time": result.get("start_times", [0.0] * n), "generated_text": result.get("generated_texts", [""] * n)})
    records["tpot"] = (records["latency"] - records["ttft"]) / (records["output_tokens"] - 1).where(
        records["output_tokens"] > 1)
    drafts = float(result.get("spec_decode_num_drafts", 0) or 0)
    per_pos = [rate * drafts for rate in result.get("spec_decode_per_position_acceptance_rates") or []]
    runs = pd.DataFrame([{"engine": engine, "config": config, **load, "round": 0,
                          "duration": result["duration"], "completed": result["completed"],
                          "failed": result.get("failed", n - result["completed"]),
                          "total_output_tokens": result["total_output_tokens"], "partial": False,
                          "spec_decode_num_drafts": drafts,
                          "spec_decode_draft_tokens": float(result.get("spec_decode_draft_tokens", 0) or 0),
                          "spec_decode_accepted_tokens": float(result.get("spec_decode_accepted_tokens", 0) or 0),
                          "accepted_per_pos": json.dumps(per_pos), "n_decode": 0.0,
                          "tokens_predicted": float(result["total_output_tokens"])}])
    return records, runs
