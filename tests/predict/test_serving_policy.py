"""The serving policy: per level the configuration to run, and the one launch a server that runs one
method is given for it, every k = 0 range priced (worked by hand on small summaries)."""

import math

import numpy as np
import pandas as pd
import pytest
from helpers import sim_sweep

from specnb.core.errors import ParameterError
from specnb.measure.serving_stats import draft_lengths
from specnb.predict.noise_aware import noise_aware_policy
from specnb.predict.policy_record import policy_of
from specnb.predict.serving_launch import (
    adaptive_expected,
    choose_launch,
    launch_policy,
    no_launch_why,
    zero_range_speedup,
)
from specnb.predict.serving_policy import as_launch, batch_ranges, policy_ranges, policy_switch, serving_policy
from specnb.serve.simulated.sim_engine import SimCost, crossover, expected_speedup
from specnb.serve.speculation import SPEC_OFF, Speculation


def one_method_each(eagle3: list[float], ngram=(1.12, 1.08, 1.05, 0.95)) -> pd.DataFrame:
    """spec-off (steps of 10, 10.5, 11, 20 ms at 1, 2, 4, 16 in a batch), eagle3 k=3 with the given TPOT
    speedups and n-gram k=4 (by default close behind it at 1–2 and paying to 4); each lower bound 0.08
    under its point."""
    levels, step = [1, 2, 4, 16], [10.0, 10.5, 11.0, 20.0]
    rows = [{"config": "spec-off", "k": 0, "family": "none", "uses_model": False, "concurrency": b,
             "mean_tpot_ms": t, "speedup_tpot": 1.0, "speedup_tpot_lo": 1.0,
             "tokens_predicted": 100.0, "spec_decode_draft_tokens": 0.0, "spec_decode_accepted_tokens": 0.0}
            for b, t in zip(levels, step)]
    # eagle3: 100 tokens in 60 steps, 3 drafted each (d = 3, τ' = 5/3); n-gram d = 4
    for config, k, family, speedups, drafted in (("eagle3 k=3", 3, "eagle3", eagle3, 180.0),
                                                 ("ngram k=4", 4, "ngram", list(ngram), 240.0)):
        rows += [{"config": config, "k": k, "family": family, "uses_model": family == "eagle3", "concurrency": b,
                  "mean_tpot_ms": t / x, "speedup_tpot": x,
                  "speedup_tpot_lo": x - 0.08, "tokens_predicted": 100.0, "spec_decode_draft_tokens": drafted,
                  "spec_decode_accepted_tokens": 40.0} for b, t, x in zip(levels, step, speedups)]
    return pd.DataFrame(rows)


