"""The shipped notebooks: stored clean with one parameters cell, and all of them smoke-run through the CLI.

Notebooks are discovered from ``notebooks/`` at collection time, so a new numbered notebook is
covered without editing this file. Each notebook's smoke run is its own test, through the same CLI
as ``specnb run --smoke``, so the test runner's workers share them out: a smoke run checks that
every cell runs and writes its outputs, not what it times.
"""

import ast
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import nbformat
import pandas as pd
import papermill
import pytest
from helpers import assert_offline

from specnb.app.charts import lint
from specnb.app.render import CHART_SPECS
from specnb.app.runner import list_notebooks
from specnb.core.paths import REPO_ROOT
from specnb.native import llama_cpp
from specnb.serve import llama

NOTEBOOKS = list_notebooks(REPO_ROOT / "notebooks")
RUNNER_SET = {"smoke": False, "output_dir": "", "interactive": True}  # the runner sets these; defaults for JupyterLab
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# benchmarks/ scripts that copy a notebook run's figures into benchmarks/README.md (tests/benchmarks lists them)
COPIED_BY = {"06_decision_framework": "predictor.py", "07_alternatives": "alternatives.py", "08_serving": "serving.py"}


def code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def test_notebooks_are_found():
    assert len(NOTEBOOKS) >= 3, NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_clean_with_one_parameters_cell_and_a_conclusion(path):
    nb = nbformat.read(path, as_version=4)
    assert [c.execution_count for c in code_cells(nb) if c.outputs or c.execution_count is not None] == []
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and tagged[0].cell_type == "code"
    declared = papermill.inspect_notebook(str(path))
    assert {name: ast.literal_eval(declared[name]["default"]) for name in RUNNER_SET if name in declared} == RUNNER_SET
    assert nb.cells[0].cell_type == "markdown" and "?" in nb.cells[0].source  # the question it answers
    conclusion = [i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and "Conclusion" in c.source]
    assert conclusion and any(c.cell_type == "code" for c in nb.cells[conclusion[-1]:])  # printed from the data


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_markdown_has_no_latex(path):
    """The shared HTML is offline and carries no MathJax: a formula written as $...$ would reach the
    reader as raw LaTeX, so formulas are written in Unicode."""
    nb = nbformat.read(path, as_version=4)
    assert [c.source[:80] for c in nb.cells if c.cell_type == "markdown" and "$" in c.source] == []


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_smoke_run_writes_parseable_outputs(path, tmp_path):
    # One thread per run: the test workers run two notebooks at once on as many cores, and two
    # two-thread kernels on two cores took 4-8x as long as one alone.
    specs = tmp_path / "chart_specs.jsonl"  # every chart the run draws, as its Vega-Lite spec
    env = {k: v for k, v in os.environ.items() if k != "SPECNB_NOTEBOOKS"} | {"OMP_NUM_THREADS": "1",
                                                                              CHART_SPECS: str(specs)}
    done = subprocess.run([sys.executable, "-m", "specnb", "run", path.stem[:2], "--smoke", "--json", "--out",
                           str(tmp_path)], capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads(done.stdout)
    assert [r["notebook"] for r in runs] == [path.stem] and all(r["ok"] for r in runs)
    stem = path.stem
    executed = nbformat.read(tmp_path / f"{stem}.ipynb", as_version=4)
    outputs = [o for c in code_cells(executed) for o in c.outputs]
    assert [o for o in outputs if o.output_type == "error"] == [], stem
    assert [o for o in outputs if WIDGET_VIEW in o.get("data", {})] == [], f"{stem}: a widget is dead in HTML"
    html = (tmp_path / f"{stem}.html").read_text(encoding="utf-8")
    assert "<svg" in html, f"{stem}: no inline SVG chart"
    assert "cdn.jsdelivr" not in html and '<script src="http' not in html, stem
    assert_offline(html)
    summary = json.loads((tmp_path / f"{stem}.summary.json").read_text())
    assert summary["ok"] and summary["parameters"]["smoke"] is True, stem
    assert summary["environment"]["packages"]["torch"] and summary["results"], stem
    tables = [name for name in summary["files"] if name.endswith(".csv")]
    assert tables, f"{stem} recorded no table"
    for name in tables:
        assert not pd.read_csv(tmp_path / name).empty, name
    assert_charts_read_true(specs, drew="<svg" in html)
    if stem in COPIED_BY:  # the benchmark that copies this notebook's figures reads the run, as a user starts it
        copied = subprocess.run([sys.executable, f"benchmarks/{COPIED_BY[stem]}", str(tmp_path), "--no-write"],
                                capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
        assert copied.returncode == 0 and "|" in copied.stdout, copied.stderr[-3000:]


def assert_charts_read_true(specs: Path, drew: bool) -> None:
    """Every chart of a smoke run, read back from its spec: no two series of one panel share a colour,
    no data row lies hidden under another's mark, no legend label is cut (``specnb.app.charts.lint``)."""
    charts = [json.loads(line) for line in specs.read_text(encoding="utf-8").splitlines()] if specs.exists() else []
    assert charts or not drew, "the run drew charts but wrote no spec"
    found = {i: lint.problems(spec) for i, spec in enumerate(charts)}
    assert {i: p for i, p in found.items() if p} == {}


def test_decision_notebook_defaults_give_enough_held_out_prompts():
    """Notebook 06's default prompt counts must split: below the number of categories, validation
    narrows both pools to its categories, so 20 calibration prompts need 4 validation prompts."""
    from specnb.app.parameters import declared_defaults
    from specnb.measure.prompts import split_prompts

    path = next(p for p in NOTEBOOKS if p.stem.startswith("06"))
    params = declared_defaults(path)
    calibration, validation = split_prompts("all", params["n_calibration_prompts"], params["n_validation_prompts"])
    assert (len(calibration), len(validation)) == (params["n_calibration_prompts"], params["n_validation_prompts"])
    assert not set(calibration["prompt"]) & set(validation["prompt"])


@pytest.mark.slow
@pytest.mark.skipif(llama_cpp.missing_note() is not None, reason="llama.cpp missing (make setup)")
def test_a_crashing_engine_is_a_note_and_the_notebook_still_finishes(tmp_path):
    """Every llama.cpp child of notebook 07 dies with SIGILL at its first call (the crash hook): the
    kernel lives, the note names the signal, every other method, the charts and the conclusion run,
    and no child is left behind."""
    env = {k: v for k, v in os.environ.items() if k != "SPECNB_NOTEBOOKS"} | {
        "OMP_NUM_THREADS": "1", "SPECNB_CRASH_ENGINE": "SIGILL", "SPECNB_TEST_RUN": uuid.uuid4().hex}
    done = subprocess.run([sys.executable, "-m", "specnb", "run", "07", "--smoke", "--json", "--out", str(tmp_path)],
                          capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    executed = nbformat.read(tmp_path / "07_alternatives.ipynb", as_version=4)
    text = "".join(o.get("text", "") for c in code_cells(executed) for o in c.outputs)
    assert re.search(r"note: verifier-only · llama.cpp · Q4_1: left out, llama.cpp \([^)]+\.gguf\) died with "
                     r"SIGILL \(illegal instruction\)\n", text), text
    summary = pd.read_csv(tmp_path / "07_alternatives.summary.csv")
    assert "llama.cpp" not in set(summary["engine"]) and len(summary) >= 2  # the baseline and int8 still ran
    assert "llama.cpp" not in set(pd.read_csv(tmp_path / "07_alternatives.tax_fits.csv")["engine"].str[:9])
    assert "<svg" in (tmp_path / "07_alternatives.html").read_text(encoding="utf-8")
    results = json.loads((tmp_path / "07_alternatives.summary.json").read_text())["results"]
    assert any("died with SIGILL" in str(v) for v in results.values())  # the conclusion carries the note
    assert processes_with(env["SPECNB_TEST_RUN"]) == []  # the kernel and its engine children are all gone


def processes_with(tag: str) -> list[int]:
    """Pids of live processes whose environment carries ``SPECNB_TEST_RUN=tag`` (a run's children)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if f"SPECNB_TEST_RUN={tag}".encode() in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.mark.slow
def test_the_serving_notebook_without_an_engine_is_a_note_not_a_failure(tmp_path):
    """No llama-server here (a failed build, a machine without a compiler) and no endpoint: notebook
    08 says how to get one and still ends with its conclusion, so `make demo` finishes."""
    env = {k: v for k, v in os.environ.items() if k != "SPECNB_NOTEBOOKS"} | {
        "OMP_NUM_THREADS": "1", "SPECNB_LLAMA_SERVER": str(tmp_path / "no-such-llama-server")}
    done = subprocess.run([sys.executable, "-m", "specnb", "run", "08", "--smoke", "--json", "--out", str(tmp_path)],
                          capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    executed = nbformat.read(tmp_path / "08_serving.ipynb", as_version=4)
    text = "".join(o.get("text", "") for c in code_cells(executed) for o in c.outputs)
    assert "note: llama-server not found: build it with `make setup`" in text
    conclusion = code_cells(executed)[-1].outputs
    assert any("llama-server not found" in str(o.get("data", {})) for o in conclusion)  # the conclusion says why


@pytest.mark.slow
def test_the_serving_notebook_on_vllm_without_vllm_is_a_note_not_a_failure(tmp_path):
    """engine vllm and no endpoint where setup left vLLM out: notebook 08 says why in one line and still
    ends with its conclusion; no server is started."""
    env = {k: v for k, v in os.environ.items() if k != "SPECNB_NOTEBOOKS"} | {"OMP_NUM_THREADS": "1",
                                                                               "SPECNB_SKIP_VLLM": "1"}
    done = subprocess.run([sys.executable, "-m", "specnb", "run", "08", "--smoke", "-p", "engine", "vllm", "--json",
                           "--out", str(tmp_path)], capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    executed = nbformat.read(tmp_path / "08_serving.ipynb", as_version=4)
    text = "".join(o.get("text", "") for c in code_cells(executed) for o in c.outputs)
    assert "note: vLLM left out: SPECNB_SKIP_VLLM=1" in text and ", vLLM 0.32.0 (CPU) with " in text
    conclusion = code_cells(executed)[-1].outputs
    assert any("vLLM left out" in str(o.get("data", {})) for o in conclusion)


@pytest.mark.slow
def test_the_serving_notebook_runs_end_to_end_on_the_simulated_engine(tmp_path):
    """The engine seam end to end: notebook 08's smoke path on the simulated engine (registered through
    ``specnb.serve.simulated``, nothing else knows it): spec-off, n-gram and spec-off's
    A/A twin started, the launch noise read off the twin, counters read, greedy text identical, summary,
    the one verdict (n-gram paying at every level: its static configuration, so no second server and no
    check pass) named alike by results.json, the policy section and the conclusion, the bursty trace
    over the static configurations, its text — and every process it started gone after."""
    tag = uuid.uuid4().hex
    # drafting pays far beyond the noise (about 2.7x at one request), so the policy drafts and is launched, however
    # loaded the machine running the test is
    cost = {"fixed_ms": 40.0, "per_token_ms": 1.0, "acceptance": [0.95, 0.9, 0.85], "speed": 1.0}
    env = {k: v for k, v in os.environ.items() if k != "SPECNB_NOTEBOOKS"} | {
        "OMP_NUM_THREADS": "1", "SPECNB_SIM_COST": json.dumps(cost), "SPECNB_TEST_RUN": tag,
        CHART_SPECS: str(tmp_path / "chart_specs.jsonl")}
    done = subprocess.run([sys.executable, "-m", "specnb", "run", "08", "--smoke", "-p", "engine", "simulated",
                           "--json", "--out", str(tmp_path)], capture_output=True, text=True, env=env, cwd=REPO_ROOT,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_charts_read_true(tmp_path / "chart_specs.jsonl", drew=False)
    summary = pd.read_csv(tmp_path / "08_serving.summary.csv").set_index(["config", "concurrency"])
    # spec-off's A/A twin runs beside them: no launch noise is stored for this machine yet (the test's own folder)
    assert set(summary.index.get_level_values("config")) == {"spec-off", "ngram k=3", "spec-off-aa"}
    ngram = summary.loc["ngram k=3"]
    assert (ngram["identical_outputs"] == ngram["paired_requests"]).all() and (ngram["paired_requests"] > 0).all()
    assert (ngram["spec_decode_num_drafts"] > 0).all() and ngram["alpha"].between(0, 1).all()
    assert set(summary["engine"]) == {"simulated"} and set(summary["k"]) == {0, 3}  # the records carry the record
    results = json.loads((tmp_path / "08_serving.summary.json").read_text())["results"]
    noise = results["launch_noise"]  # the twin's pair, every CI widened by it
    assert noise["pairs"] == 1 and noise["sigma"] >= 0
    assert (summary.loc["ngram k=3", "launch_sigma"] == noise["sigma"]).all()
    assert json.loads(results["policy_vllm"]) == {"method": "ngram", "num_speculative_tokens": 3}  # as launched
    assert results["verdict_record"]["kind"] == "static" and results["verdict_record"]["config"] == "ngram k=3"
    assert_one_launch(results, tmp_path / "08_serving.ipynb")
    assert not (tmp_path / "08_serving.check_summary.csv").exists()  # the sweep measured this launch as itself
    trace = pd.read_csv(tmp_path / "08_serving.trace.csv")
    assert set(trace["config"]) == {"spec-off", "ngram k=3"} and trace["adaptive_mean_tpot_ms"].isna().all()
    # the trace forecast, written before the trace, then held against it; the reconstruction beside it
    assert set(results["trace_forecast"]) == {"spec-off", "ngram k=3"}
    assert results["trace_forecast_median_error"] >= 0 and "trace_reconstruction_median_error" in results
    assert processes_with(tag) == []  # the kernel and every simulated server are gone


def markdown_outputs(ipynb: Path) -> list[str]:
    """Every Markdown a cell of an executed notebook displayed, in order."""
    nb = nbformat.read(ipynb, as_version=4)
    return [out["data"]["text/markdown"] for cell in nb.cells if cell.cell_type == "code"
            for out in cell.get("outputs", []) if "text/markdown" in out.get("data", {})]


def assert_one_launch(results: dict, ipynb: Path) -> None:
    """Notebook 08 names one launch: the verdict record's, the launch line in results.json, the policy
    section (its verdict line after the candidates) and the conclusion (whose first line it is) —
    the same configuration and the same line everywhere."""
    record, line, verdict = results["verdict_record"], results["launch_line"], results["verdict"]
    assert record["line"] == line and (line == "" if record["kind"] in ("", "none") else line)
    if not record["kind"]:  # nothing to decide: no verdict line anywhere
        assert verdict == "" and "**verdict**" not in "".join(markdown_outputs(ipynb))
        return
    if record["kind"] == "none" or line.startswith("{"):  # a line in vLLM's form is policy_vllm itself
        assert results["policy_vllm"] == (line or "no --speculative-config")
    assert verdict.startswith(f"**verdict**: launch **{record['launch']}**")
    assert (f"(`{line}`)" in verdict) if line and record["kind"] != "per_load" else "`{" not in verdict
    shown = markdown_outputs(ipynb)
    conclusion = [m for m in shown if m.startswith(f"- {verdict}\n")]
    policy = [m for m in shown if m.endswith(f"\n\n{verdict}")]
    assert len(policy) == 1 and len(conclusion) == 1  # the policy section and the conclusion say the same line
    if line and record["kind"] != "per_load":
        assert f"```\n{line}\n```" in policy[0]  # the policy section prints the line results.json keeps


@pytest.mark.slow
def test_a_bad_level_is_refused_before_any_server_in_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SPECNB_NOTEBOOKS"} | {"OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "specnb", "run", "08", "-p", "concurrency", "[0]",
                           "--out", str(tmp_path)], capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=600)
    assert done.returncode == 2, done.stderr[-3000:]
    ours = [line for line in done.stderr.splitlines() if line.startswith("specnb")]
    assert len(ours) == 1 and "ParameterError: concurrency levels must be whole numbers >= 1" in ours[0], ours


@pytest.mark.slow
@pytest.mark.skipif(llama.missing_note() is not None, reason="no llama-server built")
def test_ctrl_c_during_the_serving_sweep_stops_its_servers_and_keeps_the_records(tmp_path):
    """`specnb run 08` on a tiny sweep that would run for minutes, interrupted as a terminal's Ctrl-C
    does (SIGINT to the run's process group) once its first runs are on disk: exit 130 with one line,
    the per-request CSV kept with at least the rows written before the interrupt, whole, and no
    llama-server of the run left."""
    tag = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k != "SPECNB_NOTEBOOKS"} | {"OMP_NUM_THREADS": "1",
                                                                               "SPECNB_TEST_RUN": tag}
    tiny = ["-p", "engine", "llama.cpp", "-p", "speculation", "['ngram-simple:2']", "-p", "n_prompts", "2",
            "-p", "max_new_tokens", "8", "-p", "concurrency", "[1]", "-p", "rounds", "200", "-p", "threads", "1"]
    proc = subprocess.Popen([sys.executable, "-m", "specnb", "run", "08", *tiny, "--json", "--out", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO_ROOT,
                            start_new_session=True)
    requests = tmp_path / "08_serving.requests.csv"
    try:
        deadline = time.monotonic() + 600  # a kernel, its imports and two servers, on a loaded machine
        while not (requests.exists() and len(pd.read_csv(requests)) >= 2):  # whole (written by replace)
            assert proc.poll() is None and time.monotonic() < deadline, "the sweep ended or stalled before its runs"
            time.sleep(0.2)
        servers = [pid for pid in processes_with(tag) if b"llama-server" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        written = len(pd.read_csv(requests))
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 130, err
    ours = [line for line in err.splitlines() if line.startswith("specnb")]
    assert len(ours) == 1 and "interrupted during 08_serving" in ours[0], err
    kept = pd.read_csv(requests)
    assert len(kept) >= written and kept["success"].all() and set(kept["config"]) <= {"spec-off", "ngram-simple k=2"}
    assert servers, "no llama-server of the run was seen"
    deadline = time.monotonic() + 120  # a server goes with its kernel (parent-death signal): polled, not slept for
    while processes_with(tag) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(tag) == []


@pytest.mark.slow
def test_a_server_that_fails_to_start_is_one_line_with_its_log_and_exit_2(tmp_path):
    """A llama-server that exits at start (here a stand-in binary that logs as llama.cpp does when a
    buffer cannot be allocated, and exits 1): `specnb run 08` prints one line carrying the server's
    last log line and its first error, and exits 2."""
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\necho '0.00.001 I srv  llama_server: initializing'\n"
                    "echo '0.00.002 E ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 1'\n"
                    "echo '0.00.003 E srv  llama_server: exiting due to model loading error'\nexit 1\n")
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "SPECNB_NOTEBOOKS"} | {
        "OMP_NUM_THREADS": "1", "SPECNB_LLAMA_SERVER": str(fake)}
    done = subprocess.run([sys.executable, "-m", "specnb", "run", "08", "--smoke", "--out", str(tmp_path / "run")],
                          capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=600)
    assert done.returncode == 2, done.stderr[-3000:]
    ours = [line for line in done.stderr.splitlines() if line.startswith("specnb")]
    assert len(ours) == 1, done.stderr[-3000:]
    assert "ServerFailed: spec-off: llama-server exited with code 1 at start" in ours[0]
    assert "exiting due to model loading error (first error: " in ours[0] and "failed to allocate" in ours[0]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_folded_method_section_keeps_its_text_inside_the_fold_in_the_shared_html(path, tmp_path):
    """A <details> block is one HTML block (no blank line inside): the offline export re-parses each HTML
    block on its own, and a fold split by blank lines comes out empty, its text below it."""
    from specnb.app.execution import export_html

    folded = [c for c in nbformat.read(path, as_version=4).cells
              if c.cell_type == "markdown" and "<details>" in c.source]
    for cell in folded:
        nb = nbformat.v4.new_notebook()
        nb.cells = [cell]
        nbformat.write(nb, tmp_path / "fold.ipynb")
        html = export_html(tmp_path / "fold.ipynb").read_text()
        inside = html[html.index("</summary>") + len("</summary>"):html.index("</details>")]
        assert len(re.sub(r"<[^>]+>|\s", "", inside)) > 100, f"{path.stem}: the fold holds no text"
