"""The serving predictor on a hand-worked step-cost curve, the policy and its vLLM/llama-server forms,
and notebook 08's parameter parsing."""

import json
import math

import pandas as pd
import pytest

from specnb.app.serving_setup import endpoint_targets, server_configs
from specnb.core.errors import ParameterError
from specnb.predict.serving_predictor import (
    folds,
    llama_server_flags,
    median_error,
    policy_ranges,
    policy_switch,
    predict_serving,
    serving_policy,
    speculative_config,
    step_cost,
    step_ms,
    validate_held_out,
    validate_serving,
    vllm_config,
)

LEVELS = [1, 2, 4, 8]


def summary_frame(measured_speedups):
    # spec-off: a step with b tokens in the batch costs t(b) = 10, 12, 16, 24 ms.
    off = pd.DataFrame({"config": "spec-off", "concurrency": LEVELS, "mean_tpot_ms": [10.0, 12.0, 16.0, 24.0],
                        "tokens_predicted": 100.0, "spec_decode_accepted_tokens": 0.0, "spec_decode_draft_tokens": 0.0})
    # n-gram: 100 tokens in 60 steps (40 accepted), 120 draft tokens: d = 2, τ' = 5/3.
    ngram = pd.DataFrame({"config": "ngram k=2", "concurrency": LEVELS, "mean_tpot_ms": [8.4, 9.0, 12.0, 20.0],
                          "tokens_predicted": 100.0, "spec_decode_accepted_tokens": 40.0,
                          "spec_decode_draft_tokens": 120.0, "speedup_tpot": measured_speedups})
    return pd.concat([off, ngram], ignore_index=True)


def test_step_cost_interpolates_and_extends_the_last_segment():
    cost = step_cost(summary_frame([1.0] * 4))
    assert step_ms(cost, 3) == pytest.approx(14.0) and step_ms(cost, 12) == pytest.approx(32.0)


def test_prediction_by_hand():
    pred = predict_serving(summary_frame([1.0] * 4), "ngram k=2", LEVELS).set_index("concurrency")
    tau = 100 / 60
    # b = 1: verify 3 tokens, t(3) = 14 ms for 5/3 tokens; b = 4: t(12) = 32 ms.
    assert pred.loc[1, "predicted_tpot_ms"] == pytest.approx(14.0 / tau)
    assert pred.loc[1, "predicted_speedup_tpot"] == pytest.approx(10.0 / (14.0 / tau))
    assert pred.loc[4, "predicted_speedup_tpot"] == pytest.approx(16.0 / (32.0 / tau))
    assert pred.loc[1, "draft_ms"] == pytest.approx(0.0, abs=1e-9)  # its step costs what its verification does


def test_a_forward_probe_prices_the_extra_tokens():
    probe = pd.DataFrame({"tokens": [1, 2, 4, 8, 16], "forward_ms": [5.0, 6.0, 8.0, 12.0, 20.0]})
    pred = predict_serving(summary_frame([1.0] * 4), "ngram k=2", LEVELS, probe=probe).set_index("concurrency")
    tau = 100 / 60
    # b = 1: the probe prices verification at t(1) + f(3) − f(1) = 12 ms a step; the n-gram's took 8.4 × 5/3 = 14:
    # 2 ms of its own per step, scaled like spec-off's step (×16/10 at 4, ×24/10 at 8)
    assert pred.loc[1, "draft_ms"] == pytest.approx(2.0)
    # b = 4: spec-off's step 16 ms + f(12) − f(4) = 16 + (16 − 8) = 24 ms for 5/3 tokens
    assert pred.loc[4, "predicted_tpot_ms"] == pytest.approx((24.0 + 3.2) / tau)
    assert pred.loc[8, "predicted_tpot_ms"] == pytest.approx((24.0 + (20 + 8 * 1.0) - 12.0 + 4.8) / tau)  # f extended


