"""Charts of measured runs: speedup with its CI, per-stage time, step economics, acceptance, the
draft-size tradeoff and batch-size costs."""

from __future__ import annotations

import altair as alt
import pandas as pd

from specnb.app.charts.expected import unit_rule
from specnb.app.charts.style import MAX_SERIES, dash, dashed_lines, draft_color, log_axis, one_mark_each
from specnb.core import theory
from specnb.decode.timing import STAGES
from specnb.measure.acceptance import accept_lengths


def speedup_chart(summary, x: str = "gamma", predictions=None, title: str | None = None) -> alt.TopLevelMixin:
    """Measured speedup (95% bootstrap CI) against ``x`` with a rule at 1x: one line per draft, one
    point per draft and ``x``; a draft's colour is its colour of the run (``style.draft_colours``).

    With ``predictions`` (tidy: draft, x, kind, speedup; ``analysis.leviathan_predictions``) each
    draft gets a panel of its own, its measured line solid and each prediction dashed (the legend
    shows which dash is which); without, more than eight drafts are split into panels of eight."""
    titles = {"gamma": "draft tokens per step γ", "batch_size": "batch size (prompts per batch)"}
    data = summary[summary["gamma"] > 0] if "gamma" in summary else summary
    data = data.assign(draft=data.get("draft", "measured"), kind="measured (95% CI)")
    one_mark_each(data, ["draft", x], "speedup_chart: one point per draft and " + x)
    predicted = None
    if predictions is not None and len(predictions):
        predicted = predictions.assign(kind=predictions["kind"].map(lambda k: f"Leviathan, {k}"))
        one_mark_each(predicted, ["draft", x, "kind"], "speedup_chart: one predicted point per draft, kind and " + x)
    color = draft_color(data, *([predicted] if predicted is not None else []))
    kinds = ["measured (95% CI)", *([] if predicted is None else dict.fromkeys(predicted["kind"]))]
    x_enc = alt.X(f"{x}:Q", title=titles.get(x, x),
                  axis=alt.Axis(values=sorted(data[x].unique().tolist()), format="~g"))
    y = alt.Y("speedup_lo:Q", title="speedup over verifier-only (x)", scale=alt.Scale(zero=False))

    def panel(frame, guess, width):
        measured = alt.Chart(frame).encode(x=x_enc, color=color)
        layers = [
            measured.mark_errorbar().encode(y=y, y2="speedup_hi:Q"),
            dashed_lines(frame, kinds, x=x_enc, y="speedup:Q", color=color, tooltip=[
                "candidate", x, alt.Tooltip("speedup:Q", format=".3f"), alt.Tooltip("speedup_lo:Q", format=".3f"),
                alt.Tooltip("speedup_hi:Q", format=".3f"), alt.Tooltip("alpha:Q", format=".3f")]),
            unit_rule(),
        ]
        if guess is not None and len(guess):
            layers.append(alt.Chart(guess).mark_line().encode(
                x=x_enc, y="speedup:Q", color=color, strokeDash=dash(kinds),
                tooltip=["draft", "kind", x, alt.Tooltip("speedup:Q", format=".3f")]))
        return alt.layer(*layers).properties(width=width, height=220 if predicted is not None else 280)

    drafts = list(dict.fromkeys(data["draft"].astype(str)))
    if predicted is None and len(drafts) <= MAX_SERIES:
        return panel(data, None, 420).properties(title=title or f"Speedup vs {titles.get(x, x)}")
    if predicted is None:
        groups = [drafts[i:i + MAX_SERIES] for i in range(0, len(drafts), MAX_SERIES)]
    else:
        groups = [[d] for d in drafts]
    charts = [panel(data[data["draft"].astype(str).isin(g)],
                    None if predicted is None else predicted[predicted["draft"].astype(str).isin(g)],
                    260).properties(title=name_lines(g)) for g in groups]
    return alt.concat(*charts, columns=2).properties(title=title or f"Speedup vs {titles.get(x, x)}")


def name_lines(names: list[str], width_chars: int = 36) -> list[str]:
    """A panel title naming its drafts, wrapped into lines that fit a 260 px panel."""
    lines = [""]
    for name in names:
        joined = f"{lines[-1]}, {name}" if lines[-1] else name
        if lines[-1] and len(joined) > width_chars:
            lines.append(name)
        else:
            lines[-1] = joined
    return lines


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
    """One measured metric (tok/s, α, τ) against γ or batch size: one line per draft, one point per
    draft and ``x``."""
    one_mark_each(summary, ["draft", x], f"metric_chart: one point per draft and {x}")
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
            x=alt.X(f"{x}:Q", title=labels.get(x, x),
                    axis=alt.Axis(values=sorted(summary[x].unique().tolist()), format="~g")),
            y=alt.Y(f"{y}:Q", title=labels.get(y, y)),
            color=draft_color(summary),
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


