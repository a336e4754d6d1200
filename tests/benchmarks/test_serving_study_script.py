"""benchmarks/serving_study.py: two runs compared (the same policy, speedups agreeing within their CIs)
on hand-made tables, and its bad arguments as one line with exit 2 before anything runs."""

import subprocess
import sys

import pandas as pd

from specnb.core.paths import REPO_ROOT


def load_script():
    """benchmarks/serving_study.py as a module, without putting benchmarks/ on sys.path (its scripts' names would
    come first for every test after this one)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("serving_study", REPO_ROOT / "benchmarks" / "serving_study.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


serving_study = load_script()

SCRIPT = REPO_ROOT / "benchmarks" / "serving_study.py"


def summary(points: list[tuple[float, float, float]]) -> pd.DataFrame:
    rows = [{"config": "spec-off", "concurrency": c, "speedup_tpot": 1.0} for c in (1, 4)]
    rows += [{"config": "ngram k=4", "concurrency": c, "mean_batch": c * 0.9, "speedup_tpot": x,
              "speedup_tpot_lo": lo, "speedup_tpot_hi": hi} for c, (x, lo, hi) in zip((1, 4), points)]
    return pd.DataFrame(rows)


def test_two_runs_agree_where_their_cis_overlap_and_policies_compare_k_by_level():
    a = summary([(1.20, 1.10, 1.30), (0.90, 0.85, 0.95)])
    b = summary([(1.25, 1.12, 1.38), (1.05, 1.00, 1.10)])
    table = serving_study.agreement(a, b).set_index("concurrency")
    assert list(table["agree"]) == [True, False] and "spec-off" not in set(table["config"])
    policy = pd.DataFrame({"concurrency": [1, 4], "k": [4, 0]})
    assert serving_study.same_policy(policy, policy.copy())
    assert not serving_study.same_policy(policy, policy.assign(k=[4, 4]))
    assert not serving_study.same_policy(policy, policy.iloc[:1])


def test_bad_arguments_are_one_line_and_exit_2():
    for args, message in ((["--seeds", "3"], "--seeds takes two different whole numbers"),
                          (["--rounds", "2"], "--rounds must be >= 3")):
        done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120,
                              cwd=REPO_ROOT)
        assert done.returncode == 2 and message in done.stderr.strip().splitlines()[-1]


def test_each_seeds_crossover_is_said_with_its_ci_and_a_configuration_that_never_crosses_says_so():
    table = pd.DataFrame([{"config": "ngram k=4", "crossover": 11.3, "crossover_lo": 6.0, "crossover_hi": float("nan"),
                           "verdict": "stops paying", "min_level": 1.0, "max_level": 32.0, "ci_excludes_1_top": True},
                          {"config": "ngram k=12", "crossover": float("nan"), "crossover_lo": float("nan"),
                           "crossover_hi": float("nan"), "verdict": "pays at every level measured", "min_level": 1.0,
                           "max_level": 32.0, "ci_excludes_1_top": False}])
    lines = serving_study.crossover_lines(2, {"crossover": table})
    assert lines[0] == ("- seed 2, ngram k=4: stops paying by the point estimates, crosses 1 at 11.3 [CI 6–above the "
                        "top level]; at the top level, its CI excludes 1 there (levels 1–32)")
    assert lines[1] == ("- seed 2, ngram k=12: pays at every level measured by the point estimates, no crossing; at "
                        "the top level, no measurable difference there (CI holds 1) (levels 1–32)")
    assert serving_study.crossover_lines(1, {"crossover": pd.DataFrame()}) == []


def test_each_seeds_verdict_is_its_records_kind_and_how_sure():
    assert serving_study.verdict_of({"verdict_record": {"kind": "static", "sure": "decided"}}) == "static, decided"
    assert serving_study.verdict_of({"verdict_record": {"kind": "", "sure": ""}}) == "nothing to decide, ?"
    assert serving_study.verdict_of({}) == "?"  # a run from before the verdict record