def test_a_speculative_steps_own_cost_is_calibrated_at_the_first_level():
    # the n-gram's step at 1 takes 9.6 ms a token where its verification of 3 tokens prices 8.4:
    # 1.2 ms × 5/3 = 2 ms of proposer and sampler work per step, scaled like the verifier's step
    frame = summary_frame([1.0] * 4)
    frame.loc[(frame["config"] == "ngram k=2") & (frame["concurrency"] == 1), "mean_tpot_ms"] = 9.6
    pred = predict_serving(frame, "ngram k=2", LEVELS).set_index("concurrency")
    assert pred.loc[1, "predicted_tpot_ms"] == pytest.approx(9.6)  # fits the calibration level exactly
    assert pred.loc[1, "draft_ms"] == pytest.approx(2.0)
    assert pred.loc[2, "draft_ms"] == pytest.approx(2.0 * 12 / 10)


def test_validation_reports_the_median_error_off_the_calibration_level():
    tau = 100 / 60
    exact = [10 / (14 / tau), 12 / (step_ms(step_cost(summary_frame([1] * 4)), 6) / tau), 16 / (32 / tau),
             24 / (48 / tau)]
    validation = validate_serving(summary_frame(exact), {"ngram k=2": False})
    assert median_error(validation) == pytest.approx(0.0, abs=1e-9)
    off = validate_serving(summary_frame([x * 1.1 for x in exact]), {"ngram k=2": False})
    assert median_error(off) == pytest.approx(1 - 1 / 1.1)


def test_policy_ranges_and_pasteable_forms():
    summary = pd.DataFrame({
        "config": ["ngram-simple k=4", "ngram-simple k=2"] * 3, "concurrency": [1, 1, 4, 4, 16, 16],
        "speedup_tpot": [1.5, 1.3, 1.1, 1.2, 0.9, 0.95], "speedup_tpot_lo": [1.3, 1.1, 0.95, 1.05, 0.8, 0.85]})
    policy = serving_policy(summary, {"ngram-simple k=4": 4, "ngram-simple k=2": 2})
    assert list(policy["k"]) == [4, 2, 0] and list(policy["config"])[2] == "spec-off"
    assert policy_ranges(policy) == [[1, 3, 4], [4, 15, 2], [16, 4096, 0]]
    config = json.loads(vllm_config(policy, "ngram"))
    assert config["num_speculative_tokens"] == 4 and config["num_speculative_tokens_per_batch_size"][0] == [1, 3, 4]
    flags = llama_server_flags(policy, {"ngram-simple k=4": "--spec-type ngram-simple --spec-draft-n-max 4"})
    assert flags[0] == "1–3 concurrent: --spec-type ngram-simple --spec-draft-n-max 4"
    assert flags[1].endswith("--spec-draft-n-max 2")
    assert flags[2] == "16 or more concurrent: no --spec-type (spec-off)"


def test_a_policy_that_never_speculates_is_no_speculative_config():
    summary = pd.DataFrame({"config": ["ngram k=4"] * 2, "concurrency": [1, 8], "speedup_tpot": [0.95, 0.88],
                            "speedup_tpot_lo": [0.89, 0.8]})
    policy = serving_policy(summary, {"ngram k=4": 4})
    assert list(policy["k"]) == [0, 0]
    assert speculative_config(policy, "ngram") == {} and vllm_config(policy, "ngram") == ""
    paying = serving_policy(summary.assign(speedup_tpot=[1.2, 0.88], speedup_tpot_lo=[1.1, 0.8]), {"ngram k=4": 4})
    assert speculative_config(paying, "ngram", "draft") == {"method": "ngram", "num_speculative_tokens": 4,
                                                            "num_speculative_tokens_per_batch_size": [[1, 7, 4],
                                                                                                      [8, 4096, 0]],
                                                            "model": "draft"}


def test_endpoints_are_loopback_by_default_and_named(monkeypatch):
    monkeypatch.delenv("SPECNB_ALLOW_REMOTE", raising=False)
    [only] = endpoint_targets("http://127.0.0.1:8000/", "vllm")
    assert (only.name, only.url, only.engine) == ("spec-off", "http://127.0.0.1:8000", "vllm")
    pair = endpoint_targets("spec-off=http://localhost:8000,eagle3 k=3=http://localhost:8001", "vllm")
    assert [t.name for t in pair] == ["spec-off", "eagle3 k=3"] and pair[1].url.endswith(":8001")
    with pytest.raises(ParameterError, match="not loopback"):
        endpoint_targets("http://10.0.0.5:8000", "vllm")
    with pytest.raises(ParameterError, match="engine"):
        endpoint_targets("http://127.0.0.1:8000", "tgi")
    monkeypatch.setenv("SPECNB_ALLOW_REMOTE", "1")
    assert endpoint_targets("http://10.0.0.5:8000", "sglang")[0].url == "http://10.0.0.5:8000"


