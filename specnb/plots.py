"""Altair charts for the notebooks: titled, axes labelled with units, static-friendly.

Rendered notebooks are shared as offline HTML, so charts must not need a CDN: under papermill
(``interactive=False``) we switch altair to its ``svg`` renderer, which converts each chart with
vl-convert inside the kernel and stores plain SVG in the notebook. In JupyterLab the default
renderer stays, so tooltips and widgets work.
"""

from __future__ import annotations

import altair as alt


def use_static_renderer() -> None:
    """Charts become inline SVG (vl-convert): no JavaScript, no network, visible in any browser."""
    alt.renderers.enable("svg")
    alt.data_transformers.disable_max_rows()
