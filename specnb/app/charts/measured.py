"""Charts of measured runs: speedup with its CI, per-stage time, step economics, acceptance, the
draft-size tradeoff and batch-size costs."""

from __future__ import annotations

import altair as alt

from specnb.app.charts.expected import unit_rule
from specnb.core import theory
from specnb.decode.timing import STAGES
from specnb.measure.acceptance import accept_lengths


def speedup_chart(summary, x: str = "gamma", predictions=None, title: str | None = None) -> alt.Chart:
    """Measured speedup (95% bootstrap CI) against ``x``, optionally with predicted lines
    (tidy ``predictions``: x, speedup, source); a rule at 1x separates wins from losses."""
    titles = {"gamma": "draft tokens per step γ", "batch_size": "batch size (prompts per batch)"}
    data = summary[summary["gamma"] > 0] if "gamma" in summary else summary
    color = alt.Color("series:N", title="", legend=alt.Legend(labelLimit=320))
    data = data.assign(series=data.get("draft", "measured").astype(str) + " (measured)")
    measured = alt.Chart(data).encode(x=alt.X(f"{x}:Q", title=titles.get(x, x)), color=color)
    layers = [
        measured.mark_errorbar().encode(
            y=alt.Y("speedup_lo:Q", title="speedup over verifier-only (x)", scale=alt.Scale(zero=False)),
            y2="speedup_hi:Q",
        ),
        measured.mark_line(point=True).encode(
            y="speedup:Q",
            tooltip=[
                "candidate",
                x,
                alt.Tooltip("speedup:Q", format=".3f"),
                alt.Tooltip("speedup_lo:Q", format=".3f"),
                alt.Tooltip("speedup_hi:Q", format=".3f"),
                alt.Tooltip("alpha:Q", format=".3f"),
            ],
        ),
        unit_rule(),
    ]
    if predictions is not None:
        layers.append(
            alt.Chart(predictions.assign(series=predictions["source"]))
            .mark_line(strokeDash=[5, 3])
            .encode(
                x=f"{x}:Q", y="speedup:Q", color=color, tooltip=["source", x, alt.Tooltip("speedup:Q", format=".3f")]
            )
        )
    return alt.layer(*layers).properties(title=title or f"Speedup vs {titles.get(x, x)}", width=420, height=280)


STAGE_ORDER = list(STAGES)


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
    return (
        alt.Chart(frame.assign(**{by: frame[by].astype(str)}))
        .mark_bar()
        .encode(
            x=alt.X(f"{by}:N", title=by.replace("_", " "), sort=order),
            y=alt.Y("ms_per_token:Q", title="ms per generated token"),
            color=alt.Color("stage:N", title="stage", sort=STAGE_ORDER),
            order=alt.Order("stage_rank:Q"),
            tooltip=[by, "stage", alt.Tooltip("ms_per_token:Q", format=".2f")],
        )
        .transform_calculate(stage_rank=f"indexof({STAGE_ORDER}, datum.stage)")
        .properties(title=title or "Time per generated token by stage", width=420, height=280)
    )


def metric_chart(summary, y: str, x: str = "gamma", title: str | None = None) -> alt.Chart:
    """One measured metric (tok/s, α, τ) against γ or batch size, one line per draft."""
    labels = {
        "tok_s": "generated tokens per second",
        "alpha": "acceptance rate α",
        "tau": "tokens per verifier step τ",
        "gamma": "draft tokens per step γ",
        "batch_size": "batch size",
    }
    return (
        alt.Chart(summary)
        .mark_line(point=True)
        .encode(
            x=alt.X(f"{x}:Q", title=labels.get(x, x)),
            y=alt.Y(f"{y}:Q", title=labels.get(y, y)),
            color=alt.Color("draft:N", title="draft"),
            tooltip=["candidate", x, alt.Tooltip(f"{y}:Q", format=".3f")],
        )
        .properties(title=title or f"{labels.get(y, y)} vs {labels.get(x, x)}", width=300, height=220)
    )


def break_even_curves(gammas, alphas=None):
    """c at which speedup is exactly 1, per (α, γ) (``theory.break_even_c``), as a tidy frame."""
    import numpy as np
    import pandas as pd

    alphas = np.linspace(0.0, 0.95, 39) if alphas is None else np.asarray(alphas, dtype=float)
    return pd.DataFrame(
        [{"alpha": a, "gamma": g, "c": float(theory.break_even_c(a, g))} for g in gammas for a in alphas]
    )


