"""Execute the numbered notebooks with papermill and share them as offline HTML.

One runner for every notebook (as pymc-examples does): ``run_notebooks`` executes each notebook
in ``notebooks/`` into ``outputs/<run-id>/``, renders a standalone HTML file that makes no
network request (no require.js, MathJax, mermaid or widget-manager scripts from a CDN; charts are
inline SVG), and writes ``<stem>.summary.json`` with the parameters, the environment and whatever
the notebook recorded; at the end, also after failures and Ctrl-C, the run's front page ``index.html``
(``specnb.app.report``: each notebook's question, verdict, first chart and link) and ``timings.csv`` (each
notebook's minutes, what the demo's budget is checked against). Notebooks run one
after another: most of them time model forwards, and two at once on a small machine would measure
each other. Only a smoke run, which checks that every
cell runs rather than what it times, runs two at once (``--jobs``).

Inside a notebook, ``specnb.app.recorder.Recorder`` saves tidy tables (CSV) and headline numbers
next to it, so every figure in the HTML can be recomputed from raw records.

Parameters are checked before anything runs (``specnb.app.parameters``): papermill only *warns*
about unknown names and injects any value, so a typo such as ``-p gama 8`` would silently run the
defaults and ``-p gammas notalist`` would fail minutes later in a cell.
"""

from __future__ import annotations

import json
import os
import platform
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specnb.app.execution import Stopping, execute, export_html, stop_kernels
from specnb.app.parameters import check_parameters, check_values, parameters_for
from specnb.app.report import write_index
from specnb.core.devices import describe_machine
from specnb.core.errors import ParameterError, SpecnbError
from specnb.core.paths import REPO_ROOT, git_commit
from specnb.serve.engines import engine_named


class NotebookFailed(SpecnbError, RuntimeError):
    """One or more notebooks raised; the partial outputs are kept next to the others."""


class RunInterrupted(SpecnbError, RuntimeError):
    """Ctrl-C during a run: finished notebooks and the interrupted one's partial notebook and HTML
    are kept. The command line exits with 130, as a shell does for SIGINT."""

    exit_code = 130

    def __init__(self, run: NotebookRun, runs: list[NotebookRun] | None = None):
        super().__init__(f"interrupted during {run.name}; finished notebooks and the partial {run.name} "
                         f"(.ipynb and .html) are in {Path(run.ipynb).parent}")
        self.run, self.runs = run, runs


@dataclass(kw_only=True)
class NotebookRun:
    """What happened to one notebook in a run (tidy: one record per notebook)."""

    name: str
    ipynb: str
    html: str | None
    ok: bool
    seconds: float
    parameters: dict[str, Any]
    error: str | None = None
    files: list[str] = field(default_factory=list)
    note: str = ""  # why it ran otherwise than the demo's first choice (``variant``), one line


def notebooks_dir() -> Path:
    """``$SPECNB_NOTEBOOKS`` or the repository's ``notebooks/`` folder."""
    return Path(os.environ.get("SPECNB_NOTEBOOKS") or REPO_ROOT / "notebooks")


def list_notebooks(folder: Path | None = None) -> list[Path]:
    """Numbered notebooks (``01_...ipynb``) in reading order."""
    folder = folder or notebooks_dir()
    return sorted(p for p in folder.glob("[0-9][0-9]_*.ipynb"))


def select_notebooks(names: list[str] | None, folder: Path | None = None) -> list[Path]:
    """Match names by number (``3``, ``03``), stem (``03_gamma_sweep``) or suffix (``gamma_sweep``)."""
    available = list_notebooks(folder)
    if not available:
        raise ParameterError(f"no numbered notebooks found in {folder or notebooks_dir()}")
    if not names:
        return available
    chosen = []
    for name in names:
        key = Path(name).stem
        matches = [p for p in available if _matches(p.stem, key)]
        if len(matches) != 1:
            known = ", ".join(p.stem for p in available)
            if not matches:
                raise ParameterError(f"no notebook {name!r}; known: {known} (by number, stem or title)")
            raise ParameterError(f"notebook {name!r} matches {len(matches)} notebooks; known: {known}")
        chosen.append(matches[0])
    return chosen


def _matches(stem: str, key: str) -> bool:
    number, _, title = stem.partition("_")
    return key in (stem, title) or (key.isdigit() and int(key) == int(number))


def new_run_dir(out: Path | None) -> Path:
    """``outputs/<run-id>/`` (a timestamp) unless ``--out`` names a folder."""
    if out is None:
        out = REPO_ROOT / "outputs" / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    return out.resolve()  # notebooks run with the run folder as cwd: a relative --out would nest


