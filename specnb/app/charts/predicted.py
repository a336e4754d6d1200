"""Charts of the predictor: the cost model against measured forwards,
acceptance by position, predicted speedup per γ with its band, predicted vs measured on the
held-out grid, what-if verdicts, and the reference run replayed."""

from __future__ import annotations

import altair as alt

from specnb.app.charts.expected import SPEEDUP_SCALE, unit_rule
from specnb.app.charts.style import dashed_lines, draft_color, one_mark_each
from specnb.measure.acceptance import MIN_EVENTS, rate_interval


def cost_model_chart(grid, fits, title: str | None = None) -> alt.Chart:
    """Measured decode forwards (one point per model, tokens and batch size) against tokens × batch,
    and each model's priced curve at every token count (``specnb.predict.costs.CostModel.curve``,
    the model the predictor uses, its kernel ``breaks`` included; ``fits``: rows of
    ``cost_model_table``). A model keeps its colour of the run."""
    import pandas as pd

    from specnb.predict.costs import CostModel  # deferred: loads torch and pandas

    points = grid[grid["kind"] == "decode"].assign(tokens=lambda g: g["n_tokens"] * g["batch_size"])
    one_mark_each(points, ["model", "n_tokens", "batch_size"], "cost_model_chart: one point per model and shape")
    lines = []
    for fit in fits.itertuples():
        span = points[points["model"] == fit.model]["tokens"]
        if span.empty:
            continue
        breaks = getattr(fit, "breaks", [2])
        priced = CostModel(t0_ms=fit.t0_ms, ms_per_token=fit.ms_per_token, r2=fit.r2, n_points=fit.n_points,
                           measured=fit.measured, breaks=list(breaks) if breaks is not None else [2]).curve()
        for tokens in range(1, int(span.max()) + 1):
            lines.append({"model": fit.model, "tokens": tokens, "priced_ms": float(priced(tokens))})
    lines = pd.DataFrame(lines, columns=["model", "tokens", "priced_ms"])
    color = draft_color(points, lines, field="model", title="model")
    base = alt.Chart(points).mark_point(filled=True, size=50).encode(
        x=alt.X("tokens:Q", title="tokens in the forward (n × batch)"),
        y=alt.Y("median_ms:Q", title="forward time (ms, median)"),
        color=color, shape=alt.Shape("batch_size:N", title="batch size"),
        tooltip=["model", "n_tokens", "batch_size", alt.Tooltip("median_ms:Q", format=".2f")])
    priced = alt.Chart(lines).mark_line(strokeDash=[4, 3]).encode(
        x="tokens:Q", y="priced_ms:Q", color=color,
        tooltip=["model", "tokens", alt.Tooltip("priced_ms:Q", format=".2f")])
    return (base + priced).properties(title=title or "Cost model: priced forward time (dashed) vs measured",
                                      width=420, height=280)


