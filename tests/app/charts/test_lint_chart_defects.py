"""What each chart's marks stand for, chart by chart: the defects a reader found in a demo run's pages
(several drafts joined into one line or stacked into one bar, pooled explorers, colours shared or
unrelated, positions nobody reached drawn as points, a cost line the predictor does not use)."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fixtures import chart_frames as frames

from specnb.app import widgets
from specnb.app.charts import expected, lint, measured, predicted, style
from specnb.core.errors import ParameterError
from specnb.measure import acceptance, analysis
from specnb.predict.costs import CostModel


def units(chart):
    """(encoding, rows) of every view of ``chart``, from its spec."""
    spec = chart.to_dict()
    return [(u.encoding, u.rows) for u in lint.walk(spec, spec.get("datasets", {}), None, [], {}, "chart")]


def test_alpha_chart_draws_one_line_per_draft_and_measure():
    """At one γ four drafts' rates were one line's points (a vertical zig-zag): colour is the draft now."""
    chart = measured.alpha_chart(frames.summary())
    assert lint.problems(chart) == []
    assert {enc["color"]["field"] for enc, _ in units(chart) if "color" in enc} == {"draft"}


def test_step_cost_bars_are_one_per_draft_and_gamma_and_add_up_to_the_step():
    """Four drafts' bars were stacked into one (4.6 tokens where a step cost 1.07–2.15)."""
    steps = frames.steps()
    chart = measured.step_cost_chart(steps)
    assert lint.problems(chart) == []
    drawn = pd.DataFrame([r for enc, rows in units(chart) if "part" in enc.get("color", {}).get("field", "")
                          for r in rows])
    totals = drawn.groupby(["draft", "gamma"])["tokens"].sum()
    expected_totals = steps.set_index(["draft", "gamma"])["break_even_tokens"]
    assert np.allclose(totals.sort_index(), expected_totals.sort_index())


def test_accept_lengths_are_per_draft_and_refuse_to_pool():
    records = frames.records()
    with pytest.raises(ParameterError, match="drafts"):
        acceptance.accept_lengths(records, 3)
    mine = acceptance.accept_lengths(records, 3, "smollm2-draft-m")
    lengths = records[(records["gamma"] == 3) & (records["draft"] == "smollm2-draft-m")]["accept_lengths"].iloc[0]
    assert np.allclose(mine["measured"], np.bincount(lengths, minlength=4) / len(lengths))


def test_the_explorer_keeps_each_charts_computed_title():
    """The static grid overwrote each chart's title with its γ, dropping the τ it computed."""
    spec = frames.summary()
    grid = widgets.measured_explorer(lambda gamma: measured.accept_length_chart(frames.records(), gamma),
                                     spec[spec["gamma"] > 0], "gamma", False, columns=3)
    titles = [c["title"] for c in grid.to_dict()["hconcat"]]
    assert all("τ = " in " ".join(t["subtitle"]) for t in titles), titles
    assert lint.problems(grid) == []


def test_speedup_panels_name_their_drafts_in_lines_that_fit():
    """Ten drafts split into panels of eight, the first titled with all eight names on one line
    (about 600 px over a 260 px panel, running into the next)."""
    names = [f"smollm2-draft-{k}" for k in range(10)]
    rows = [{**row, "draft": name, "candidate": f"{name} γ={row['gamma']}"}
            for name in names for row in frames.summary().drop_duplicates("gamma").to_dict("records")]
    chart = measured.speedup_chart(pd.DataFrame(rows))
    assert lint.problems(chart) == []
    titles = [c["title"] for c in chart.to_dict()["concat"]]
    assert [name for t in titles for line in t for name in line.split(", ")] == names


def test_speedup_chart_gives_a_draft_one_colour_measured_and_predicted():
    """12 series on a 10-colour palette: two drafts shared a colour, a draft's measured and predicted
    lines had unrelated ones. Now a panel per draft, the draft's colour, the prediction a dash."""
    chart = measured.speedup_chart(frames.summary(), predictions=frames.predictions())
    assert lint.problems(chart) == []
    colours = style.draft_colours(frames.DRAFTS)
    for enc, _ in units(chart):
        if enc.get("color", {}).get("field") == "draft":
            scale = enc["color"]["scale"]
            assert dict(zip(scale["domain"], scale["range"])) == colours
    assert len(set(colours.values())) == len(frames.DRAFTS)


def test_a_draft_keeps_its_colour_whatever_else_a_chart_shows():
    alone = style.draft_colours(["smollm2-eagle"])
    together = style.draft_colours(["prompt-lookup", "my/hub-draft", "smollm2-eagle", "other/draft"])
    assert together["smollm2-eagle"] == alone["smollm2-eagle"]
    assert len(set(together.values())) == 4


