"""Charts of the predictor: the cost model against measured forwards,
acceptance by position, predicted speedup per γ with its band, predicted vs measured on the
held-out grid, what-if verdicts, and the reference run replayed."""

from __future__ import annotations

import altair as alt

from specnb.app.charts.expected import SPEEDUP_SCALE, unit_rule


def cost_model_chart(grid, fits, title: str | None = None) -> alt.Chart:
    """Measured decode forwards (points) against tokens × batch, and each model's priced curve
    (``specnb.predict.costs.CostModel.curve``: the one-token forward, then a robust line over the
    rest; ``fits``: rows of ``cost_model_table``)."""
    import pandas as pd

    from specnb.predict.costs import CostModel  # deferred: loads torch and pandas

    points = grid[grid["kind"] == "decode"].assign(tokens=lambda g: g["n_tokens"] * g["batch_size"])
    lines = []
    for fit in fits.itertuples():
        span = points[points["model"] == fit.model]["tokens"]
        if span.empty:
            continue
        priced = CostModel(t0_ms=fit.t0_ms, ms_per_token=fit.ms_per_token, r2=fit.r2, n_points=fit.n_points,
                           measured=fit.measured).curve()
        for tokens in sorted({1, 2, int(span.max())}):
            lines.append({"model": fit.model, "tokens": tokens, "priced_ms": float(priced(tokens))})
    base = alt.Chart(points).mark_point(filled=True, size=50).encode(
        x=alt.X("tokens:Q", title="tokens in the forward (n × batch)"),
        y=alt.Y("median_ms:Q", title="forward time (ms, median)"),
        color=alt.Color("model:N", title="model"), shape=alt.Shape("batch_size:N", title="batch size"),
        tooltip=["model", "n_tokens", "batch_size", alt.Tooltip("median_ms:Q", format=".2f")])
    priced = alt.Chart(pd.DataFrame(lines)).mark_line(strokeDash=[4, 3]).encode(
        x="tokens:Q", y="priced_ms:Q", color="model:N")
    return (base + priced).properties(title=title or "Cost model: priced forward time (dashed) vs measured",
                                      width=420, height=280)


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
    FLOPs c: horizontal bars are the measured 95% CIs, vertical ones the predictor's band; a point
    drawn hollow has its prediction outside the measured CI (an error beyond noise). The diagonal is
    a perfect prediction."""
    import pandas as pd

    levi = table["flops_leviathan_speedup"]
    tidy = pd.concat([
        table.assign(method="specnb predictor", predicted=table["predicted_speedup"], lo=table["predicted_lo"],
                     hi=table["predicted_hi"]),
        table.assign(method="Leviathan, FLOPs c", predicted=levi, lo=levi, hi=levi,
                     prediction_in_ci=(levi >= table["measured_lo"]) & (levi <= table["measured_hi"])),
    ], ignore_index=True)
    tidy["inside"] = tidy["prediction_in_ci"].map({True: "inside the measured CI", False: "outside"})
    bounds = [tidy["predicted"], tidy["measured_speedup"], tidy["measured_lo"], tidy["measured_hi"]]
    low = float(min(min(b.min() for b in bounds), 1.0)) * 0.9
    high = float(max(max(b.max() for b in bounds), 1.0)) * 1.1
    scale = alt.Scale(domain=[low, high])
    base = alt.Chart(tidy).encode(x=alt.X("measured_speedup:Q", title="measured speedup (x, bar: 95% CI)",
                                          scale=scale),
                                  color=alt.Color("method:N", title="prediction"))
    points = base.mark_point(size=60).encode(
        y=alt.Y("predicted:Q", title="predicted speedup (x)", scale=scale), shape=alt.Shape("draft:N", title="draft"),
        fill=alt.condition("datum.prediction_in_ci", alt.Color("method:N"), alt.value("white")),
        tooltip=["method", "draft", "gamma", "batch_size", alt.Tooltip("measured_speedup:Q", format=".3f"),
                 alt.Tooltip("measured_lo:Q", format=".3f", title="measured CI lo"),
                 alt.Tooltip("measured_hi:Q", format=".3f", title="measured CI hi"),
                 alt.Tooltip("predicted:Q", format=".3f"), "inside", "units"])
    bars = base.mark_rule(opacity=0.5).encode(y="lo:Q", y2="hi:Q")
    xbars = base.mark_rule(opacity=0.6).encode(x="measured_lo:Q", x2="measured_hi:Q", y="predicted:Q")
    diagonal = alt.Chart(pd.DataFrame({"x": [low, high]})).mark_line(color="gray", strokeDash=[4, 4]).encode(
        x="x:Q", y="x:Q")
    return (diagonal + xbars + bars + points).properties(
        title=title or "Held-out validation: predicted vs measured speedup (hollow: prediction outside the CI)",
        width=420, height=380)


def verdict_heatmap(frame, x: str = "draft_speed", y: str = "batch_size", title: str | None = None) -> alt.Chart:
    """Best predicted speedup over a what-if grid (colour; blue wins) with the recommended γ written in."""
    labels = {"draft_speed": "draft made faster by (x)", "batch_size": "batch size", "alpha": "flat acceptance α"}
    frame = frame.assign(
        label=frame["recommended_gamma"].map(lambda g: "don't" if g is None or g != g else f"γ={int(g)}")
    )
    base = alt.Chart(frame).encode(x=alt.X(f"{x}:O", title=labels.get(x, x)), y=alt.Y(f"{y}:O", title=labels.get(y, y)))
    cells = base.mark_rect().encode(
        color=alt.Color("best_speedup:Q", title="best speedup (x)", scale=SPEEDUP_SCALE),
        tooltip=[
            x,
            y,
            "label",
            alt.Tooltip("best_speedup:Q", format=".3f"),
            alt.Tooltip("break_even_alpha:Q", format=".3f"),
        ],
    )
    text = base.mark_text(fontSize=11).encode(text="label:N")
    return (cells + text).properties(title=title or "What would change the verdict", width=300, height=200)


def reference_chart(frame, title: str | None = None) -> alt.Chart:
    """The reference MPS run: predicted tok/s against the assumed extra cost per verified token,
    per reading of α, with the reported tok/s and verifier-only tok/s as horizontal rules (one panel per γ)."""
    lines = (
        alt.Chart(frame)
        .mark_line(point=True)
        .encode(
            x=alt.X("verify_extra_token_fraction:Q", title="each extra verified token costs (fraction of a forward)"),
            y=alt.Y("predicted_tok_s:Q", title="tokens per second"),
            color=alt.Color("alpha_reading:N", title="reading of α = 0.392"),
            tooltip=[
                "gamma",
                "alpha_reading",
                "verify_extra_token_fraction",
                alt.Tooltip("predicted_tok_s:Q", format=".2f"),
                "reported_tok_s",
            ],
        )
    )
    reported = alt.Chart(frame).mark_rule(color="black").encode(y="reported_tok_s:Q")
    flops = alt.Chart(frame).mark_rule(color="gray", strokeDash=[4, 4]).encode(y="flops_theory_tok_s:Q")
    alone = alt.Chart(frame).mark_rule(color="red", strokeDash=[1, 3]).encode(y="verifier_only_tok_s:Q")
    return (
        (lines + reported + flops + alone)
        .properties(width=300, height=240)
        .facet(column=alt.Column("gamma:O", title="γ"))
        .properties(
            title=title
            or "Reference MPS run: black = reported, dashed = FLOPs theory, red dotted = verifier-only, "
            "lines = predictor"
        )
    )
