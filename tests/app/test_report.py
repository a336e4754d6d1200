"""specnb.app.report: a run folder's front page read back from its executed notebooks and summaries."""

import base64
import json
import re
from pathlib import Path

import pandas as pd
import pytest
from helpers import PNG_1PX as PNG
from helpers import assert_offline, displayed, executed_notebook

from specnb.app import report
from specnb.app.runner import NotebookFailed, run_notebooks

FIXTURES = Path(__file__).parents[1] / "fixtures" / "notebooks"
SVG = "<svg xmlns='http://www.w3.org/2000/svg' width='40' height='20'><rect width='40' height='20'/></svg>"


def fake_run(tmp_path: Path) -> list[dict]:
    """Two notebooks: one that ran (SVG chart, two Markdown outputs, its HTML page), one that failed in a
    cell (PNG chart, no conclusion, no HTML); a summary with the environment for the first."""
    verdict = ["- speculation **loses** here: 0.9x\n", "- <script>alert(1)</script>"]
    ok = executed_notebook("**Question: does it pay\non this machine?**\n\nMore text.",
                           [displayed("text/markdown", "- an early table note"), displayed("image/svg+xml", SVG),
                            displayed("text/markdown", verdict)])
    bad = executed_notebook("**Question: and at batch 8?**", [displayed("image/png", PNG + "\n")])
    (tmp_path / "01_a.ipynb").write_text(json.dumps(ok))
    (tmp_path / "01_a.html").write_text("<html></html>")
    (tmp_path / "02_b.ipynb").write_text(json.dumps(bad))
    env = {"cpu": "Test CPU", "cpu_count": 2, "torch_threads": 2, "python": "3.11.7",
           "packages": {"torch": "2.13.0"}, "git_commit": "abc1234", "time_utc": "2026-12-03T00:00:00Z"}
    (tmp_path / "01_a.summary.json").write_text(json.dumps({"environment": env}))
    return [{"name": "01_a", "ipynb": str(tmp_path / "01_a.ipynb"), "html": str(tmp_path / "01_a.html"), "ok": True,
             "error": None, "seconds": 90.0},
            {"name": "02_b", "ipynb": str(tmp_path / "02_b.ipynb"), "html": None, "ok": False,
             "error": "cell 3 ('x = 1 / 0'): ZeroDivisionError: division by zero", "seconds": 30.0,
             "note": "02_b runs with engine = 'b', not engine = 'a': a is not installed"}]


def test_a_section_reads_question_verdict_chart_and_link(tmp_path):
    run = fake_run(tmp_path)[0]
    section = report.build_section(run, tmp_path)
    assert section.question == "does it pay on this machine?"
    assert section.verdict_markdown.startswith("- speculation **loses** here")  # the last Markdown, not the first
    assert section.html_link == "01_a.html" and section.ok
    mime, payload = section.chart_uri.removeprefix("data:").split(";base64,")
    assert mime == "image/svg+xml" and base64.b64decode(payload).decode() == SVG


def test_a_png_chart_keeps_its_base64_and_a_missing_notebook_leaves_blanks(tmp_path):
    bad = report.build_section(fake_run(tmp_path)[1], tmp_path)
    assert bad.chart_uri == f"data:image/png;base64,{PNG}" and bad.verdict_markdown == "" and bad.html_link is None
    never = {"name": "03_c", "ipynb": str(tmp_path / "03_c.ipynb"), "html": None, "ok": False, "error": "kernel died"}
    section = report.build_section(never, tmp_path)
    assert (section.question, section.chart_uri, section.verdict_markdown) == ("", None, "")


def test_the_page_lists_every_notebook_the_failed_one_with_its_error(tmp_path):
    path = report.write_index(tmp_path, fake_run(tmp_path))
    page = path.read_text()
    assert path == tmp_path / "index.html"
    assert "1 of 2 notebooks ran in 2.0 min; failed: 02_b" in page and "ok (1.5 min)" in page
    assert "note: 02_b runs with engine = &#x27;b&#x27;, not engine = &#x27;a&#x27;: a is not installed" in page
    assert "failed: cell 3 (&#x27;x = 1 / 0&#x27;): ZeroDivisionError: division by zero" in page
    assert "<strong>loses</strong>" in page and "<script" not in page  # Markdown rendered, raw HTML escaped
    assert "href='01_a.html'" in page and page.count("<img ") == 2
    assert "Test CPU" in page and "abc1234" in page and "torch 2.13.0" in page
    assert_offline(page)


def test_the_runner_writes_the_page_also_when_a_notebook_fails(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECNB_NOTEBOOKS", str(FIXTURES))
    with pytest.raises(NotebookFailed, match=r"report .*index\.html"):
        run_notebooks(["ok", "fails"], {}, out=tmp_path, progress=False)
    page = (tmp_path / "index.html").read_text()
    assert "<h2>01_ok</h2>" in page and "<h2>02_fails</h2>" in page
    assert re.search(r"1 of 2 notebooks ran in [0-9.]+ min; failed: 02_fails", page) and "href='01_ok.html'" in page
    timings = pd.read_csv(tmp_path / "timings.csv")  # what benchmarks/README.md quotes per notebook
    assert list(timings["notebook"]) == ["01_ok", "02_fails", "total"] and list(timings["ok"]) == [True, False, False]
    assert timings["seconds"].iloc[-1] == pytest.approx(timings["seconds"].iloc[:-1].sum(), abs=0.2)
