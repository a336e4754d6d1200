"""Checking the predictor against measurement: a held-out grid of (draft × γ × batch size) run on
prompts calibration never saw, interleaved with verifier-only as ``specnb.measure.runs`` runs
everything, with the measured speedup next to the prediction and next to Leviathan's formula fed
with the FLOPs c (what people use today); and the headline numbers behind the README.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from specnb.core.errors import ParameterError
from specnb.measure.prompts import as_prompt_frame, prompt_tokens
from specnb.measure.runs import BASELINE, make_candidates, run_interleaved, summarise
from specnb.predict.costs import HardwareProfile
from specnb.predict.predictor import clears_break_even, predict


def validate(
    profile: HardwareProfile,
    loaded,
    prompts,
    gammas=(1, 2, 3, 4, 6),
    batch_sizes=(1,),
    max_new_tokens: int | None = None,
    repeats: int = 1,
    progress: bool = True,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Measure every (draft, γ, batch size) on ``prompts`` and set predictions beside it.

    Batch size b runs ``repeats × b`` interleaved repeats, so every grid point rests on the same
    number of timed generations (P prompts make P / b batches). Why: with 4 prompts, batch 2 would
    otherwise be 2 timed runs per point, and two options 5% apart would be ranked by timing noise.

    Returns (raw records, one row per grid point with measured and predicted speedups and errors).
    """
    pair, models = loaded
    frame = as_prompt_frame(prompts)
    n_new = int(max_new_tokens or profile.max_new_tokens)
    records, rows = [], []
    for b in batch_sizes:
        full = frame.iloc[: len(frame) // b * b]  # whole batches only: a last, smaller batch is another grid point
        if full.empty:
            raise ParameterError(f"batch size {b} needs at least {b} validation prompts, got {len(frame)}")
        got = run_interleaved(
            pair,
            full,
            make_candidates(models, gammas),
            max_new_tokens=n_new,
            batch_size=b,
            repeats=repeats * b,
            progress=progress,
        )
        records.append(got)
        measured = summarise(got, n_boot=500)
        width = prompt_tokens(pair.tokenizer, full, b)
        for name in models:
            pred = predict(profile, name, gammas, b, n_new, width).table.set_index("gamma")
            for _, m in measured[measured["draft"] == name].iterrows():
                p = pred.loc[int(m["gamma"])]
                rows.append(
                    {
                        "draft": name,
                        "gamma": int(m["gamma"]),
                        "batch_size": b,
                        "measured_speedup": m["speedup"],
                        "measured_lo": m["speedup_lo"],
                        "measured_hi": m["speedup_hi"],
                        "measured_alpha": m["alpha"],
                        "measured_tau": m["tau"],
                        "predicted_speedup": p["predicted_speedup"],
                        "predicted_lo": p["speedup_lo"],
                        "predicted_hi": p["speedup_hi"],
                        "predicted_tau": p["tokens_per_step"],
                        "flops_leviathan_speedup": p["flops_leviathan_speedup"],
                        "wallclock_leviathan_speedup": p["wallclock_leviathan_speedup"],
                    }
                )
    table = pd.DataFrame(rows)
    for column, name in (
        ("predicted_speedup", "error"),
        ("flops_leviathan_speedup", "flops_error"),
        ("wallclock_leviathan_speedup", "wallclock_error"),
    ):
        table[name] = (table[column] - table["measured_speedup"]) / table["measured_speedup"]
    return pd.concat(records, ignore_index=True), table


def recommendation_check(table: pd.DataFrame) -> pd.DataFrame:
    """Per (draft, batch): the γ the predictor recommends among the measured ones (None: verifier
    only, worth 1.0x; the rule of ``specnb.predict.predictor.Prediction``) and its measured speedup against the best
    measured option."""
    rows = []
    for (draft, b), group in table.groupby(["draft", "batch_size"], sort=False):
        rows.append(check_choice(group, draft=draft, batch_size=b))
    for b, group in table.groupby("batch_size", sort=False):  # the whole verdict: which draft and γ
        rows.append(check_choice(group, draft="any", batch_size=b))
    return pd.DataFrame(rows)


def check_choice(group: pd.DataFrame, **keys) -> dict:
    best_pred = group.loc[group["predicted_speedup"].idxmax()]
    recommended = best_pred if clears_break_even(best_pred["predicted_speedup"], best_pred["predicted_lo"]) else None
    got = float(recommended["measured_speedup"]) if recommended is not None else 1.0
    best = group.loc[group["measured_speedup"].idxmax()]
    best_measured = max(float(best["measured_speedup"]), 1.0)
    spec_wins = best["measured_speedup"] > 1.0
    return {
        **keys,
        "recommended": None if recommended is None else f"{recommended['draft']} γ={int(recommended['gamma'])}",
        "recommended_predicted_speedup": float(best_pred["predicted_speedup"]) if recommended is not None else 1.0,
        "recommended_measured_speedup": got,
        "best_measured": f"{best['draft']} γ={int(best['gamma'])}" if spec_wins else BASELINE,
        "best_measured_predicted_speedup": float(best["predicted_speedup"]) if spec_wins else 1.0,
        "best_measured_speedup": best_measured,
        "ratio_to_best": got / best_measured,
        "within_5pct": got >= 0.95 * best_measured,
    }


def validation_summary(table: pd.DataFrame) -> dict[str, Any]:
    """Headline numbers: median |error| as a fraction of measured speedup, for the predictor and
    for the Leviathan formula with FLOPs-c and with wall-clock c, and the recommendation check."""
    checks = recommendation_check(table)
    return {
        "grid_points": int(len(table)),
        "median_abs_error": float(table["error"].abs().median()),
        "max_abs_error": float(table["error"].abs().max()),
        "flops_leviathan_median_abs_error": float(table["flops_error"].abs().median()),
        "wallclock_leviathan_median_abs_error": float(table["wallclock_error"].abs().median()),
        "within_band": float(
            (
                (table["measured_speedup"] >= table["predicted_lo"])
                & (table["measured_speedup"] <= table["predicted_hi"])
            ).mean()
        ),
        "recommendation_worst_ratio": float(checks["ratio_to_best"].min()),
        "recommendations_within_5pct": f"{int(checks['within_5pct'].sum())}/{len(checks)}",
        "target_error_met": bool(table["error"].abs().median() <= 0.10),
        "target_recommendation_met": bool(checks["within_5pct"].all()),
    }
