"""The serving predictor on a hand-worked step-cost curve (the policy that follows is
``test_serving_policy``)."""


import pandas as pd
import pytest

from specnb.core.errors import ParameterError
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
    calls = (lambda: step_cost(rates), lambda: serving_policy(rates.assign(speedup_tpot_lo=1.1), {"ngram k=2": 2}),
             lambda: validate_held_out(rates.assign(draft_n=1), {"ngram k=2": False}))
    for call in calls:
        with pytest.raises(ParameterError, match="closed-loop concurrency levels.*open-loop"):
            call()