def c_alpha_chart(
    points, gammas=(1, 2, 4, 8), title: str | None = None, c_title: str = "wall-clock cost ratio c (draft ÷ verifier)"
) -> alt.Chart:
    """Every draft at its measured (α, wall-clock c), with break-even curves per γ: below a curve
    that γ wins, above it speculation is a tax (tidy ``points``: draft, alpha, c, best_speedup);
    ``c_title`` names the c when it is not by wall clock (e.g. by FLOPs)."""
    curves = (
        alt.Chart(break_even_curves(gammas))
        .mark_line(strokeDash=[4, 3])
        .encode(
            x=alt.X("alpha:Q", title="acceptance rate α", scale=alt.Scale(domain=[0, 1])),
            y=alt.Y("c:Q", title=c_title),
            detail="gamma:O",
            color=alt.value("grey"),
        )
    )
    labels = (
        alt.Chart(break_even_curves(gammas, [0.95]))
        .mark_text(align="left", dx=4, color="grey")
        .encode(x="alpha:Q", y="c:Q", text=alt.Text("gamma:O", format="d"))
    )
    dots = (
        alt.Chart(points)
        .mark_point(filled=True, size=90)
        .encode(
            x="alpha:Q",
            y="c:Q",
            color=alt.Color("draft:N", title="draft"),
            shape=alt.Shape("verdict:N", title="best measured"),
            tooltip=[
                "draft",
                alt.Tooltip("alpha:Q", format=".3f"),
                alt.Tooltip("c:Q", format=".3f"),
                alt.Tooltip("best_speedup:Q", format=".3f"),
                "best_gamma",
            ],
        )
    )
    names = (
        alt.Chart(points).mark_text(align="left", dx=7, dy=-7, fontSize=10).encode(x="alpha:Q", y="c:Q", text="draft:N")
    )
    return (curves + labels + dots + names).properties(
        title=title or "Draft cost vs acceptance; dashed: break-even per γ (labels), below wins", width=460, height=320
    )


def acceptance_strip_chart(rows, group: str = "categories", title: str | None = None) -> alt.Chart:
    """Per-prompt acceptance rates as dots per draft, coloured by ``group`` (prompt category or run)."""
    return (
        alt.Chart(rows)
        .mark_tick(thickness=2, size=14)
        .encode(
            x=alt.X("alpha:Q", title="acceptance rate α (per prompt)", scale=alt.Scale(domain=[0, 1])),
            y=alt.Y("draft:N", title="draft"),
            color=alt.Color(f"{group}:N", title=group.replace("_", " ")),
            tooltip=[
                "draft",
                "gamma",
                group,
                "prompt_ids",
                alt.Tooltip("alpha:Q", format=".3f"),
                alt.Tooltip("speedup:Q", format=".3f"),
            ],
        )
        .properties(title=title or "Acceptance varies prompt to prompt", width=460, height=220)
    )


def histogram_chart(frame, x: str, title: str, x_title: str, color: str | None = None) -> alt.Chart:
    """Counts of ``x`` in 20 bins (e.g. α of simulated short runs)."""
    enc = {"color": alt.Color(f"{color}:N", title=color)} if color else {}
    return (
        alt.Chart(frame)
        .mark_bar(opacity=0.7)
        .encode(
            x=alt.X(f"{x}:Q", bin=alt.Bin(maxbins=20), title=x_title),
            y=alt.Y("count():Q", title="runs", stack=None),
            **enc,
        )
        .properties(title=title, width=420, height=220)
    )


def per_token_vs_batch_chart(grid, title: str | None = None) -> alt.Chart:
    """Forward ms per token in the batch against batch size, one line per tokens-per-forward:
    flat-falling while memory-bound (weights read once for the whole batch), flat when compute-bound."""
    frame = grid.assign(ms_per_token=grid["median_ms"] / (grid["n_tokens"] * grid["batch_size"]))
    return (
        alt.Chart(frame)
        .mark_line(point=True)
        .encode(
            x=alt.X("batch_size:Q", title="batch size", scale=alt.Scale(type="log", base=2)),
            y=alt.Y("ms_per_token:Q", title="ms per token (forward ÷ tokens in it)", scale=alt.Scale(type="log")),
            color=alt.Color("n_tokens:O", title="tokens per row"),
            tooltip=[
                "batch_size",
                "n_tokens",
                alt.Tooltip("median_ms:Q", format=".2f"),
                alt.Tooltip("ms_per_token:Q", format=".3f"),
            ],
        )
        .properties(title=title or "Verifier forward cost per token vs batch size", width=420, height=280)
    )


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
    bars = (
        alt.Chart(tidy)
        .mark_bar(opacity=0.8)
        .encode(
            x=x,
            y=alt.Y("tokens:Q", title="verifier-only tokens (time of) / tokens yielded"),
            color=alt.Color(
                "part:N",
                title="a step costs",
                sort=list(parts.values()),
                scale=alt.Scale(domain=list(parts.values()), range=["#f58518", "#e45756", "#72b7b2"]),
            ),
            order=alt.Order("rank:Q"),  # draft, verify, bookkeeping: the stage chart's colours
            tooltip=["candidate", "part", alt.Tooltip("tokens:Q", format=".2f")],
        )
    )
    yielded = (
        alt.Chart(steps)
        .mark_point(shape="diamond", filled=True, size=110, color="black")
        .encode(
            x=x,
            y="tokens_per_step:Q",
            tooltip=[
                "candidate",
                alt.Tooltip("tokens_per_step:Q", format=".2f"),
                alt.Tooltip("break_even_tokens:Q", format=".2f"),
            ],
        )
    )
    return (bars + yielded).properties(
        title=title or "A step's cost in verifier-only tokens (bars) vs tokens it yields (diamonds)",
        width=420,
        height=280,
    )


