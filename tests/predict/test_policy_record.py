"""The policy record: what it is keyed on comes from its producer, and its table is the one the
recorder, CSVs and charts have always had."""

import math

import pandas as pd
import pytest
from helpers import sim_sweep

from specnb.predict.noise_aware import noise_aware_policy
from specnb.predict.policy_record import Policy, PolicyLevel, policy_of
from specnb.predict.serving_decision import decide
from specnb.predict.serving_policy import serving_policy
from specnb.serve.engines import SPEC_OFF, Speculation
from specnb.serve.simulated import SimCost

COST = SimCost(fixed_ms=10.0, per_token_ms=0.5, prefill_per_token_ms=0.0, acceptance=(0.7,))
NGRAM = {k: Speculation(entry="ngram", k=k, method="ngram", family="ngram") for k in (2, 4)}


@pytest.fixture(scope="module")
def swept():
    """Three rounds of spec-off, k = 2 and k = 4 on the simulated engine, with paired speedups."""
    records, summary = sim_sweep(COST, [SPEC_OFF, NGRAM[2], NGRAM[4]], [1, 4, 16])
    off = summary[summary["config"] == "spec-off"].set_index("concurrency")["mean_tpot_ms"]
    speedup = summary["concurrency"].map(off) / summary["mean_tpot_ms"]
    return records, summary.assign(speedup_tpot=speedup, speedup_tpot_lo=speedup * 0.97,
                                   speedup_tpot_hi=speedup * 1.03)


def summary_only() -> pd.DataFrame:
    return pd.DataFrame({"config": ["ngram k=4", "ngram k=2"] * 2, "concurrency": [1, 1, 4, 4],
                         "speedup_tpot": [1.5, 1.3, 0.9, 1.2], "speedup_tpot_lo": [1.3, 1.1, 0.8, 1.05]})


def test_each_producer_says_what_its_ranges_are_keyed_on(swept):
    records, summary = swept
    assert serving_policy(summary_only(), {"ngram k=4": 4, "ngram k=2": 2}).keyed_on == "concurrency"
    assert noise_aware_policy(records, summary).keyed_on == "batch"
    assert serving_policy(summary, records=records).keyed_on == "batch"  # enough rounds: the noise-aware rule
    decision = decide(summary, records)
    assert decision.policy.keyed_on == "batch" and decision.launched.keyed_on == "batch"
    with pytest.raises(ValueError, match="keyed on"):
        Policy(levels=(), keyed_on="rate", columns=())


def test_the_summary_only_table_is_the_one_it_always_was():
    policy = serving_policy(summary_only(), {"ngram k=4": 4, "ngram k=2": 2})
    cut = math.exp(math.log(4) * 0.2 / 0.5)  # k = 4 leads by 0.2 at 1, trails by 0.3 at 4
    expected = pd.DataFrame({"concurrency": [1, 4], "config": ["ngram k=4", "ngram k=2"], "k": [4, 2],
                             "speedup_tpot": [1.5, 1.2], "cut": [math.nan, cut]})
    pd.testing.assert_frame_equal(policy.frame(), expected)
    assert policy.levels[1] == PolicyLevel(concurrency=4, config="ngram k=2", k=2, speedup_tpot=1.2, cut=cut)


def test_a_table_read_back_round_trips_column_for_column(swept):
    records, summary = swept
    table = serving_policy(summary, records=records).frame()
    assert list(table.columns) == ["concurrency", "batch", "config", "k", "median_speedup", "spread", "rounds",
                                   "noisy", "tie_with", "speedup_tpot", "cut"]
    again = policy_of(table, "batch").frame()
    pd.testing.assert_frame_equal(again, table)
    assert again.to_csv(index=False) == table.to_csv(index=False)
    with pytest.raises(ValueError, match="not \\['mean_tpot_ms'\\]"):
        policy_of(table.assign(mean_tpot_ms=1.0), "batch")


def test_nothing_to_decide_writes_the_summarys_header_and_no_rows(swept):
    _, summary = swept
    decision = decide(summary.drop(columns="speedup_tpot"))
    assert decision.kind == "" and not decision.policy.levels
    assert decision.policy.frame().to_csv(index=False) == summary.drop(columns="speedup_tpot").iloc[:0].to_csv(
        index=False)
