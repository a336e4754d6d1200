"""The serving verdict (``serving_verdict``): every candidate priced from a summary, the tie rule, how
sure, the launch line and the ranges — worked by hand on small summaries."""

import math

import pandas as pd
import pytest

from specnb.core.errors import ParameterError
from specnb.predict.serving_verdict import (
    Noise,
    Policy,
    PolicyLevel,
    choose,
    decide,
    policy_ranges,
    policy_switch,
    price,
    with_trace,
)

LEVELS = [1, 4]


def summary(speedups: dict, var: float = 0.0004, sigma: float = 0.03, critical: float = 2.5, pairs: int = 10,
            batches=(1.0, 3.9)) -> pd.DataFrame:
    """spec-off and one row per (configuration ``ngram k=K`` or ``eagle3 k=K``, level), each with the
    summary's columns the verdict reads; the CI is the band the verdict judges with."""
    rows = [{"config": "spec-off", "k": 0, "family": "none", "uses_model": False, "concurrency": lv,
             "speedup_tpot": 1.0, "mean_batch": b, "request_throughput": 1.0} for lv, b in zip(LEVELS, batches)]
    for name, values in speedups.items():
        family, k = name.split(" k=")
        for lv, x, b in zip(LEVELS, values, batches):
            half = critical * math.sqrt(var + sigma ** 2)
            rows.append({"config": name, "k": int(k), "family": family, "uses_model": family == "eagle3",
                         "concurrency": lv, "speedup_tpot": x, "speedup_tpot_lo": x * math.exp(-half),
                         "speedup_tpot_hi": x * math.exp(half), "tpot_log_var": var, "launch_sigma": sigma,
                         "launch_pairs": pairs, "critical": critical, "mean_batch": b})
    return pd.DataFrame(rows)


def test_pays_at_low_load_and_loses_at_high_load_is_a_schedule():
    verdict = decide(summary({"ngram k=4": [1.40, 0.80], "ngram k=2": [1.15, 0.85]}), engine="simulated")
    assert verdict.kind == "schedule" and verdict.sure == "decided"
    assert verdict.chosen.configs == ("ngram k=4", "spec-off")  # k=4 beats k=2 at 1 beyond the noise
    assert [lv.k for lv in verdict.policy.levels] == [4, 0]
    assert set(verdict.beaten) == {"spec-off", "ngram k=4", "ngram k=2"}  # each beaten at its worst level
    assert verdict.beaten["spec-off"] == ("ngram schedule", 0) and verdict.beaten["ngram k=4"][1] == 1


def test_a_larger_k_replaces_a_smaller_one_only_beyond_the_noise():
    far = decide(summary({"ngram k=4": [1.60, 0.80], "ngram k=2": [1.20, 0.85]}, sigma=0.01, var=0.0001),
                 engine="simulated")
    assert far.chosen.configs == ("ngram k=4", "spec-off")
    near = decide(summary({"ngram k=4": [1.26, 0.80], "ngram k=2": [1.25, 0.85]}), engine="simulated")
    assert near.chosen.configs == ("ngram k=2", "spec-off")


def test_a_near_tie_goes_to_spec_off_and_names_what_it_is_tied_with():
    verdict = decide(summary({"ngram k=4": [1.01, 0.99], "ngram k=2": [1.005, 0.995]}), engine="simulated")
    assert verdict.kind == "none" and verdict.line == ""
    assert {t.name for t in verdict.tied} == {"ngram k=4", "ngram k=2"}
    assert verdict.tied_text().endswith("are within the noise")
    assert verdict.sure == "decided"  # nothing ahead by more than the 1% tie
    ahead = decide(summary({"ngram k=4": [1.04, 1.03]}), engine="simulated")
    assert ahead.kind == "none" and ahead.sure == "tie"  # 4% ahead, within a band of c·σ ≈ 9%, and never 15% ahead
    assert ahead.tied_text() == "ngram k=4 is within the noise"