def alpha_chart(summary, title: str | None = None) -> alt.Chart:
    """Two acceptance rates against γ (summary merged with ``analysis.token_alpha_by_candidate``):
    accepted ÷ drafted, which falls with γ by construction, and accepted ÷ positions reached, the
    per-token α of Leviathan's formula, flat when acceptance does not depend on the position."""
    labels = {"alpha": "accepted ÷ drafted", "alpha_token": "accepted ÷ reached (per-token α)"}
    tidy = summary[summary["gamma"] > 0].melt(
        id_vars=["candidate", "gamma"], value_vars=list(labels), var_name="measure", value_name="rate"
    )
    tidy["measure"] = tidy["measure"].map(labels)
    return (
        alt.Chart(tidy)
        .mark_line(point=True)
        .encode(
            x=alt.X("gamma:Q", title="draft tokens per step γ"),
            y=alt.Y("rate:Q", title="acceptance rate", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("measure:N", title="α as"),
            tooltip=["candidate", "measure", alt.Tooltip("rate:Q", format=".3f")],
        )
        .properties(title=title or "Acceptance rate vs γ", width=300, height=220)
    )


def accept_length_chart(records, gamma: int, title: str | None = None) -> alt.LayerChart:
    """Share of verifier steps that accepted n = 0..γ draft tokens at one γ (bars), and what i.i.d.
    acceptance at the measured per-token α would give (dots): ``measure.acceptance.accept_lengths``."""
    frame = accept_lengths(records, gamma)
    alpha = frame.attrs["alpha_token"]
    x = alt.X("accepted:O", title="draft tokens accepted in a step")
    bars = (
        alt.Chart(frame)
        .mark_bar(opacity=0.7)
        .encode(
            x=x,
            y=alt.Y("measured:Q", title="share of steps", scale=alt.Scale(domain=[0, 1])),
            tooltip=["accepted", alt.Tooltip("measured:Q", format=".3f"), alt.Tooltip("iid:Q", format=".3f")],
        )
    )
    dots = alt.Chart(frame).mark_point(filled=True, color="black").encode(x=x, y="iid:Q")
    tau = 1 + float((frame["accepted"] * frame["measured"]).sum())
    return (bars + dots).properties(
        title=title or f"γ = {gamma}: accepted per step (bars), i.i.d. at α = {alpha:.2f} (dots); τ = {tau:.2f}",
        width=260,
        height=200,
    )


def ragged_cost_chart(ragged, title: str | None = None) -> alt.FacetChart:
    """What ragged batches cost per batch size (``analysis.ragged_summary``): the share of cache slots
    kept but masked (another row accepted more) and of row-steps spent on finished rows."""
    labels = {
        "masked_slot_share": "cache slots masked (ragged acceptance)",
        "idle_row_share": "row-steps on finished rows",
    }
    tidy = ragged.melt(
        id_vars=["candidate", "gamma", "batch_size"], value_vars=list(labels), var_name="cost", value_name="share"
    )
    tidy["cost"] = tidy["cost"].map(labels)
    return (
        alt.Chart(tidy)
        .mark_line(point=True)
        .encode(
            x=alt.X("batch_size:Q", title="batch size", scale=alt.Scale(type="log", base=2)),
            y=alt.Y("share:Q", title="share", axis=alt.Axis(format="%")),
            color=alt.Color("gamma:O", title="γ (0 = verifier-only)"),
            tooltip=["candidate", "batch_size", alt.Tooltip("share:Q", format=".1%")],
        )
        .properties(width=260, height=220)
        .facet(column=alt.Column("cost:N", title=None))
        .properties(title=title or "Ragged-batch costs per batch size")
    )
