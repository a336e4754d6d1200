"""A run's front page: ``index.html`` in the run folder, one section per notebook.

A run leaves one executed notebook, one HTML page and several tables per notebook; a reader wants
the answers first. The page gives each notebook's question (the bold "Question: …" line of its
first Markdown cell), its verdict (the last Markdown a code cell displayed: the conclusion a
``specnb.app.text`` function wrote), its first chart and a relative link to its full HTML, with the
machine, versions and commit once at the top. A failed notebook is listed with its error line.

Everything is read from the executed ``.ipynb`` files and ``<name>.summary.json`` the runner wrote,
nothing is recomputed, and the page makes no network request: charts are the SVG or PNG outputs the
run already stored (``specnb.app.render`` draws them offline), embedded as data URIs, and the page
has no script at all, so it opens from a folder, an e-mail attachment or a CI artifact alike.
"""

from __future__ import annotations

import base64
import html
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

INDEX = "index.html"
_QUESTION = re.compile(r"\*\*Question:\s*(.+?)\*\*", re.S)
_CHART_TYPES = ("image/svg+xml", "image/png")  # what a papermill run stores: vl-convert SVG, matplotlib PNG


@dataclass(kw_only=True)
class Section:
    """What the front page says about one notebook run."""

    name: str
    ok: bool
    question: str
    verdict_markdown: str
    chart_uri: str | None
    html_link: str | None
    error: str | None = None
    seconds: float | None = None
    note: str = ""


def index_path(run_dir: Path) -> Path:
    """Where a run's front page lives: the run folder's ``index.html``."""
    return Path(run_dir) / INDEX


def read_cells(ipynb: Path) -> list[dict]:
    """The executed notebook's cells, or none where it was never written (a run that could not start)."""
    try:
        return json.loads(Path(ipynb).read_text(encoding="utf-8")).get("cells", [])
    except (OSError, ValueError):
        return []


def find_question(cells: list[dict]) -> str:
    """The bold "Question: …" line of the first Markdown cell, on one line: every notebook opens with it."""
    for cell in cells:
        if cell.get("cell_type") == "markdown":
            found = _QUESTION.search(_text(cell.get("source", "")))
            return " ".join(found.group(1).split()) if found else ""
    return ""


def find_verdict(cells: list[dict]) -> str:
    """The last Markdown a code cell displayed: each notebook ends on its conclusion (a ``Report``)."""
    shown = [_text(out["data"]["text/markdown"]) for cell in cells if cell.get("cell_type") == "code"
             for out in cell.get("outputs", []) if "text/markdown" in out.get("data", {})]
    return shown[-1] if shown else ""


def find_chart(cells: list[dict]) -> str | None:
    """The notebook's first chart as a data URI: the SVG or PNG the run stored, so the page needs no renderer."""
    for cell in cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            for mime in _CHART_TYPES:
                if mime in data:
                    return to_data_uri(mime, data[mime])
    return None


def to_data_uri(mime: str, payload: str | list[str]) -> str:
    """SVG arrives as text, PNG as base64 already (nbformat's encodings)."""
    text = _text(payload)
    if mime == "image/svg+xml":
        return f"data:{mime};base64,{base64.b64encode(text.encode('utf-8')).decode('ascii')}"
    encoded = "".join(text.split())
    return f"data:{mime};base64,{encoded}"


def _text(value: str | list[str]) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def build_section(run: dict[str, Any], run_dir: Path) -> Section:
    """One notebook run (a ``NotebookRun`` as a dict) read back from its files."""
    cells = read_cells(Path(run["ipynb"]))
    page = Path(run["html"]) if run.get("html") else None
    link = page.name if page is not None and (Path(run_dir) / page.name).exists() else None
    return Section(name=run["name"], ok=bool(run["ok"]), question=find_question(cells),
                   verdict_markdown=find_verdict(cells), chart_uri=find_chart(cells), html_link=link,
                   error=run.get("error"), seconds=run.get("seconds"), note=run.get("note") or "")


