"""Charts of the options besides speculation (other engines, precisions, batching): every method's
speedup and its fidelity to the fp32 verifier's greedy output, the speculation tax split by engine,
and what batching buys."""

from __future__ import annotations

import altair as alt
import pandas as pd

from specnb.app.text.common import fidelity_text


def output_category(row) -> str:
    """The colour of a method's bar: speculation or not, and whether its output stayed the fp32 verifier's."""
    if row.speculation:
        return "speculation (lossless)" if row.identical_prompts == row.prompts else "speculation on a lossy engine"
    return "same output" if row.identical_prompts == row.prompts else "different output"


def speedup_chart(summary: pd.DataFrame) -> alt.Chart:
    """Speedup over the eager fp32 verifier with its 95% CI, one bar per method, coloured by whether
    the output stayed the fp32 verifier's; a rule at 1x."""
    frame = summary.assign(kind=[output_category(r) for r in summary.itertuples()],
                           fidelity=[fidelity_text(r) for r in summary.itertuples()])
    order = list(frame.sort_values("speedup", ascending=False)["method"])
    y = alt.Y("method:N", sort=order, title=None)
    bars = alt.Chart(frame).mark_bar().encode(
        x=alt.X("speedup:Q", title="speedup over verifier-only, PyTorch eager fp32 (x)"), y=y,
        color=alt.Color("kind:N", title=None),
        tooltip=["method", alt.Tooltip("tok_s:Q", format=".1f"), alt.Tooltip("speedup:Q", format=".2f"),
                 alt.Tooltip("speedup_lo:Q", format=".2f"), alt.Tooltip("speedup_hi:Q", format=".2f"), "fidelity"])
    ci = alt.Chart(frame).mark_rule().encode(x="speedup_lo:Q", x2="speedup_hi:Q", y=y)
    unit = alt.Chart(pd.DataFrame({"x": [1.0]})).mark_rule(strokeDash=[4, 3]).encode(x="x:Q")
    return (bars + ci + unit).properties(title="Speculation next to its alternatives, same prompts, interleaved",
                                         width=420, height=max(160, 22 * len(frame)))


def fidelity_chart(summary: pd.DataFrame) -> alt.Chart:
    """Speed against fidelity: speedup vs the share of tokens before the first divergence."""
    return alt.Chart(summary).mark_point(filled=True, size=80).encode(
        x=alt.X("prefix_share:Q", title="share of fp32 greedy tokens kept (before the first divergence)",
                scale=alt.Scale(domain=[0, 1.02])),
        y=alt.Y("speedup:Q", title="speedup (x)"),
        color=alt.Color("engine:N"), shape=alt.Shape("precision:N"),
        tooltip=["method", alt.Tooltip("speedup:Q", format=".2f"), alt.Tooltip("prefix_share:Q", format=".0%"),
                 "identical_prompts", "prompts"],
    ).properties(title="What each speedup costs in output: lossless methods sit at the right edge",
                 width=420, height=260)


def tax_chart(grid: pd.DataFrame, fits: pd.DataFrame) -> alt.Chart:
    """Forward time against tokens per forward per engine (points), the fit t0 + k·n (dashed) and the
    memory-bandwidth floor of one step (a tick at n = 1)."""
    lines = fits.merge(grid[["model", "n_tokens"]].rename(columns={"model": "engine"}), on="engine")
    lines = lines.assign(fit_ms=lines["t0_ms"] + lines["ms_per_token"] * lines["n_tokens"])
    color = alt.Color("engine:N", title="engine · precision")
    x = alt.X("n_tokens:Q", title="tokens per forward (all logits: the verification shape)",
              axis=alt.Axis(values=sorted(grid["n_tokens"].unique().tolist()), format="~g"),
              scale=alt.Scale(padding=16))  # the floor's tick at n = 1 clear of the axis
    points = alt.Chart(grid.rename(columns={"model": "engine"})).mark_line(point=True).encode(
        x=x, y=alt.Y("median_ms:Q", title="ms per forward"), color=color,
        tooltip=["engine", "n_tokens", alt.Tooltip("median_ms:Q", format=".1f")])
    fit = alt.Chart(lines).mark_line(strokeDash=[4, 3]).encode(x=x, y="fit_ms:Q", color=color)
    floor = alt.Chart(fits.assign(n_tokens=1)).mark_tick(orient="horizontal", thickness=2, size=18).encode(
        x="n_tokens:Q", y="floor_ms:Q", color=color, tooltip=["engine", alt.Tooltip("floor_ms:Q", format=".1f")])
    return (points + fit + floor).properties(
        title="The tax, split: same model, same tokens, per engine (ticks: bandwidth floor of one step)",
        width=420, height=280)


def batching_chart(table: pd.DataFrame) -> alt.Chart:
    """Throughput and per-prompt latency against batch size, both relative to batch 1."""
    tidy = table.melt(id_vars=["batch_size"], value_vars=["throughput_x", "latency_x"], var_name="measure",
                      value_name="x_batch_1").replace({"throughput_x": "throughput", "latency_x": "latency per prompt"})
    return alt.Chart(tidy).mark_line(point=True).encode(
        x=alt.X("batch_size:Q", title="batch size",
                axis=alt.Axis(values=sorted(tidy["batch_size"].unique().tolist()), format="~g")),
        y=alt.Y("x_batch_1:Q", title="relative to batch 1 (x)"),
        color=alt.Color("measure:N", title=None),
        tooltip=["batch_size", "measure", alt.Tooltip("x_batch_1", format=".2f")],
    ).properties(title="Batching: more tokens per weight read, each prompt waits for the batch", width=420, height=240)
