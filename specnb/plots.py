"""Altair charts for the notebooks: titled, axes labelled with units, static-friendly.

Rendered notebooks are shared as offline HTML, so charts must not need a CDN: under papermill
(``interactive=False``) we switch altair to its ``svg`` renderer, which converts each chart with
vl-convert inside the kernel and stores plain SVG in the notebook. In JupyterLab the default
renderer stays, so tooltips and widgets work.
"""

from __future__ import annotations

import altair as alt


def use_static_renderer() -> None:
    """Charts become inline SVG (vl-convert): no JavaScript, no network, visible in any browser.

    Progress bars become plain text too: in a kernel ``tqdm.auto`` draws an ipywidgets bar, which
    the static HTML can only show as a dead widget. The text bar's final line (count, elapsed
    time) stays in the rendered copy. transformers' own weight-loading bars are switched off.
    """
    import tqdm.auto
    import tqdm.std
    from transformers.utils import logging as hf_logging

    alt.renderers.enable("svg")
    alt.data_transformers.disable_max_rows()
    tqdm.auto.tqdm = tqdm.std.tqdm  # read at call time by bench, models and transformers
    hf_logging.disable_progress_bar()


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
    """Break-even α (speedup = 1) against γ, one line per cost ratio c; above a line speculation wins."""
    return alt.Chart(frame).mark_line(point=True).encode(
        x=alt.X("gamma:Q", title="draft tokens per step γ"),
        y=alt.Y("break_even_alpha:Q", title="break-even acceptance rate α", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("label:N", title="cost ratio c"),
        tooltip=["label", "gamma", alt.Tooltip("break_even_alpha:Q", format=".3f")],
    ).properties(title="Acceptance needed to break even, per γ and cost ratio c", width=420, height=260)


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
    """Per-forward wall time against tokens per forward, one line per model, log-2 x axis."""
    label = "ms per forward" if y == "median_ms" else "ms per token"
    return alt.Chart(grid).mark_line(point=True).encode(
        x=alt.X("n_tokens:Q", title="tokens per forward", scale=alt.Scale(type="log", base=2)),
        y=alt.Y(f"{y}:Q", title=label, scale=alt.Scale(type="log")),
        color=alt.Color("model:N", title="model"),
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
        color=alt.Color("model:N", title="model"),
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


def smaller_vs_faster_chart(curve, ratios, reference=(6.0, 2.8)) -> alt.LayerChart:
    """How much faster per token a draft with s-times fewer FLOPs is: the fitted line
    (``microbench.smaller_vs_faster``), the measured drafts (``flops_smaller``, ``times_faster``) and
    the reference's (s, x faster) point on MPS. The gap to the diagonal is the dispatch cost."""
    import pandas as pd

    x = alt.X("flops_smaller:Q", title="draft FLOPs smaller by (x)", scale=alt.Scale(type="log"))
    y = alt.Y("times_faster:Q", title="draft faster per token (x)", scale=alt.Scale(type="log"))
    ideal = alt.Chart(curve.assign(times_faster=curve["flops_smaller"])).mark_line(color="lightgray").encode(x=x, y=y)
    fitted = alt.Chart(curve).mark_line(point=True).encode(x=x, y=y, tooltip=[
        alt.Tooltip("flops_smaller:Q", format=".1f"), alt.Tooltip("times_faster:Q", format=".2f")])
    measured = alt.Chart(ratios).mark_point(shape="diamond", size=120, filled=True, color="black").encode(
        x=x, y=y, tooltip=["draft", alt.Tooltip("flops_smaller:Q", format=".1f"), alt.Tooltip("times_faster:Q", format=".2f")])
    ref = alt.Chart(pd.DataFrame({"flops_smaller": [reference[0]], "times_faster": [reference[1]]})).mark_point(
        shape="cross", size=150, color="red").encode(x=x, y=y)
    return (ideal + fitted + measured + ref).properties(
        title="Fewer FLOPs vs faster per token: blue = this machine's fit, ◆ = measured drafts, "
              "✚ = reference (MPS), gray = FLOPs ratio", width=460, height=280)


# ---------------------------------------------------------------- measured runs (notebooks 03-05)

def speedup_chart(summary, x: str = "gamma", predictions=None, title: str | None = None) -> alt.Chart:
    """Measured speedup (95% bootstrap CI) against ``x``, optionally with predicted lines
    (tidy ``predictions``: x, speedup, source); a rule at 1x separates wins from losses."""
    titles = {"gamma": "draft tokens per step γ", "batch_size": "batch size (prompts per batch)"}
    data = summary[summary["gamma"] > 0] if "gamma" in summary else summary
    color = alt.Color("series:N", title="", legend=alt.Legend(labelLimit=320))
    data = data.assign(series=data.get("draft", "measured").astype(str) + " (measured)")
    measured = alt.Chart(data).encode(x=alt.X(f"{x}:Q", title=titles.get(x, x)), color=color)
    layers = [
        measured.mark_errorbar().encode(y=alt.Y("speedup_lo:Q", title="speedup over verifier-only (x)",
                                                scale=alt.Scale(zero=False)),
                                        y2="speedup_hi:Q"),
        measured.mark_line(point=True).encode(
            y="speedup:Q", tooltip=["candidate", x, alt.Tooltip("speedup:Q", format=".3f"),
                                    alt.Tooltip("speedup_lo:Q", format=".3f"), alt.Tooltip("speedup_hi:Q", format=".3f"),
                                    alt.Tooltip("alpha:Q", format=".3f")]),
        unit_rule(),
    ]
    if predictions is not None:
        layers.append(alt.Chart(predictions.assign(series=predictions["source"])).mark_line(strokeDash=[5, 3]).encode(
            x=f"{x}:Q", y="speedup:Q", color=color, tooltip=["source", x, alt.Tooltip("speedup:Q", format=".3f")]))
    return alt.layer(*layers).properties(title=title or f"Speedup vs {titles.get(x, x)}", width=420, height=280)


STAGE_ORDER = ["prefill", "draft", "verify", "accept", "rollback", "other"]


def stage_frame(summary, by: str = "candidate"):
    """Tidy per-stage ms per generated token from ``bench.summarise`` output."""
    cols = [f"{s}_ms_per_token" for s in STAGE_ORDER]
    ids = list(dict.fromkeys(c for c in (by, "candidate", "gamma", "batch_size") if c in summary))
    frame = summary.melt(id_vars=ids, value_vars=cols, var_name="stage", value_name="ms_per_token")
    frame["stage"] = frame["stage"].str.replace("_ms_per_token", "", regex=False)
    return frame


def stage_breakdown_chart(summary, by: str = "candidate", title: str | None = None) -> alt.Chart:
    """Stacked bars: where each generated token's time goes (draft / verify / overhead), per candidate."""
    frame = stage_frame(summary, by)
    order = list(dict.fromkeys(summary[by].astype(str)))
    return alt.Chart(frame.assign(**{by: frame[by].astype(str)})).mark_bar().encode(
        x=alt.X(f"{by}:N", title=by.replace("_", " "), sort=order),
        y=alt.Y("ms_per_token:Q", title="ms per generated token"),
        color=alt.Color("stage:N", title="stage", sort=STAGE_ORDER),
        order=alt.Order("stage_rank:Q"),
        tooltip=[by, "stage", alt.Tooltip("ms_per_token:Q", format=".2f")],
    ).transform_calculate(stage_rank=f"indexof({STAGE_ORDER}, datum.stage)").properties(
        title=title or "Time per generated token by stage", width=420, height=280)


def metric_chart(summary, y: str, x: str = "gamma", title: str | None = None) -> alt.Chart:
    """One measured metric (tok/s, α, τ) against γ or batch size, one line per draft."""
    labels = {"tok_s": "generated tokens per second", "alpha": "acceptance rate α", "tau": "tokens per verifier step τ",
              "gamma": "draft tokens per step γ", "batch_size": "batch size"}
    return alt.Chart(summary).mark_line(point=True).encode(
        x=alt.X(f"{x}:Q", title=labels.get(x, x)), y=alt.Y(f"{y}:Q", title=labels.get(y, y)),
        color=alt.Color("draft:N", title="draft"), tooltip=["candidate", x, alt.Tooltip(f"{y}:Q", format=".3f")],
    ).properties(title=title or f"{labels.get(y, y)} vs {labels.get(x, x)}", width=300, height=220)


def break_even_curves(gammas, alphas=None):
    """c at which speedup is exactly 1, per (α, γ): c = (E[tokens per step] − 1) ÷ γ (tidy)."""
    import numpy as np
    import pandas as pd

    from specnb.theory import tokens_per_step

    alphas = np.linspace(0.0, 0.95, 39) if alphas is None else np.asarray(alphas)
    rows = [{"alpha": a, "gamma": g, "c": (float(tokens_per_step(a, g)) - 1.0) / g} for g in gammas for a in alphas]
    return pd.DataFrame(rows)


def c_alpha_chart(points, gammas=(1, 2, 4, 8), title: str | None = None,
                  c_title: str = "wall-clock cost ratio c (draft ÷ verifier)") -> alt.Chart:
    """Every draft at its measured (α, wall-clock c), with break-even curves per γ: below a curve
    that γ wins, above it speculation is a tax (tidy ``points``: draft, alpha, c, best_speedup);
    ``c_title`` names the c when it is not by wall clock (e.g. by FLOPs)."""
    curves = alt.Chart(break_even_curves(gammas)).mark_line(strokeDash=[4, 3]).encode(
        x=alt.X("alpha:Q", title="acceptance rate α", scale=alt.Scale(domain=[0, 1])),
        y=alt.Y("c:Q", title=c_title),
        detail="gamma:O", color=alt.value("grey"))
    labels = alt.Chart(break_even_curves(gammas, [0.95])).mark_text(align="left", dx=4, color="grey").encode(
        x="alpha:Q", y="c:Q", text=alt.Text("gamma:O", format="d"))
    dots = alt.Chart(points).mark_point(filled=True, size=90).encode(
        x="alpha:Q", y="c:Q", color=alt.Color("draft:N", title="draft"),
        shape=alt.Shape("verdict:N", title="best measured"),
        tooltip=["draft", alt.Tooltip("alpha:Q", format=".3f"), alt.Tooltip("c:Q", format=".3f"),
                 alt.Tooltip("best_speedup:Q", format=".3f"), "best_gamma"])
    names = alt.Chart(points).mark_text(align="left", dx=7, dy=-7, fontSize=10).encode(x="alpha:Q", y="c:Q",
                                                                                       text="draft:N")
    return (curves + labels + dots + names).properties(
        title=title or "Draft cost vs acceptance; dashed: break-even per γ (labels), below wins", width=460, height=320)


def acceptance_strip_chart(rows, group: str = "categories", title: str | None = None) -> alt.Chart:
    """Per-prompt acceptance rates as dots per draft, coloured by ``group`` (prompt category or run)."""
    return alt.Chart(rows).mark_tick(thickness=2, size=14).encode(
        x=alt.X("alpha:Q", title="acceptance rate α (per prompt)", scale=alt.Scale(domain=[0, 1])),
        y=alt.Y("draft:N", title="draft"),
        color=alt.Color(f"{group}:N", title=group.replace("_", " ")),
        tooltip=["draft", "gamma", group, "prompt_ids", alt.Tooltip("alpha:Q", format=".3f"),
                 alt.Tooltip("speedup:Q", format=".3f")],
    ).properties(title=title or "Acceptance varies prompt to prompt", width=460, height=220)


def histogram_chart(frame, x: str, title: str, x_title: str, color: str | None = None) -> alt.Chart:
    """Counts of ``x`` in 20 bins (e.g. α of simulated short runs)."""
    enc = {"color": alt.Color(f"{color}:N", title=color)} if color else {}
    return alt.Chart(frame).mark_bar(opacity=0.7).encode(
        x=alt.X(f"{x}:Q", bin=alt.Bin(maxbins=20), title=x_title),
        y=alt.Y("count():Q", title="runs", stack=None), **enc,
    ).properties(title=title, width=420, height=220)


def per_token_vs_batch_chart(grid, title: str | None = None) -> alt.Chart:
    """Forward ms per token in the batch against batch size, one line per tokens-per-forward:
    flat-falling while memory-bound (weights read once for the whole batch), flat when compute-bound."""
    frame = grid.assign(ms_per_token=grid["median_ms"] / (grid["n_tokens"] * grid["batch_size"]))
    return alt.Chart(frame).mark_line(point=True).encode(
        x=alt.X("batch_size:Q", title="batch size", scale=alt.Scale(type="log", base=2)),
        y=alt.Y("ms_per_token:Q", title="ms per token (forward ÷ tokens in it)", scale=alt.Scale(type="log")),
        color=alt.Color("n_tokens:O", title="tokens per row"),
        tooltip=["batch_size", "n_tokens", alt.Tooltip("median_ms:Q", format=".2f"),
                 alt.Tooltip("ms_per_token:Q", format=".3f")],
    ).properties(title=title or "Verifier forward cost per token vs batch size", width=420, height=280)


# ---------------------------------------------------------------- decision framework (notebook 06)

def cost_model_chart(grid, fits, title: str | None = None) -> alt.Chart:
    """Measured decode forwards (points) against tokens × batch, and each model's fitted line
    t = t0 + k·n·b (``fits``: rows of model, t0_ms, ms_per_token)."""
    import pandas as pd

    points = grid[grid["kind"] == "decode"].assign(tokens=lambda g: g["n_tokens"] * g["batch_size"])
    lines = []
    for fit in fits.itertuples():
        span = points[points["model"] == fit.model]["tokens"]
        if span.empty:
            continue
        for tokens in (span.min(), span.max()):
            lines.append({"model": fit.model, "tokens": tokens, "fit_ms": fit.t0_ms + fit.ms_per_token * tokens})
    base = alt.Chart(points).mark_point(filled=True, size=50).encode(
        x=alt.X("tokens:Q", title="tokens in the forward (n × batch)"),
        y=alt.Y("median_ms:Q", title="forward time (ms, median)"),
        color=alt.Color("model:N", title="model"), shape=alt.Shape("batch_size:N", title="batch size"),
        tooltip=["model", "n_tokens", "batch_size", alt.Tooltip("median_ms:Q", format=".2f")])
    fitted = alt.Chart(pd.DataFrame(lines)).mark_line(strokeDash=[4, 3]).encode(
        x="tokens:Q", y="fit_ms:Q", color="model:N")
    return (base + fitted).properties(title=title or "Cost model: t = t0 + k·n·b (dashed) vs measured", width=420,
                                      height=280)


def acceptance_profile_chart(pooled, per_prompt=None, title: str | None = None) -> alt.Chart:
    """Conditional acceptance a_i by draft position (line: pooled; ticks: each calibration prompt)."""
    line = alt.Chart(pooled).mark_line(point=True).encode(
        x=alt.X("position:O", title="draft position i"),
        y=alt.Y("conditional_rate:Q", title="P(accept i | 1..i−1 accepted)", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("draft:N", title="draft"),
        tooltip=["draft", "position", "reached", "accepted", alt.Tooltip("conditional_rate:Q", format=".3f")])
    chart = line
    if per_prompt is not None and len(per_prompt):
        chart = line + alt.Chart(per_prompt).mark_tick(opacity=0.5, size=10).encode(
            x="position:O", y="conditional_rate:Q", color="draft:N", tooltip=["draft", "prompt_id", "position",
                                                                             "reached", "accepted"])
    return chart.properties(title=title or "Acceptance by position is not one α", width=420, height=260)


def prediction_chart(table, title: str | None = None) -> alt.Chart:
    """Predicted speedup vs γ per draft with its band, the FLOPs-c Leviathan line dashed, 1.0x marked."""
    base = alt.Chart(table).encode(x=alt.X("gamma:O", title="draft tokens per step γ"),
                                   color=alt.Color("draft:N", title="draft"))
    band = base.mark_area(opacity=0.2).encode(y=alt.Y("speedup_lo:Q", title="speedup over verifier-only (x)"),
                                              y2="speedup_hi:Q")
    line = base.mark_line(point=True).encode(y="predicted_speedup:Q", tooltip=[
        "draft", "gamma", alt.Tooltip("predicted_speedup:Q", format=".3f"), alt.Tooltip("speedup_lo:Q", format=".3f"),
        alt.Tooltip("speedup_hi:Q", format=".3f"), alt.Tooltip("break_even_alpha:Q", format=".3f")])
    flops = base.mark_line(strokeDash=[2, 3], opacity=0.7).encode(y="flops_leviathan_speedup:Q")
    return (band + line + flops + unit_rule()).properties(
        title=title or "Predicted speedup (band: 10–90% over prompts; dotted: Leviathan with FLOPs c)",
        width=460, height=280)


def validation_chart(table, title: str | None = None) -> alt.Chart:
    """Predicted vs measured speedup on the held-out grid, for the predictor and for Leviathan with
    FLOPs c; the diagonal is a perfect prediction."""
    import pandas as pd

    tidy = pd.concat([
        table.assign(method="specnb predictor", predicted=table["predicted_speedup"], lo=table["predicted_lo"],
                     hi=table["predicted_hi"]),
        table.assign(method="Leviathan, FLOPs c", predicted=table["flops_leviathan_speedup"],
                     lo=table["flops_leviathan_speedup"], hi=table["flops_leviathan_speedup"]),
    ], ignore_index=True)
    low = float(min(tidy["predicted"].min(), tidy["measured_speedup"].min(), 1.0)) * 0.9
    high = float(max(tidy["predicted"].max(), tidy["measured_speedup"].max(), 1.0)) * 1.1
    scale = alt.Scale(domain=[low, high])
    base = alt.Chart(tidy).encode(x=alt.X("measured_speedup:Q", title="measured speedup (x)", scale=scale),
                                  color=alt.Color("method:N", title="prediction"))
    points = base.mark_point(filled=True, size=60).encode(
        y=alt.Y("predicted:Q", title="predicted speedup (x)", scale=scale), shape=alt.Shape("draft:N", title="draft"),
        tooltip=["method", "draft", "gamma", "batch_size", alt.Tooltip("measured_speedup:Q", format=".3f"),
                 alt.Tooltip("predicted:Q", format=".3f")])
    bars = base.mark_rule(opacity=0.5).encode(y="lo:Q", y2="hi:Q")
    xbars = base.mark_rule(opacity=0.3).encode(x="measured_lo:Q", x2="measured_hi:Q", y="predicted:Q")
    diagonal = alt.Chart(pd.DataFrame({"x": [low, high]})).mark_line(color="gray", strokeDash=[4, 4]).encode(
        x="x:Q", y="x:Q")
    return (diagonal + xbars + bars + points).properties(
        title=title or "Held-out validation: predicted vs measured speedup", width=420, height=380)


def verdict_heatmap(frame, x: str = "draft_speed", y: str = "batch_size", title: str | None = None) -> alt.Chart:
    """Best predicted speedup over a what-if grid (colour; blue wins) with the recommended γ written in."""
    labels = {"draft_speed": "draft made faster by (x)", "batch_size": "batch size", "alpha": "flat acceptance α"}
    frame = frame.assign(label=frame["recommended_gamma"].map(lambda g: "don't" if g is None or g != g else f"γ={int(g)}"))
    base = alt.Chart(frame).encode(x=alt.X(f"{x}:O", title=labels.get(x, x)), y=alt.Y(f"{y}:O", title=labels.get(y, y)))
    cells = base.mark_rect().encode(color=alt.Color("best_speedup:Q", title="best speedup (x)", scale=SPEEDUP_SCALE),
                                    tooltip=[x, y, "label", alt.Tooltip("best_speedup:Q", format=".3f"),
                                             alt.Tooltip("break_even_alpha:Q", format=".3f")])
    text = base.mark_text(fontSize=11).encode(text="label:N")
    return (cells + text).properties(title=title or "What would change the verdict", width=300, height=200)


def reference_chart(frame, title: str | None = None) -> alt.Chart:
    """The reference MPS run: predicted tok/s against the assumed extra cost per verified token,
    per reading of α, with the reported tok/s and verifier-only tok/s as horizontal rules (one panel per γ)."""
    lines = alt.Chart(frame).mark_line(point=True).encode(
        x=alt.X("verify_extra_token_fraction:Q", title="each extra verified token costs (fraction of a forward)"),
        y=alt.Y("predicted_tok_s:Q", title="tokens per second"),
        color=alt.Color("alpha_reading:N", title="reading of α = 0.392"),
        tooltip=["gamma", "alpha_reading", "verify_extra_token_fraction", alt.Tooltip("predicted_tok_s:Q", format=".2f"),
                 "reported_tok_s"])
    reported = alt.Chart(frame).mark_rule(color="black").encode(y="reported_tok_s:Q")
    flops = alt.Chart(frame).mark_rule(color="gray", strokeDash=[4, 4]).encode(y="flops_theory_tok_s:Q")
    alone = alt.Chart(frame).mark_rule(color="red", strokeDash=[1, 3]).encode(y="verifier_only_tok_s:Q")
    return (lines + reported + flops + alone).properties(width=300, height=240).facet(
        column=alt.Column("gamma:O", title="γ")).properties(
        title=title or "Reference MPS run: black = reported, dashed = FLOPs theory, red dotted = verifier-only, "
                       "lines = predictor")


# ---------------------------------------------------------------- gamma sweep and batch size (notebooks 03, 05)

def step_cost_chart(steps, title: str | None = None) -> alt.LayerChart:
    """Per γ (one draft): a decoding step's time in verifier-only tokens, stacked draft / verify /
    bookkeeping (``analysis.step_costs``), next to the tokens the step yields (black diamonds). A γ
    wins where the diamond is above its bar: it buys more tokens than the step costs."""
    parts = {"draft_cost": "draft", "verify_cost": "verify", "overhead_cost": "accept + rollback + other"}
    tidy = steps.melt(id_vars=["candidate", "gamma"], value_vars=list(parts), var_name="part", value_name="tokens")
    tidy["part"] = tidy["part"].map(parts)
    tidy["rank"] = tidy["part"].map({v: i for i, v in enumerate(parts.values())})
    x = alt.X("gamma:O", title="draft tokens per step γ")
    bars = alt.Chart(tidy).mark_bar(opacity=0.8).encode(
        x=x, y=alt.Y("tokens:Q", title="verifier-only tokens (time of) / tokens yielded"),
        color=alt.Color("part:N", title="a step costs", sort=list(parts.values()),
                        scale=alt.Scale(domain=list(parts.values()), range=["#f58518", "#e45756", "#72b7b2"])),
        order=alt.Order("rank:Q"),  # draft, verify, bookkeeping: the stage chart's colours
        tooltip=["candidate", "part", alt.Tooltip("tokens:Q", format=".2f")])
    yielded = alt.Chart(steps).mark_point(shape="diamond", filled=True, size=110, color="black").encode(
        x=x, y="tokens_per_step:Q", tooltip=["candidate", alt.Tooltip("tokens_per_step:Q", format=".2f"),
                                             alt.Tooltip("break_even_tokens:Q", format=".2f")])
    return (bars + yielded).properties(
        title=title or "A step's cost in verifier-only tokens (bars) vs tokens it yields (diamonds)",
        width=420, height=280)


def alpha_chart(summary, title: str | None = None) -> alt.Chart:
    """Two acceptance rates against γ (summary merged with ``analysis.token_alpha_by_candidate``):
    accepted ÷ drafted, which falls with γ by construction, and accepted ÷ positions reached, the
    per-token α of Leviathan's formula, flat when acceptance does not depend on the position."""
    labels = {"alpha": "accepted ÷ drafted", "alpha_token": "accepted ÷ reached (per-token α)"}
    tidy = summary[summary["gamma"] > 0].melt(id_vars=["candidate", "gamma"], value_vars=list(labels),
                                              var_name="measure", value_name="rate")
    tidy["measure"] = tidy["measure"].map(labels)
    return alt.Chart(tidy).mark_line(point=True).encode(
        x=alt.X("gamma:Q", title="draft tokens per step γ"),
        y=alt.Y("rate:Q", title="acceptance rate", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("measure:N", title="α as"),
        tooltip=["candidate", "measure", alt.Tooltip("rate:Q", format=".3f")],
    ).properties(title=title or "Acceptance rate vs γ", width=300, height=220)


def accept_length_chart(records, gamma: int, title: str | None = None) -> alt.LayerChart:
    """Share of verifier steps that accepted n = 0..γ draft tokens at one γ (bars), and what an
    i.i.d. acceptance at the measured per-token α (accepted ÷ positions reached) would give (dots).
    Mass at 0 is why τ saturates as γ grows."""
    import numpy as np
    import pandas as pd

    from specnb.acceptance import counts_from_positions

    rows = records[records["gamma"] == gamma]
    lengths = np.array([n for row in rows["accept_lengths"] for n in row], dtype=int)
    counts = np.bincount(lengths, minlength=gamma + 1)[:gamma + 1] if len(lengths) else np.zeros(gamma + 1)
    reached = sum(sum(counts_from_positions(a, d)[0])
                  for a, d in zip(rows["accepted_by_position"], rows["drafted_by_position"]))
    alpha = min(rows["accepted"].sum() / reached, 1.0) if reached else 0.0  # per-token α, as the formula uses
    iid = [alpha ** n * (1 - alpha) for n in range(gamma)] + [alpha ** gamma]  # stop at first rejection
    frame = pd.DataFrame({"accepted": np.arange(gamma + 1), "measured": counts / max(counts.sum(), 1), "iid": iid})
    x = alt.X("accepted:O", title="draft tokens accepted in a step")
    bars = alt.Chart(frame).mark_bar(opacity=0.7).encode(
        x=x, y=alt.Y("measured:Q", title="share of steps", scale=alt.Scale(domain=[0, 1])),
        tooltip=["accepted", alt.Tooltip("measured:Q", format=".3f"), alt.Tooltip("iid:Q", format=".3f")])
    dots = alt.Chart(frame).mark_point(filled=True, color="black").encode(x=x, y="iid:Q")
    tau = 1 + float((frame["accepted"] * frame["measured"]).sum())
    return (bars + dots).properties(
        title=title or f"γ = {gamma}: accepted per step (bars), i.i.d. at α = {alpha:.2f} (dots); τ = {tau:.2f}",
        width=260, height=200)


def ragged_cost_chart(ragged, title: str | None = None) -> alt.FacetChart:
    """What ragged batches cost per batch size (``analysis.ragged_summary``): the share of cache slots
    kept but masked (another row accepted more) and of row-steps spent on finished rows."""
    labels = {"masked_slot_share": "cache slots masked (ragged acceptance)",
              "idle_row_share": "row-steps on finished rows"}
    tidy = ragged.melt(id_vars=["candidate", "gamma", "batch_size"], value_vars=list(labels), var_name="cost",
                       value_name="share")
    tidy["cost"] = tidy["cost"].map(labels)
    return alt.Chart(tidy).mark_line(point=True).encode(
        x=alt.X("batch_size:Q", title="batch size", scale=alt.Scale(type="log", base=2)),
        y=alt.Y("share:Q", title="share", axis=alt.Axis(format="%")),
        color=alt.Color("gamma:O", title="γ (0 = verifier-only)"),
        tooltip=["candidate", "batch_size", alt.Tooltip("share:Q", format=".1%")],
    ).properties(width=260, height=220).facet(column=alt.Column("cost:N", title=None)).properties(
        title=title or "Ragged-batch costs per batch size")
