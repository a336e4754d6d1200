"""recorder: what a notebook saves beside its executed copy, importable without Jupyter machinery."""

import json
import subprocess
import sys

import pandas as pd

from specnb.app.recorder import Recorder


def test_tables_and_values_are_written_at_once(tmp_path):
    rec = Recorder(tmp_path, "09_x")
    assert rec.table("runs", pd.DataFrame({"a": [1, 2]})) == tmp_path / "09_x.runs.csv"
    assert rec.value("best_gamma", 3) == 3
    rec.record({"speedup": 1.5})
    assert json.loads((tmp_path / "09_x.results.json").read_text()) == {"best_gamma": 3, "speedup": 1.5}


def test_a_notebook_kernel_imports_no_jupyter_machinery():
    code = ("import sys, specnb.app.recorder\n"
            "print(sorted(m for m in sys.modules if m.startswith(('jupyter', 'papermill'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