# A notebook that reads another's outputs from the run folder, by default: with ``--jobs`` it starts
# only once that one has finished. 07 prices the predictor's pick from 06's hardware profile.
READS_FROM = {"07_alternatives": ("06_decision_framework",)}

# How the demo runs a notebook whose defaults do not fit its budget (notebook 08): once, as the first of its
# variants whose engine is here — vLLM, the engine the reference measured; llama-server where setup left vLLM out
# (or SPECNB_SKIP_VLLM=1), said in one line — with that variant's trims. `-p engine` picks a variant (its trims too);
# a smoke run, `-p endpoint` or an engine no variant names runs the notebook's own defaults.
@dataclass(frozen=True, kw_only=True)
class Variant:
    """One way the demo runs a notebook: ``selects`` is what makes it this variant (the user setting one of these
    keys picks the variant that agrees), ``trims`` are defaults of its own that a user's parameters override (the
    demo's budget), each said in the notebook through ``trimmed``; ``not_with``: a key only another variant reads
    (the user setting it leaves this one out)."""

    selects: dict[str, Any] = field(default_factory=dict)
    trims: dict[str, Any] = field(default_factory=dict)
    not_with: tuple[str, ...] = ()

    def parameters(self, user: dict[str, Any]) -> dict[str, Any]:
        trims = {k: v for k, v in self.trims.items() if k not in user}
        said = ", ".join(f"{k} = {v!r}" for k, v in trims.items())
        return {**trims, **user, **self.selects, **({"trimmed": said} if trims else {})}

    def agrees(self, user: dict[str, Any]) -> bool:
        """Whether the user's parameters leave this variant in: every key it selects by that the user set has its
        value, and the user set no key of ``not_with``."""
        return all(user[k] == v for k, v in self.selects.items() if k in user) and not any(
            k in user for k in self.not_with)

    def describe(self) -> str:
        return ", ".join(f"{k} = {v!r}" for k, v in self.selects.items()) or "its defaults"


def engine_missing(engine: str) -> str | None:
    """None where ``engine`` can start here, else one line saying why not (the engine's own ``missing``)."""
    return engine_named(engine).missing()


def missing(variant: Variant) -> str | None:
    """Why ``variant`` cannot run on this machine (its engine is absent), or None."""
    return engine_missing(variant.selects["engine"]) if "engine" in variant.selects else None


# The demo's budget (20 min on 2 cores). Notebook 08 measures each level as 3 rounds of every prompt in whole cycles
# to turnovers·c requests at least, with c filler requests around each run: on vLLM (70-130 ms a step here, a
# minute or more to start each server) the demo trims it to 8 prompts at levels 1 and 4 with 2 turnovers, at
# 16 tokens a request; on llama-server to levels 1-4 at 16 tokens. Every trim is printed in the notebook; `-p`
# overrides it. `-p precision` (the GGUF's) asks about llama-server alone.
VARIANTS = {"08_serving": (
    Variant(selects={"engine": "vllm"}, not_with=("precision",),
            trims={"max_new_tokens": 16, "n_prompts": 8, "concurrency": [1, 4], "turnovers": 2}),
    Variant(selects={"engine": "llama.cpp"}, trims={"concurrency": [1, 2, 4], "max_new_tokens": 16}))}


def variant(path: Path, user: dict[str, Any], smoke: bool) -> tuple[dict[str, Any], str]:
    """The parameters notebook ``path`` runs with (the user's with its variant's own), and one line where it runs
    as another variant than the first because that one's engine is absent here ("" otherwise)."""
    runs = [run for run in VARIANTS.get(path.stem, ()) if run.agrees(user)]
    if smoke or "endpoint" in user or not runs:
        return dict(user), ""
    for run in runs[:-1]:
        if missing(run) is None:
            return run.parameters(user), ""
    first, chosen = runs[0], runs[-1]
    if chosen is first:  # asked for by the user: the notebook says itself when its engine is absent
        return chosen.parameters(user), ""
    why = missing(first)
    return chosen.parameters(user), f"{path.stem} runs with {chosen.describe()}, not {first.describe()}: {why}"


