"""Checking the predictor against measurement: a held-out grid of (draft × γ × batch size) run on
prompts calibration never saw, interleaved with verifier-only as ``specnb.measure.runs`` runs
everything, with the measured speedup next to the prediction and next to Leviathan's formula fed
with the FLOPs c (what people use today); and the headline numbers behind the README.

Every measured point has a 95% CI (bootstrap over prompt batches, paired with verifier-only), and
the claims are read through it, so timing noise is never reported as a predictor's error:

- the error claim (median |error| ≤ ``ERROR_TARGET``) is *met* when the raw median is within it,
  *missed* only when the median distance from each prediction to its point's CI is beyond it, and
  otherwise *inconclusive at this budget*;
- a recommendation is *wrong* only when the best measured option's CI lies wholly above the
  recommended one's (lower bound above upper bound). Non-overlap of two 95% intervals is the
  conservative test: it calls fewer misses than the paired difference's CI would, and needs nothing
  but the table.

The grid is sized by its own first pass (``specnb.measure.sizing``): its pooled spread says how
many units a point needs for a CI of ±``CI_TARGET``, and the rest of ``budget_s`` buys repeats for
the points still wider than that, the highest predicted first, as they decide the recommendation.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pandas as pd

from specnb.core.errors import ParameterError
from specnb.measure import sizing
from specnb.measure.prompts import as_prompt_frame, prompt_tokens
from specnb.measure.runs import BASELINE, make_candidates, run_interleaved, summarise
from specnb.predict.costs import HardwareProfile
from specnb.predict.predictor import Workload, clears_break_even, predict

ERROR_TARGET = 0.10  # the predictor's claim: median |predicted − measured| ÷ measured
RECOMMENDATION_TARGET = 0.05  # a recommendation's measured speedup within 5% of the best option's
CI_TARGET = ERROR_TARGET / 2  # a point's CI half-width at which a 10% error shows outside it


def validate(profile: HardwareProfile, loaded, prompts, *, gammas=(1, 2, 3, 4, 6), batch_sizes=(1,),
             max_new_tokens: int | None = None, repeats: int = 1, budget_s: float | None = None,
             progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Measure every γ of ``gammas`` at every batch size of ``batch_sizes`` for each draft of ``loaded``
    on ``prompts``, generating ``max_new_tokens`` (None: the profile's), and set predictions beside it.

    Batch size b runs ``repeats × b`` interleaved repeats, so every grid point rests on the same
    number of timed generations (P prompts make P / b batches). Why: with 4 prompts, batch 2 would
    otherwise be 2 timed runs per point, and two options 5% apart would be ranked by timing noise.

    With ``budget_s`` (seconds for the whole validation), that first pass is a pilot: what is left
    of the budget goes to more repeats of the points whose CI is wider than ±``CI_TARGET``
    (``more_repeats``). Repeats narrow timing noise only: a spread that comes from the prompts
    themselves needs more prompts, and stays in the CI (the bootstrap keeps a prompt's repeats
    together). ``budget_s`` 0 or None: the first pass alone. Returns (raw records, one row per grid
    point with measured and predicted speedups, the measured CI, errors, and the units the point
    rests on against those it needs).
    """
    started = time.perf_counter()
    pair, models = loaded
    n_new = int(max_new_tokens or profile.max_new_tokens)
    frames = {b: whole_batches(as_prompt_frame(prompts), b) for b in batch_sizes}
    candidates = make_candidates(models, gammas)
    records = pd.concat([
        run_interleaved(pair, frames[b], candidates, max_new_tokens=n_new, batch_size=b, repeats=repeats * b,
                        progress=progress)
        for b in batch_sizes], ignore_index=True)
    table = grid_table(profile, pair, models, records, frames, n_new)
    extended = False
    for i, b in enumerate(batch_sizes if budget_s else ()):
        left = (budget_s - (time.perf_counter() - started)) / (len(batch_sizes) - i)  # shared by the rest
        at_b = records[records["batch_size"] == b]
        names, extra = more_repeats(table[table["batch_size"] == b], sizing.pooled_spread(at_b),
                                    len(frames[b]) // b, left)
        if not extra:
            continue
        chosen = [c for c in candidates if c.name == BASELINE or c.name in names]
        got = run_interleaved(pair, frames[b], chosen, max_new_tokens=n_new, batch_size=b, repeats=extra,
                              progress=progress, warmup=False)
        records = pd.concat([records, got.assign(repeat=got["repeat"] + at_b["repeat"].max() + 1)],
                            ignore_index=True)
        extended = True
    if extended:
        table = grid_table(profile, pair, models, records, frames, n_new)
    return records, table


def whole_batches(frame: pd.DataFrame, b: int) -> pd.DataFrame:
    """Whole batches only: a last, smaller batch is another grid point."""
    full = frame.iloc[: len(frame) // b * b]
    if full.empty:
        raise ParameterError(f"batch size {b} needs at least {b} validation prompts, got {len(frame)}")
    return full


def more_repeats(points: pd.DataFrame, spread: sizing.Spread, units_per_repeat: int,
                 seconds: float) -> tuple[list[str], int]:
    """Which of one batch size's points get more repeats, and how many, within ``seconds``.

    A point needs ``sizing.units_needed(spread.sd, CI_TARGET)`` units; those still wider than
    ±``CI_TARGET`` are ranked by predicted speedup (the top ones decide the recommendation) and, at
    the repeats the widest-needed point asks for, as many as the time allows are taken (each repeat
    also reruns verifier-only). When not even one fits at that many repeats, the top point alone
    gets what fits. Returns (candidate names, repeats); ``([], 0)`` when nothing needs or fits more.
    """
    if spread.df < 1 or not np.isfinite(spread.sd) or seconds <= 0:
        return [], 0
    needed = sizing.units_needed(spread.sd, CI_TARGET)
    wide = points[(points["ci_half_width"] > CI_TARGET) | points["ci_half_width"].isna()]
    wide = wide[wide["units"] < needed].sort_values("predicted_speedup", ascending=False)
    if wide.empty:
        return [], 0
    names = [f"{d} γ={int(g)}" for d, g in zip(wide["draft"], wide["gamma"])]
    repeats = -(-(needed - int(wide["units"].min())) // units_per_repeat)  # ceil
    runs_per_candidate = repeats * units_per_repeat
    fits = sizing.affordable_repeats(seconds, spread.wall_ms_per_unit, runs_per_candidate) - 1  # less the baseline
    if fits >= 1:
        return names[:fits], repeats
    repeats = sizing.affordable_repeats(seconds, spread.wall_ms_per_unit, 2 * units_per_repeat)
    return (names[:1], repeats) if repeats else ([], 0)


def grid_table(profile: HardwareProfile, pair, models: dict, records: pd.DataFrame, frames: dict,
               n_new: int) -> pd.DataFrame:
    """One row per grid point: measured speedup with its CI, the prediction, errors, and the units
    (paired runs) behind the point against ``units_needed`` for ±``CI_TARGET`` at this batch size's
    pooled spread.

    The CI is the wider of two: the bootstrap over prompt batches (``summarise``; it keeps a
    prompt's repeats together, but with 2–4 batches it covers well under 95%) and the interval from
    the grid's pooled spread (``sizing.pooled_interval``; right at small n, but it takes repeats of
    a prompt as independent). Each covers the other's blind spot."""
    rows = []
    for b, full in frames.items():
        at_b = records[records["batch_size"] == b]
        measured = summarise(at_b, n_boot=500)
        spread = sizing.pooled_spread(at_b)
        needed = sizing.units_needed(spread.sd, CI_TARGET) if spread.df >= 1 else np.nan
        width = prompt_tokens(pair.tokenizer, full, b)
        for name in models:
            workload = Workload(batch_size=b, max_new_tokens=n_new, prompt_tokens=width)
            pred = predict(profile, name, sorted(set(measured["gamma"]) - {0}), workload).table
            pred = pred.set_index("gamma")
            for _, m in measured[measured["draft"] == name].iterrows():
                p = pred.loc[int(m["gamma"])]
                lo, hi = sizing.pooled_interval(m["speedup"], spread, int(m["records"]))
                rows.append(
                    {
                        "draft": name,
                        "gamma": int(m["gamma"]),
                        "batch_size": b,
                        "measured_speedup": m["speedup"],
                        "measured_lo": np.fmin(m["speedup_lo"], lo),
                        "measured_hi": np.fmax(m["speedup_hi"], hi),
                        "bootstrap_lo": m["speedup_lo"],
                        "bootstrap_hi": m["speedup_hi"],
                        "measured_alpha": m["alpha"],
                        "measured_tau": m["tau"],
                        "units": int(m["records"]),
                        "units_needed": needed,
                        "log_speedup_sd": spread.sd,
                        "predicted_speedup": p["predicted_speedup"],
                        "predicted_lo": p["speedup_lo"],
                        "predicted_hi": p["speedup_hi"],
                        "predicted_tau": p["tokens_per_step"],
                        "flops_leviathan_speedup": p["flops_leviathan_speedup"],
                        "wallclock_leviathan_speedup": p["wallclock_leviathan_speedup"],
                    }
                )
    return add_errors(pd.DataFrame(rows))


def add_errors(table: pd.DataFrame) -> pd.DataFrame:
    """Errors as fractions of the measured speedup, and what the measured CI says of each: its
    relative half-width, whether it holds the prediction, and the prediction's distance beyond it
    (0 inside: an error the CI cannot tell from noise)."""
    table = table.copy()
    for column, name in (
        ("predicted_speedup", "error"),
        ("flops_leviathan_speedup", "flops_error"),
        ("wallclock_leviathan_speedup", "wallclock_error"),
    ):
        table[name] = (table[column] - table["measured_speedup"]) / table["measured_speedup"]
    measured, lo, hi, predicted = (table[c] for c in ("measured_speedup", "measured_lo", "measured_hi",
                                                      "predicted_speedup"))
    table["ci_half_width"] = (hi - lo) / 2 / measured
    table["prediction_in_ci"] = (predicted >= lo) & (predicted <= hi)
    beyond = np.maximum(np.maximum(lo - predicted, predicted - hi), 0.0) / measured
    table["error_beyond_ci"] = beyond.where(lo.notna() & hi.notna())  # no CI: no reading (NaN, skipped)
    return table


def recommendation_check(table: pd.DataFrame) -> pd.DataFrame:
    """Per (draft, batch): the γ the predictor recommends among the measured ones (None: verifier
    only, worth 1.0x exactly; the rule of ``specnb.predict.predictor.Prediction``) and its measured
    speedup against the best measured option: ``within_5pct`` on the point estimates, and ``wrong``
    only when the best option's CI lies wholly above the recommended one's."""
    rows = []
    for (draft, b), group in table.groupby(["draft", "batch_size"], sort=False):
        rows.append(check_choice(group, draft=draft, batch_size=b))
    for b, group in table.groupby("batch_size", sort=False):  # the whole verdict: which draft and γ
        rows.append(check_choice(group, draft="any", batch_size=b))
    return pd.DataFrame(rows)


def check_choice(group: pd.DataFrame, **keys) -> dict:
    best_pred = group.loc[group["predicted_speedup"].idxmax()]
    recommended = best_pred if clears_break_even(best_pred["predicted_speedup"], best_pred["predicted_lo"]) else None
    got, got_lo, got_hi = measured_ci(recommended)
    best = group.loc[group["measured_speedup"].idxmax()]
    spec_wins = best["measured_speedup"] > 1.0
    best_measured, best_lo, best_hi = measured_ci(best if spec_wins else None)
    return {
        **keys,
        "recommended": None if recommended is None else f"{recommended['draft']} γ={int(recommended['gamma'])}",
        "recommended_predicted_speedup": float(best_pred["predicted_speedup"]) if recommended is not None else 1.0,
        "recommended_measured_speedup": got,
        "recommended_lo": got_lo,
        "recommended_hi": got_hi,
        "best_measured": f"{best['draft']} γ={int(best['gamma'])}" if spec_wins else BASELINE,
        "best_measured_predicted_speedup": float(best["predicted_speedup"]) if spec_wins else 1.0,
        "best_measured_speedup": best_measured,
        "best_lo": best_lo,
        "best_hi": best_hi,
        "ratio_to_best": got / best_measured,
        "within_5pct": got >= (1 - RECOMMENDATION_TARGET) * best_measured,
        "wrong": bool(best_lo > got_hi),  # NaN bounds (one unit: no CI) compare False: never a miss
    }


def measured_ci(point) -> tuple[float, float, float]:
    """A grid point's measured speedup and 95% CI; verifier-only (None) is 1.0x by definition."""
    if point is None:
        return 1.0, 1.0, 1.0
    return float(point["measured_speedup"]), float(point["measured_lo"]), float(point["measured_hi"])


def validation_summary(table: pd.DataFrame) -> dict[str, Any]:
    """Headline numbers: median |error| as a fraction of measured speedup, for the predictor and
    for the Leviathan formula with FLOPs-c and with wall-clock c; what the measured CIs say of them;
    the recommendation check; and a verdict on each claim: "met", "missed" (beyond the CIs) or
    "inconclusive" (the CIs are too wide to tell)."""
    checks = recommendation_check(table)
    raw = float(table["error"].abs().median())
    beyond = float(table["error_beyond_ci"].median())
    if raw <= ERROR_TARGET:
        error_verdict = "met"
    else:
        error_verdict = "missed" if beyond > ERROR_TARGET else "inconclusive"
    if checks["within_5pct"].all():
        recommendation_verdict = "met"
    else:
        recommendation_verdict = "missed" if checks["wrong"].any() else "inconclusive"
    units = table["units"] if "units" in table else pd.Series(dtype=float)
    needed = table["units_needed"] if "units_needed" in table else pd.Series(dtype=float)
    return {
        "grid_points": int(len(table)),
        "median_abs_error": raw,
        "max_abs_error": float(table["error"].abs().max()),
        "median_error_beyond_ci": beyond,
        "flops_leviathan_median_abs_error": float(table["flops_error"].abs().median()),
        "wallclock_leviathan_median_abs_error": float(table["wallclock_error"].abs().median()),
        "within_ci": float(table["prediction_in_ci"].mean()),
        "median_ci_half_width": float(table["ci_half_width"].median()),
        "within_band": float(
            (
                (table["measured_speedup"] >= table["predicted_lo"])
                & (table["measured_speedup"] <= table["predicted_hi"])
            ).mean()
        ),
        "ci_overlaps_band": float(
            ((table["measured_lo"] <= table["predicted_hi"]) & (table["measured_hi"] >= table["predicted_lo"])).mean()
        ),
        "points_sized": f"{int((units >= needed).sum())}/{len(table)}",
        "points_off_beyond_ci": f"{int((table['error_beyond_ci'] > ERROR_TARGET).sum())}/{len(table)}",
        "recommendation_worst_ratio": float(checks["ratio_to_best"].min()),
        "recommendations_within_5pct": f"{int(checks['within_5pct'].sum())}/{len(checks)}",
        "recommendations_wrong": f"{int(checks['wrong'].sum())}/{len(checks)}",
        "error_verdict": error_verdict,
        "recommendation_verdict": recommendation_verdict,
        "target_error_met": error_verdict == "met",
        "target_recommendation_met": recommendation_verdict == "met",
    }


def sizing_table(records: pd.DataFrame, tokens: int, token_options=(2, 4)) -> pd.DataFrame:
    """Per batch size, from the validation's own records: the pooled spread of a unit's log speedup,
    the units a point needs for ±``CI_TARGET`` at ``tokens`` per row, and at ``token_options`` times
    as many tokens if the spread is per token (``sizing.sd_at_tokens``, the optimistic reading),
    with the minutes that would take at the measured time per generation."""
    rows = []
    for b, at_b in pd.DataFrame(records).groupby("batch_size"):
        spread = sizing.pooled_spread(at_b)
        candidates = at_b["candidate"].nunique()
        for scale in (1, *token_options):
            sd = sizing.sd_at_tokens(spread.sd, 1, scale)
            needed = sizing.units_needed(sd, CI_TARGET) if spread.df >= 1 else np.nan
            rows.append({
                "batch_size": int(b),
                "tokens": int(tokens * scale),
                "log_speedup_sd": sd,
                "df": spread.df,
                "units_needed": needed,
                "grid_minutes": needed * candidates * spread.wall_ms_per_unit * scale / 6e4,
            })
    return pd.DataFrame(rows)
