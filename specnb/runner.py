"""Execute the numbered notebooks with papermill and share them as offline HTML.

One runner for every notebook (as pymc-examples does): ``run_notebooks`` executes each notebook
in ``notebooks/`` into ``outputs/<run-id>/``, renders a standalone HTML file that makes no
network request (no require.js, MathJax, mermaid or widget-manager scripts from a CDN; charts are
inline SVG), and writes ``<stem>.summary.json`` with the parameters, the environment and whatever
the notebook recorded. Notebooks run one after another, never in parallel: most of them time
model forwards, and two at once on a small machine would measure each other.

Inside a notebook, ``Recorder`` saves tidy tables (CSV) and headline numbers next to it, so every
figure in the HTML can be recomputed from raw records.

papermill only *warns* about unknown parameters; here they are an error, because a typo such as
``-p gama 8`` would otherwise silently run the defaults.
"""

from __future__ import annotations

import ast
import json
import os
import platform
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specnb.errors import ParameterError, SpecnbError

REPO_ROOT = Path(__file__).resolve().parent.parent
_OFFLINE_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{% block jupyter_widgets %}{% endblock jupyter_widgets %}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{% block data_svg scoped -%}
<div class="jp-RenderedSVG jp-OutputArea-output {{ extra_class }}" data-mime-type="image/svg+xml">
{{ output.data['image/svg+xml'] }}
</div>
{%- endblock data_svg %}
"""


class NotebookFailed(SpecnbError, RuntimeError):
    """One or more notebooks raised; the partial outputs are kept next to the others."""


@dataclass
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
            raise ParameterError(f"notebook {name!r} matches {len(matches)} notebooks; known: {known}")
        chosen.append(matches[0])
    return chosen


def _matches(stem: str, key: str) -> bool:
    number, _, title = stem.partition("_")
    return key in (stem, title) or (key.isdigit() and int(key) == int(number))


def parse_value(text: str) -> Any:
    """``-p KEY VALUE`` values: Python literals (``4``, ``0.5``, ``[1, 2]``, ``True``) or plain strings."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def declared_parameters(path: Path) -> dict[str, dict]:
    """The names papermill finds in the notebook's ``parameters`` cell."""
    import papermill

    return papermill.inspect_notebook(str(path))


def check_parameters(paths: list[Path], parameters: dict[str, Any]) -> None:
    """Refuse names that no selected notebook declares (papermill would only warn).

    With several notebooks a parameter needs only one of them to declare it (``-p gamma_max 6``
    applies to the notebooks that sweep gamma); with one notebook it must be declared there.
    """
    declared = {name for path in paths for name in declared_parameters(path)}
    unknown = sorted(set(parameters) - declared)
    if unknown:
        where = paths[0].stem if len(paths) == 1 else "the selected notebooks"
        raise ParameterError(
            f"unknown parameter(s) {', '.join(unknown)} for {where}; declared: {', '.join(sorted(declared))}"
        )


def parameters_for(path: Path, user: dict[str, Any], smoke: bool, output_dir: Path) -> dict[str, Any]:
    """User parameters plus what the runner sets: ``smoke``, ``output_dir``, ``interactive``."""
    declared = declared_parameters(path)
    runner_set = {"smoke": smoke, "output_dir": str(output_dir), "interactive": False}
    params = {k: v for k, v in runner_set.items() if k in declared}
    params.update({k: v for k, v in user.items() if k in declared})
    return params


def new_run_dir(out: Path | None) -> Path:
    """``outputs/<run-id>/`` (a timestamp) unless ``--out`` names a folder."""
    if out is None:
        out = REPO_ROOT / "outputs" / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    return out.resolve()  # notebooks run with the run folder as cwd: a relative --out would nest


