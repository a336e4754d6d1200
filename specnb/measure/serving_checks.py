"""The closed loop's policy, measured: per level the best static configuration (``best_static``, the
one home of "best static, else spec-off at 1.00x"), each configuration's k (``draft_lengths``), an
adaptive schedule held against the best static one per level (``adaptive_check``), and a bursty
trace's paired speedups (``trace_check``) at the rate that keeps a load in flight (``trace_rate``).
CIs resample prompts as the summary's do (``serving_summary.speedup_ci``) and are simultaneous over
each check's own family, launch noise included (``launch_noise.simultaneous``).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from specnb.measure.launch_noise import LaunchNoise, launches_in, simultaneous
from specnb.measure.load_shapes import shape_of
from specnb.measure.serving_summary import decode_timed, paired_requests, row_rng, speedup_ci
from specnb.serve.speculation import ADAPTIVE_CONFIG, BASELINE_CONFIG, NOT_CANDIDATES


def best_static(summary: pd.DataFrame, baseline: str = BASELINE_CONFIG) -> pd.DataFrame:
    """Per level, the static configuration with the best TPOT speedup, and spec-off at 1.00x where
    none beats it: what a policy is held against, before it runs (``serving_launch.choose_launch``)
    and after (``adaptive_check``)."""
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
    (``launch_noise.simultaneous``: two launches a level), so a miss inside the pass's noise shows;
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
    own, ``launch_noise.simultaneous``) with the launch ``noise`` counted (``launch_sigma``,
    ``launch_pairs``, ``critical``: the ``adaptive_speedup_tpot`` family's); mean TPOT as read.
    ``beats``: adaptive's CI against it lies above 1, since a mean lower by a millisecond or two is
    noise, not a win (``serving_decision.trace_pick`` judges the trace with these). A trace without
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
