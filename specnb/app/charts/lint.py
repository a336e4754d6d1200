"""What a chart claims, read back from its Vega-Lite spec: the problems a reader would be misled by.

``problems(chart)`` walks any Altair chart (layers, facets, concatenations) down to its unit views,
takes each view's rows from the data the spec carries, and reports:

- rows that land on one mark: two rows with the same values in every encoded field draw one point,
  one bar segment or one rule over the other, and two rows of one line series at the same x make
  the line zig-zag vertically (a field the chart does not encode, a draft, told them apart). A view
  that aggregates or bins on purpose says so in its encoding and is not checked;
- two series of one panel in one colour (more values than the palette has, or a range that repeats),
  more than eight series in one panel, and the same for shapes and dashes;
- a legend label or title, or an axis label, that Vega would cut with an ellipsis;
- titles of views side by side wider than their view, which run into the next view's title;
- an explicit axis domain the data leaves, and a log axis over a few whole-number levels (tokens,
  batch sizes, concurrency) that ticks other values.

The Vega-Lite defaults it assumes: nominal colour "category" (Tableau 10), shapes "symbol" (8),
dashes 5; colour and other non-positional scales shared across layers, facets and concatenations
unless ``resolve`` makes them independent; legend labels cut at 160 px, titles at 180 px.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field

from specnb.app.charts.style import MAX_SERIES

PALETTE_SIZES = {"category": 10, "tableau10": 10, "category10": 10, "category20": 20, "category20b": 20,
                 "category20c": 20, "tableau20": 20, "dark2": 8, "set1": 9, "set2": 8, "set3": 12, "accent": 8,
                 "paired": 12, "pastel1": 9, "pastel2": 8, "observable10": 10}
DEFAULT_RANGES = {"color": "category", "shape": 8, "strokeDash": 5}
SERIES_CHANNELS = ("color", "fill", "stroke", "shape", "strokeDash", "detail", "size", "opacity", "strokeWidth")
IGNORED_CHANNELS = ("tooltip", "order", "href", "description", "key")
FACET_CHANNELS = ("row", "column", "facet")
PATH_MARKS = ("line", "area", "trail")
CHAR_PX = 6.5  # a legend or axis label character at Vega's 10–11 px font, generously
TITLE_CHAR_PX = 7.5  # a title character at Vega's 13 px bold
CONCAT_SPACING_PX = 20  # Vega-Lite's default gap between concatenated views


@dataclass(kw_only=True)
class Unit:
    """One view: its mark, encoding, the rows it draws, the facet fields above it, its scale group."""

    path: str
    mark: str
    mark_def: dict
    encoding: dict
    rows: list[dict] | None
    facets: list[str] = field(default_factory=list)
    groups: dict = field(default_factory=dict)  # channel -> the id of the view its scale is shared in
    transforms: list = field(default_factory=list)


def problems(chart) -> list[str]:
    """Every problem of ``chart`` (an Altair chart or its ``to_dict()``), one line each; [] when none."""
    spec = chart.to_dict() if hasattr(chart, "to_dict") else chart
    units = list(walk(spec, spec.get("datasets", {}), None, [], {}, "chart"))
    config = spec.get("config", {})
    found = []
    for unit in units:
        found += hidden_rows(unit)
        found += axis_problems(unit, config)
    found += colour_problems(units)
    found += legend_problems(units, config)
    found += title_problems(spec, "chart")
    return list(dict.fromkeys(found))


def walk(spec: dict, datasets: dict, rows, facets: list[str], groups: dict, path: str):
    """The unit views below ``spec``, with the data, facet fields and scale groups they inherit."""
    rows = data_rows(spec.get("data"), datasets, rows)
    resolve = spec.get("resolve", {}).get("scale", {})
    title = spec.get("title")
    name = f"{path} «{title.get('text') if isinstance(title, dict) else title}»" if title else path
    if "facet" in spec and "spec" in spec:
        facet = spec["facet"]
        fields = [f["field"] for f in ([facet] if "field" in facet else facet.values()) if isinstance(f, dict)
                  and "field" in f]
        yield from walk(spec["spec"], datasets, rows, facets + fields, groups, name + "/facet")
        return
    for key in ("layer", "hconcat", "vconcat", "concat"):
        for i, child in enumerate(spec.get(key, [])):
            inner = {**groups, **{ch: f"{name}/{key}[{i}]" for ch, how in resolve.items() if how == "independent"}}
            yield from walk(child, datasets, rows, facets, inner, f"{name}/{key}[{i}]")
    if "mark" in spec:
        mark = spec["mark"] if isinstance(spec["mark"], dict) else {"type": spec["mark"]}
        encoding = spec.get("encoding", {})
        fields = [encoding[ch]["field"] for ch in FACET_CHANNELS if "field" in encoding.get(ch, {})]
        yield Unit(path=name, mark=mark["type"], mark_def=mark, encoding=encoding, rows=rows,
                   facets=facets + fields, groups=groups, transforms=spec.get("transform", []))


def data_rows(data, datasets: dict, inherited):
    if data is None:
        return inherited
    if "name" in data and data["name"] in datasets:
        return datasets[data["name"]]
    if "values" in data:
        return data["values"]
    return None  # a URL, a sequence or a generator: nothing to read here


def channel_field(encoding: dict, channel: str) -> str | None:
    """The field a channel encodes (``None``: a constant, a condition or nothing)."""
    entry = encoding.get(channel)
    if isinstance(entry, dict) and isinstance(entry.get("field"), str):
        return entry["field"].replace("\\", "")
    return None


def aggregates(encoding: dict) -> bool:
    return any(isinstance(e, dict) and (e.get("aggregate") or e.get("bin")) for e in encoding.values())


def mark_key(unit: Unit) -> tuple[list[str], str]:
    """The fields that tell one mark from another in ``unit`` (and what a mark is, for the message).

    A path (line, area) is one per series; rows of one series must differ in the field it runs along
    (x, or ``order`` where it sets the path's order). A bar stacks on its measure, so rows must differ
    in every encoded field but that one. Any other mark sits where its position fields put it (two
    series that meet at one value are told apart by their colour, not hidden)."""
    enc = unit.encoding
    series = [f for ch in SERIES_CHANNELS if (f := channel_field(enc, ch))] + unit.facets
    if unit.mark in PATH_MARKS:
        along = channel_field(enc, "order") or channel_field(enc, "x")
        if enc.get("x", {}).get("type") == "quantitative" and enc.get("y", {}).get("type") in ("nominal", "ordinal"):
            along = channel_field(enc, "order") or channel_field(enc, "y")
        return series + ([along] if along else []), "point of a line"
    positions = [f for ch in ("x", "y", "x2", "y2", "xOffset", "yOffset", "theta", "radius")
                 if (f := channel_field(enc, ch))]
    if unit.mark == "bar":
        measure = stacked_measure(enc)
        return series + [f for f in positions if f != measure], "bar"
    return series + positions, unit.mark


def stacked_measure(enc: dict) -> str | None:
    """The quantitative field a bar stacks on (its length), where the other axis is discrete."""
    x, y = enc.get("x", {}), enc.get("y", {})
    if y.get("type") == "quantitative" and x.get("type") != "quantitative" and "y2" not in enc:
        return channel_field(enc, "y")
    if x.get("type") == "quantitative" and y.get("type") != "quantitative" and "x2" not in enc:
        return channel_field(enc, "x")
    return None


def visible(row: dict, unit: Unit) -> bool:
    """Whether Vega draws the row: a null or NaN in a quantitative position is filtered out."""
    for ch in ("x", "y", "x2", "y2"):
        f = channel_field(unit.encoding, ch)
        if f and f in row and (row[f] is None or (isinstance(row[f], float) and row[f] != row[f])):
            return False
    return True


def hidden_rows(unit: Unit) -> list[str]:
    """Rows that land on one mark (module docstring); nothing for a view that aggregates on purpose."""
    if unit.rows is None or aggregates(unit.encoding) or any("calculate" not in t for t in unit.transforms):
        return []  # a calculated field is not in the rows: it is left out of the key
    fields, what = mark_key(unit)
    fields = [f for f in dict.fromkeys(fields) if unit.rows and f in unit.rows[0]]
    if not fields:
        return [] if len(unit.rows) <= 1 or unit.mark in PATH_MARKS else \
            [f"{unit.path}: {len(unit.rows)} rows drawn as one {unit.mark} (it encodes no field of theirs)"]
    seen = defaultdict(list)
    for row in unit.rows:
        if visible(row, unit):
            seen[json.dumps([row.get(f) for f in fields], default=str)].append(row)
    found = []
    for key, rows in seen.items():
        if len(rows) > 1:
            told = [f for f in rows[0]
                    if f not in fields and len({json.dumps(r.get(f), default=str) for r in rows}) > 1]
            found.append(f"{unit.path}: {len(rows)} rows on one {what} at {dict(zip(fields, json.loads(key)))}"
                         f" (told apart only by {', '.join(told[:4]) or 'nothing: duplicates'})")
    return found[:3]


def palette_size(channel: str, entry: dict) -> int | None:
    """How many distinct values the channel's scale can show before it repeats (None: no limit)."""
    scale = entry.get("scale") or {}
    if isinstance(scale.get("range"), list):
        return len(scale["range"])
    if entry.get("type") in ("quantitative", "temporal") or (channel == "color" and entry.get("type") == "ordinal"):
        return None  # a ramp: every value its own shade
    scheme = scale.get("scheme", DEFAULT_RANGES.get(channel))
    scheme = scheme.get("name") if isinstance(scheme, dict) else scheme
    return PALETTE_SIZES.get(scheme, None) if isinstance(scheme, str) else scheme


def colour_of(value: str, entry: dict, union: dict, size: int | None):
    """The colour (shape, dash) a value gets: its place in the view's explicit domain and range, else
    its place in the scale's domain (all views sharing it) on a palette of ``size``."""
    scale = entry.get("scale") or {}
    domain, rng = scale.get("domain"), scale.get("range")
    if isinstance(domain, list) and isinstance(rng, list) and json.loads(value) in domain:
        return json.dumps(rng[domain.index(json.loads(value)) % len(rng)])
    return union.get(value, 0) % size if size else value


def colour_problems(units: list[Unit]) -> list[str]:
    """Two series of one panel in one colour, shape or dash; a value in two colours across the views
    that share a scale; more than eight series in one panel."""
    found = []
    for channel in ("color", "shape", "strokeDash"):
        unions = defaultdict(dict)  # scale group -> value -> its place in the shared domain
        drawn = defaultdict(lambda: defaultdict(set))  # (group, view) -> panel -> {(value, colour)}
        for unit in units:
            f = channel_field(unit.encoding, channel)
            if not f or unit.rows is None:
                continue
            entry, group = unit.encoding[channel], unit.groups.get(channel, "shared")
            explicit = (entry.get("scale") or {}).get("domain")
            values = [json.dumps(v) for v in explicit] if isinstance(explicit, list) else \
                sorted({json.dumps(r.get(f)) for r in unit.rows if r.get(f) is not None})
            for value in values:
                unions[group].setdefault(value, len(unions[group]))
        for unit in units:
            f = channel_field(unit.encoding, channel)
            if not f or unit.rows is None:
                continue
            entry, group = unit.encoding[channel], unit.groups.get(channel, "shared")
            size = palette_size(channel, entry)
            if size is None:
                continue
            view = unit.path.split("/layer[")[0]
            for row in unit.rows:
                if row.get(f) is not None:
                    value = json.dumps(row.get(f))
                    panel = json.dumps([row.get(p) for p in unit.facets])
                    drawn[(group, view)][panel].add((value, colour_of(value, entry, unions[group], size)))
        ranges = defaultdict(set)  # Vega-Lite unions shared domains but keeps one range: they must agree
        for unit in units:
            entry = unit.encoding.get(channel)
            if channel_field(unit.encoding, channel) and isinstance((entry.get("scale") or {}).get("range"), list):
                scale = entry["scale"]
                ranges[unit.groups.get(channel, "shared")].add(json.dumps([scale.get("domain"), scale["range"]]))
        found += [f"views sharing one {channel} scale set {len(r)} different domains and ranges"
                  for r in ranges.values() if len(r) > 1]
        colours = defaultdict(set)
        for (group, view), panels in drawn.items():
            for panel, pairs in panels.items():
                where = view + (f" panel {panel}" if panel != "[]" else "")
                values = {v for v, _ in pairs}
                if channel == "color" and len(values) > MAX_SERIES:
                    found.append(f"{where}: {len(values)} series in one panel (at most {MAX_SERIES}: facet)")
                slots = defaultdict(set)
                for value, colour in pairs:
                    slots[json.dumps(colour)].add(value)
                    colours[(group, value)].add(json.dumps(colour))
                for same in slots.values():
                    if len(same) > 1:
                        names = sorted(str(json.loads(v)) for v in same)
                        found.append(f"{where}: {', '.join(names)} share one {channel}")
        found += [f"{json.loads(value)} is drawn in {len(c)} different {channel}s across views sharing one scale"
                  for (group, value), c in colours.items() if len(c) > 1]
    return found


def legend_problems(units: list[Unit], config: dict) -> list[str]:
    """Legend labels and titles Vega would cut: wider than their limit (0: none)."""
    found = []
    legend_config = config.get("legend", {})
    for unit in units:
        for channel in ("color", "fill", "stroke", "shape", "strokeDash", "size", "opacity"):
            entry, f = unit.encoding.get(channel), channel_field(unit.encoding, channel)
            if not f or unit.rows is None or not isinstance(entry, dict) or entry.get("legend", {}) is None:
                continue
            legend = entry.get("legend") or {}
            label_limit = legend.get("labelLimit", legend_config.get("labelLimit", 160))
            title_limit = legend.get("titleLimit", legend_config.get("titleLimit", 180))
            labels = {str(r.get(f)) for r in unit.rows if r.get(f) is not None}
            widest = max(labels, key=len, default="")
            if label_limit and len(widest) * CHAR_PX > label_limit:
                found.append(f"{unit.path}: legend label {widest!r} cut at {label_limit} px")
            title = entry.get("title", f)
            if title and title_limit and len(str(title)) * CHAR_PX > title_limit:
                found.append(f"{unit.path}: legend title {title!r} cut at {title_limit} px")
    return found


def title_width_px(title) -> float:
    """The widest line of a view's title and subtitle at Vega's fonts (title 13 px bold, subtitle 11 px)."""
    if isinstance(title, dict):
        lines = [(line, TITLE_CHAR_PX) for line in as_lines(title.get("text"))]
        lines += [(line, CHAR_PX) for line in as_lines(title.get("subtitle"))]
    else:
        lines = [(line, TITLE_CHAR_PX) for line in as_lines(title)]
    return max((len(str(line)) * px for line, px in lines), default=0.0)


def as_lines(text) -> list:
    return [] if text is None else list(text) if isinstance(text, list) else [text]


def title_problems(spec: dict, path: str) -> list[str]:
    """Titles of views side by side that run into their neighbours: a title is centred on its view, so
    one wider than the view and the gap beside it is drawn over the next view's title."""
    found = []
    for key in ("layer", "hconcat", "vconcat", "concat"):
        children = spec.get(key, [])
        side_by_side = key == "hconcat" or (key == "concat" and spec.get("columns", 2) != 1)
        for i, child in enumerate(children):
            width, title = child.get("width"), child.get("title")
            if side_by_side and len(children) > 1 and title and isinstance(width, (int, float)) and \
                    title_width_px(title) > width + CONCAT_SPACING_PX:
                text = title.get("text") if isinstance(title, dict) else title
                found.append(f"{path}/{key}[{i}]: title {text!r} is wider than its {width} px view and runs "
                             "into its neighbour's")
            found += title_problems(child, f"{path}/{key}[{i}]")
    return found


def axis_problems(unit: Unit, config: dict) -> list[str]:
    """An explicit domain the data leaves; a log axis over a few levels ticking other values; axis
    labels cut at their limit."""
    found = []
    if unit.rows is None:
        return found
    for channel in ("x", "y"):
        entry, f = unit.encoding.get(channel, {}), channel_field(unit.encoding, channel)
        if f and entry.get("type") in ("nominal", "ordinal") and entry.get("axis", {}) is not None:
            limit = (entry.get("axis") or {}).get("labelLimit", config.get("axis", {}).get("labelLimit", 180))
            widest = max((str(r.get(f)) for r in unit.rows), key=len, default="")
            if limit and len(widest) * CHAR_PX > limit:
                found.append(f"{unit.path}: axis label {widest!r} cut at {limit} px")
        if not f or entry.get("type") != "quantitative" or aggregates({channel: entry}):
            continue
        values = [r[f] for r in unit.rows if isinstance(r.get(f), (int, float)) and r[f] == r[f]]
        scale, axis = entry.get("scale") or {}, entry.get("axis") or {}
        domain = scale.get("domain")
        if isinstance(domain, list) and len(domain) == 2 and all(isinstance(d, (int, float)) for d in domain) and \
                values and (min(values) < domain[0] - 1e-9 or max(values) > domain[1] + 1e-9):
            found.append(f"{unit.path}: {f} runs {min(values):.3g}–{max(values):.3g}, outside its axis {domain}")
        levels = sorted(set(values))
        counted = all(float(v).is_integer() for v in levels)  # levels (tokens, batch sizes), not measurements
        if scale.get("type") == "log" and counted and 0 < len(levels) <= 12 and axis is not None:
            ticks = axis.get("values")
            if not isinstance(ticks, list) or not set(ticks) <= set(levels):
                found.append(f"{unit.path}: log axis {f} over {len(levels)} levels ticks values not measured")
    return found