def test_acceptance_profile_draws_no_unreached_position_and_counts_small_ones():
    """Position 4 (reached 0 times) was a point at 0, position 3 (1 of 1) a point at 1.0 with no count."""
    chart = predicted.acceptance_profile_chart(frames.profile(), frames.per_prompt_profile())
    assert lint.problems(chart) == []
    spec = chart.to_dict()
    points = [r for u in lint.walk(spec, spec.get("datasets", {}), None, [], {}, "chart") if u.mark == "line"
              for r in u.rows]
    assert {(r["draft"], r["position"]) for r in points} == {(d, p) for d in frames.DRAFTS for p in (1, 2, 3)}
    labels = [r["count"] for enc, rows in units(chart) if "text" in enc for r in rows]
    assert set(labels) == {"1/1"}
    third = [r for r in points if r["position"] == 3][0]
    assert third["rate_lo"] < 0.25 and third["rate_hi"] == 1.0  # 1 of 1: Wilson says 0.21–1


def test_a_position_reached_three_times_does_not_pick_the_gamma():
    """Notebook 04's profile repeated a 3-of-3 position's 1.0 past the measured γ and so picked the
    largest γ; positions below 5 reached take the pooled rate of those above."""
    records = pd.DataFrame([{"draft": "d", "gamma": 2, "prompt_ids": "p", "accepted_by_position": [10, 3],
                             "drafted_by_position": [20, 3]}])
    table = pd.DataFrame([{"draft": "d", "c_flops": 0.1, "c_wall": 0.3}])
    speedups = analysis.profile_speedups(records, table, max_gamma=6)
    wall = speedups[speedups["c_kind"] == "wall clock"].set_index("gamma")["speedup"]
    assert wall.idxmax() == 1  # at α = 0.5 and c = 0.3 every extra γ costs more than it yields


def test_cost_model_chart_draws_the_model_the_predictor_uses():
    """The verifier line was built without its kernel breaks (56.7 ms for a 2-token forward where the
    model said 41.7)."""
    fits = frames.cost_models()
    chart = predicted.cost_model_chart(frames.cost_grid(), fits)
    fit = fits.iloc[0]
    model = CostModel(t0_ms=fit.t0_ms, ms_per_token=fit.ms_per_token, r2=fit.r2, n_points=fit.n_points,
                      measured=fit.measured, breaks=fit.breaks).curve()
    drawn = {r["tokens"]: r["priced_ms"] for enc, rows in units(chart) if enc.get("y", {}).get("field") == "priced_ms"
             for r in rows}
    assert drawn and all(np.isclose(ms, float(model(tokens))) for tokens, ms in drawn.items())
    assert lint.problems(chart) == []


def test_a_resampling_with_few_outcomes_is_drawn_as_those_outcomes():
    """1000 draws of three values were a 20-bin histogram; now one bar per outcome, with its share."""
    runs = frames.simulated_runs(distinct=3)
    chart = measured.histogram_chart(runs, "alpha", "α of short runs", "α", color="draft")
    rows = [r for _, rows in units(chart) for r in rows]
    assert len(rows) == 3 * 3 and all(r["lo"] == r["hi"] for r in rows)
    shares = pd.DataFrame(rows).groupby("draft")["share"].sum()
    assert np.allclose(shares, 1.0)
    many = measured.histogram_chart(frames.simulated_runs(distinct=50), "alpha", "t", "α", color="draft")
    assert all(r["lo"] < r["hi"] for _, rows in units(many) for r in rows)


def test_log_axes_tick_only_the_measured_levels():
    grid = frames.forward_grid()
    enc = units(expected.forward_time_chart(grid))[0][0]
    assert enc["x"]["axis"]["values"] == [1, 2, 4, 8]


def test_legend_labels_and_titles_are_never_cut():
    """``smollm2-draft-n…``: Vega cuts a legend label at 160 px unless told otherwise. Importing any
    chart module (in a fresh process, as a notebook does) sets no limit."""
    script = ("import altair as alt, pandas as pd\n"
              "from specnb.app.charts import engine_options\n"
              "chart = alt.Chart(pd.DataFrame({'x': [1]})).mark_point().encode(x='x:Q')\n"
              "print(chart.to_dict().get('config', {}).get('legend', {}).get('labelLimit'))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).parents[3])
    assert done.stdout.strip() == "0"
    long = frames.summary().assign(draft=lambda f: f["draft"] + " distilled from smollm2-135m at 4 layers")
    assert lint.problems(measured.metric_chart(long[long["gamma"] > 0], "tok_s")) == []


def test_reference_rules_are_one_per_panel():
    assert lint.problems(predicted.reference_chart(frames.reference())) == []


def test_more_than_eight_series_become_panels():
    assert lint.problems(expected.break_even_chart(frames.break_even(11))) == []
    assert lint.problems(measured.c_alpha_chart(frames.c_alpha(10))) == []


def test_two_rows_for_one_mark_are_refused():
    twice = pd.concat([frames.steps(), frames.steps()])
    with pytest.raises(ParameterError, match="one bar per draft and γ"):
        measured.step_cost_chart(twice)
