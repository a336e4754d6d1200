"""A run's index.html in headless Chromium: every chart draws, every link reaches a file, nothing is fetched.

The page is built by ``specnb.app.report`` from a fake run folder whose chart is what a papermill run
stores (altair's SVG through vl-convert) and a PNG beside it. Chromium is found as the JupyterLab test
finds it (the ``chromium`` fixture); ``SPECNB_BROWSER_OPTIONAL=1`` skips when it is missing.
"""

import json
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from helpers import PNG_1PX, displayed, executed_notebook

from specnb.app import report

pytestmark = [pytest.mark.slow, pytest.mark.browser]

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def altair_svg() -> str:
    """A chart as the notebooks' static renderer stores it."""
    import altair as alt
    import pandas as pd
    import vl_convert as vlc

    from specnb.app.render import vegalite_version_for_vl_convert

    chart = alt.Chart(pd.DataFrame({"gamma": [1, 2, 3], "speedup": [0.9, 1.1, 1.0]})).mark_line().encode(
        x="gamma:Q", y="speedup:Q")
    return vlc.vegalite_to_svg(chart.to_dict(), vl_version=vegalite_version_for_vl_convert())


def run_folder(tmp_path: Path) -> Path:
    chart = displayed("image/svg+xml", altair_svg())
    ok = executed_notebook("**Question: does it pay?**", [chart, displayed("text/markdown", "- yes")])
    bad = executed_notebook("**Question: at batch 8?**", [displayed("image/png", PNG_1PX)])
    for name, nb in (("01_a", ok), ("02_b", bad)):
        (tmp_path / f"{name}.ipynb").write_text(json.dumps(nb))
        (tmp_path / f"{name}.html").write_text(f"<html><body>{name}</body></html>")
    runs = [{"name": name, "ipynb": str(tmp_path / f"{name}.ipynb"), "html": str(tmp_path / f"{name}.html"),
             "ok": name == "01_a", "error": None if name == "01_a" else "cell 2: ValueError: deliberate"}
            for name in ("01_a", "02_b")]
    return report.write_index(tmp_path, runs)


def test_the_index_draws_its_charts_and_its_links_resolve_offline(chromium, tmp_path):
    sync_playwright, executable = chromium
    index = run_folder(tmp_path)
    requests: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.on("request", lambda r: requests.append(r.url))
            page.goto(index.as_uri(), wait_until="load", timeout=60_000)
            images = page.eval_on_selector_all("img", "els => els.map(e => [e.complete, e.naturalWidth])")
            links = page.eval_on_selector_all("a", "els => els.map(e => e.href)")
        finally:
            browser.close()
    assert len(images) == 2 and all(done and width > 0 for done, width in images), images
    assert len(links) == 2 and all(Path(unquote(urlsplit(url).path)).is_file() for url in links), links
    assert [url for url in requests if not url.startswith(("file:", "data:"))] == []
