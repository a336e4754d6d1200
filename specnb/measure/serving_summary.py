"""A serving sweep's summaries: vLLM bench's statistics per configuration and level, acceptance from
the engine's counters, speedups over spec-off with CIs, and where each configuration stops paying.

Names follow ``vllm bench serve``'s result JSON (``completed``, ``request_throughput``,
``output_throughput``, ``mean_/median_/p90_/p99_`` of ``ttft_ms``, ``tpot_ms``, ``itl_ms``,
``e2el_ms``, ``request_goodput``, ``spec_decode_acceptance_length``), so a table here and a vLLM
result file line up; ``vllm_bench.from_vllm_bench`` reads such a file into the same shape.

A closed loop's fillers (``filler``: they held the level around the measured requests) are never
summarised (``serving_steady.measured_records``). The latency statistics, ``tpot_weighted_ms`` (Σ
decode s ÷ Σ decode tokens, what an engine step is priced by) and a closed loop's throughput are
taken over steady requests (``serving_steady.steady_records``; ``steady_requests`` counts them,
``prompts_measured`` of ``prompts_total`` says how many prompts they cover, ``mean_batch`` is the
engine's own batch there). Speedups pair each steady request with spec-off's on the same prompt,
cycle, round and level (greedy and lossless: the same tokens). TPOT speedup = Σ spec-off decode time
÷ Σ decode time per output token; E2E speedup the same with whole latencies; the bootstrap resamples
prompts, each with all its rounds (``speedup_ci``), and the speculative rows' CIs are simultaneous
over the table's configurations and levels, launch-to-launch noise included (``add_speedups``,
``launch_noise.simultaneous``: ``critical``, ``launch_sigma`` and ``launch_pairs`` on each row). Output
throughput at a fixed concurrency is concurrency × tokens ÷ latency over steady requests (Little's
law, ``level_throughput``), so its speedup's CI is the E2E one, scaled. The policy measured (best
static per level, the adaptive check, the trace) is ``serving_checks``'.
"""

from __future__ import annotations

import json
import math
import zlib

import numpy as np
import pandas as pd

from specnb.core.errors import ParameterError
from specnb.measure.acceptance import Fallback, counter_rates
from specnb.measure.launch_noise import Z95, LaunchNoise, launches_in, log_var, simultaneous
from specnb.measure.load_shapes import shape_of
from specnb.measure.runs import bootstrap_speedup, paired_speedup
from specnb.measure.serving_steady import level_batch, measured_records, steady_records
from specnb.serve.speculation import AA_TWIN_CONFIG, BASELINE_CONFIG

# What each summary row carries from its records: the load's shape and the configuration's identity.
CARRIED = ("load", "burstiness", "turnovers", "max_tokens_asked", "range_ratio", "method", "family", "k",
           "uses_model", "adaptive", "schedule")
TIMES = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "latency"}


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
    (``load_shapes.shape_of``): ``concurrency`` or ``request_rate``."""
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
    with the launch noise added (``launch_noise.simultaneous``)."""
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
    one family: their CIs are simultaneous over it, the launch noise included (``launch_noise.simultaneous``:
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