def c_alpha_chart(points, gammas=(1, 2, 4, 8), title: str | None = None,
                  c_title: str = "wall-clock cost ratio c (draft ÷ verifier)",
                  color: alt.Color | None = None) -> alt.Chart:
    """Every draft at its measured (α, wall-clock c), with break-even curves per γ: below a curve
    that γ wins, above it speculation is a tax (tidy ``points``: draft, alpha, c, best_speedup);
    ``c_title`` names the c when it is not by wall clock (e.g. by FLOPs). One point per draft, in its
    colour of the run; more than eight drafts are split into panels of eight."""
    one_mark_each(points, ["draft"], "c_alpha_chart: one point per draft")
    drafts = list(dict.fromkeys(points["draft"].astype(str)))
    color = color or draft_color(points)  # every panel the same scale: the run's colours of all the drafts
    if len(drafts) > MAX_SERIES:
        return alt.concat(*[c_alpha_chart(points[points["draft"].astype(str).isin(drafts[i:i + MAX_SERIES])], gammas,
                                          f"drafts {i + 1}–{min(i + MAX_SERIES, len(drafts))}", c_title, color)
                            for i in range(0, len(drafts), MAX_SERIES)], columns=1).properties(
            title=title or "Draft cost vs acceptance; dashed: break-even per γ (labels), below wins")
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
            color=color,
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
    """Per-prompt acceptance rates, one tick per draft, ``group`` (prompt category or run, its own
    lane within the draft's row and its colour) and rate: prompts with the same rate share a tick
    (on purpose), which says how many it holds where more than one."""
    ties = rows.groupby(["draft", "gamma", group, "alpha"], sort=False, dropna=False).agg(
        prompts=("prompt_ids", "size"), prompt_ids=("prompt_ids", lambda ids: ", ".join(map(str, ids))),
        speedup=("speedup", "mean")).reset_index()
    ties["label"] = ties["prompts"].map(lambda n: f"×{n}" if n > 1 else "")
    x = alt.X("alpha:Q", title="acceptance rate α (per prompt)", scale=alt.Scale(domain=[0, 1]))
    y, lane = alt.Y("draft:N", title="draft"), alt.YOffset(f"{group}:N")
    ticks = alt.Chart(ties).mark_tick(thickness=2, size=10).encode(
        x=x, y=y, yOffset=lane, color=alt.Color(f"{group}:N", title=group.replace("_", " ")),
        tooltip=["draft", "gamma", group, "prompts", "prompt_ids", alt.Tooltip("alpha:Q", format=".3f"),
                 alt.Tooltip("speedup:Q", format=".3f", title="speedup (mean)")])
    counts = alt.Chart(ties[ties["prompts"] > 1]).mark_text(dx=10, fontSize=9, align="left").encode(
        x=x, y=y, yOffset=lane, text="label:N")
    return (ticks + counts).properties(title=title or "Acceptance varies prompt to prompt", width=460,
                                       height=max(160, 40 * ties["draft"].nunique()))


FEW_OUTCOMES = 12  # a resampling with at most this many distinct outcomes is drawn as those outcomes


def outcome_shares(frame, x: str, group: str | None = None) -> pd.DataFrame:
    """The share of draws per ``group`` that reported each distinct ``x`` where every group drew at
    most ``FEW_OUTCOMES`` values (columns group, x, lo = hi = the value, share, draws); otherwise the
    share in each of 20 common bins (lo, hi the bin's edges)."""
    import numpy as np

    frame = frame.dropna(subset=[x]).assign(_group=frame[group].astype(str) if group else "all")
    few = int(frame.groupby("_group")[x].nunique().max()) <= FEW_OUTCOMES if len(frame) else True
    edges = np.linspace(frame[x].min(), frame[x].max() + 1e-12, 21) if len(frame) and not few else None
    rows = []
    for name, draws in frame.groupby("_group", sort=False):
        if few:
            counts = draws[x].value_counts().sort_index()
            rows += [{"group": name, "lo": v, "hi": v, "draws": int(n), "share": n / len(draws)}
                     for v, n in counts.items()]
        else:
            counts, _ = np.histogram(draws[x], bins=edges)
            rows += [{"group": name, "lo": lo, "hi": hi, "draws": int(n), "share": n / len(draws)}
                     for lo, hi, n in zip(edges[:-1], edges[1:], counts) if n]
    return pd.DataFrame(rows, columns=["group", "lo", "hi", "draws", "share"])