def test_one_vllm_launch_is_chosen_by_its_worst_level_with_every_k0_range_priced():
    summary = one_method_each([1.17, 1.10, 0.90, 0.60])
    assert draft_lengths(summary) == {"eagle3 k=3": 3, "ngram k=4": 4}  # as the records carry them
    overall = serving_policy(summary)
    assert overall.keyed_on == "concurrency"  # one figure per level: ranges on the client's load
    assert list(overall.frame()["config"]) == ["eagle3 k=3", "eagle3 k=3", "ngram k=4", "spec-off"]  # chosen most
    # a k = 0 range pays the method's own step cost δ: eagle3's 3.25 ms at 1 (8.55 ms × 5/3 − t(4) = 11), scaled
    # like the step, so 1 / (1 + 0.3245) at every level; n-gram's 3.13 ms (8.93 × 5/3 − t(5) = 11.75)
    zero = zero_range_speedup(summary, "eagle3 k=3", [1, 4, 16])
    assert zero[4] == pytest.approx(11 / (11 + (10 / 1.17 * 5 / 3 - 11) * 1.1), rel=1e-6)
    ngram_zero = zero_range_speedup(summary, "ngram k=4", [16])[16]
    assert ngram_zero == pytest.approx(1 / (1 + (10 / 1.12 * 5 / 3 - 11.75) / 10))
    # eagle3's launch drafts at 4 too (0.90 beats its k = 0 range's 0.755), not at 16 (0.60 does not)
    eagle3 = launch_policy(summary, {"eagle3 k=3": 3})
    assert list(eagle3.frame()["k"]) == [3, 3, 3, 0]
    expected = adaptive_expected(summary, eagle3, "eagle3 k=3")
    assert list(expected["speedup_tpot"]) == pytest.approx([1.17, 1.10, 0.90, zero[16]])
    # n-gram's launch drafts at 16 as well (0.95 against 0.76 at k = 0): worst level 0.95 of the best static,
    # eagle3's 0.755, vLLM without speculation's 1 / 1.17
    choice = choose_launch(summary, overall)
    assert (choice.kind, choice.config) == ("static", "ngram k=4")  # one range: the static configuration itself
    assert choice.launch.family == "ngram" and list(choice.policy.frame()["k"]) == [4, 4, 4, 4]
    assert choice.launch.ranges == ((1, 4096, 4),) and choice.launch.draft == "" and choice.why_not == ""
    # where the head pays at every level its schedule has no k = 0, and it is the one launch
    choice = choose_launch(one_method_each([1.17, 1.10, 1.08, 1.10]), overall)
    assert choice.launch.family == "eagle3" and list(choice.policy.frame()["k"]) == [3, 3, 3, 3]
    assert choice.launch.draft == "<the eagle3 model's folder>"  # an endpoint's: only its operator knows it
    named = choose_launch(one_method_each([1.17, 1.10, 1.08, 1.10]), overall, {"eagle3 k=3": "/heads/e3"})
    assert named.launch.draft == "/heads/e3"
    # n-gram paying at 1 only, 0.80 elsewhere: drafting everywhere (0.80) or k = 0 ranges (0.69) both lose
    # more at 2–16 than 1.10 gains at 1, so the policy is vLLM without speculation, and says why
    lone = one_method_each([0.5] * 4, ngram=(1.10, 0.80, 0.80, 0.80))
    lone = lone[lone["config"] != "eagle3 k=3"]
    alone = serving_policy(lone)
    choice = choose_launch(lone, alone)
    assert choice.launch.family == "ngram" and list(choice.policy.frame()["k"]) == [0, 0, 0, 0]
    assert set(choice.policy.frame()["config"]) == {"spec-off"} and not choice.launch.drafts
    assert "k = 0 ranges elsewhere cost more" in choice.why_not and choice.kind == "none"
    assert "did not pay at any level" in no_launch_why(policy_of(alone.frame().assign(k=0), "concurrency"), "ngram")


def test_policy_ranges_and_pasteable_forms():
    summary = pd.DataFrame({
        "config": ["ngram-simple k=4", "ngram-simple k=2"] * 3, "concurrency": [1, 1, 4, 4, 16, 16],
        "speedup_tpot": [1.5, 1.3, 1.1, 1.2, 0.9, 0.95], "speedup_tpot_lo": [1.3, 1.1, 0.95, 1.05, 0.8, 0.85]})
    policy = serving_policy(summary, {"ngram-simple k=4": 4, "ngram-simple k=2": 2})
    assert list(policy.frame()["k"]) == [4, 2, 0] and list(policy.frame()["config"])[2] == "spec-off"
    # k changes where the speedups cross, linear in log concurrency: 4 → 2 at 4^(0.2 / 0.3) = 2.5 (k = 4 leads by
    # 0.2 at 1, trails by 0.1 at 4), 2 → 0 at 4·4^(0.2 / 0.25) = 12.1 (k = 2 at 1.2, then 0.95 against spec-off's 1)
    assert policy.frame()["cut"].tolist()[1:] == pytest.approx([4 ** (2 / 3), 4 * 4 ** 0.8])
    assert policy_ranges(policy) == [[1, 2, 4], [3, 12, 2], [13, 4096, 0]]
    launch = as_launch(policy, "ngram", "")
    assert launch.ranges == ((1, 2, 4), (3, 12, 2), (13, 4096, 0))
    assert launch.by_k == {4: "ngram-simple k=4", 2: "ngram-simple k=2", 0: "spec-off"}