def acceptance_profile_chart(pooled, per_prompt=None, title: str | None = None) -> alt.Chart:
    """Conditional acceptance a_i by draft position, one panel per draft: a point per position that
    was reached (a position nobody reached is no point), its Wilson 95% interval as a bar, and the
    count (accepted/reached) written beside every rate from fewer than ``MIN_EVENTS`` events; ticks:
    each calibration prompt's rate (``per_prompt``; prompts with the same rate share a tick)."""
    one_mark_each(pooled, ["draft", "position"], "acceptance_profile_chart: one point per draft and position")
    shown = pooled[pooled["reached"] > 0]
    lo, hi = rate_interval(shown["accepted"], shown["reached"])
    shown = shown.assign(rate_lo=lo, rate_hi=hi, count=[f"{a}/{r}" for a, r in zip(shown["accepted"],
                                                                                   shown["reached"])],
                         conditional_rate=shown["accepted"] / shown["reached"])
    prompts = None if per_prompt is None or not len(per_prompt) else per_prompt[per_prompt["reached"] > 0]
    color = draft_color(pooled)
    positions = sorted(pooled["position"].unique().tolist())
    x = alt.X("position:O", title="draft position i", scale=alt.Scale(domain=positions))
    y = alt.Y("conditional_rate:Q", title="P(accept i | 1..i−1 accepted)", scale=alt.Scale(domain=[0, 1]))

    def panel(draft):
        mine = shown[shown["draft"] == draft]
        tooltip = ["draft", "position", "reached", "accepted", alt.Tooltip("conditional_rate:Q", format=".3f"),
                   alt.Tooltip("rate_lo:Q", format=".2f"), alt.Tooltip("rate_hi:Q", format=".2f")]
        layers = [alt.Chart(mine).mark_rule(opacity=0.5).encode(x=x, y=alt.Y("rate_lo:Q", scale=alt.Scale(
                      domain=[0, 1])), y2="rate_hi:Q", color=color),
                  alt.Chart(mine).mark_line(point=True).encode(x=x, y=y, color=color, tooltip=tooltip),
                  alt.Chart(mine[mine["reached"] < MIN_EVENTS]).mark_text(dx=14, fontSize=9, align="left").encode(
                      x=x, y=y, text="count:N")]
        if prompts is not None:
            ticks = prompts[prompts["draft"] == draft].drop_duplicates(["position", "conditional_rate"])
            layers.append(alt.Chart(ticks).mark_tick(opacity=0.5, size=10).encode(
                x=x, y=y, color=color, tooltip=["draft", "prompt_id", "position", "reached", "accepted"]))
        return alt.layer(*layers).properties(title=draft, width=max(120, 28 * len(positions)), height=180)

    drafts = list(dict.fromkeys(pooled["draft"].astype(str)))
    chart = alt.concat(*[panel(d) for d in drafts], columns=min(len(drafts), 4))
    return chart.properties(title=title or "Acceptance by position is not one α (bars: 95% interval; "
                            f"n/m: a rate from fewer than {MIN_EVENTS} positions reached)")


def prediction_chart(table, title: str | None = None) -> alt.Chart:
    """Predicted speedup vs γ, one line per draft (its colour of the run) with its band, and the
    Leviathan speedup with FLOPs c dashed (the legend shows which dash is which); 1.0x marked."""
    import pandas as pd

    one_mark_each(table, ["draft", "gamma"], "prediction_chart: one point per draft and γ")
    kinds = ["specnb predictor", "Leviathan, FLOPs c"]
    lines = pd.concat([table.assign(kind=kinds[0], speedup=table["predicted_speedup"]),
                       table.assign(kind=kinds[1], speedup=table["flops_leviathan_speedup"])], ignore_index=True)
    color = draft_color(table)
    x = alt.X("gamma:O", title="draft tokens per step γ")
    band = alt.Chart(table).mark_area(opacity=0.15).encode(
        x=x, y=alt.Y("speedup_lo:Q", title="speedup over verifier-only (x)"), y2="speedup_hi:Q", color=color)
    line = dashed_lines(lines, kinds, x=x, y="speedup:Q", color=color, tooltip=[
        "draft", "gamma", "kind", alt.Tooltip("speedup:Q", format=".3f"), alt.Tooltip("speedup_lo:Q", format=".3f"),
        alt.Tooltip("speedup_hi:Q", format=".3f"), alt.Tooltip("break_even_alpha:Q", format=".3f")])
    return (band + line + unit_rule()).properties(
        title=title or "Predicted speedup (band: 10–90% over prompts; dashed: Leviathan with FLOPs c)",
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
        y=alt.Y("predicted:Q", title="predicted speedup (x)", scale=scale),
        shape=alt.Shape("draft:N", title="draft", legend=alt.Legend(symbolStrokeColor="black")),
        fill=alt.condition("datum.prediction_in_ci", alt.Color("method:N", legend=None), alt.value("white")),
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
    # each rule's value is the same on every row of a γ: one rule per panel (its max, on purpose),
    # not one per row drawn over each other
    reported = alt.Chart(frame).mark_rule(color="black").encode(y="max(reported_tok_s):Q")
    flops = alt.Chart(frame).mark_rule(color="gray", strokeDash=[4, 4]).encode(y="max(flops_theory_tok_s):Q")
    alone = alt.Chart(frame).mark_rule(color="red", strokeDash=[1, 3]).encode(y="max(verifier_only_tok_s):Q")
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