def histogram_chart(frame, x: str, title: str, x_title: str, color: str | None = None) -> alt.Chart:
    """How often resampled runs (e.g. ``analysis.simulate_runs``) reported each ``x``, one panel row
    per ``color`` group (a draft): one bar per distinct outcome with the share of draws that gave it
    where the draws take few values (``outcome_shares``), else one bar per bin."""
    shares = outcome_shares(frame, x, color)
    few = bool((shares["lo"] == shares["hi"]).all())
    bars = alt.Chart(shares.rename(columns={"group": color or "group"})).mark_bar(
        opacity=0.8, **({"size": 6} if few else {})).encode(
        x=alt.X("lo:Q", title=x_title + (" (each bar one distinct outcome)" if few else " (20 bins)")),
        **({} if few else {"x2": "hi:Q"}),
        y=alt.Y("share:Q", title="share of runs", axis=alt.Axis(format="%")),
        tooltip=[alt.Tooltip("lo:Q", format=".3f", title=x), alt.Tooltip("share:Q", format=".1%"), "draws"],
        **({"color": draft_color(shares.rename(columns={"group": color}), field=color, title=color),
            "row": alt.Row(f"{color}:N", title=None, header=alt.Header(labelAngle=0, labelAlign="left"))}
           if color else {}))
    return bars.properties(title=title, width=360, height=70 if color else 220)