def test_a_policy_that_never_speculates_is_no_speculative_config():
    summary = pd.DataFrame({"config": ["ngram k=4"] * 2, "concurrency": [1, 8], "speedup_tpot": [0.95, 0.88],
                            "speedup_tpot_lo": [0.89, 0.8]})
    policy = serving_policy(summary, {"ngram k=4": 4})
    assert list(policy.frame()["k"]) == [0, 0]
    assert not as_launch(policy, "ngram", "").drafts
    paying = serving_policy(summary.assign(speedup_tpot=[1.2, 0.88], speedup_tpot_lo=[1.1, 0.8]), {"ngram k=4": 4})
    assert as_launch(paying, "ngram", "draft").ranges == ((1, 3, 4), (4, 4096, 0))  # 1.2 → 0.88: crosses 1 at 3.7


def test_the_policy_switches_off_between_its_last_drafting_level_and_the_next():
    table = pd.DataFrame({"concurrency": [1, 4, 16, 64], "k": [4, 2, 0, 0]})
    assert policy_switch(policy_of(table, "concurrency")) == pytest.approx(8.0)
    assert math.isnan(policy_switch(policy_of(table.assign(k=0), "concurrency")))
    assert math.isnan(policy_switch(policy_of(table.assign(k=3), "concurrency")))


def test_a_policy_that_drafts_everywhere_switches_where_its_k_first_falls():
    table = pd.DataFrame({"concurrency": [1, 4, 16, 64], "k": [4, 4, 1, 2]})
    assert policy_switch(policy_of(table, "concurrency")) == pytest.approx(8.0)
    assert policy_switch(policy_of(table.assign(k=[2, 4, 4, 1]), "concurrency")) == pytest.approx(32.0)


def test_the_policy_runs_the_best_point_estimate_unless_its_interval_admits_a_loss_over_5_percent():
    summary = pd.DataFrame({"config": ["ngram k=4"] * 3, "concurrency": [1, 8, 16],
                            "speedup_tpot": [1.08, 1.08, 0.99], "speedup_tpot_lo": [0.97, 0.93, 0.97]})
    policy = serving_policy(summary, {"ngram k=4": 4})
    assert list(policy.frame()["k"]) == [4, 0, 0]  # 1.08 [0.97–]: runs; 1.08 [0.93–]: may lose 7%; 0.99: never pays


# ------------------------------------------------------------ the noise-aware policy, where the truth is known

# n-gram k = 4 pays most at a batch of 1–4, k = 2 from there to its crossover (30), spec-off above
COST = SimCost(fixed_ms=10.0, per_token_ms=0.5, prefill_per_token_ms=0.0, acceptance=(0.7,))
NGRAM = {k: Speculation(entry="ngram", k=k, method="ngram", family="ngram") for k in (1, 2, 4)}
LEVELS = [1, 2, 4, 8, 16, 32, 64]


@pytest.fixture(scope="module")
def swept():
    """Three rounds (each its own acceptance draws and output lengths) of spec-off, k = 2 and k = 4."""
    return sim_sweep(COST, [SPEC_OFF, NGRAM[2], NGRAM[4]], LEVELS)


def truth_k(batch: float) -> int:
    """The k that is fastest at a steady decode batch, by the cost model (spec-off counting as 1)."""
    speedups = {0: 1.0, **{k: expected_speedup(COST, NGRAM[k], batch) for k in (2, 4)}}
    return max(speedups, key=speedups.get)


