"""The serving predictor on a hand-worked step-cost curve (the policy that follows is
``test_serving_policy``)."""


import pandas as pd
import pytest

from specnb.core.errors import ParameterError
from specnb.measure.serving_sweep import Sweep
from specnb.predict.serving_predictor import (
    median_error,
    predict_serving,
    step_cost,
    step_ms,
    validate_held_out,
    validate_serving,
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


def test_a_poisson_sweep_is_refused_by_the_predictor_and_the_policy():
    from specnb.predict.serving_policy import serving_policy

    rates = summary_frame([1.0] * 4).rename(columns={"concurrency": "request_rate"}).assign(load="open")
    sweep = Sweep(records=rates.assign(draft_n=1), runs=pd.DataFrame())
    calls = (lambda: step_cost(rates), lambda: serving_policy(rates.assign(speedup_tpot_lo=1.1), {"ngram k=2": 2}),
             lambda: validate_held_out(sweep, {"ngram k=2": False}))
    for call in calls:
        with pytest.raises(ParameterError, match="closed-loop concurrency levels.*open-loop"):
            call()


def steady_sweep() -> tuple[pd.DataFrame, pd.DataFrame]:
    """(records, runs) at 1 and 4 concurrent: per level and configuration a steady 11-token request (10
    decode tokens at 10 ms each on spec-off at 1), a steady 41-token one (40 at 20 ms), a ramp-up
    request and a filler at 500 ms a token; 2.5 times the step times at 4, 4 times them on an n-gram
    with a costly proposer (whose counters say d = 2, τ' = 5/3)."""
    rows, runs = [], []
    for config, speed in (("spec-off", 1.0), ("ngram k=2", 0.25)):
        for level in (1, 4):
            scale = level / 2 + 0.5  # 1 at 1 concurrent, 2.5 at 4
            for i, (tokens, tpot_s, steady, filler) in enumerate(((11, 0.010, True, False), (41, 0.020, True, False),
                                                                   (41, 0.5, False, False), (41, 0.5, False, True))):
                seconds = (tokens - 1) * tpot_s * scale / speed
                rows.append({"engine": "vllm", "config": config, "load": "closed", "concurrency": level, "round": 0,
                             "prompt_index": i, "prompt_id": f"p{i}", "cycle": -1 if filler else 0, "success": True,
                             "output_tokens": tokens, "ttft": 0.05, "latency": 0.05 + seconds,
                             "tpot": seconds / (tokens - 1), "itl": "[]", "partial": False, "steady": steady,
                             "filler": filler, "generated_text": "x"})
            counters = (0.0, 0.0) if config == "spec-off" else (40.0, 120.0)
            runs.append({"config": config, "concurrency": level, "duration": 5.0, "accepted_per_pos": "[]",
                         "spec_decode_num_drafts": 0.0, "spec_decode_accepted_tokens": counters[0],
                         "spec_decode_draft_tokens": counters[1], "n_decode": 0.0, "tokens_predicted": 100.0})
    return pd.DataFrame(rows), pd.DataFrame(runs)


def test_a_step_is_priced_by_the_steady_token_weighted_tpot_not_the_mean_of_request_tpots():
    from specnb.measure.serving_stats import summarise_sweep
    from specnb.predict.trace_prediction import tpot_curve

    records, runs = steady_sweep()
    summary = summarise_sweep(records, runs, n_boot=50)
    off = summary[summary["config"] == "spec-off"].set_index("concurrency")
    # steady requests only: (10 × 10 + 40 × 20) ms ÷ 50 tokens = 18 ms, where their mean TPOT is 15 ms
    assert off.loc[1, "tpot_weighted_ms"] == pytest.approx(18.0) and off.loc[1, "mean_tpot_ms"] == pytest.approx(15.0)
    assert off.loc[4, "tpot_weighted_ms"] == pytest.approx(45.0) and off.loc[4, "mean_tpot_ms"] == pytest.approx(37.5)
    assert off.loc[1, "completed"] == 3 and off.loc[1, "steady_requests"] == 2  # the filler is never summarised
    # Little's law over the steady requests: 4 in flight, 52 tokens over 0.05 + 0.25 + 0.05 + 2.0 s of latency
    assert off.loc[4, "output_throughput"] == pytest.approx(4 * 52 / 2.35)
    cost = step_cost(summary)
    assert list(cost["step_ms"]) == pytest.approx([18.0, 45.0])  # the predictor's t(b)
    pred = predict_serving(summary, "ngram k=2", [1, 4]).set_index("concurrency")
    ngram = summary[summary["config"] == "ngram k=2"].set_index("concurrency")
    assert ngram.loc[1, "tpot_weighted_ms"] == pytest.approx(72.0) and ngram.loc[1, "mean_tpot_ms"] == pytest.approx(60)
    # calibrated at 1 on its weighted TPOT: 72 ms × 5/3 a step, less t(3) = 18 + 27·2/3 = 36 ms to verify 3 tokens
    assert pred.loc[1, "draft_ms"] == pytest.approx(72.0 * 5 / 3 - 36.0)
    assert pred.loc[1, "predicted_tpot_ms"] == pytest.approx(72.0)  # fits the calibration level exactly
    assert pred.loc[1, "predicted_speedup_tpot"] == pytest.approx(18.0 / 72.0)
    assert list(tpot_curve(summary, "spec-off")[1]) == pytest.approx([18.0, 45.0])  # the trace prediction's TPOT(b)
