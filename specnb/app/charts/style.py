"""What every chart shares: one colour per draft across a whole run, legends and titles that never
clip, and log axes that tick only the levels that were measured.

A draft keeps its colour from notebook to notebook because the colour is a function of its name,
not of its place in one chart's legend: the embedded drafts each own one of Tableau's ten colours
(Vega's default palette, so a reader who knows one chart knows the others), the verifier (and
verifier-only decoding) is dark grey, and any other name (a Hub id, a folder) takes a colour of a
second palette by a stable hash of its name, the next free one where two such names collide (in
name order, so the same names get the same colours in every chart that shows them together).

Importing this module registers and enables the ``specnb`` Altair theme: Vega truncates a legend
label at 160 px and a legend title at 180 px with an ellipsis, so ``smollm2-draft-s (measured)`` and
``smollm2-draft-s (Leviathan, wall-clock c)`` would read alike; the theme lifts those limits (0: none).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

import altair as alt
import pandas as pd

from specnb.core.errors import ParameterError
from specnb.measure.runs import BASELINE
from specnb.models.registry import EMBEDDED_EXITS, EMBEDDED_VERIFIER, PROMPT_LOOKUP

# Tableau 10, Vega's "category" scheme, in its own order: one colour per embedded draft
TABLEAU10 = ["#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#eeca3b", "#b279a2", "#ff9da6", "#9d755d",
             "#bab0ac"]
EMBEDDED_COLOURS = dict(zip(
    ["smollm2-draft-xs", "smollm2-draft-s", "smollm2-draft-m", "smollm2-eagle", "smollm2-eagle3", "smollm2-medusa",
     *EMBEDDED_EXITS, PROMPT_LOOKUP], TABLEAU10))
VERIFIER_COLOUR = "#4d4d4d"
# Dark2 and two more: colours none of the embedded drafts uses
OTHER_COLOURS = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#17becf",
                 "#8c564b", "#393b79"]
MAX_SERIES = 8  # series one panel may hold; more are split into panels


def draft_colours(names: Iterable[str]) -> dict[str, str]:
    """Each name's colour: the embedded drafts and the verifier a fixed one; any other name a colour of
    ``OTHER_COLOURS`` by a stable hash, the next free one where two collide (in name order)."""
    names = list(dict.fromkeys(str(n) for n in names))
    found = {n: EMBEDDED_COLOURS[n] for n in names if n in EMBEDDED_COLOURS}
    found.update({n: VERIFIER_COLOUR for n in names if n in (EMBEDDED_VERIFIER, BASELINE)})
    taken = set()
    for name in sorted(n for n in names if n not in found):
        start = zlib.crc32(name.encode()) % len(OTHER_COLOURS)
        free = [OTHER_COLOURS[(start + i) % len(OTHER_COLOURS)] for i in range(len(OTHER_COLOURS))]
        found[name] = next((c for c in free if c not in taken), free[0])
        taken.add(found[name])
    return {n: found[n] for n in names}


def draft_color(*frames: pd.DataFrame, field: str = "draft", title: str | None = "draft") -> alt.Color:
    """The colour channel of a chart whose series are drafts (or models): every draft in ``frames``
    (all the layers that share the scale) in its own colour of the run (``draft_colours``)."""
    names = list(dict.fromkeys(str(v) for f in frames if field in f for v in f[field].dropna()))
    colours = draft_colours(names)
    return alt.Color(f"{field}:N", title=title, scale=alt.Scale(domain=names, range=[colours[n] for n in names]))


def one_mark_each(frame: pd.DataFrame, keys: list[str], what: str) -> None:
    """Refuse data that would put two rows on one mark: ``what`` says what one mark is (``keys``)."""
    keys = [k for k in keys if k in frame]
    twins = frame[frame.duplicated(keys, keep=False)]
    if len(twins):
        first = twins.iloc[0]
        raise ParameterError(f"{what}: {len(twins)} rows share {', '.join(f'{k}={first[k]}' for k in keys)} and would "
                             "draw one over another; pass one row per mark (choose one batch size, draft or γ)")


def dash(domain: list[str], title: str | None = None) -> alt.StrokeDash:
    """Measured vs predicted as a dash the legend shows: the first of ``domain`` solid, the others
    dashed (field ``kind``). The legend draws the dash only for a line without ``point=True`` (Vega
    draws a circle for that): points go in a layer of their own (``dashed_lines``)."""
    dashes = [[1, 0], [2, 2], [6, 3], [6, 2, 2, 2]][: len(domain)]
    legend = alt.Legend(symbolStrokeColor="black", symbolStrokeWidth=2) if len(domain) > 1 else None
    return alt.StrokeDash("kind:N", title=title, scale=alt.Scale(domain=domain, range=dashes), legend=legend)


def dashed_lines(frame: pd.DataFrame, kinds: list[str], dash_title: str | None = None, **encoding) -> alt.LayerChart:
    """One line per series of ``frame`` (colour and ``kind``), dashed by its ``kind`` among ``kinds``,
    with a point per row on top; ``encoding`` holds x, y, color and the tooltip."""
    tooltip = encoding.pop("tooltip", [])
    base = alt.Chart(frame).encode(**encoding)
    return base.mark_line().encode(strokeDash=dash(kinds, dash_title)) + base.mark_point(
        filled=True, size=30).encode(detail="kind:N", tooltip=tooltip)


def log_axis(values: Iterable[float]) -> alt.Axis:
    """An axis on a log scale that ticks only the measured levels (Vega's own log ticks crowd two
    or three levels with 2, 3, 5 … labels between them)."""
    levels = sorted({float(v) for v in values if pd.notna(v)})
    return alt.Axis(values=[int(v) if v.is_integer() else v for v in levels], format="~g")


@alt.theme.register("specnb", enable=True)
def theme() -> alt.theme.ThemeConfig:
    """Legend labels and titles, axis labels and chart titles at full length (Vega's limits, 0: none),
    in a named font: a static chart is laid out by vl-convert and drawn by the reader's browser, and
    where the two resolve ``sans-serif`` to different fonts (DejaVu Sans is wider than vl-convert's own)
    the browser's text overflowed the SVG and its edges were cut. Naming the font first makes both
    measure with it where it is installed (``make setup`` installs it beside Chromium)."""
    return {"config": {"font": "DejaVu Sans, sans-serif",
                       "legend": {"labelLimit": 0, "titleLimit": 0},
                       "axis": {"labelLimit": 0, "titleLimit": 0},
                       "header": {"labelLimit": 0, "titleLimit": 0},
                       "title": {"limit": 0}}}
