"""ipywidgets sliders that redraw altair charts, and their static stand-in for shared HTML.

In JupyterLab a reader drags α, γ, c or batch size and the chart follows. A rendered notebook
(papermill + offline HTML) has no kernel behind it, so a slider there would be dead: ``explore``
then shows a pre-rendered grid of the same chart at a few slider positions instead.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import altair as alt

from specnb.app.charts import expected, predicted


def explore(make_chart: Callable[..., alt.TopLevelMixin], controls: dict[str, Any], interactive: bool,
            grid: dict[str, list] | None = None, columns: int = 2):
    """Sliders (``controls``: name -> ipywidgets control) driving ``make_chart(**values)`` when
    ``interactive``; otherwise the charts at every combination of ``grid`` values, laid out in a grid.

    Returns the object to display (last expression of a notebook cell).
    """
    if interactive:
        return slider_panel(make_chart, controls)
    return static_grid(make_chart, grid or {k: [c.value] for k, c in controls.items()}, columns)


def slider_panel(make_chart, controls: dict[str, Any]):
    """A VBox of the controls above an Output that re-renders the chart on every change."""
    import ipywidgets as widgets
    from IPython.display import display

    out = widgets.Output()

    def redraw(_=None):
        out.clear_output(wait=True)
        with out:
            display(make_chart(**{k: c.value for k, c in controls.items()}))

    for control in controls.values():
        control.observe(redraw, names="value")
    redraw()
    return widgets.VBox([widgets.HBox(list(controls.values())), out])


def static_grid(make_chart, grid: dict[str, list], columns: int = 2) -> alt.TopLevelMixin:
    """``make_chart`` at every combination of ``grid`` values, ``columns`` per row. A chart keeps the
    title it computed (it names its values and states its answer); one without a title is titled by
    its values."""
    keys = list(grid)
    charts = []
    for values in itertools.product(*(grid[k] for k in keys)):
        point = dict(zip(keys, values))
        label = ", ".join(f"{k} = {v:.3g}" if isinstance(v, float) else f"{k} = {v}" for k, v in point.items())
        chart = make_chart(**point)
        charts.append(chart if chart.to_dict().get("title") else chart.properties(title=label))
    rows = [alt.hconcat(*charts[i:i + columns]) for i in range(0, len(charts), columns)]
    return alt.vconcat(*rows) if len(rows) > 1 else rows[0]


def float_slider(name: str, value: float, low: float, high: float, step: float):
    import ipywidgets as widgets

    return widgets.FloatSlider(value=value, min=low, max=high, step=step, description=name,
                               continuous_update=False, readout_format=".2f")


def int_slider(name: str, value: int, low: int, high: int):
    import ipywidgets as widgets

    return widgets.IntSlider(value=value, min=low, max=high, step=1, description=name, continuous_update=False)


# ---------------------------------------------------------------- ready-made explorers

def theory_chart(alpha: float, gamma: int, c: float) -> alt.TopLevelMixin:
    """Leviathan speedup vs α at cost ratio c for γ and its neighbours, with α marked."""
    import numpy as np
    import pandas as pd

    from specnb.core.theory import expected_speedup  # deferred: loads pandas

    alphas = np.linspace(0.0, 0.95, 39)
    gammas = sorted({max(1, gamma - 2), gamma, gamma + 2})
    frame = pd.DataFrame([{"alpha": a, "gamma": g, "c": c, "speedup": float(expected_speedup(a, g, c))}
                          for g in gammas for a in alphas])
    now = float(expected_speedup(alpha, gamma, c))
    return expected.speedup_vs_alpha_chart(frame, alpha=alpha, title=f"α={alpha:.2f}, γ={gamma}, c={c:.3f}: {now:.2f}x")


def theory_explorer(interactive: bool, alpha: float = 0.6, gamma: int = 4, c: float = 0.2,
                    grid: dict[str, list] | None = None):
    """Sliders α, γ, c over the Leviathan formula (static: a grid over c and γ)."""
    controls = {"alpha": float_slider("α", alpha, 0.0, 0.95, 0.01), "gamma": int_slider("γ", gamma, 1, 16),
                "c": float_slider("c", c, 0.0, 1.0, 0.01)} if interactive else {}
    grid = grid or {"alpha": [alpha], "gamma": [2, 4, 8], "c": [0.05, c, 0.5]}
    return explore(theory_chart, controls, interactive, grid, columns=3)


def measured_explorer(make_chart, summary, key: str, interactive: bool, label: str | None = None, columns: int = 2):
    """A slider over the measured values of ``key`` (γ or batch size) redrawing ``make_chart(value)``."""
    import ipywidgets as widgets

    values = sorted(summary[key].unique().tolist())
    controls = {key: widgets.SelectionSlider(options=values, value=values[0], description=label or key,
                                             continuous_update=False)} if interactive else {}
    return explore(lambda **kw: make_chart(kw[key]), controls, interactive, {key: values}, columns)


# ---------------------------------------------------------------- decision framework (notebook 06)

def what_if_chart(profile, draft: str, alpha: float, batch_size: int, draft_speed: float) -> alt.TopLevelMixin:
    """The predicted speedup per γ if acceptance were a flat α, at a batch size, with a draft
    ``draft_speed`` times faster (``specnb.predict.what_if.what_if``), titled with the verdict."""
    # deferred: loads torch and pandas
    from specnb.predict.predictor import Workload
    from specnb.predict.what_if import what_if

    pred = what_if(profile, draft, alpha, draft_speed, workload=Workload(batch_size=batch_size))
    verdict = f"γ={pred.recommended_gamma}, {pred.predicted_speedup:.2f}x" if pred.recommended_gamma else \
        f"don't speculate (best {pred.predicted_speedup:.2f}x)"
    return predicted.prediction_chart(pred.table.assign(draft=draft),
                                  title=f"α={alpha:.2f}, batch {batch_size}, draft {draft_speed:g}x faster: {verdict}")


def what_if_explorer(profile, draft: str, interactive: bool, grid: dict[str, list] | None = None):
    """Sliders for flat α, batch size and draft speed over the calibrated profile (static: a grid)."""
    measured = round(profile.acceptance[draft].alpha_iid(), 2)
    controls = {"alpha": float_slider("α (flat)", min(measured, 0.95), 0.0, 0.95, 0.01),
                "batch_size": int_slider("batch", 1, 1, 16),
                "draft_speed": float_slider("draft ×", 1.0, 0.5, 4.0, 0.25)} if interactive else {}
    grid = grid or {"alpha": [min(measured, 0.95), 0.8], "batch_size": [1], "draft_speed": [1.0, 2.0]}
    return explore(lambda **kw: what_if_chart(profile, draft, **kw), controls, interactive, grid, columns=2)