def read_environment(run_dir: Path, names: list[str]) -> dict[str, Any]:
    """The environment the first notebook's summary recorded (every summary of a run records the same machine)."""
    for name in names:
        try:
            return json.loads((Path(run_dir) / f"{name}.summary.json").read_text())["environment"]
        except (OSError, ValueError, KeyError):
            continue
    return {}


def render_markdown(text: str) -> str:
    """A verdict as HTML; raw HTML in it is escaped, so a verdict cannot add a script or a remote image."""
    import mistune

    return mistune.create_markdown(escape=True, plugins=["table"])(text)


def render_environment(env: dict[str, Any]) -> str:
    """Machine, versions and commit, once: what tells two runs' machines apart."""
    if not env:
        return "<p class='env'>environment not recorded</p>"
    machine = ", ".join(str(env[k]) for k in ("cpu", "gpu", "platform") if env.get(k))
    cores = f"{env.get('cpu_count')} cores, {env.get('torch_threads')} torch threads" if env.get("cpu_count") else ""
    packages = ", ".join(f"{k} {v}" for k, v in (env.get("packages") or {}).items() if v)
    rows = [("machine", machine), ("cores", cores), ("python", env.get("python")), ("packages", packages),
            ("commit", env.get("git_commit")), ("recorded (UTC)", env.get("time_utc"))]
    cells = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows if v)
    return f"<table class='env'>{cells}</table>"


def render_section(section: Section) -> str:
    """One notebook: question, status, verdict, chart, link to its full page."""
    status = "ok" if section.ok else f"failed: {section.error or 'no error recorded'}"
    status += f" ({section.seconds / 60:.1f} min)" if section.seconds is not None else ""
    parts = [f"<section id='{html.escape(section.name)}'>", f"<h2>{html.escape(section.name)}</h2>",
             f"<p class='question'>{html.escape(section.question or 'question not found')}</p>",
             f"<p class='status {'ok' if section.ok else 'failed'}'>{html.escape(status)}</p>"]
    if section.note:
        parts.append(f"<p class='note'>note: {html.escape(section.note)}</p>")
    if section.verdict_markdown:
        parts.append(f"<div class='verdict'>{render_markdown(section.verdict_markdown)}</div>")
    if section.chart_uri:
        parts.append(f"<img class='chart' alt='first chart of {html.escape(section.name)}' src='{section.chart_uri}'>")
    if section.html_link:
        parts.append(f"<p><a href='{html.escape(section.html_link)}'>the whole notebook</a></p>")
    parts.append("</section>")
    return "\n".join(parts)


_STYLE = """body{font-family:sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;line-height:1.45}
.env th{text-align:left;padding-right:1rem}.question{font-weight:bold}.failed{color:#b00}.ok{color:#060}
img.chart{max-width:100%;height:auto;border:1px solid #ddd}section{border-top:1px solid #ccc;margin-top:2rem}
table{border-collapse:collapse}td,th{padding:.1rem .5rem;vertical-align:top}"""


def render_index(sections: list[Section], env: dict[str, Any], title: str) -> str:
    """The whole page: no script and no remote resource, so it opens offline."""
    failed = [s.name for s in sections if not s.ok]
    minutes = sum(s.seconds or 0.0 for s in sections) / 60
    summary = f"{len(sections) - len(failed)} of {len(sections)} notebooks ran in {minutes:.1f} min" + (
        f"; failed: {', '.join(failed)}" if failed else "")
    body = "\n".join(render_section(s) for s in sections)
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body>\n<h1>{html.escape(title)}</h1>\n<p>{html.escape(summary)}</p>\n"
            f"{render_environment(env)}\n{body}\n</body></html>\n")


def write_index(run_dir: Path, runs: list[dict[str, Any]]) -> Path:
    """Write ``index.html`` for the runs (``NotebookRun``s as dicts) of one run folder; returns its path."""
    run_dir = Path(run_dir)
    sections = [build_section(run, run_dir) for run in runs]
    page = render_index(sections, read_environment(run_dir, [r["name"] for r in runs]), f"specnb run {run_dir.name}")
    path = index_path(run_dir)
    path.write_text(page, encoding="utf-8")
    return path