def run_notebooks(
    names: list[str] | None = None,
    parameters: dict[str, Any] | None = None,
    smoke: bool = False,
    out: Path | None = None,
    progress: bool = True,
) -> list[NotebookRun]:
    """Execute notebooks in order; raise ``NotebookFailed`` after all ran if any failed."""
    parameters = parameters or {}
    paths = select_notebooks(names)
    check_parameters(paths, parameters)  # fail fast on typos, before minutes of execution
    run_dir = new_run_dir(out)
    runs = [run_one(path, parameters, smoke, run_dir, progress) for path in paths]
    (run_dir / "runs.json").write_text(json.dumps([asdict(r) for r in runs], indent=1, default=str))
    failed = [r for r in runs if not r.ok]
    if failed:
        lines = "; ".join(f"{r.name}: {r.error}" for r in failed)
        raise NotebookFailed(f"{len(failed)} of {len(runs)} notebook(s) failed (partial outputs kept in {run_dir}): {lines}")
    return runs


def run_one(path: Path, user: dict[str, Any], smoke: bool, run_dir: Path, progress: bool) -> NotebookRun:
    """Execute one notebook; on a failing cell keep the partial notebook and render it anyway."""
    import papermill

    params = parameters_for(path, user, smoke, run_dir)
    ipynb = run_dir / path.name
    started = time.perf_counter()
    error = None
    try:
        papermill.execute_notebook(
            str(path), str(ipynb), parameters=params, progress_bar=progress, cwd=str(run_dir), kernel_name="python3"
        )
    except papermill.PapermillExecutionError as err:
        first_line = (err.source or "").strip().splitlines()[:1]
        error = f"cell {err.exec_count} ({first_line[0] if first_line else 'empty'!r}): {err.ename}: {err.evalue}"
    seconds = time.perf_counter() - started
    html = export_html(ipynb) if ipynb.exists() else None
    files = sorted(p.name for p in run_dir.glob(f"{path.stem}.*"))
    run = NotebookRun(path.stem, str(ipynb), html and str(html), error is None, seconds, params, error, files)
    write_summary(run_dir, run)
    return run


def export_html(ipynb: Path) -> Path:
    """Standalone HTML with no network requests: CDN script blocks removed, images embedded.

    Charts (our own vl-convert SVG) go in as ``<svg>`` elements rather than base64 ``<img>``: their
    labels stay searchable and selectable, and the page reads them without decoding. A text
    progress bar is stored as one stream output per redraw ("\\r..."); they are merged so the page
    shows its last state only, as a terminal would.
    """
    import nbformat
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import CoalesceStreamsPreprocessor

    exporter = HTMLExporter(
        extra_loaders=[DictLoader({"specnb_offline.html.j2": _OFFLINE_TEMPLATE})],
        template_file="specnb_offline.html.j2",
        embed_images=True,
    )
    exporter.register_preprocessor(CoalesceStreamsPreprocessor(), enabled=True)
    body, _ = exporter.from_notebook_node(nbformat.read(ipynb, as_version=4))
    html = ipynb.with_suffix(".html")
    html.write_text(body, encoding="utf-8")
    return html


def describe_environment() -> dict[str, Any]:
    """Versions, device names and the git commit: enough to tell two runs' machines apart."""
    import importlib.metadata as md

    versions = {}
    for pkg in ("specnb", "torch", "transformers", "numpy", "pandas", "altair", "papermill"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "gpu": gpu_name(),
        "packages": versions,
        "git_commit": git_commit(),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_name() -> str | None:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return "Apple MPS"
    return None


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


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


class Recorder:
    """Used inside a notebook: saves tidy tables and headline numbers next to the executed copy.

    ``rec = Recorder(output_dir, "03_gamma_sweep")``; ``rec.table("runs", df)`` writes
    ``03_gamma_sweep.runs.csv``; ``rec.value("best_gamma", 3)`` adds to ``03_gamma_sweep.results.json``.
    Values are written at once, so an interrupted notebook keeps what it had measured.
    """

    def __init__(self, output_dir: str | Path, notebook: str):
        self.dir = Path(output_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.notebook = notebook
        self.values: dict[str, Any] = {}

    def table(self, name: str, frame) -> Path:
        path = self.dir / f"{self.notebook}.{name}.csv"
        frame.to_csv(path, index=False)
        return path

    def value(self, key: str, value: Any) -> Any:
        self.values[key] = value
        path = self.dir / f"{self.notebook}.results.json"
        path.write_text(json.dumps(self.values, indent=1, default=_jsonable))
        return value


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


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