def per_token_vs_batch_chart(grid, title: str | None = None) -> alt.Chart:
    """Forward ms per token in the batch against batch size, one line per tokens-per-forward:
    flat-falling while memory-bound (weights read once for the whole batch), flat when compute-bound."""
    frame = grid.assign(ms_per_token=grid["median_ms"] / (grid["n_tokens"] * grid["batch_size"]))
    return (
        alt.Chart(frame)
        .mark_line(point=True)
        .encode(
            x=alt.X("batch_size:Q", title="batch size", scale=alt.Scale(type="log", base=2),
                    axis=log_axis(frame["batch_size"])),
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


def step_cost_chart(steps, title: str | None = None) -> alt.TopLevelMixin:
    """A decoding step's time in verifier-only tokens, one bar per draft and γ stacked draft / verify /
    bookkeeping (``analysis.step_costs``), next to the tokens the step yields (black diamonds), one
    panel per draft. A γ wins where the diamond is above its bar: it buys more tokens than the step
    costs."""
    steps = steps.assign(draft=steps["draft"].astype(str))
    one_mark_each(steps, ["draft", "gamma"], "step_cost_chart: one bar per draft and γ")
    parts = {"draft_cost": "draft", "verify_cost": "verify", "overhead_cost": "accept + rollback + other"}
    tidy = steps.melt(id_vars=["candidate", "draft", "gamma"], value_vars=list(parts), var_name="part",
                      value_name="tokens")
    tidy["part"] = tidy["part"].map(parts)
    tidy["rank"] = tidy["part"].map({v: i for i, v in enumerate(parts.values())})
    top = float(max(steps["tokens_per_step"].max(), steps["break_even_tokens"].max())) * 1.05
    y = alt.Y("tokens:Q", title="verifier-only tokens (time of) / tokens yielded", scale=alt.Scale(domain=[0, top]))

    def panel(draft):
        x = alt.X("gamma:O", title="draft tokens per step γ")
        bars = alt.Chart(tidy[tidy["draft"] == draft]).mark_bar(opacity=0.8).encode(
            x=x, y=y,
            color=alt.Color("part:N", title="a step costs", sort=list(parts.values()),
                            scale=alt.Scale(domain=list(parts.values()), range=["#f58518", "#e45756", "#72b7b2"])),
            order=alt.Order("rank:Q"),  # draft, verify, bookkeeping: the stage chart's colours
            tooltip=["candidate", "part", alt.Tooltip("tokens:Q", format=".2f")])
        yielded = alt.Chart(steps[steps["draft"] == draft]).mark_point(
            shape="diamond", filled=True, size=110, color="black").encode(
            x=x, y=alt.Y("tokens_per_step:Q", scale=alt.Scale(domain=[0, top])),
            tooltip=["candidate", alt.Tooltip("tokens_per_step:Q", format=".2f"),
                     alt.Tooltip("break_even_tokens:Q", format=".2f")])
        return (bars + yielded).properties(title=draft, width=max(130, 45 * steps["gamma"].nunique()), height=240)

    return alt.hconcat(*[panel(d) for d in dict.fromkeys(steps["draft"])]).properties(
        title=title or "A step's cost in verifier-only tokens (bars) vs tokens it yields (diamonds), per draft")


def alpha_chart(summary, title: str | None = None) -> alt.Chart:
    """Two acceptance rates against γ (summary merged with ``analysis.token_alpha_by_candidate``), one
    line per draft and measure (colour: the draft; dash: the measure): accepted ÷ drafted, which falls
    with γ by construction, and accepted ÷ positions reached, the per-token α of Leviathan's formula,
    flat when acceptance does not depend on the position."""
    labels = {"alpha": "accepted ÷ drafted", "alpha_token": "accepted ÷ reached (per-token α)"}
    spec = summary[summary["gamma"] > 0]
    one_mark_each(spec, ["draft", "gamma"], "alpha_chart: one point per draft, measure and γ")
    tidy = spec.melt(id_vars=["candidate", "draft", "gamma"], value_vars=list(labels), var_name="kind",
                     value_name="rate")
    tidy["kind"] = tidy["kind"].map(labels)
    return dashed_lines(
        tidy, list(labels.values()), "α as",
        x=alt.X("gamma:Q", title="draft tokens per step γ",
                axis=alt.Axis(values=sorted(tidy["gamma"].unique()), format="~g")),
        y=alt.Y("rate:Q", title="acceptance rate", scale=alt.Scale(domain=[0, 1])),
        color=draft_color(tidy), tooltip=["candidate", "kind", alt.Tooltip("rate:Q", format=".3f")],
    ).properties(title=title or "Acceptance rate vs γ", width=300, height=220)


def accept_length_chart(records, gamma: int, title: str | None = None) -> alt.LayerChart:
    """Share of verifier steps that accepted n = 0..γ draft tokens at one γ: one line per draft and
    measure, the measured share solid and what i.i.d. acceptance at the draft's per-token α would give
    dashed (``measure.acceptance.accept_lengths`` per draft, never pooled). The subtitle gives each
    draft's τ and per-token α."""
    drafts = list(dict.fromkeys(records.loc[records["gamma"] == gamma, "draft"].astype(str)))
    per_draft = {draft: accept_lengths(records, gamma, draft) for draft in drafts}
    frame = pd.concat([f.assign(draft=d) for d, f in per_draft.items()], ignore_index=True)
    taus = {d: (1 + float((f["accepted"] * f["measured"]).sum()), f.attrs["alpha_token"]) for d, f in per_draft.items()}
    kinds = ["measured", "i.i.d. at the draft's α"]
    tidy = frame.melt(id_vars=["draft", "accepted"], value_vars=["measured", "iid"], var_name="kind",
                      value_name="share").replace({"kind": {"iid": kinds[1]}})
    chart = dashed_lines(
        tidy, kinds, x=alt.X("accepted:O", title="draft tokens accepted in a step"),
        y=alt.Y("share:Q", title="share of steps", scale=alt.Scale(domain=[0, 1])),
        color=draft_color(tidy), tooltip=["draft", "kind", "accepted", alt.Tooltip("share:Q", format=".3f")])
    heading = alt.TitleParams(text=title or f"γ = {gamma}: steps by drafts accepted",
                              subtitle=[f"τ = {t:.2f}, α = {a:.2f}  {d}" for d, (t, a) in taus.items()])
    return chart.properties(title=heading, width=max(220, 40 * (gamma + 1)), height=200)


def ragged_cost_chart(ragged, title: str | None = None) -> alt.FacetChart:
    """What ragged batches cost per batch size (``analysis.ragged_summary``): the share of cache slots
    kept but masked (another row accepted more) and of row-steps spent on finished rows."""
    labels = {
        "masked_slot_share": "cache slots masked (ragged acceptance)",
        "idle_row_share": "row-steps on finished rows",
    }
    one_mark_each(ragged, ["gamma", "batch_size"], "ragged_cost_chart: one point per γ and batch size (one draft)")
    tidy = ragged.melt(
        id_vars=["candidate", "gamma", "batch_size"], value_vars=list(labels), var_name="cost", value_name="share"
    )
    tidy["cost"] = tidy["cost"].map(labels)
    return (
        alt.Chart(tidy)
        .mark_line(point=True)
        .encode(
            x=alt.X("batch_size:Q", title="batch size", scale=alt.Scale(type="log", base=2),
                    axis=log_axis(tidy["batch_size"])),
            y=alt.Y("share:Q", title="share", axis=alt.Axis(format="%")),
            color=alt.Color("gamma:O", title="γ (0 = verifier-only)"),
            tooltip=["candidate", "batch_size", alt.Tooltip("share:Q", format=".1%")],
        )
        .properties(width=260, height=220)
        .facet(column=alt.Column("cost:N", title=None))
        .properties(title=title or "Ragged-batch costs per batch size")
    )