def test_the_noise_aware_policy_switches_where_the_truth_does_within_one_level(swept):
    records, summary = swept
    record = noise_aware_policy(records, summary)
    assert record.keyed_on == "batch"  # over rounds: ranges on the engine's batch
    policy = record.frame()
    assert list(policy.columns[:8]) == ["concurrency", "batch", "config", "k", "median_speedup", "spread", "rounds",
                                        "noisy"] and "tie_with" in policy
    batches = policy["batch"].to_numpy()
    for i, k in enumerate(policy["k"]):
        near = {truth_k(b) for b in batches[max(0, i - 1):i + 2]}  # the level and its neighbours
        assert k in near, (policy["concurrency"][i], k, near)
    assert list(policy["k"])[0] == 4 and list(policy["k"])[-1] == 0
    assert not policy["noisy"].any() and (policy["spread"] <= 0.1).all()
    # it stops speculating between the last level below k = 2's crossover and the first above it, give or take one
    stop = crossover(COST, NGRAM[2], 64)
    switch = policy_switch(record)
    around = np.searchsorted(batches, stop)
    assert batches[max(0, around - 2)] <= switch <= batches[min(len(batches) - 1, around + 1)]
    given = serving_policy(summary, records=records)  # given 3 rounds, this one
    assert given.keyed_on == "batch" and given.frame().drop(columns="cut").equals(policy)
    assert (policy["rounds"] == 3).all()
    checked = pd.concat([records, records[records["config"] == "ngram k=4"].assign(config="adaptive")])
    assert noise_aware_policy(checked, summary).frame().equals(policy)  # a launch measured beside them: no candidate


def test_a_policy_from_fewer_than_three_rounds_is_refused_and_serving_policy_falls_back(swept):
    records, summary = swept
    two = records[records["round"] < 2]
    with pytest.raises(ParameterError, match="at least 3 rounds.*hold 2"):
        noise_aware_policy(two, summary)
    fallback = serving_policy(summary.assign(speedup_tpot=1.2, speedup_tpot_lo=1.1), records=two)
    assert "spread" not in fallback.frame() and set(fallback.frame()["k"]) == {4}
    assert fallback.keyed_on == "concurrency"  # today's rule: the best point estimate


def test_a_tie_goes_to_the_cheaper_configuration():
    # each step costs the same whatever it verifies, and only the first draft is ever accepted: k = 1 and
    # k = 2 run the same steps, and a draft model at k = 1 too (its forward is free here)
    cost = SimCost(fixed_ms=10.0, per_token_ms=0.0, acceptance=(0.9, 0.0))
    model = Speculation(entry="draft", k=1, method="draft_model", family="draft_model", uses_model=True)
    records, summary = sim_sweep(cost, [SPEC_OFF, NGRAM[2], model, NGRAM[1]], [1, 4], tokens=24)
    policy = noise_aware_policy(records, summary)
    assert list(policy.frame()["config"]) == ["ngram k=1", "ngram k=1"] and list(policy.frame()["k"]) == [1, 1]
    assert list(policy.frame()["tie_with"]) == ["draft k=1, ngram k=2"] * 2  # the free one at k = 1, then k = 2


def test_a_noisy_level_keeps_the_cheaper_choice_and_is_flagged(swept):
    records, summary = swept
    jitter = {0: 1.0, 1: 1.25, 2: 0.8}  # k = 4's decode time at concurrency 1, per round: rel. MAD 0.2
    hit = (records["config"] == "ngram k=4") & (records["concurrency"] == 1)
    factor = records["round"].map(jitter).where(hit, 1.0)
    noisy = records.assign(latency=records["ttft"] + (records["latency"] - records["ttft"]) * factor)
    policy = noise_aware_policy(noisy, summary).frame().set_index("concurrency")
    assert policy.loc[1, "config"] == "ngram k=2" and policy.loc[1, "noisy"]  # k = 4 measured best, but too noisy
    assert not policy.drop(index=1)["noisy"].any()


