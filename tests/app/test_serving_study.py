"""Notebook 08's study as one call: its parameters as a record, a part a run does not have shown as
nothing, and a run without an engine still ending with its conclusion."""

import json

from specnb.app import serving_study
from specnb.app.text.cell_report import Report


def test_parameters_are_read_from_the_notebook_with_a_smoke_runs_sizes():
    names = {"engine": "simulated", "smoke": True, "seed": 3, "In": [], "pd": None}  # a kernel's other names ignored
    params = serving_study.Params.of(names)
    assert (params.engine, params.seed, params.n_prompts, params.concurrency) == ("simulated", 3, 4, [1, 2])
    assert serving_study.Params.of({"n_prompts": 8}).n_prompts == 8


def test_show_prints_lines_displays_parts_and_skips_what_is_missing(capsys):
    serving_study.show("note: one", None, Report("**two**", {}))
    out = capsys.readouterr().out
    assert out.startswith("note: one\n") and "None" not in out


def test_a_study_without_an_engine_is_a_note_and_still_concludes(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECNB_LLAMA_SERVER", str(tmp_path / "no-such-llama-server"))
    params = serving_study.Params(smoke=True, output_dir=str(tmp_path), interactive=False, n_prompts=4,
                                  concurrency=[1, 2], max_new_tokens=12)
    study = serving_study.run(params)
    assert any("llama-server not found" in line for line in study.intro) and study.summary.empty
    assert study.policy_report is not None and study.forecast_report is None and study.tpot_chart is None
    assert "llama-server not found" in study.conclusion.markdown
    results = json.loads((tmp_path / "08_serving.results.json").read_text())
    assert results["launch_line"] == "" and "machine" in results
