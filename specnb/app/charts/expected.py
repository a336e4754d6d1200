"""Charts of what theory and forward costs lead one to expect: speedup surfaces and break-even
curves from Leviathan's formulas, forward time against tokens, the dispatch line, and whether a
smaller or a faster draft pays."""

from __future__ import annotations

import altair as alt

from specnb.app.charts.style import MAX_SERIES, draft_color, log_axis, one_mark_each
from specnb.core import reference

# ---------------------------------------------------------------- theory (notebook 01)

SPEEDUP_SCALE = alt.Scale(scheme="redblue", domainMid=1.0)


def speedup_heatmap(surface, x: str = "alpha", y: str = "gamma", title: str | None = None) -> alt.Chart:
    """Leviathan expected speedup over a tidy grid (``theory.speedup_surface_*``); blue wins, red loses."""
    labels = {"alpha": "acceptance rate α", "gamma": "draft tokens per step γ", "c": "cost ratio c (draft ÷ verifier)"}
    fixed = [k for k in ("alpha", "gamma", "c") if k not in (x, y) and surface[k].nunique() == 1]
    where = ", ".join(f"{k} = {surface[k].iloc[0]:.4g}" for k in fixed)
    base = alt.Chart(surface).encode(
        x=alt.X(f"{x}:O", title=labels[x], axis=alt.Axis(format=".2f") if x != "gamma" else alt.Axis()),
        y=alt.Y(f"{y}:O", title=labels[y], sort="descending",
                axis=alt.Axis(format=".2f") if y != "gamma" else alt.Axis()),
    )
    cells = base.mark_rect().encode(
        color=alt.Color("speedup:Q", scale=SPEEDUP_SCALE, title="speedup (x)"),
        tooltip=[alt.Tooltip(c, format=".3f") for c in ("alpha", "gamma", "c", "speedup")],
    )
    text = base.mark_text(fontSize=8).encode(text=alt.Text("speedup:Q", format=".2f"))
    return (cells + text).properties(title=title or f"Expected speedup (Leviathan et al.) at {where}",
                                     width=420, height=260)


