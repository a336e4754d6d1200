"""Every script in benchmarks/ runs the way a user starts it — ``python benchmarks/X.py ...`` from the
repository root, so benchmarks/ is first on ``sys.path`` — at its smallest real settings, printing and writing
nothing to the README (``--no-write``, a handful of tokens). A module in benchmarks/ that shadows an installed
package, or a moved specnb name, fails here instead of at the next benchmark run.

Where each script runs: ``RUN_HERE`` (below); ``gpu_check.py`` in ``test_gpu_check.py``; the three that copy
a notebook run's figures (``predictor.py RUN_DIR``, ``alternatives.py``, ``serving.py``) after that notebook's
smoke run in ``tests/notebooks/test_notebooks.py``; the vLLM ones and the serving study are not run
(``NOT_RUN`` says why), and ``test_every_script_is_accounted_for`` keeps the lists whole.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specnb.core.paths import REPO_ROOT
from specnb.native import llama_build, llama_cpp

BENCHMARKS = REPO_ROOT / "benchmarks"
TOKENS = ["--max-new-tokens", "3"]
RUN_HERE = {
    "engine.py": ["--device", "cpu", "--no-write", "--prompts", "1", "--repeats", "1", *TOKENS],
    "drafts.py": ["--no-write", "--drafts", "smollm2-draft-xs", "--gammas", "1", "--prompts", "1", *TOKENS],
    "heads.py": ["--no-write", "--prompts", "1", "--kernels", "default", *TOKENS],
    "confidence.py": ["--prompts", "1", "--repeats", "1", *TOKENS],
    "kernel_paths.py": ["--no-write", "--repeats", "1"],
    "kernel_paths.py --forward": ["--no-write", "--forward", "--repeats", "1"],
    "predictor.py --held-out": ["--no-write", "--held-out", "--calibration", "1", "--prompts", "1", "--repeats", "1",
                                "--drafts", "smollm2-draft-xs", *TOKENS],
    "llama_build.py": ["--build", str(llama_build.lib_dir().parent), "--precision", "f32", "--prompts", "1",
                       "--tokens", "3", "--repeats", "1", "--threads", "1"],
    "verdict_stability.py": ["--sweeps", "1", "--states", "0", "--truth", "benchmarks/truths/near_tie.json"],
}
ELSEWHERE = {
    "gpu_check.py": "tests/benchmarks/test_gpu_check.py",
    "predictor.py": "tests/notebooks/test_notebooks.py (after notebook 06's smoke run)",
    "alternatives.py": "tests/notebooks/test_notebooks.py (after notebook 07's smoke run)",
    "serving.py": "tests/notebooks/test_notebooks.py (after notebook 08's smoke run)",
}
NOT_RUN = {
    "serving_study.py": "two whole `specnb run 08` runs (minutes each); its comparison and argument checks are "
                        "tested in test_serving_study_script.py",
    "vllm_client.py": "needs vLLM servers and `vllm bench serve`; the suite starts no vLLM it could point at",
    "vllm_k0.py": "starts five vLLM servers of its own (20-60 s each)",
    "vllm_start.py": "starts a vLLM server per launch setting (20-60 s each)",
    "vllm_trace.py": "starts four vLLM servers of its own (20-60 s each)",
}


def run(script: str, args: list[str]) -> subprocess.CompletedProcess:
    """``python benchmarks/<script> args`` from the repository root, one thread (two workers share the cores)."""
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, f"benchmarks/{script}", *args], capture_output=True, text=True,
                          cwd=REPO_ROOT, env=env, timeout=600)


def needs(script: str) -> str | None:
    """Why a script cannot run on this machine (None: it can)."""
    if script == "llama_build.py":
        return llama_cpp.missing_note() or (None if llama_build.lib_dir().is_dir() else "no llama.cpp build")
    return None


@pytest.mark.slow
@pytest.mark.parametrize("name", RUN_HERE)
def test_the_script_runs_from_the_repository_root(name):
    script = name.split()[0]
    if needs(script):
        pytest.skip(needs(script))
    done = run(script, RUN_HERE[name])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "|" in done.stdout, done.stdout[-2000:]  # every one of them prints its table


def test_every_script_is_accounted_for():
    scripts = {p.name for p in BENCHMARKS.glob("*.py")}
    here = {name.split()[0] for name in RUN_HERE}
    assert scripts == here | set(ELSEWHERE) | set(NOT_RUN) and not (here | set(ELSEWHERE)) & set(NOT_RUN)


def test_no_script_shadows_an_installed_package():
    """benchmarks/ is the first entry of ``sys.path`` when a script runs: a stem an installed package uses
    (``kernels``, which transformers imports) hides that package from every import after it."""
    from importlib.machinery import PathFinder

    elsewhere = [p for p in sys.path if Path(p or ".").resolve() != BENCHMARKS]
    shadowing = [path.name for path in BENCHMARKS.glob("*.py")
                 if path.stem in sys.stdlib_module_names or PathFinder.find_spec(path.stem, elsewhere)]
    assert shadowing == []
