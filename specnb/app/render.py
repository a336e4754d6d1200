"""How a notebook's charts and progress bars are shown, with no network either way.

Shared copies (papermill, ``interactive=False``): altair's ``svg`` renderer converts each chart with
vl-convert inside the kernel and stores plain SVG in the notebook, so the offline HTML carries no
JavaScript at all. In JupyterLab (``interactive=True``): charts stay JavaScript, for tooltips, zoom
and sliders, but altair's own renderers cannot draw offline. Its default loads vega from a CDN
("Error loading script: https://cdn.jsdelivr.net/npm/vega@6"); the ``mimetype`` renderer hands the
spec to JupyterLab 4, whose Vega extension draws only Vega-Lite ≤ 5 (altair 6 emits 6); its
``template="inline"`` puts the 0.9 MB bundle and top-level ``const`` declarations in every chart, so
only the first chart on a page draws. The ``specnb_offline`` renderer here takes vega, vega-lite and
vega-embed from vl-convert (the versions altair targets), shows that bundle once, as a hidden output
of the setup cell, and makes each chart its spec plus a small script that draws it once the bundle
is loaded: a few kB per chart, also for one a slider redraws, and never a request off the machine.
A saved notebook reopened in JupyterLab redraws its charts as long as the setup cell's output was
kept and the notebook is trusted; otherwise a chart says which cell to run again.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import tempfile
import uuid
from pathlib import Path
from typing import Any

import altair as alt

from specnb.models.cache import cache_dir


def setup_notebook(interactive: bool) -> None:
    """Call once in a notebook's setup cell: inline SVG for a papermill run, offline JavaScript charts
    in JupyterLab."""
    if interactive:
        use_interactive_renderer()
    else:
        use_static_renderer()


def use_static_renderer() -> None:
    """Charts become inline SVG (vl-convert): no JavaScript, no network, visible in any browser.

    Progress bars become plain text too: in a kernel ``tqdm.auto`` draws an ipywidgets bar, which
    the static HTML can only show as a dead widget. The text bar's final line (count, elapsed
    time) stays in the rendered copy. transformers' own weight-loading bars are switched off.
    """
    import tqdm.auto
    import tqdm.std
    from transformers.utils import logging as hf_logging

    alt.renderers.enable(STATIC_RENDERER)
    alt.data_transformers.disable_max_rows()
    tqdm.auto.tqdm = tqdm.std.tqdm  # read at call time by bench, models and transformers
    hf_logging.disable_progress_bar()


STATIC_RENDERER = "specnb_svg"
CHART_SPECS = "SPECNB_CHART_SPECS"  # a file each static chart's Vega-Lite spec is appended to, where set


def static_renderer(spec: dict, **metadata: Any) -> dict[str, str]:
    """altair's ``svg`` renderer; where the environment names a file in ``SPECNB_CHART_SPECS``, each
    chart's Vega-Lite spec is also appended to it, one JSON a line, so a test can read back every chart
    a smoke run drew (``specnb.app.charts.lint``) rather than only its pixels."""
    from altair.vegalite.v6.display import svg_renderer

    if os.environ.get(CHART_SPECS):
        with open(os.environ[CHART_SPECS], "a", encoding="utf-8") as out:
            out.write(json.dumps(spec) + "\n")
    return svg_renderer(spec, **metadata)


OFFLINE_RENDERER = "specnb_offline"
_READY_EVENT = "specnb:vega-ready"
# Never offer "Open in Vega Editor" (it posts the spec to vega.github.io); export and source stay.
_DEFAULT_EMBED_OPTIONS = {"actions": {"export": True, "source": True, "compiled": True, "editor": False}}
_state = {"bundle_shown": False}


def vegalite_version_for_vl_convert() -> str:
    """The Vega-Lite version altair emits, in vl-convert's spelling: ``v6.4.1`` -> ``v6_4``."""
    return "_".join(alt.SCHEMA_VERSION.split(".")[:2])


@functools.lru_cache(maxsize=1)
def vega_bundle_js() -> str:
    """vega + vega-lite + vega-embed (the versions altair targets) as one classic script that sets
    ``window.vega``, ``window.vegaLite`` and ``window.vegaEmbed``; about 0.9 MB, 0.3 MB gzipped.

    vl-convert bundles it in 4-10 s (2 busy cores), so the result is kept in this process and in
    the specnb cache folder (``$SPECNB_CACHE`` or ``~/.cache/specnb``), keyed by the vl-convert and
    Vega-Lite versions; later kernels read it in milliseconds. An unwritable cache only costs time."""
    import vl_convert as vlc

    version = vegalite_version_for_vl_convert()
    if version.replace("_", ".").lstrip("v") not in vlc.get_vegalite_versions():
        raise RuntimeError(f"vl-convert-python {_vl_convert_version()} has no Vega-Lite {version} "
                           f"(it has {', '.join(vlc.get_vegalite_versions())}); upgrade vl-convert-python "
                           f"to match altair {alt.__version__}")
    path = _bundle_cache_dir() / f"vega-bundle-vl-convert-{_vl_convert_version()}-vega-lite-{version}.js"
    try:
        cached = path.read_text(encoding="utf-8")
        if cached.rstrip().endswith(_BUNDLE_TAIL):  # written whole (renamed into place), not some other file
            return cached
    except OSError:
        pass
    bundle = vlc.javascript_bundle(vl_version=version)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, delete=False,
                                         prefix=path.name, suffix=".tmp") as tmp:
            tmp.write(bundle)
        os.chmod(tmp.name, 0o644)
        os.replace(tmp.name, path)  # atomic: a parallel kernel reads the old state or the whole file
    except OSError:
        with contextlib.suppress(OSError, NameError):
            os.unlink(tmp.name)
    return bundle