def test_speculation_entries_are_checked(monkeypatch):
    monkeypatch.setattr("specnb.models.gguf.embedded_gguf", lambda name, precision="q4_1": f"/m/{name}.{precision}")
    configs = server_configs("smollm2-135m", "q4_1", ["ngram-simple:4", "smollm2-draft-s:3"], 8, 512, threads=1)
    assert [c.name for c in configs] == ["spec-off", "ngram-simple k=4", "smollm2-draft-s k=3"]
    assert configs[2].spec_type == "draft-simple" and configs[2].draft == "/m/smollm2-draft-s.q4_1"
    with pytest.raises(ParameterError, match="TYPE:K"):
        server_configs("smollm2-135m", "q4_1", ["ngram-simple"], 8, 512)


def test_held_out_validation_cross_fits_on_prompt_folds():
    rows = []
    for config, tpot, draft_n, accepted in (("spec-off", 0.010, 0, 0), ("ngram k=2", 0.008, 12, 4)):
        for index in range(4):
            rows.append({"config": config, "concurrency": 1, "round": 0, "prompt_index": index, "success": True,
                         "prompt_id": f"p{index}", "category": "ab"[index // 2],
                         "output_tokens": 11, "ttft": 0.1, "latency": 0.1 + 10 * tpot, "tpot": tpot,
                         "draft_n": draft_n, "draft_n_accepted": accepted, "generated_text": "same"})
    assert list(folds(pd.DataFrame(rows[:4]))) == [0, 1, 0, 1]  # alternating within categories a and b
    validation = validate_held_out(pd.DataFrame(rows), {"ngram k=2": False}, n_boot=20)
    assert len(validation) == 2 and set(validation["fold"]) == {0, 1}
    row = validation.iloc[0]
    # one fold: 22 tokens, 8 accepted -> 14 steps, 24 drafted: d = 24/14, τ' = 22/14; one level so t is flat
    assert row["draft_per_step"] == pytest.approx(24 / 14) and row["tokens_per_step"] == pytest.approx(22 / 14)
    # one level: the step's own cost calibrated there takes up what verifying 1 + d tokens at a flat t does
    # not, so the prediction is the calibration fold's speedup (the same TPOTs as the held-out fold's)
    assert row["predicted_speedup_tpot"] == pytest.approx(1.25) and row["speedup_tpot"] == pytest.approx(1.25)
    assert row["draft_ms"] == pytest.approx(8.0 * 22 / 14 - 10.0)
    assert not row["calibration"] and row["prompts"] == "held out"
    assert validate_held_out(pd.DataFrame(rows).assign(draft_n=0), {"ngram k=2": False}).empty
    one_per_category = pd.DataFrame(rows).assign(category=lambda f: f["prompt_id"])  # no second fold
    assert validate_held_out(one_per_category, {"ngram k=2": False}).empty


def test_held_out_validation_from_engine_counters_uses_runs_within_one_fold():
    # vLLM counts drafts per run, not per request: prompts p0, p1 (fold 0) and p2, p3 (fold 1); at
    # concurrency 1 each fold is a run of its own, at 2 one run holds all four and calibrates nothing.
    records, runs = [], []
    counts = {0: (8.0, 24.0), 1: (2.0, 24.0)}  # chunk -> (accepted, drafted) of its 22 tokens
    for config, tpot in (("spec-off", 0.010), ("ngram k=2", 0.008)):
        for level, chunk_of in ((1, [0, 0, 1, 1]), (2, [0, 0, 0, 0])):
            for index, chunk in enumerate(chunk_of):
                records.append({"config": config, "concurrency": level, "round": 0, "chunk": chunk,
                                "prompt_index": index, "prompt_id": f"p{index}", "category": "ab"[index % 2],
                                "success": True, "output_tokens": 11, "ttft": 0.1, "latency": 0.1 + 10 * tpot,
                                "tpot": tpot, "draft_n": 0, "draft_n_accepted": 0, "generated_text": "same"})
            for chunk in sorted(set(chunk_of)):
                accepted, drafted = counts[chunk] if config != "spec-off" and level == 1 else (5.0, 48.0)
                runs.append({"config": config, "concurrency": level, "round": 0, "chunk": chunk,
                             "tokens_predicted": 11.0 * chunk_of.count(chunk),
                             "spec_decode_draft_tokens": drafted if config != "spec-off" else 0.0,
                             "spec_decode_accepted_tokens": accepted if config != "spec-off" else 0.0})
    records, runs = pd.DataFrame(records), pd.DataFrame(runs)
    assert list(folds(records[records["concurrency"] == 1].head(4))) == [0, 0, 1, 1]
    validation = validate_held_out(records, {"ngram k=2": False}, n_boot=20, runs=runs).set_index(["fold",
                                                                                                   "concurrency"])
    # predicting fold 1 from fold 0's run: 22 tokens, 8 accepted -> 14 steps, 24 drafted; fold 0 from fold 1's
    assert validation.loc[(1, 1), "tokens_per_step"] == pytest.approx(22 / 14)
    assert validation.loc[(0, 1), "tokens_per_step"] == pytest.approx(22 / 20)
    assert validation.loc[(0, 1), "draft_per_step"] == pytest.approx(24 / 20)
    assert (validation["calibrated_at"] == 1).all() and set(validation.reset_index()["concurrency"]) == {1, 2}
    assert validate_held_out(records.drop(columns="chunk"), {"ngram k=2": False}, runs=runs).empty
    assert validate_held_out(records, {"ngram k=2": False}).empty  # no runs, no per-request counts


def test_endpoint_configurations_are_read_from_their_names():
    from specnb.app.serving_setup import draft_kinds, draft_lengths, vllm_method

    names = ["spec-off", "eagle3 k=3", "ngram k=4", "draft k=2", "mystery"]
    assert draft_lengths(names, []) == {"eagle3 k=3": 3, "ngram k=4": 4, "draft k=2": 2}
    assert draft_kinds(names, []) == {"eagle3 k=3": True, "ngram k=4": False, "draft k=2": True}
    assert [vllm_method(n) for n in names[1:4]] == ["eagle3", "ngram", "draft_model"]


def test_a_poisson_sweep_is_refused_by_the_predictor_and_the_policy():
    rates = summary_frame([1.0] * 4).rename(columns={"concurrency": "request_rate"})
    calls = (lambda: step_cost(rates), lambda: serving_policy(rates.assign(speedup_tpot_lo=1.1), {"ngram k=2": 2}),
             lambda: validate_held_out(rates.assign(draft_n=1), {"ngram k=2": False}))
    for call in calls:
        with pytest.raises(ParameterError, match="closed-loop concurrency levels.*Poisson"):
            call()


def test_the_policy_switches_off_between_its_last_drafting_level_and_the_next():
    policy = pd.DataFrame({"concurrency": [1, 4, 16, 64], "k": [4, 2, 0, 0]})
    assert policy_switch(policy) == pytest.approx(8.0)
    assert math.isnan(policy_switch(policy.assign(k=0))) and math.isnan(policy_switch(policy.assign(k=3)))


def test_a_policy_that_drafts_everywhere_switches_where_its_k_first_falls():
    policy = pd.DataFrame({"concurrency": [1, 4, 16, 64], "k": [4, 4, 1, 2]})
    assert policy_switch(policy) == pytest.approx(8.0)
    assert policy_switch(policy.assign(k=[2, 4, 4, 1])) == pytest.approx(32.0)


def test_the_policy_runs_the_best_point_estimate_unless_its_interval_admits_a_loss_over_5_percent():
    summary = pd.DataFrame({"config": ["ngram k=4"] * 3, "concurrency": [1, 8, 16],
                            "speedup_tpot": [1.08, 1.08, 0.99], "speedup_tpot_lo": [0.97, 0.93, 0.97]})
    policy = serving_policy(summary, {"ngram k=4": 4})
    assert list(policy["k"]) == [4, 0, 0]  # 1.08 [0.97–]: runs; 1.08 [0.93–]: could lose 7%; 0.99: never pays