def test_ranges_are_keyed_on_the_engines_batch_not_the_clients_concurrency(swept):
    records, summary = swept
    halved = summary.assign(mean_batch=summary["concurrency"] / 2)  # the engine ran half the requests in flight
    policy = noise_aware_policy(records, halved)
    assert list(policy.frame()["batch"]) == [c / 2 for c in LEVELS]
    assert list(policy.frame()["k"]) == [4, 4, 2, 2, 2, 0, 0]
    # k changes at the geometric mean of adjacent measured batches: 4 → 2 between 1 and 2, 2 → 0 between 8 and 16
    assert policy_ranges(policy) == [[1, 1, 4], [2, math.ceil(math.sqrt(8 * 16)) - 1, 2], [12, 4096, 0]]
    ranges = batch_ranges(policy)
    assert ranges.max_measured == 32 and ranges.measured == [c / 2 for c in LEVELS]
    assert ranges.interpolated == [[3, 3], [5, 7], [9, 15], [17, 31]]
    assert "not measured above a batch of 32" in ranges.text() and "9–15" in ranges.text()
    assert policy_switch(policy) == pytest.approx(math.sqrt(8 * 16))  # on the batch too
    # the same sweep keyed on concurrency would switch off at 23, not 12
    assert policy_ranges(noise_aware_policy(records, summary.drop(columns="mean_batch")))[-1][0] == 23


def test_a_policy_without_a_batch_1_anchor_is_refused(swept):
    records, summary = swept
    policy = noise_aware_policy(records[records["concurrency"] >= 4], summary)
    with pytest.raises(ParameterError, match="batch-1 anchor.*smallest here: 3.5"):
        policy_ranges(policy)


def test_rounds_that_agree_do_not_make_a_gain_whose_ci_holds_1_pay(swept):
    """Three rounds can agree closely on a gain the requests' own spread does not support: a
    configuration replaces spec-off only where its pooled 95% CI over spec-off lies above 1."""
    records, summary = swept
    clear = noise_aware_policy(records, summary.assign(speedup_tpot_lo=1.05)).frame().set_index("concurrency")
    held = noise_aware_policy(records, summary.assign(speedup_tpot_lo=0.95)).frame().set_index("concurrency")
    assert (clear["k"] > 0).any() and (held["k"] == 0).all()
    assert (held.loc[clear.index[clear["k"] > 0], "tie_with"] != "").all()  # named, not silently dropped


# ------------------------------------------------------------ the launch: every candidate, each priced with its CI

def flat_step(ngram: list[float], ngram_lo: list[float]) -> pd.DataFrame:
    """spec-off whose step barely grows (10 ms at 1 to 12 ms at 16) and n-gram k=4 that drafts little per
    accepted token (100 tokens in 83.3 steps): its own step cost δ is small, so a k = 0 range runs at about
    0.98x; n-gram's upper bounds 0.04 above its points."""
    levels, step = [1, 2, 4, 16], [10.0, 10.1, 10.4, 12.0]
    rows = [{"config": "spec-off", "k": 0, "family": "none", "uses_model": False, "concurrency": b,
             "mean_tpot_ms": t, "speedup_tpot": 1.0, "speedup_tpot_lo": 1.0, "speedup_tpot_hi": 1.0,
             "tokens_predicted": 100.0, "spec_decode_draft_tokens": 0.0, "spec_decode_accepted_tokens": 0.0}
            for b, t in zip(levels, step)]
    rows += [{"config": "ngram k=4", "k": 4, "family": "ngram", "uses_model": False, "concurrency": b,
              "mean_tpot_ms": t / x, "speedup_tpot": x, "speedup_tpot_lo": lo, "speedup_tpot_hi": x + 0.04,
              "tokens_predicted": 100.0, "spec_decode_draft_tokens": 333.3, "spec_decode_accepted_tokens": 16.7}
             for b, t, x, lo in zip(levels, step, ngram, ngram_lo)]
    return pd.DataFrame(rows)


