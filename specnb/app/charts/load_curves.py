"""Charts of speculation under serving load (notebook 08): speedup against the load (concurrency, or
request rate for Poisson arrivals: each chart reads which from the table's level column) with the 1.0
line, latency against throughput, per-position acceptance, predicted against measured."""

from __future__ import annotations

import json
import math

import altair as alt
import pandas as pd

from specnb.app.charts.style import dash, dashed_lines, log_axis
from specnb.core.intervals import speedup_text
from specnb.measure.serving_load import shape_of
from specnb.measure.serving_stats import scheduled_k
from specnb.serve.engines import BASELINE_CONFIG


def level_axis(frame: pd.DataFrame) -> alt.X:
    """The load on a log2 axis ticking the measured levels, titled with its unit (the frame's load shape's)."""
    shape = shape_of(frame)
    return alt.X(f"{shape.column}:Q", scale=alt.Scale(type="log", base=2), title=shape.unit,
                 axis=log_axis(frame[shape.column]))


def display_table(summary: pd.DataFrame) -> pd.DataFrame:
    """The sweep as a reader wants it: per configuration and level, throughput, TPOT, α/τ, speedups."""
    def ci(row, name):
        if name not in row or pd.isna(row.get(name)) or row["config"] == BASELINE_CONFIG:
            return ""
        lo, hi = row.get(f"{name}_lo"), row.get(f"{name}_hi")
        return speedup_text(row[name], None if pd.isna(lo) else lo, hi)

    def counted(row, name, digits):  # a schedule's k = 0 range drafted nothing: its counters are not its own
        return "— (k = 0 here)" if scheduled_k(row, column) == 0 else round(row[name], digits)

    order = {name: i for i, name in enumerate(dict.fromkeys([BASELINE_CONFIG, *summary["config"]]))}
    column, unit = shape_of(summary).column, shape_of(summary).unit
    rows = summary.assign(_order=summary["config"].map(order)).sort_values(["_order", column]).to_dict("records")
    return pd.DataFrame({
        "config": [r["config"] for r in rows], unit: [r[column] for r in rows],
        "engine's batch": [round(r["mean_batch"], 1) if not pd.isna(r.get("mean_batch", math.nan)) else "—"
                           for r in rows],
        "output tok/s": [round(r["output_throughput"], 1) for r in rows],
        "median TPOT ms": [round(r["median_tpot_ms"], 1) for r in rows],
        "median ITL ms": [round(r["median_itl_ms"], 1) for r in rows],
        "α": [counted(r, "alpha", 3) for r in rows], "τ": [counted(r, "tau", 2) for r in rows],
        "TPOT speedup": [ci(r, "speedup_tpot") for r in rows],
        "throughput speedup": [ci(r, "speedup_output_throughput") for r in rows],
        "partial": [r["partial"] for r in rows]})


def speedup_chart(summary: pd.DataFrame, metric: str = "speedup_tpot") -> alt.Chart:
    """Speedup over spec-off against the load (log scale) per configuration, 95% CI bars, 1.0 line."""
    frame = summary[summary["config"] != BASELINE_CONFIG].dropna(subset=[metric])
    column = shape_of(summary).column
    x = level_axis(summary)
    line = alt.Chart(frame).mark_line(point=True).encode(
        x=x, y=alt.Y(f"{metric}:Q", title=f"{metric.replace('speedup_', '')} speedup over spec-off (x)"),
        color=alt.Color("config:N", title=None),
        tooltip=["config", column, alt.Tooltip(f"{metric}:Q", format=".2f"),
                 alt.Tooltip(f"{metric}_lo:Q", format=".2f"), alt.Tooltip(f"{metric}_hi:Q", format=".2f")])
    bars = alt.Chart(frame).mark_rule().encode(x=x, y=f"{metric}_lo:Q", y2=f"{metric}_hi:Q", color="config:N")
    unit = alt.Chart(pd.DataFrame({"y": [1.0]})).mark_rule(strokeDash=[4, 3]).encode(y="y:Q")
    return (line + bars + unit).properties(title="Speedup over spec-off as load grows (95% CI)", width=420,
                                           height=260)


def latency_throughput_chart(summary: pd.DataFrame) -> alt.Chart:
    """Output throughput against p50 and p90 TPOT, one curve per configuration through its levels."""
    column, unit = shape_of(summary).column, shape_of(summary).unit
    frame = summary.melt(id_vars=["config", column, "output_throughput"],
                         value_vars=["median_tpot_ms", "p90_tpot_ms"], var_name="percentile", value_name="tpot_ms")
    frame["kind"] = frame["percentile"].map({"median_tpot_ms": "p50", "p90_tpot_ms": "p90"})
    base = alt.Chart(frame).encode(
        x=alt.X("tpot_ms:Q", title="TPOT per request (ms)"),
        y=alt.Y("output_throughput:Q", title="output throughput (tok/s)"),
        color=alt.Color("config:N", title=None), order=f"{column}:Q")
    points = base.mark_point(filled=True).encode(detail="kind:N", tooltip=[
        "config", column, alt.Tooltip("kind:N", title="percentile"), alt.Tooltip("tpot_ms:Q", format=".1f"),
        alt.Tooltip("output_throughput:Q", format=".1f")])
    return (base.mark_line().encode(strokeDash=dash(["p50", "p90"])) + points).properties(
        title=f"Latency against throughput (each point a level: {unit})", width=420, height=260)


def pooled_positions(summary: pd.DataFrame) -> pd.DataFrame:
    """Per configuration and draft position: the per-position rate pooled over levels (weighted by drafts)."""
    rows = []
    for config, group in summary[summary["spec_decode_num_drafts"] > 0].groupby("config", sort=False):
        drafts = group["spec_decode_num_drafts"].sum()
        rates = [json.loads(p) for p in group["per_position"]]
        width = max(len(r) for r in rates)
        for i in range(width):
            acc = sum(r[i] * d for r, d in zip(rates, group["spec_decode_num_drafts"]) if i < len(r))
            rows.append({"config": config, "position": i + 1, "rate": acc / drafts})
    return pd.DataFrame(rows, columns=["config", "position", "rate"])


def position_chart(summary: pd.DataFrame) -> alt.Chart:
    frame = pooled_positions(summary)
    return alt.Chart(frame).mark_line(point=True).encode(
        x=alt.X("position:O", title="draft position"),
        y=alt.Y("rate:Q", title="accepted at this position ÷ drafts", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("config:N", title=None), tooltip=["config", "position", alt.Tooltip("rate:Q", format=".3f")],
    ).properties(title="Per-position acceptance from the engine's counters (all levels)", width=420, height=220)


def prediction_chart(validation: pd.DataFrame) -> alt.Chart:
    column = shape_of(validation).column
    frame = validation.melt(id_vars=["config", column], value_vars=["speedup_tpot", "predicted_speedup_tpot"],
                            var_name="kind", value_name="speedup")
    frame["kind"] = frame["kind"].map({"speedup_tpot": "measured", "predicted_speedup_tpot": "predicted"})
    return dashed_lines(
        frame, ["measured", "predicted"], x=level_axis(validation),
        y=alt.Y("speedup:Q", title="TPOT speedup over spec-off (x)"), color=alt.Color("config:N", title=None),
        tooltip=["config", column, "kind", alt.Tooltip("speedup:Q", format=".2f")],
    ).properties(title="Serving predictor: predicted against measured", width=420, height=240)


