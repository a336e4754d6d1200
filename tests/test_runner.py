"""The papermill runner on two fixture notebooks: outputs, offline HTML, errors."""

import json
import re
from pathlib import Path

import nbformat
import pytest

from specnb import cli
from specnb.errors import ParameterError
from specnb.runner import NotebookFailed, export_html, parse_value, run_notebooks, select_notebooks

FIXTURES = Path(__file__).parent / "fixtures" / "notebooks"


@pytest.fixture(autouse=True)
def fixture_notebooks(monkeypatch):
    monkeypatch.setenv("SPECNB_NOTEBOOKS", str(FIXTURES))


def test_select_by_number_stem_and_title():
    assert [p.stem for p in select_notebooks(["1", "02_fails"])] == ["01_ok", "02_fails"]
    assert [p.stem for p in select_notebooks(["ok"])] == ["01_ok"]
    with pytest.raises(ParameterError, match="known: 01_ok, 02_fails"):
        select_notebooks(["nope"])


def test_parse_value_literals_and_strings():
    assert parse_value("4") == 4 and parse_value("0.5") == 0.5 and parse_value("[1, 2]") == [1, 2]
    assert parse_value("True") is True and parse_value("Qwen/Qwen2.5-3B-Instruct") == "Qwen/Qwen2.5-3B-Instruct"


def test_run_writes_notebook_html_tables_and_summary(tmp_path):
    (run,) = run_notebooks(["ok"], {"scale": 3}, out=tmp_path, progress=False)
    assert run.ok and run.parameters == {"smoke": False, "output_dir": str(tmp_path), "scale": 3}
    summary = json.loads((tmp_path / "01_ok.summary.json").read_text())
    assert summary["results"] == {"scale": 3}
    assert summary["environment"]["packages"]["torch"]
    assert (tmp_path / "01_ok.points.csv").read_text().splitlines()[1:] == ["1,3", "2,6", "3,9"]
    executed = nbformat.read(tmp_path / "01_ok.ipynb", as_version=4)
    assert not any(o.get("ename") for c in executed.cells if c.cell_type == "code" for o in c.outputs)
    html = (tmp_path / "01_ok.html").read_text()
    assert "<svg" in html  # the altair chart, as an inline <svg> element
    assert_offline(html)


def test_relative_out_folder_holds_the_tables(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # notebooks run with the run folder as cwd: a relative --out must not nest
    (run,) = run_notebooks(["ok"], {"scale": 2}, out=Path("runs/a"), progress=False)
    assert run.ok and (tmp_path / "runs" / "a" / "01_ok.points.csv").exists()
    assert not (tmp_path / "runs" / "a" / "runs").exists()


def assert_offline(html: str) -> None:
    """No script, stylesheet or image is fetched from the network."""
    remote = re.findall(r"""<(?:script|link|img|iframe)[^>]+(?:src|href)=["'](https?:)?//""", html)
    assert remote == []
    assert "cdn" not in " ".join(re.findall(r"<script[^>]*>", html)).lower()


def test_failing_cell_reports_notebook_cell_and_error_and_keeps_partial(tmp_path):
    with pytest.raises(NotebookFailed, match=r"02_fails: cell \d+ \(.raise ValueError.*ValueError: deliberate failure"):
        run_notebooks(["fails"], out=tmp_path, progress=False)
    partial = nbformat.read(tmp_path / "02_fails.ipynb", as_version=4)
    assert partial.cells[-1].source == "y = 2" and not partial.cells[-1].outputs
    assert (tmp_path / "02_fails.html").exists()
    assert json.loads((tmp_path / "02_fails.summary.json").read_text())["ok"] is False


def test_unknown_parameter_is_an_error_before_running(tmp_path, capsys):
    assert cli.main(["run", "ok", "-p", "scal", "3", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown parameter(s) scal" in err and "scale" in err
    assert not (tmp_path / "01_ok.ipynb").exists()


def test_export_html_strips_cdn_scripts_from_any_notebook(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("Math $a^2$ and a widget-free notebook")]
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    path = tmp_path / "x.ipynb"
    nbformat.write(nb, path)
    assert_offline(export_html(path).read_text())


def test_export_html_keeps_the_last_state_of_a_text_progress_bar(tmp_path):
    nb = nbformat.v4.new_notebook()
    redraws = [nbformat.v4.new_output("stream", name="stderr", text=f"\rruns: {i}/3") for i in range(4)]
    nb.cells = [nbformat.v4.new_code_cell("run()", outputs=[*redraws, nbformat.v4.new_output("stream", name="stderr",
                                                                                             text="\n")])]
    path = tmp_path / "bars.ipynb"
    nbformat.write(nb, path)
    html = export_html(path).read_text()
    assert "runs: 3/3" in html and "runs: 2/3" not in html and "runs: 0/3" not in html
