"""A trace's TPOT predicted from the closed-loop sweep and the trace's own batch occupancy, worked by
hand and checked where the truth is known: the simulated engine in virtual time."""

import numpy as np
import pandas as pd
import pytest
from helpers import sim_sweep, sim_trace

from specnb.core.errors import ParameterError
from specnb.measure.serving_rounds import occupancy
from specnb.measure.serving_stats import trace_check
from specnb.predict.noise_aware import noise_aware_policy
from specnb.predict.serving_policy import policy_ranges, scheduled_config
from specnb.predict.trace_prediction import (
    predict_trace,
    predicted_tpot,
    tpot_at,
    tpot_curve,
    trace_median_error,
    trace_prediction_table,
)
from specnb.serve.simulated.sim_engine import SimCost
from specnb.serve.speculation import SPEC_OFF, Speculation

# n-gram k = 4 pays most at a batch of 1–4, k = 2 from there to ~29, spec-off above (simulated.crossover)
COST = SimCost(fixed_ms=10.0, per_token_ms=0.5, prefill_per_token_ms=0.0, acceptance=(0.7,))
K2 = Speculation(entry="ngram", k=2, method="ngram", family="ngram")
K4 = Speculation(entry="ngram", k=4, method="ngram", family="ngram")


def test_the_trace_tpot_is_token_weighted_over_the_batches_held():
    held = occupancy([[0.0, 0], [1.0, 2], [3.0, 1], [4.0, 0]])
    # 4 sequence-s at batch 2 with 10 ms a token: 400 tokens; 1 sequence-s at 1 with 5 ms: 200; 5 s ÷ 600
    figures = predicted_tpot(held, lambda b: ({2.0: 10.0, 1.0: 5.0}[b], False))
    assert figures["predicted_tpot_ms"] == pytest.approx(5000 / 600)
    assert figures["trace_mean_batch"] == pytest.approx(5 / 3) and figures["clamped_share"] == 0.0


def test_tpot_is_linear_in_log_batch_and_clamped_beyond_the_measured_ends():
    summary = pd.DataFrame({"config": "spec-off", "concurrency": [1, 4, 16], "mean_tpot_ms": [10.0, 12.0, 20.0],
                            "mean_batch": [1.0, 4.0, 16.0]})
    curve = tpot_curve(summary, "spec-off")
    assert tpot_at(curve, 2.0) == (pytest.approx(11.0), False)  # halfway in log between 1 and 4
    assert tpot_at(curve, 64.0) == (pytest.approx(20.0), True)  # never extrapolated, but flagged
    # without mean_batch the level is the batch
    assert tpot_at(tpot_curve(summary.drop(columns="mean_batch"), "spec-off"), 8.0)[0] == pytest.approx(16.0)
    with pytest.raises(ParameterError, match="no summary rows for 'ngram k=2'"):
        tpot_curve(summary, "ngram k=2")


@pytest.fixture(scope="module")
def traced():
    records, summary = sim_sweep(COST, [SPEC_OFF, K2, K4], [1, 2, 4, 8, 16, 32, 64])
    policy = noise_aware_policy(records, summary)
    adaptive = Speculation(entry="ngram", k=4, method="ngram", family="ngram", adaptive=True,
                           schedule=tuple(tuple(r) for r in policy_ranges(policy)))
    rng = np.random.default_rng(7)
    bursts = [start + rng.uniform(0.0, 0.1, 40) for start in (0.0, 4.0, 8.0)]  # 40 at once, three times
    arrivals = sorted(np.concatenate([*bursts, rng.uniform(0.0, 12.0, 40)]))  # and a trickle between
    trace_records, runs = sim_trace(COST, [SPEC_OFF, K2, K4, adaptive], list(arrivals),
                                    list(rng.integers(24, 73, len(arrivals))))
    return summary, policy, trace_records, runs


def test_the_predicted_trace_speedup_matches_the_simulated_engines_within_10_percent(traced):
    summary, policy, trace_records, runs = traced
    predicted = predict_trace(summary, runs, policy)
    assert set(predicted["config"]) == {"spec-off", "ngram k=2", "ngram k=4", "adaptive"}
    assert not predicted["clamped"].any()  # the trace stays within the measured batches
    check = trace_check(trace_records, n_boot=50)
    table = trace_prediction_table(predicted, check)
    assert set(table["config"]) == {"ngram k=2", "ngram k=4", "adaptive"}
    adaptive = table.set_index("config").loc["adaptive", "measured_speedup_tpot"]
    assert adaptive == check.set_index("config").loc["spec-off", "adaptive_speedup_tpot"]  # adaptive over spec-off
    assert (table["error"] < 0.10).all(), table
    assert trace_median_error(table) == pytest.approx(table["error"].median())


def test_adaptive_reads_each_batch_off_the_configuration_its_schedule_runs_there(traced):
    summary, policy, _, runs = traced
    ranges = policy_ranges(policy)
    for lo, hi, k in ranges:
        assert {int(summary.set_index("config").loc[scheduled_config(policy, b), "k"].iloc[0])
                for b in (lo, min(hi, 200))} == {k}
    assert predict_trace(summary, runs).query("config == 'adaptive'").empty  # no policy: nothing to read


def test_a_trace_beyond_the_measured_batches_is_clamped_and_flagged(traced):
    summary, policy, _, runs = traced
    low = summary[summary["concurrency"] <= 8]
    predicted = predict_trace(low, runs[runs["config"] != "adaptive"]).set_index("config")
    assert predicted["clamped"].all() and (predicted["clamped_share"] > 0.3).all()
    with pytest.raises(ParameterError, match="no 'spec-off' run"):
        predict_trace(summary, runs[runs["config"] != "spec-off"], policy)
