"""The chart linter finds what misleads a reader, and passes what does not."""

import altair as alt
import pandas as pd

from specnb.app.charts import lint


def rates(drafts=("a", "b")):
    return pd.DataFrame([{"draft": d, "gamma": g, "rate": 0.5 + 0.1 * i - 0.01 * g}
                         for i, d in enumerate(drafts) for g in (1, 3)])


def test_a_line_through_two_drafts_at_one_x_zig_zags():
    bad = alt.Chart(rates()).mark_line().encode(x="gamma:Q", y="rate:Q")
    good = bad.encode(color="draft:N")
    assert any("2 rows on one point of a line" in p and "draft" in p for p in lint.problems(bad))
    assert lint.problems(good) == []


def test_bars_of_two_drafts_stacked_into_one():
    bad = alt.Chart(rates()).mark_bar().encode(x="gamma:O", y="rate:Q")
    assert any("rows on one bar" in p for p in lint.problems(bad))
    assert lint.problems(bad.encode(xOffset="draft:N", color="draft:N")) == []
    assert lint.problems(alt.Chart(rates()).mark_bar().encode(x="gamma:O", y="mean(rate):Q")) == []  # on purpose


def test_eleven_series_on_ten_colours_and_a_shared_scale_with_two_ranges():
    frame = rates([f"d{k}" for k in range(11)])
    found = lint.problems(alt.Chart(frame).mark_line().encode(x="gamma:Q", y="rate:Q", color="draft:N"))
    assert any("share one color" in p for p in found) and any("11 series in one panel" in p for p in found)

    def panel(names, colours):
        return alt.Chart(frame[frame["draft"].isin(names)]).mark_line().encode(
            x="gamma:Q", y="rate:Q", color=alt.Color("draft:N", scale=alt.Scale(domain=names, range=colours)))
    two = panel(["d0"], ["red"]) | panel(["d1"], ["blue"])
    assert any("different domains and ranges" in p for p in lint.problems(two))
    assert lint.problems(two.resolve_scale(color="independent")) == []


def test_a_legend_label_vega_would_cut():
    long = rates(("smollm2-draft-s (Leviathan, wall-clock c) at batch 1", "b"))
    chart = alt.Chart(long).mark_line().encode(x="gamma:Q", y="rate:Q", color="draft:N")
    assert any("cut at 160 px" in p for p in lint.problems(chart.to_dict() | {"config": {}}))
    roomy = chart.encode(color=alt.Color("draft:N", legend=alt.Legend(labelLimit=0)))
    assert lint.problems(roomy.to_dict() | {"config": {}}) == []


def test_titles_side_by_side_that_run_into_each_other():
    """A title is centred on its view: wider than the view and the gap, it is drawn over the next one's."""
    def panel(title):
        return alt.Chart(rates()).mark_line().encode(x="gamma:Q", y="rate:Q", color="draft:N").properties(
            width=160, title=title)
    long = "γ = 1: share of steps that accepted n draft tokens"
    assert any("runs into its neighbour" in p for p in lint.problems(panel(long) | panel("γ = 3")))
    assert lint.problems(panel(long) & panel("γ = 3")) == []  # stacked: nothing beside it
    assert lint.problems(panel("γ = 1") | panel("γ = 3")) == []
    wrapped = alt.TitleParams(text="γ = 1", subtitle=["τ = 1.48, α = 0.66  eagle"])
    assert lint.problems(panel(wrapped) | panel("γ = 3")) == []


def test_log_axis_ticks_and_a_domain_the_data_leaves():
    frame = pd.DataFrame({"batch": [1, 2, 4], "ms": [3.0, 2.0, 1.5]})
    log = alt.Chart(frame).mark_line().encode(x=alt.X("batch:Q", scale=alt.Scale(type="log")), y="ms:Q")
    assert any("log axis batch" in p for p in lint.problems(log))
    ticked = log.encode(x=alt.X("batch:Q", scale=alt.Scale(type="log"), axis=alt.Axis(values=[1, 2, 4])))
    assert lint.problems(ticked) == []
    clipped = alt.Chart(frame).mark_line().encode(x="batch:Q", y=alt.Y("ms:Q", scale=alt.Scale(domain=[0, 2])))
    assert any("outside its axis" in p for p in lint.problems(clipped))


def test_facets_are_panels_of_their_own():
    frame = pd.concat([rates().assign(panel=p) for p in ("x", "y")])
    chart = alt.Chart(frame).mark_line().encode(x="gamma:Q", y="rate:Q", color="draft:N").facet(column="panel:N")
    assert lint.problems(chart) == []
    assert any("rows on one point" in p for p in lint.problems(
        alt.Chart(frame).mark_line().encode(x="gamma:Q", y="rate:Q", color="draft:N")))
