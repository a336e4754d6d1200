"""The offline renderer without a browser: what a chart's output holds, and that nothing points at a CDN.

The browser test (test_jupyterlab_offline.py) shows the charts really draw; these run in a second
(plus 4-10 s once per machine while vl-convert bundles vega; then it comes from the specnb cache).
"""

import re
import shutil
import subprocess

import altair as alt
import pandas as pd
import pytest

from specnb.app import render as offline


@pytest.fixture
def renderer():
    previous = alt.renderers.active
    yield
    alt.renderers.enable(previous)


def chart(title="speedup"):
    frame = pd.DataFrame({"alpha": [0.1, 0.5, 0.9], "speedup": [0.9, 1.3, 2.5]})
    return alt.Chart(frame).mark_line().encode(x="alpha:Q", y="speedup:Q", tooltip=["alpha"]).properties(title=title)


def test_bundle_is_vega_lite_altair_emits_and_sets_the_globals():
    js = offline.vega_bundle_js()
    assert 500_000 < len(js) < 3_000_000
    assert js.rstrip().endswith("window.vegaLite=__default1;") and "window.vegaEmbed=" in js
    assert offline.bundle_html().lower().count("</script") == 1  # only its own closing tag


def test_chart_output_is_small_inline_and_never_reaches_a_cdn(renderer):
    offline.enable_offline_renderer(show_bundle=False)
    first = chart()._repr_mimebundle_()
    second = chart()._repr_mimebundle_()
    first, second = (b[0] if isinstance(b, tuple) else b for b in (first, second))
    assert "window.__specnbVega = " in first["text/html"]  # no setup-cell output: the first chart carries the bundle
    assert "window.__specnbVega = " not in second["text/html"] and len(second["text/html"]) < 10_000
    for html in (first["text/html"], second["text/html"]):
        assert not re.search(r"<script[^>]+src=|https?://cdn|jsdelivr|unpkg", html)
    assert second["text/plain"] == "<altair chart: speedup (drawn by JavaScript in JupyterLab)>"
    assert '"editor": false' in second["text/html"]  # no "Open in Vega Editor" (it posts to vega.github.io)


def test_a_title_cannot_close_the_script(renderer):
    offline.enable_offline_renderer(show_bundle=False)
    offline._state["bundle_shown"] = True
    html = chart(title="</script><script>alert(1)</script>")._repr_mimebundle_()
    html = (html[0] if isinstance(html, tuple) else html)["text/html"]
    assert html.count("<script") == 1 and html.count("</script>") == 1
    assert "\\u003c/script>" in html


@pytest.mark.skipif(not shutil.which("node"), reason="node checks the JavaScript syntax")
def test_chart_script_is_valid_javascript(renderer, tmp_path):
    offline.enable_offline_renderer(show_bundle=False)
    offline._state["bundle_shown"] = True
    bundle = chart()._repr_mimebundle_()
    html = (bundle[0] if isinstance(bundle, tuple) else bundle)["text/html"]
    script = html.split('<script type="text/javascript">', 1)[1].rsplit("</script>", 1)[0]
    (tmp_path / "chart.js").write_text(script)
    checked = subprocess.run(["node", "--check", str(tmp_path / "chart.js")], capture_output=True, check=False)
    assert checked.returncode == 0, checked.stderr


def test_interactive_setup_enables_the_offline_renderer(renderer):
    offline.use_interactive_renderer()
    assert alt.renderers.active == offline.OFFLINE_RENDERER


def test_a_static_chart_is_laid_out_in_the_font_the_page_draws_it_in():
    """A static SVG is laid out by vl-convert and drawn by the reader's browser: with ``sans-serif``
    each resolved it to another font, and notebook 08's legend labels and titles were cut at the SVG's
    edge. The theme names the font, so the layout measures the text the browser draws."""
    import specnb.app.charts.style  # noqa: F401  (registers and enables the theme)

    frame = pd.DataFrame({"x": [1, 2], "y": [1, 2], "series": ["eagle3 k=3", "ngram k=4"]})
    chart = alt.Chart(frame, title="Latency against throughput (each point a level: concurrent requests)").mark_line(
    ).encode(x="x:Q", y="y:Q", color="series:N")
    svg = offline.static_renderer(chart.to_dict())["image/svg+xml"]
    fonts = set(re.findall(r'font-family="([^"]*)"', svg))
    assert fonts == {"DejaVu Sans, sans-serif"}, fonts