def test_a_tie_the_noise_leaves_wide_open_is_inconclusive():
    one_pair = decide(summary({"ngram k=4": [1.15, 1.12]}, critical=12.7, pairs=1), engine="simulated")
    assert one_pair.kind == "none" and one_pair.sure == "inconclusive"
    assert one_pair.tied[0].name == "ngram k=4" and one_pair.noise.critical_known < 3  # known, it would pay
    ten = decide(summary({"ngram k=4": [1.04, 1.03]}, pairs=10), engine="simulated")
    assert ten.sure == "tie"  # a tie whatever the estimate's uncertainty: the engine's own


def test_a_static_configuration_that_pays_everywhere_is_launched_as_itself():
    verdict = decide(summary({"ngram k=4": [1.40, 1.20], "ngram k=2": [1.20, 1.15]}), engine="simulated")
    assert verdict.kind == "static" and verdict.chosen.name == "ngram k=4"
    assert verdict.launch.ranges == ((1, 4096, 4),)


def test_losing_everywhere_is_no_speculation_beyond_the_noise():
    verdict = decide(summary({"ngram k=4": [0.85, 0.75], "ngram k=2": [0.90, 0.85]}), engine="simulated")
    assert verdict.kind == "none" and verdict.sure == "decided" and not verdict.tied


def test_without_launch_noise_the_band_is_sampling_alone_and_the_text_says_so():
    verdict = decide(summary({"ngram k=4": [1.40, 0.80]}, sigma=0.0, pairs=0), engine="simulated",
                     noise_text="launch-to-launch noise not measured")
    assert verdict.noise.sigma == 0.0 and "not measured" in verdict.noise_text


def test_the_noise_free_rule_calls_differences_under_the_tie_ties():
    truth = summary({"ngram k=4": [1.015, 1.0], "ngram k=2": [1.005, 0.99]}, var=0.0, sigma=0.0, critical=0.0)
    candidates = price(truth, "simulated", tie=0.02)
    choice = choose(candidates, Noise(critical=0.0, sigma=0.0), tie=0.02)
    assert choice.chosen.name == "spec-off"


def test_a_k0_range_on_vllm_is_priced_at_its_measured_cost():
    verdict = decide(summary({"ngram k=4": [1.40, 0.80], "ngram k=2": [1.25, 0.85]}), engine="vllm")
    assert verdict.kind == "schedule"
    assert verdict.chosen.log_speedup[1] == pytest.approx(math.log(0.95))  # not spec-off's 1.00
    assert verdict.policy.zero_speedup == pytest.approx(0.95)


def test_a_schedule_needs_a_batch_one_anchor():
    with pytest.raises(ParameterError, match="batch-1 anchor"):
        decide(summary({"ngram k=4": [1.40, 0.80], "ngram k=2": [1.25, 0.85]}, batches=(2.0, 3.9)),
               engine="simulated")


def test_ranges_cut_where_the_choices_cross_and_the_switch_is_there():
    policy = Policy(levels=(PolicyLevel(concurrency=1, batch=1.0, config="ngram k=4", k=4, cut=math.nan),
                            PolicyLevel(concurrency=8, batch=8.0, config="spec-off", k=0, cut=3.2)))
    assert policy_ranges(policy) == [[1, 3, 4], [4, 4096, 0]]
    assert policy_switch(policy) == pytest.approx(3.2)


def test_the_trace_checks_the_launch_and_never_changes_its_line():
    verdict = decide(summary({"ngram k=4": [1.40, 1.20]}), engine="simulated")
    trace = pd.DataFrame([{"config": "spec-off", "k": 0, "speedup_tpot": 1.0, "speedup_tpot_lo": 1.0,
                           "speedup_tpot_hi": 1.0, "best": "ngram k=4", "speedup_over_best": 0.8,
                           "speedup_over_best_lo": 0.7, "speedup_over_best_hi": 0.9},
                          {"config": "ngram k=4", "k": 4, "speedup_tpot": 1.25, "speedup_tpot_lo": 1.1,
                           "speedup_tpot_hi": 1.4, "best": "ngram k=4", "speedup_over_best": 1.0,
                           "speedup_over_best_lo": 1.0, "speedup_over_best_hi": 1.0}])
    checked = with_trace(verdict, trace)
    assert checked.line == verdict.line and "1.25x" in checked.trace and "nothing ran faster" in checked.trace