def break_even_chart(frame) -> alt.Chart:
    """Break-even α (speedup = 1) against γ, one line per cost ratio c (one point per c and γ); above
    a line speculation wins. More than eight cost ratios are split into panels of eight."""
    one_mark_each(frame, ["label", "gamma"], "break_even_chart: one point per cost ratio and γ")
    labels = list(dict.fromkeys(frame["label"]))

    def panel(chunk, title):
        return alt.Chart(frame[frame["label"].isin(chunk)]).mark_line(point=True).encode(
            x=alt.X("gamma:Q", title="draft tokens per step γ"),
            y=alt.Y("break_even_alpha:Q", title="break-even acceptance rate α", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("label:N", title="cost ratio c", sort=chunk),
            tooltip=["label", "gamma", alt.Tooltip("break_even_alpha:Q", format=".3f")],
        ).properties(title=title, width=420, height=260)

    title = "Acceptance needed to break even, per γ and cost ratio c"
    if len(labels) <= MAX_SERIES:
        return panel(labels, title)
    chunks = [labels[i:i + MAX_SERIES] for i in range(0, len(labels), MAX_SERIES)]
    return alt.vconcat(*[panel(c, f"cost ratios {i * MAX_SERIES + 1}–{i * MAX_SERIES + len(c)}")
                         for i, c in enumerate(chunks)]).resolve_scale(color="independent").properties(title=title)


def speedup_vs_alpha_chart(frame, alpha: float | None = None, title: str | None = None) -> alt.Chart:
    """Expected speedup against α, one line per γ (tidy: alpha, gamma, speedup); a rule at 1x."""
    lines = alt.Chart(frame).mark_line().encode(
        x=alt.X("alpha:Q", title="acceptance rate α"),
        y=alt.Y("speedup:Q", title="expected speedup (x)"),
        color=alt.Color("gamma:O", title="γ"),
        tooltip=["gamma", alt.Tooltip("alpha:Q", format=".2f"), alt.Tooltip("speedup:Q", format=".3f")],
    )
    layers = [lines, unit_rule()]
    if alpha is not None:
        layers.append(alt.Chart(alt.Data(values=[{"alpha": alpha}])).mark_rule(strokeDash=[4, 3]).encode(x="alpha:Q"))
    c = frame["c"].iloc[0] if "c" in frame and frame["c"].nunique() == 1 else None
    default = f"Expected speedup vs acceptance rate (c = {c:.3f})" if c is not None else "Expected speedup vs α"
    return alt.layer(*layers).properties(title=title or default, width=420, height=260)


def unit_rule(axis: str = "y") -> alt.Chart:
    """A grey rule at speedup 1x: above wins, below loses."""
    return alt.Chart(alt.Data(values=[{"v": 1.0}])).mark_rule(color="grey", strokeDash=[2, 2]).encode(
        **{axis: alt.Y("v:Q") if axis == "y" else alt.X("v:Q")})


# ---------------------------------------------------------------- dispatch overhead (notebook 02)

def forward_time_chart(grid, y: str = "median_ms", title: str | None = None) -> alt.Chart:
    """Per-forward wall time against tokens per forward: one line per model (its colour of the run),
    one point per model and token count; log-2 x axis ticking the measured counts."""
    one_mark_each(grid, ["model", "n_tokens"], "forward_time_chart: one point per model and token count")
    label = "ms per forward" if y == "median_ms" else "ms per token"
    return alt.Chart(grid).mark_line(point=True).encode(
        x=alt.X("n_tokens:Q", title="tokens per forward", scale=alt.Scale(type="log", base=2),
                axis=log_axis(grid["n_tokens"])),
        y=alt.Y(f"{y}:Q", title=label, scale=alt.Scale(type="log")),
        color=draft_color(grid, field="model", title="model"),
        tooltip=["model", "n_tokens", "batch_size", alt.Tooltip(f"{y}:Q", format=".2f")],
    ).properties(title=title or "Forward time vs tokens per forward (median, KV cache of 128 tokens)",
                 width=420, height=280)


def dispatch_fit_chart(points, fit) -> alt.Chart:
    """Measured forward ms against forward GFLOPs with the fitted t = t0 + k·FLOPs line."""
    import numpy as np
    import pandas as pd

    x = np.linspace(0.0, float(points["gflops"].max()) * 1.05, 50)
    line = pd.DataFrame({"gflops": x, "fit_ms": fit.t0_ms + fit.ms_per_gflop * x})
    dots = alt.Chart(points).mark_point(filled=True).encode(
        x=alt.X("gflops:Q", title="GFLOPs per forward"),
        y=alt.Y("median_ms:Q", title="ms per forward"),
        color=draft_color(points, field="model", title="model"),
        tooltip=["model", "n_tokens", alt.Tooltip("gflops:Q", format=".3f"), alt.Tooltip("median_ms:Q", format=".2f")],
    )
    fitted = alt.Chart(line).mark_line(color="black", strokeDash=[4, 2]).encode(x="gflops:Q", y="fit_ms:Q")
    title = f"t = {fit.t0_ms:.1f} ms + {fit.ms_per_gflop:.1f} ms/GFLOP × FLOPs  (R² = {fit.r2:.3f})"
    return (dots + fitted).properties(title=title, width=420, height=280)


def cost_ratio_chart(frame) -> alt.Chart:
    """FLOPs c next to wall-clock c per draft (tidy: draft, kind, c)."""
    return alt.Chart(frame).mark_bar().encode(
        x=alt.X("kind:N", title=None, axis=alt.Axis(labels=False, ticks=False)),
        y=alt.Y("c:Q", title="cost ratio c (draft ÷ verifier)"),
        color=alt.Color("kind:N", title="measured by"),
        column=alt.Column("draft:N", title="draft"),
        tooltip=["draft", "kind", alt.Tooltip("c:Q", format=".3f")],
    ).properties(title="Cost ratio c: FLOPs vs wall clock", width=60, height=240)


def smaller_vs_faster_chart(curve, ratios) -> alt.LayerChart:
    """How much faster per token a draft with s-times fewer FLOPs is: the fitted line
    (``measure.forward.smaller_vs_faster``), the measured drafts (``flops_smaller``, ``times_faster``)
    and the reference run's point on MPS (``core.reference``). The gap to the diagonal is the
    dispatch cost."""
    import pandas as pd

    x = alt.X("flops_smaller:Q", title="draft FLOPs smaller by (x)", scale=alt.Scale(type="log"))
    y = alt.Y("times_faster:Q", title="draft faster per token (x)", scale=alt.Scale(type="log"))
    ideal = alt.Chart(curve.assign(times_faster=curve["flops_smaller"])).mark_line(color="lightgray").encode(x=x, y=y)
    fitted = alt.Chart(curve).mark_line(point=True).encode(x=x, y=y, tooltip=[
        alt.Tooltip("flops_smaller:Q", format=".1f"), alt.Tooltip("times_faster:Q", format=".2f")])
    measured = (
        alt.Chart(ratios)
        .mark_point(shape="diamond", size=120, filled=True, color="black")
        .encode(
            x=x,
            y=y,
            tooltip=[
                "draft",
                alt.Tooltip("flops_smaller:Q", format=".1f"),
                alt.Tooltip("times_faster:Q", format=".2f"),
            ],
        )
    )
    point = {"flops_smaller": [reference.size_ratio()], "times_faster": [reference.REFERENCE_MPS["draft_speed_ratio"]]}
    ref = alt.Chart(pd.DataFrame(point)).mark_point(shape="cross", size=150, color="red").encode(x=x, y=y)
    return (ideal + fitted + measured + ref).properties(
        title="Fewer FLOPs vs faster per token: blue = this machine's fit, black diamonds = measured drafts, "
        "red cross = reference (MPS), grey = FLOPs ratio",
        width=460,
        height=280,
    )
