"""benchmarks/predictor.py's command line: help, a folder that is not a run, a folder with --held-out."""

import subprocess
import sys

from specnb.core.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "benchmarks" / "predictor.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120,
                          cwd=REPO_ROOT)


def test_help_answers_and_a_bad_folder_is_one_line_with_exit_2(tmp_path):
    shown = run("--help")
    assert shown.returncode == 0 and "--held-out" in shown.stdout and "run_dir" in shown.stdout
    missing = run(str(tmp_path))
    assert missing.returncode == 2 and missing.stderr.strip().count("\n") == 0
    assert "06_decision_framework.summary.json" in missing.stderr
    both = run(str(tmp_path), "--held-out")
    assert both.returncode == 2 and "reads no run folder" in both.stderr