def test_a_static_configuration_ahead_at_every_level_is_the_launch_not_a_schedule_with_a_k0_range():
    summary = flat_step([1.12, 1.08, 1.05, 1.03], [1.04, 1.00, 0.97, 0.90])
    policy = serving_policy(summary)
    assert list(policy.frame()["k"]) == [4, 4, 4, 0]  # at 16 its CI admits a 10% loss: the policy keeps spec-off
    schedule = launch_policy(summary, {"ngram k=4": 4})
    assert list(schedule.frame()["k"]) == [4, 4, 4, 0]  # and 1.03 [0.90–] does not beat the k = 0 range's 0.98
    choice = choose_launch(summary, policy)
    # the schedule runs 0.98 at 16 where n-gram itself measured 1.03, the best static there: 0.95 of it; n-gram
    # at every level is 1.00 of the best static everywhere, and one range is no schedule
    assert (choice.kind, choice.config) == ("static", "ngram k=4")
    assert choice.launch.ranges == ((1, 4096, 4),) and list(choice.policy.frame()["k"]) == [4, 4, 4, 4]
    assert list(choice.candidates["candidate"]) == ["ngram k=4", "ngram schedule", "spec-off"]
    assert choice.candidates["worst"].tolist()[:2] == pytest.approx([1.0, 0.98 / 1.03], abs=0.005)


def test_a_k0_range_is_judged_with_its_own_ci_as_drafting_is():
    from specnb.predict.serving_launch import drafts_over_zero, zero_range_ci

    summary = flat_step([1.12, 1.08, 1.05, 1.03], [1.04, 1.00, 0.97, 0.90])
    zero = zero_range_ci(summary, "ngram k=4", [1, 16])
    # the calibration's CI: n-gram's TPOT at 1 read at 1.04x and 1.16x prices δ dearer and cheaper
    assert (zero["speedup_tpot_lo"] < zero["speedup_tpot"]).all()
    assert (zero["speedup_tpot"] < zero["speedup_tpot_hi"]).all()
    assert zero.loc[16, "speedup_tpot"] == pytest.approx(zero_range_speedup(summary, "ngram k=4", [16])[16])
    # drafting at 1.00 [0.945–] against a range at 0.97: its point is ahead, and against the range's point its
    # lower bound holds (0.945 ≥ 0.95 × 0.97); against the range's upper bound 1.00 it admits a loss over 5%
    assert not drafts_over_zero((1.0, 0.945, 1.05), (0.97, 0.94, 1.0))
    assert drafts_over_zero((1.0, 0.955, 1.05), (0.97, 0.94, 1.0))
    assert not drafts_over_zero((0.96, 0.955, 0.97), (0.97, 0.97, 0.97))  # behind it: the range runs


def test_a_switch_sits_where_the_interpolated_speedups_cross_not_at_the_geometric_mean():
    from specnb.predict.serving_policy import with_cuts

    summary = pd.DataFrame({"config": ["spec-off", "ngram k=4"] * 2, "concurrency": [1, 1, 4, 4],
                            "speedup_tpot": [1.0, 1.5, 1.0, 0.9]})
    policy = policy_of(pd.DataFrame({"concurrency": [1, 4], "batch": [1.0, 3.5], "config": ["ngram k=4", "spec-off"],
                                     "k": [4, 0]}), "batch")
    assert policy_ranges(policy) == [[1, 1, 4], [2, 4096, 0]]  # no speedups to read: the geometric mean, 1.87
    cut = with_cuts(policy, summary)
    # 1.5 at a batch of 1 to 0.9 at 3.5, linear in log batch, meets spec-off's 1.00 at 3.5^(5/6) = 2.84
    assert cut.frame()["cut"].iloc[1] == pytest.approx(3.5 ** (5 / 6))
    assert policy_ranges(cut) == [[1, 2, 4], [3, 4096, 0]] and policy_switch(cut) == pytest.approx(3.5 ** (5 / 6))
