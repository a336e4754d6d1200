"""benchmarks/gpu_check.py, the prepared GPU run: its ``--device cpu --tiny`` run writes the schema a GPU run
writes (stage sums, the dispatch table, γ and batch sweeps, lossless counts), and the script imports nothing
beyond torch, transformers, numpy, pandas, the standard library and specnb, so a GPU machine's own python3
runs it."""

import json
import subprocess
import sys

import pytest

from specnb.core.paths import REPO_ROOT

# Installed before anything else in a fresh interpreter: every import statement (and importlib.import_module
# call) made by specnb's modules or the script is recorded with its top-level name, cached or not, so what
# transformers itself pulls in (its tqdm, safetensors, huggingface_hub) is not charged to specnb.
HOOK = """
import builtins, importlib, json, sys
ALLOWED = {"torch", "transformers", "numpy", "pandas", "specnb"} | set(sys.stdlib_module_names)
found = set()
def mine(module):
    return module == "__main__" or module.startswith("specnb")
def note(who, name):
    if mine(who) and name.split(".")[0] not in ALLOWED:
        found.add(f"{who} imports {name}")
real_import, real_import_module = builtins.__import__, importlib.import_module
def hooked(name, globals=None, locals=None, fromlist=(), level=0):
    if level == 0:
        note((globals or {}).get("__name__", ""), name)
    return real_import(name, globals, locals, fromlist, level)
def hooked_module(name, package=None):
    if not name.startswith("."):
        note(sys._getframe(1).f_globals.get("__name__", ""), name)
    return real_import_module(name, package)
builtins.__import__, importlib.import_module = hooked, hooked_module
def report(path):
    with open(path, "w") as f:
        json.dump(sorted(found), f)
"""


def imports_beyond(tmp_path, code: str, *argv: str) -> list[str]:
    """Run ``code`` after ``HOOK`` in a fresh interpreter (``argv`` as its sys.argv[1:]); what it imported
    beyond the allowed set."""
    found = tmp_path / "found.json"
    script = HOOK + code + f"\nreport({str(found)!r})\n"
    done = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, cwd=REPO_ROOT,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(found.read_text())


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """``python benchmarks/gpu_check.py --device cpu --tiny --out DIR``, as the GPU user runs it without --tiny."""
    out = tmp_path_factory.mktemp("gpu_check")
    done = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--device", "cpu", "--tiny", "--out", str(out)],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=600)
    return done, out


def test_the_tiny_run_passes_and_names_its_versions_first(tiny_run):
    done, out = tiny_run
    assert done.returncode == 0, done.stderr[-3000:]
    first = done.stdout.splitlines()[0]
    assert first.startswith("torch ") and "transformers 5." in first and "device cpu" in first
    assert "lossless, float32: " in (out / "gpu_check.txt").read_text()


def test_stage_sums_and_checks_cover_every_configuration(tiny_run):
    result = json.loads((tiny_run[1] / "gpu_check.json").read_text())
    plan, sums = result["plan"], result["stage_sums"]
    assert {(s["step"], s["dtype"]) for s in sums} == {("gamma sweep", "float32"), ("batch sweep", "float32"),
                                                      ("lossless", "float32"), ("lossless", "bfloat16")}
    assert all(0 < s["stage_sum_ms"] and s["max_rel_error"] <= result["checks"]["stage_sum_tolerance"] for s in sums)
    assert {s["batch_size"] for s in sums if s["step"] == "batch sweep"} == set(plan["batch_sizes"])
    assert result["checks"]["complete"] and result["cut_by_budget"] == []


def test_the_dispatch_table_has_every_forward_and_both_cs(tiny_run):
    result = json.loads((tiny_run[1] / "gpu_check.json").read_text())
    plan, dispatch = result["plan"], result["dispatch"]
    for dtype in plan["dtypes"]:
        grid = dispatch[dtype]["grid"]
        assert len(grid) == len(plan["models"]) * len(plan["grid_tokens"]) * len(plan["grid_batches"])
        assert all(row["median_ms"] > 0 for row in grid)
        ratios = {r["draft"]: r for r in dispatch[dtype]["cost_ratios"]}
        assert set(ratios) == set(plan["models"]) - {dispatch["verifier"]}
        assert all(0 < r["flops_c"] < 1 and r["wall_clock_c"] > 0 for r in ratios.values())
        assert set(dispatch[dtype]["fit"]) >= {"t0_ms", "ms_per_gflop", "r2"}


def test_the_sweeps_have_speedups_with_cis_and_real_acceptance(tiny_run):
    result = json.loads((tiny_run[1] / "gpu_check.json").read_text())
    plan, loop = result["plan"], result["loop"]
    by_gamma = {r["gamma"]: r for r in loop["gamma_sweep"]}
    assert set(by_gamma) == {0, *plan["gammas"]} and by_gamma[0]["speedup"] == 1
    speculative = [r for r in loop["gamma_sweep"] + loop["batch_sweep"] if r["gamma"]]
    assert all(r["speedup_lo"] <= r["speedup"] <= r["speedup_hi"] and r["tau"] >= 1 for r in speculative)
    assert all(0 < r["alpha"] < 1 for r in speculative)  # the early exit agrees with the verifier, not always
    assert all(r["verify_ms_per_token"] > 0 and r["draft_ms_per_token"] > 0 for r in speculative)
    assert {(r["batch_size"], r["gamma"]) for r in loop["batch_sweep"]} == {
        (b, g) for b in plan["batch_sizes"] for g in (0, plan["batch_gamma"])}


def test_lossless_counts_every_run_and_each_difference_has_its_margin(tiny_run):
    result = json.loads((tiny_run[1] / "gpu_check.json").read_text())
    plan, lossless = result["plan"], result["lossless"]
    runs = (plan["lossless_prompts"] + 1) * len(plan["lossless_gammas"])
    assert {d: (got["runs"], got["passed"]) for d, got in lossless.items()} == {d: (runs, True) for d in plan["dtypes"]}
    assert lossless["float32"]["identical"] == runs and lossless["float32"]["differing"] == []
    for d in lossless["bfloat16"]["differing"]:
        assert d["near_tie"] and 0 <= d["margin"] <= d["bound"]


def test_the_script_imports_only_torch_transformers_numpy_pandas(tmp_path):
    """The whole tiny run, under the hook: module-level imports and the deferred ones its steps reach."""
    code = ("import runpy\ntry:\n    runpy.run_path('benchmarks/gpu_check.py', run_name='__main__')\n"
            "except SystemExit:\n    pass\n")
    assert imports_beyond(tmp_path, code, "--device", "cpu", "--tiny", "--out", str(tmp_path / "out")) == []


def test_the_import_hook_sees_a_package_beyond_the_four(tmp_path):
    """The runner (papermill's and Jupyter's side of specnb) is what the GPU script must not reach."""
    assert any(" imports jupyter" in line or " imports papermill" in line or " imports psutil" in line
               for line in imports_beyond(tmp_path, "import specnb.app.runner\n"))