_BUNDLE_TAIL = "window.vegaLite=__default1;"  # how vl-convert's default snippet ends


def _vl_convert_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("vl-convert-python")
    except PackageNotFoundError:
        return "unknown"


def _bundle_cache_dir() -> Path:
    return cache_dir()


def _bundle_key() -> str:
    import vl_convert as vlc

    return f"vega {vlc.get_vega_version()}, vega-lite {vegalite_version_for_vl_convert()}, " \
           f"vega-embed {vlc.get_vega_embed_version()}"


def _script_safe(text: str) -> str:
    """Text that cannot end or confuse the ``<script>`` element it sits in."""
    return text.replace("</script", "<\\/script").replace("</SCRIPT", "<\\/SCRIPT").replace("<!--", "<\\!--")


def bundle_html() -> str:
    """One ``<script>`` that loads the bundle into the page (once per page and version) and tells
    waiting charts. The bundle runs inside a function, so evaluating it again (a re-run setup
    cell, a second notebook in the same JupyterLab tab) cannot clash on top-level declarations."""
    key = json.dumps(_bundle_key())
    return (
        '<div class="specnb-vega-bundle" style="display:none"></div>\n'
        '<script type="text/javascript">\n'
        "(function () {\n"
        f"  if (window.__specnbVega !== {key}) {{\n"
        "    (function () {\n" + _script_safe(vega_bundle_js()) + "\n    })();\n"
        f"    window.__specnbVega = {key};\n"
        "  }\n"
        f'  window.dispatchEvent(new Event("{_READY_EVENT}"));\n'
        "})();\n"
        "</script>"
    )


_CHART_TEMPLATE = """\
<div id="{div_id}" class="specnb-vega" style="width:100%"></div>
<script type="text/javascript">
(function (spec, embedOpt, key) {{
  var el = document.currentScript && document.currentScript.previousElementSibling;
  if (!el || el.id !== "{div_id}") el = document.getElementById("{div_id}");
  var drawn = false;
  function draw() {{
    if (drawn || window.__specnbVega !== key || !window.vegaEmbed) return;
    drawn = true;
    window.removeEventListener("{event}", draw);
    el.textContent = "";
    window.vegaEmbed(el, spec, embedOpt).catch(function (err) {{
      el.textContent = "Chart error: " + (err && err.message ? err.message : err);
      el.style.color = "red";
    }});
  }}
  window.addEventListener("{event}", draw);
  draw();
  setTimeout(function () {{
    if (!drawn) el.textContent = "Chart not drawn: the offline Vega bundle is not loaded in this page. " +
      "Run the notebook's setup cell (the one calling enable_offline_renderer) again.";
  }}, 20000);
}})({spec}, {embed_options}, {key});
</script>"""


def offline_renderer(spec: dict, **metadata: Any) -> dict[str, str]:
    """altair renderer: a ``<div>`` and a small script drawing ``spec`` with the page's vegaEmbed.

    The first chart after ``enable_offline_renderer(show_bundle=False)`` carries the bundle itself.
    ``metadata`` may hold ``embed_options`` (``alt.renderers.set_embed_options`` or ``enable``)."""
    embed_options = {**_DEFAULT_EMBED_OPTIONS, "mode": "vega-lite", **(metadata.get("embed_options") or {})}

    def as_js(value) -> str:  # "<" in JSON strings becomes \u003c: no "</script>" or "<!--" from a title or a datum
        return json.dumps(value).replace("<", "\\u003c")

    html = _CHART_TEMPLATE.format(div_id=f"specnb-vega-{uuid.uuid4().hex}", event=_READY_EVENT, spec=as_js(spec),
                                  embed_options=as_js(embed_options), key=as_js(_bundle_key()))
    if not _state["bundle_shown"]:
        _state["bundle_shown"] = True
        html = bundle_html() + "\n" + html
    title = spec.get("title")
    title = title.get("text") if isinstance(title, dict) else title
    return {"text/html": html,
            "text/plain": f"<altair chart{': ' + str(title) if title else ''} (drawn by JavaScript in JupyterLab)>"}


# registered on import, so ``alt.renderers.enable("specnb_offline")`` works once this module is imported
alt.renderers.register(OFFLINE_RENDERER, offline_renderer)
alt.renderers.register(STATIC_RENDERER, static_renderer)


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def enable_offline_renderer(show_bundle: bool = True, embed_options: dict | None = None) -> None:
    """Charts draw in JupyterLab with no network: vega/vega-lite/vega-embed come from vl-convert.

    Call it once in a notebook's setup cell when the notebook runs interactively. With
    ``show_bundle`` (and inside a kernel) the 0.9 MB bundle is displayed right away as a hidden
    output of that cell, so every later chart, also one redrawn by a slider, is a few kB; otherwise
    the first chart displayed carries it. Raises if vl-convert lacks the Vega-Lite version altair
    emits, rather than drawing nothing.
    """
    vega_bundle_js()  # fail here, in the setup cell, if vl-convert cannot serve this altair
    alt.renderers.enable(OFFLINE_RENDERER, **({"embed_options": embed_options} if embed_options else {}))
    _state["bundle_shown"] = False
    if show_bundle and _in_kernel():
        from IPython.display import display

        display({"text/html": bundle_html(), "text/plain": f"<offline Vega bundle: {_bundle_key()}>"}, raw=True)
        _state["bundle_shown"] = True


def use_interactive_renderer() -> None:
    """The JupyterLab counterpart of ``use_static_renderer``: offline JavaScript charts (tooltips,
    zoom) and, as on the static path, no 5000-row limit on a chart's data."""
    enable_offline_renderer()
    alt.data_transformers.disable_max_rows()
