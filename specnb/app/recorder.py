"""What a notebook saves beside its executed copy: tidy tables (CSV) and headline numbers (JSON), so
every figure in the HTML can be recomputed from raw records.

Imported by every notebook's first cell, so it imports no Jupyter machinery (the runner that
executes notebooks, ``specnb.app.runner``, does).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from specnb.core.paths import REPO_ROOT


def default_output_dir() -> Path:
    """Where a notebook run by hand (in JupyterLab) writes its tables: ``$SPECNB_OUTPUTS``, or the
    repository's ``outputs/`` folder, never the notebooks' own folder. A ``specnb run`` passes its
    run folder instead."""
    return Path(os.environ.get("SPECNB_OUTPUTS") or REPO_ROOT / "outputs")


class Recorder:
    """Used inside a notebook: saves tidy tables and headline numbers next to the executed copy.

    ``rec = Recorder(output_dir, "03_gamma_sweep")``; ``rec.table("runs", df)`` writes
    ``03_gamma_sweep.runs.csv``; ``rec.value("best_gamma", 3)`` (or ``rec.record(report)`` for a
    ``specnb.app.text.cell_report.Report``'s values) adds to ``03_gamma_sweep.results.json``. Values are
    written at once, so an interrupted notebook keeps what it had measured. An empty
    ``output_dir`` means ``default_output_dir()``.
    """

    def __init__(self, output_dir: str | Path | None, notebook: str):
        self.dir = Path(output_dir) if output_dir else default_output_dir()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.notebook = notebook
        self.values: dict[str, Any] = {}

    def path(self, suffix: str) -> Path:
        """``<output dir>/<notebook>.<suffix>``: where a notebook's own files (a profile, say) go."""
        return self.dir / f"{self.notebook}.{suffix}"

    def table(self, name: str, frame) -> Path:
        """Write ``frame`` as ``<stem>.<name>.csv`` whole or not at all: a table rewritten as a run
        grows (notebook 08's requests) must survive a kernel killed mid-write (Ctrl-C) as it last was."""
        path = self.path(f"{name}.csv")
        partial = path.with_name(path.name + ".part")
        frame.to_csv(partial, index=False)
        partial.replace(path)
        return path

    def value(self, key: str, value: Any) -> Any:
        self.values[key] = value
        self.path("results.json").write_text(json.dumps(self.values, indent=1, default=_jsonable))
        return value

    def record(self, report):
        """Record a report's values (a dict works too); returns it, so a cell can end with it."""
        for key, value in (report if isinstance(report, dict) else report.values).items():
            self.value(key, value)
        return report


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)