def run_notebooks(
    names: list[str] | None = None,
    parameters: dict[str, Any] | None = None,
    smoke: bool = False,
    out: Path | None = None,
    progress: bool = True,
    jobs: int | None = None,
) -> list[NotebookRun]:
    """Execute notebooks in order; raise ``NotebookFailed`` after all ran if any failed.

    ``jobs``: notebooks run at once. Timed runs take 1: two notebooks side by side would time each
    other. A smoke run, which checks that every cell runs and not what it times, defaults to two on
    a machine with two or more cores (``run_side_by_side``)."""
    parameters = parameters or {}
    paths = select_notebooks(names)
    parameters = check_parameters(paths, parameters)  # fail fast on typos and types, before minutes of execution
    check_values(paths, parameters)  # and on a missing folder or file, an unknown engine: before any run folder
    jobs = check_jobs(jobs, smoke)
    run_dir = new_run_dir(out)
    runs = []
    try:
        if min(jobs, len(paths)) > 1:
            runs = run_side_by_side(paths, parameters, run_dir, jobs, progress)
        else:
            for path in paths:
                own, note = variant(path, parameters, smoke)
                if note and progress:
                    print("note:", note, flush=True)
                runs.append(run_one(path, own, RunSetting(smoke=smoke, run_dir=run_dir, progress=progress), note))
    except RunInterrupted as stop:
        runs = stop.runs or [*runs, stop.run]
        raise
    finally:
        (run_dir / "runs.json").write_text(json.dumps([asdict(r) for r in runs], indent=1, default=str))
        write_timings(run_dir, runs)
        index = write_index(run_dir, [asdict(r) for r in runs])
    failed = [r for r in runs if not r.ok]
    if failed:
        lines = "; ".join(f"{r.name}: {r.error}" for r in failed)
        raise NotebookFailed(f"{len(failed)} of {len(runs)} notebook(s) failed (partial outputs kept in {run_dir}, "
                             f"report {index}): {lines}")
    return runs


def write_timings(run_dir: Path, runs: list[NotebookRun]) -> Path:
    """``timings.csv``: one row per notebook run (name, engine where it has one, ok, seconds, minutes) and a
    ``total`` row: what a budget is checked against (benchmarks/README.md quotes it per machine kind)."""
    import csv

    path = run_dir / "timings.csv"
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["notebook", "engine", "ok", "seconds", "minutes"])
        for r in runs:
            out.writerow([r.name, r.parameters.get("engine", ""), r.ok, round(r.seconds, 1), round(r.seconds / 60, 2)])
        total = sum(r.seconds for r in runs)
        out.writerow(["total", "", all(r.ok for r in runs), round(total, 1), round(total / 60, 2)])
    return path


def check_jobs(jobs: int | None, smoke: bool) -> int:
    """Notebooks at once: ``jobs``, or by default 1 (2 for a smoke run on two or more cores)."""
    if jobs is None:
        return min(2, os.cpu_count() or 1) if smoke else 1
    if jobs < 1:
        raise ParameterError(f"--jobs must be at least 1, got {jobs}")
    if jobs > 1 and not smoke:
        raise ParameterError(f"--jobs {jobs} runs notebooks side by side, so each would time the other; "
                             "only a --smoke run may (it checks that cells run, not what they time)")
    return jobs


