"""The papermill runner on two fixture notebooks: outputs, offline HTML, errors."""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest
from helpers import assert_offline

from specnb.app import cli, runner
from specnb.app.execution import export_html
from specnb.app.parameters import fits, parse_value
from specnb.app.runner import NotebookFailed, run_notebooks, select_notebooks
from specnb.core.errors import ParameterError

FIXTURES = Path(__file__).parents[1] / "fixtures" / "notebooks"


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


def test_failing_cell_reports_notebook_cell_and_error_and_keeps_partial(tmp_path):
    with pytest.raises(NotebookFailed, match=r"02_fails: cell \d+ \(.raise ValueError.*ValueError: deliberate failure"):
        run_notebooks(["fails"], out=tmp_path, progress=False)  # the line that raised, not the cell's first (an import)
    partial = nbformat.read(tmp_path / "02_fails.ipynb", as_version=4)
    assert partial.cells[-1].source == "y = 2" and not partial.cells[-1].outputs
    assert (tmp_path / "02_fails.html").exists()
    assert json.loads((tmp_path / "02_fails.summary.json").read_text())["ok"] is False


def test_unknown_parameter_is_an_error_before_running(tmp_path, capsys):
    assert cli.main(["run", "ok", "-p", "scal", "3", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown parameter(s) scal" in err and "scale" in err
    assert not (tmp_path / "01_ok.ipynb").exists()


@pytest.mark.parametrize("value, message", [
    ("notanumber", "parameter scale of 01_ok must be an integer like its default, got str 'notanumber'"),
    ("2.5", "must be an integer like its default, got float 2.5"),
    ("[2]", "must be an integer like its default, got list [2]"),
])
def test_a_value_of_the_wrong_type_is_an_error_before_running(tmp_path, capsys, value, message):
    assert cli.main(["run", "ok", "-p", "scale", value, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "e.g. -p scale \"2\"" in err
    assert not (tmp_path / "01_ok.ipynb").exists()


def test_types_follow_the_declared_default():
    assert fits(3, 2) and not fits(2.5, 2) and not fits(True, 2)  # a bool is no integer
    assert fits(2, 0.5) and fits(0.25, 0.5) and not fits("0.5", 0.5)  # an integer is a number
    assert fits(False, True) and not fits(0, True)
    assert fits([1, 4], [1, 2]) and not fits([1.5], [1, 2]) and not fits("1,2", [1, 2]) and fits([0.5, 1], [0.1])
    assert fits([], [1]) and fits(["a"], []) and fits("x", "all") and not fits(8, "all")
    assert fits(8, None) and fits("code", None)  # None declares no type


def start_run(tmp_path: Path, *args: str) -> subprocess.Popen:
    """``specnb run`` in a session of its own, as a terminal starts a command (its kernels lead their
    own process groups)."""
    env = {**os.environ, "SPECNB_NOTEBOOKS": str(FIXTURES)}
    return subprocess.Popen([sys.executable, "-m", "specnb", "run", *args, "--json", "--out", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)


def press_ctrl_c(proc: subprocess.Popen, tmp_path: Path, *ready: str) -> str:
    """Once the files ``ready`` are written (the sleeping cell's marker last), send SIGINT to the
    run's process group, as a terminal's Ctrl-C does, and return its stderr. A lost Ctrl-C fails
    the same way every time and at once if the run ignores SIGINT, within 180 s if it went on
    regardless (a loaded machine takes a while to kill a kernel and export its HTML); never by
    finishing, since the cell sleeps 10 minutes. No process is left behind."""
    deadline = time.monotonic() + 300
    while not all(written(tmp_path / name) for name in ready):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc, tmp_path, f"the run ended or stalled before {ready} were written")
        time.sleep(0.1)
    if not catches_sigint(proc.pid):
        stop(proc, tmp_path, "specnb run does not handle SIGINT (it started ignored?): Ctrl-C would be lost")
    os.killpg(proc.pid, signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        stop(proc, tmp_path, "the run went on for 180 s after SIGINT: Ctrl-C was lost")
    return err


def written(path: Path) -> bool:
    return path.exists() and path.stat().st_size > 0


def catches_sigint(pid: int) -> bool:
    """Whether the process has a SIGINT handler (Linux's /proc; taken as yes where there is none)."""
    status = Path(f"/proc/{pid}/status")
    if not status.exists():
        return True
    masks = dict(line.split(":", 1) for line in status.read_text().splitlines() if line.startswith("Sig"))
    return bool(int(masks["SigCgt"], 16) >> (signal.SIGINT - 1) & 1)


def alive(pid: int) -> bool:
    """Running (a zombie, killed but not yet reaped, counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z")


def kernel_pid(tmp_path: Path) -> int:
    return int((tmp_path / "03_slow.sleeping").read_text())


def stop(proc: subprocess.Popen, tmp_path: Path, why: str) -> None:
    """Kill the run and the sleeping kernel, then fail with ``why`` and the run's stderr."""
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    if written(tmp_path / "03_slow.sleeping"):
        with contextlib.suppress(OSError):
            os.kill(kernel_pid(tmp_path), signal.SIGKILL)
    _, err = proc.communicate()
    pytest.fail(f"{why}\n{err}")


def executed(notebook: Path) -> dict[str, bool]:
    """Cell id: whether it ran."""
    cells = nbformat.read(notebook, as_version=4).cells
    return {c.id: c.execution_count is not None for c in cells if c.cell_type == "code"}


def test_ctrl_c_keeps_finished_notebooks_and_the_partial_one_with_its_html(tmp_path):
    """Ctrl-C during a cell: one line, exit 130, 01 complete, 03's partial notebook (its first cell
    ran) and its HTML kept, its kernel gone."""
    proc = start_run(tmp_path, "ok", "slow")
    err = press_ctrl_c(proc, tmp_path, "03_slow.sleeping")
    assert proc.returncode == 130, err
    ours = [line for line in err.splitlines() if line.startswith("specnb")]
    assert len(ours) == 1 and "interrupted during 03_slow" in ours[0], err
    assert "Traceback" not in err and "ZMQError" not in err, err
    assert json.loads((tmp_path / "01_ok.summary.json").read_text())["ok"] is True
    ran = executed(tmp_path / "03_slow.ipynb")
    assert ran["slow-2"] and not ran["slow-4"]
    assert papermill_times(tmp_path / "03_slow.ipynb")[1]  # papermill got to its last save
    assert "Slow fixture" in (tmp_path / "03_slow.html").read_text()
    summary = json.loads((tmp_path / "03_slow.summary.json").read_text())
    assert summary["ok"] is False and "interrupted" in summary["error"]
    assert [r["name"] for r in json.loads((tmp_path / "runs.json").read_text())] == ["01_ok", "03_slow"]
    assert not alive(kernel_pid(tmp_path))


def test_the_command_line_takes_back_a_sigint_it_started_ignoring():
    """A non-interactive shell's background job starts with SIGINT ignored; ``specnb`` handles it."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        cli.take_ctrl_c()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


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


def papermill_times(path: Path) -> tuple[str, str]:
    meta = nbformat.read(path, as_version=4).metadata["papermill"]
    return meta["start_time"], meta["end_time"]


def test_a_smoke_run_takes_two_notebooks_at_once_and_a_timed_run_never(tmp_path, capsys, monkeypatch):
    """01 does not start its kernel until 03 has started running: one after the other, 01 would wait
    for a start that never comes (and fail after 240 s); side by side it goes on at once."""
    started = {name: threading.Event() for name in ("01_ok", "03_slow")}
    real_execute = runner.execute

    def execute(path, *args, **kwargs):
        started[path.stem].set()
        if path.stem == "01_ok" and not started["03_slow"].wait(240):
            raise AssertionError("03_slow never started while 01_ok was running: not side by side")
        return real_execute(path, *args, **kwargs)

    monkeypatch.setattr(runner, "execute", execute)
    runs = run_notebooks(["ok", "slow"], {"seconds": 1}, smoke=True, out=tmp_path, progress=False, jobs=2)
    assert [r.name for r in runs] == ["01_ok", "03_slow"] and all(r.ok for r in runs)  # the order asked for
    assert [r["name"] for r in json.loads((tmp_path / "runs.json").read_text())] == ["01_ok", "03_slow"]
    assert cli.main(["run", "ok", "--jobs", "2", "--out", str(tmp_path / "timed")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "only a --smoke run may" in err
    assert cli.main(["run", "ok", "--smoke", "--jobs", "0", "--out", str(tmp_path / "none")]) == 2
    assert "at least 1" in capsys.readouterr().err


def test_side_by_side_a_notebook_waits_for_the_one_it_reads(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "READS_FROM", {"01_ok": ("03_slow",)})
    runs = run_notebooks(["ok", "slow"], {"seconds": 2}, smoke=True, out=tmp_path, progress=False, jobs=2)
    assert all(r.ok for r in runs)
    _, slow_end = papermill_times(tmp_path / "03_slow.ipynb")
    ok_start, _ = papermill_times(tmp_path / "01_ok.ipynb")
    assert ok_start >= slow_end


def test_ctrl_c_during_a_side_by_side_smoke_run_stops_every_kernel_and_keeps_the_partial_notebook(tmp_path):
    proc = start_run(tmp_path, "ok", "slow", "--smoke")
    err = press_ctrl_c(proc, tmp_path, "01_ok.summary.json", "03_slow.sleeping")
    assert proc.returncode == 130, err
    ours = [line for line in err.splitlines() if line.startswith("specnb")]
    assert len(ours) == 1 and "interrupted during 03_slow" in ours[0], err
    assert "Traceback" not in err, err
    assert json.loads((tmp_path / "01_ok.summary.json").read_text())["ok"] is True
    summary = json.loads((tmp_path / "03_slow.summary.json").read_text())
    assert summary["ok"] is False and "interrupted" in summary["error"]
    assert (tmp_path / "03_slow.html").exists()
    assert [r["name"] for r in json.loads((tmp_path / "runs.json").read_text())] == ["01_ok", "03_slow"]
    assert not alive(kernel_pid(tmp_path))


def test_a_side_by_side_run_that_raises_stops_the_other_kernel(tmp_path, monkeypatch):
    """Not a failing cell (that is data, and the run goes on) but a bug: 01's HTML export raises
    while 03 sleeps. The error comes out and 03's kernel is killed, not left running."""
    real_export = runner.export_html

    def export_html(ipynb: Path) -> Path:
        if ipynb.stem == "01_ok":
            deadline = time.monotonic() + 240
            while not written(tmp_path / "03_slow.sleeping") and time.monotonic() < deadline:
                time.sleep(0.1)
            raise OSError("disk full")
        return real_export(ipynb)

    monkeypatch.setattr(runner, "export_html", export_html)
    try:
        with pytest.raises(OSError, match="disk full"):
            run_notebooks(["ok", "slow"], smoke=True, out=tmp_path, progress=False, jobs=2)
        assert not alive(kernel_pid(tmp_path))  # stopped, not left to sleep its 10 minutes
        summary = json.loads((tmp_path / "03_slow.summary.json").read_text())
        assert summary["error"] == "stopped: another notebook's run raised OSError"
    finally:
        if written(tmp_path / "03_slow.sleeping") and alive(kernel_pid(tmp_path)):
            os.kill(kernel_pid(tmp_path), signal.SIGKILL)


def test_the_terminal_shows_progress_and_our_lines_only_and_the_kernel_talks_over_ipc(tmp_path):
    """No "Kernel is running over TCP without encryption" from ipykernel: the kernel's sockets are
    Unix sockets (transport ipc), so no TCP port is opened at all."""
    env = {**os.environ, "SPECNB_NOTEBOOKS": str(FIXTURES)}
    proc = subprocess.run([sys.executable, "-m", "specnb", "run", "link", "--out", str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert "TCP" not in proc.stderr and "eavesdropping" not in proc.stderr, proc.stderr
    shown = [part for part in re.split(r"[\r\n]", proc.stderr) if part.strip()]
    assert shown and all(part.startswith("Executing:") for part in shown), proc.stderr  # papermill's bar
    assert json.loads((tmp_path / "04_link.results.json").read_text())["transport"] == "ipc"
    assert "04_link" in proc.stdout and proc.stdout.rstrip().endswith(f"report: {tmp_path / 'index.html'}")


def test_a_notebook_with_variants_runs_once_as_the_first_whose_engine_is_here(tmp_path, monkeypatch):
    """Notebook 08's shape: the demo runs it once, into the notebook's own files, as its first variant whose
    engine is installed (vLLM, else llama-server), and says in one line when it fell back."""
    folder = tmp_path / "nbs"
    folder.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("engine = 'a'\nsmoke = False\noutput_dir = '.'\nrun_name = '01_two'",
                                          metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell("from specnb.app.recorder import Recorder\n"
                                          "Recorder(output_dir, run_name).value('engine', engine)")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, folder / "01_two.ipynb")
    monkeypatch.setenv("SPECNB_NOTEBOOKS", str(folder))
    two = (runner.Variant(selects={"engine": "b"}), runner.Variant(selects={"engine": "a"}))
    monkeypatch.setattr(runner, "VARIANTS", {"01_two": two})
    absent = {"b": None}
    monkeypatch.setattr(runner, "engine_missing", lambda engine: absent.get(engine))
    runs = run_notebooks(None, {}, out=tmp_path / "here", progress=False)
    assert [(r.name, r.ok, r.parameters["engine"], r.note) for r in runs] == [("01_two", True, "b", "")]
    assert json.loads((tmp_path / "here" / "01_two.summary.json").read_text())["results"] == {"engine": "b"}
    assert not list((tmp_path / "here").glob("01_two-*"))  # one run, the notebook's own files
    absent["b"] = "b is not installed"
    [run] = run_notebooks(None, {}, out=tmp_path / "absent", progress=False)
    assert (run.parameters["engine"], run.note) == ("a", "01_two runs with engine = 'a', not engine = 'b': "
                                                          "b is not installed")
    assert json.loads((tmp_path / "absent" / "runs.json").read_text())[0]["note"] == run.note


def test_the_demo_runs_notebook_08_once_on_vllm_and_llama_server_is_one_parameter_away(monkeypatch):
    """The shipped variants: vLLM first, trimmed for the demo's budget; ``-p engine llama.cpp`` (or ``-p precision``,
    which only llama-server reads) is the llama-server run with its own trims; without vLLM the demo falls back to
    it, saying why; a smoke run, an endpoint or an engine no variant names runs the notebook's defaults."""
    path = Path("08_serving.ipynb")
    monkeypatch.setattr(runner, "engine_missing", lambda engine: None)
    params, note = runner.variant(path, {}, smoke=False)
    assert (params["engine"], params["concurrency"], note) == ("vllm", [1, 4], "")
    assert "concurrency = [1, 4]" in params["trimmed"]
    for asked in ({"engine": "llama.cpp"}, {"precision": "f32"}):
        params, note = runner.variant(path, asked, smoke=False)
        assert (params["engine"], params["concurrency"], note) == ("llama.cpp", [1, 2, 4], "")
    assert runner.variant(path, {"engine": "vllm", "concurrency": [1]}, smoke=False)[0]["concurrency"] == [1]
    monkeypatch.setattr(runner, "engine_missing", lambda engine: "vLLM left out: SPECNB_SKIP_VLLM=1"
                        if engine == "vllm" else None)
    params, note = runner.variant(path, {}, smoke=False)
    assert params["engine"] == "llama.cpp" and note == ("08_serving runs with engine = 'llama.cpp', not engine = "
                                                        "'vllm': vLLM left out: SPECNB_SKIP_VLLM=1")
    assert runner.variant(path, {"engine": "vllm"}, smoke=False)[0]["engine"] == "vllm"  # asked for: its own note
    for user, smoke in (({}, True), ({"endpoint": "http://127.0.0.1:1"}, False), ({"engine": "simulated"}, False)):
        assert runner.variant(path, user, smoke) == (user, "")


def test_a_variants_trims_are_defaults_the_user_overrides_and_the_notebook_is_told_them(monkeypatch):
    """The demo's run of notebook 08 asks fewer tokens (its budget) and says so through ``trimmed``; a user's own
    value wins, and then nothing is said trimmed."""
    trimmed = runner.Variant(selects={"engine": "b"}, trims={"max_new_tokens": 16}, not_with=("precision",))
    monkeypatch.setattr(runner, "VARIANTS", {"08_x": (trimmed, runner.Variant(selects={"engine": "a"}))})
    monkeypatch.setattr(runner, "engine_missing", lambda engine: None)
    path = Path("08_x.ipynb")
    assert runner.variant(path, {"seed": 1}, smoke=False) == (
        {"max_new_tokens": 16, "seed": 1, "engine": "b", "trimmed": "max_new_tokens = 16"}, "")
    assert runner.variant(path, {"max_new_tokens": 32}, smoke=False) == ({"max_new_tokens": 32, "engine": "b"}, "")
    assert runner.variant(path, {"precision": "f32"}, smoke=False) == ({"precision": "f32", "engine": "a"}, "")


def test_notebook_08_takes_the_parameters_its_variants_pass():
    """Every key a variant of a shipped notebook passes is one of that notebook's parameters."""
    from specnb.app.parameters import declared_defaults

    for stem, runs in runner.VARIANTS.items():
        known = set(declared_defaults(select_notebooks([stem], runner.REPO_ROOT / "notebooks")[0]))
        for run in runs:
            assert set(run.parameters({})) <= known, (stem, run)