def run_side_by_side(paths: list[Path], user: dict, run_dir: Path, jobs: int, progress: bool) -> list[NotebookRun]:
    """A smoke run, ``jobs`` notebooks at a time, each kernel on an equal share of the cores (two
    kernels each using every core ran 4-8x slower than one alone). A notebook that others read
    from (``READS_FROM``) starts first, and its readers wait for it and then go next, so the chain
    of the two overlaps the rest. Returns the runs in the order asked;
    on Ctrl-C every running kernel is killed and ``RunInterrupted`` carries all the runs. A run that
    raises (a bug, not a failing cell, which is data) stops the others' kernels too and is raised."""
    from tqdm.auto import tqdm

    waited_on = {name for needs in READS_FROM.values() for name in needs}
    queue = sorted(paths, key=lambda p: (p.stem not in waited_on, p.stem not in READS_FROM))  # stable otherwise
    chosen = {p.stem for p in paths}
    done: dict[str, NotebookRun] = {}
    failures: list[BaseException] = []
    running: dict[str, threading.Thread] = {}

    stopping = Stopping()
    setting = RunSetting(smoke=True, run_dir=run_dir, progress=False, stopping=stopping)

    def work(path: Path) -> None:
        try:
            done[path.stem] = run_one(path, user, setting)
        except BaseException as err:  # noqa: BLE001  (re-raised on the main thread)
            failures.append(err)

    def ready(path: Path) -> bool:
        return all(name in done or name not in chosen for name in READS_FROM.get(path.stem, ()))

    bar = tqdm(total=len(paths), desc=f"notebooks ({jobs} at a time)", unit="nb", disable=not progress)
    threads = str(max(1, (os.cpu_count() or 1) // jobs))
    previous = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = threads  # kernels inherit it and torch reads it at import
    try:
        while queue or running:
            for path in [p for p in queue if ready(p)][: jobs - len(running)]:
                queue.remove(path)
                running[path.stem] = threading.Thread(target=work, args=(path,), name=f"run {path.stem}", daemon=True)
                running[path.stem].start()
            for name in [n for n, t in running.items() if not t.is_alive()]:
                del running[name]
                bar.update(1)
                bar.set_postfix_str(f"{name}: {'ok' if name in done and done[name].ok else 'failed'}")
            if failures:
                raise failures[0]
            time.sleep(0.2)
    except KeyboardInterrupt:
        stop_kernels(running.values(), stopping)
        cut = [done[name] for name in running if name in done and not done[name].ok]
        runs = [done[p.stem] for p in paths if p.stem in done]
        if not runs:
            raise
        raise RunInterrupted(cut[0] if cut else runs[-1], runs) from None
    except BaseException as err:
        stop_kernels(running.values(), stopping, f"stopped: another notebook's run raised {type(err).__name__}")
        raise
    finally:
        bar.close()
        if previous is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = previous
    return [done[p.stem] for p in paths]


@dataclass(frozen=True, kw_only=True)
class RunSetting:
    """How each notebook of a run executes: smoke or timed, into which run folder, with progress
    shown or not, and (off the main thread) the ``Stopping`` that tells it its kernel was killed."""

    smoke: bool
    run_dir: Path
    progress: bool
    stopping: Stopping | None = None


def run_one(path: Path, user: dict[str, Any], setting: RunSetting, note: str = "") -> NotebookRun:
    """Execute one notebook into files named by its stem; on a failing
    cell, or on Ctrl-C, keep the partial notebook and render it anyway (an interruption is raised
    again as ``RunInterrupted`` once that is saved). Run off the main thread, ``setting.stopping`` is how
    it learns that the main thread caught Ctrl-C (or another run raised) and killed its kernel; the run
    then comes back marked with the reason and the main thread raises."""
    name, run_dir, stopping = path.stem, setting.run_dir, setting.stopping
    params = parameters_for(path, user, setting.smoke, run_dir, name)
    ipynb = run_dir / f"{name}.ipynb"
    started = time.perf_counter()
    error, interrupted = execute(path, ipynb, params, run_dir, setting.progress, stopping)
    seconds = time.perf_counter() - started
    html = export_html(ipynb) if ipynb.exists() else None
    files = sorted(p.name for p in run_dir.glob(f"{name}.*"))
    run = NotebookRun(name=name, ipynb=str(ipynb), html=html and str(html), ok=error is None, seconds=seconds,
                      parameters=params, error=error, files=files, note=note)
    write_summary(run_dir, run)
    if interrupted and stopping is None:
        raise RunInterrupted(run)
    return run


def describe_environment() -> dict[str, Any]:
    """The machine (``core.devices.describe_machine``), package versions and the git commit: enough
    to tell two runs' machines apart."""
    import importlib.metadata as md

    versions = {}
    for pkg in ("specnb", "torch", "transformers", "numpy", "pandas", "altair", "papermill"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    return {"python": platform.python_version(), **describe_machine(), "packages": versions,
            "git_commit": git_commit(), "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def write_summary(run_dir: Path, run: NotebookRun) -> Path:
    """``<stem>.summary.json``: parameters, environment, status and what the notebook recorded."""
    recorded_path = run_dir / f"{run.name}.results.json"
    recorded = json.loads(recorded_path.read_text()) if recorded_path.exists() else {}
    summary = {"notebook": run.name, "ok": run.ok, "error": run.error, "seconds": round(run.seconds, 2),
               "parameters": run.parameters, "environment": describe_environment(), "results": recorded,
               "files": run.files}
    path = run_dir / f"{run.name}.summary.json"
    path.write_text(json.dumps(summary, indent=1, default=str))
    return path


def write_marked_section(path: Path, name: str, markdown: str) -> None:
    """Replace the text between ``<!-- name:start -->`` and ``<!-- name:end -->`` in ``path`` (or
    append the block): each benchmark script owns one section of benchmarks/README.md."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = f"{start}\n{markdown}\n{end}"
    if start in text and end in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)
