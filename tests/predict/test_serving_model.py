"""The serving model: the step model on a hand-worked step-cost curve (the verdict that follows is
``test_serving_verdict``), and the one trace predictor — its queue and occupancy worked by hand, the
requests it plans held against the ones a sweep sends, and its forecast (a planned trace) and
reconstruction (a sampled one) held against the simulated engine's trace in virtual time, where the
truth is known. The schedules traced are the verdict's (``serving_verdict.decide``) on each sweep."""

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from helpers import sim_sweep, sim_trace

from specnb.core.errors import ParameterError
from specnb.measure import serving_load, serving_sweep
from specnb.measure.serving_load import Lengths, Open, RequestRecord, Run, Target
from specnb.measure.serving_stats import summarise_sweep, trace_check, trace_rate
from specnb.measure.serving_sweep import Sweep, SweepHooks, SweepSettings, occupancy
from specnb.predict.serving_model import (
    PlannedTrace,
    SampledTrace,
    TraceRound,
    launch_curves,
    median_error,
    plan_trace,
    predict_serving,
    predict_trace,
    predicted_tpot,
    scheduled_k,
    simulate,
    static_curves,
    step_cost,
    step_ms,
    tpot_at,
    tpot_curve,
    trace_median_error,
    trace_prediction_table,
    validate_held_out,
    validate_serving,
)
from specnb.predict.serving_verdict import decide, policy_switch
from specnb.serve.engines import SPEC_OFF, Speculation
from specnb.serve.simulated import SimCost, crossover

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


def test_a_poisson_sweep_is_refused_by_the_predictor():
    rates = summary_frame([1.0] * 4).rename(columns={"concurrency": "request_rate"}).assign(load="open")
    sweep = Sweep(records=rates.assign(draft_n=1), runs=pd.DataFrame())
    calls = (lambda: step_cost(rates), lambda: validate_held_out(sweep, {"ngram k=2": False}))
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


# The trace predictor. On PREFILL_COST every admitted prompt costs 8 ms of prefill in its step; n-gram k = 4
# stops paying at a batch of 8, k = 2 at 14, inside the measured 1–16; a k = 0 step still pays the speculative
# path's 0.5 ms (draft_ms). On FLAT_COST k = 4 pays most at a batch of 1–4, k = 2 from there to ~29, spec-off
# above (simulated.crossover), and nothing is paid for prefill or for a k = 0 step.
PREFILL_COST = SimCost(fixed_ms=10.0, per_token_ms=1.0, prefill_per_token_ms=0.25, draft_ms=0.5, acceptance=(0.7,))
FLAT_COST = SimCost(fixed_ms=10.0, per_token_ms=0.5, prefill_per_token_ms=0.0, acceptance=(0.7,))
PROMPT_LEN = 32
K2 = Speculation(entry="ngram", k=2, method="ngram", family="ngram")
K4 = Speculation(entry="ngram", k=4, method="ngram", family="ngram")
PROMPTS = pd.DataFrame({"prompt": [f"prompt {i}" for i in range(24)], "id": [f"p{i}" for i in range(24)]})


def adaptive_server(launch):
    """The simulated engine's server for a schedule: its ranges, at the launch's largest k."""
    return Speculation(entry="ngram", k=max(k for *_, k in launch.ranges), method="ngram", family="ngram",
                       adaptive=True, schedule=launch.ranges)


def test_the_queue_shares_decoding_among_the_batch_and_waits_each_arrival_its_ttft():
    trace = TraceRound(arrivals_s=np.array([0.05, 0.0]), output_lens=np.array([6, 11]))  # out of order on purpose
    # TPOT 10 ms alone, 20 ms two at a time; TTFT 10 ms with nothing decoding, 20 ms with one
    tpot_of = lambda b: (10.0 * b, b > 1)  # noqa: E731
    held = simulate(trace, tpot_of, lambda b: 10.0 * (1 + b))
    # A decodes alone from 0.01 s to 0.07 s (B's first token): 6 of its 10 tokens; then both at 20 ms a token:
    # A's 4 left by 0.15 s, B's 4 of 5 by then and its last alone by 0.16 s
    assert held.to_dict() == pytest.approx({1.0: 0.06 + 0.01, 2.0: 0.08})
    figures = predicted_tpot(held, tpot_of)
    # 15 decode tokens over 0.06 + 2 × 0.08 + 0.01 sequence-seconds, 0.15 s of them busy, 2 × 0.08 clamped
    assert figures["predicted_tpot_ms"] == pytest.approx(1e3 * (0.07 + 0.16) / 15)
    assert figures["trace_mean_batch"] == pytest.approx(0.23 / 0.15)
    assert figures["clamped_share"] == pytest.approx(0.16 / 0.23)


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


def test_the_planned_trace_draws_the_requests_the_sweep_will_send(monkeypatch):
    sent = []

    async def send_open(target, prompts, max_tokens, gaps, ignore_eos=True):
        sent.append((np.cumsum(gaps), list(max_tokens)))
        return [RequestRecord(success=True, output_tokens=n, latency=1.0, ttft=0.1) for n in max_tokens], 1.0

    def send_sampled(target, load, requests, ignore_eos, round_index, fillers=None):
        assert not (fillers and fillers.texts)  # an open load sends no fillers: the whole trace is measured
        done, duration = serving_load.run_async(load.send(target, requests.texts, requests.max_tokens, ignore_eos,
                                                          round_index))
        return Run(done=done, duration=duration, samples=[])

    monkeypatch.setattr(serving_load, "send_open", send_open)
    monkeypatch.setattr(serving_sweep, "send_sampled", send_sampled)
    monkeypatch.setattr(serving_sweep, "scrape", lambda target: serving_sweep.Counters())
    load = Open(rate=3.0, burstiness=0.25, lengths=Lengths(tokens=48), seed=5)
    prompts = pd.concat([PROMPTS] * 2, ignore_index=True)  # a trace repeats its prompts, as run_policy's does
    serving_sweep.run_sweep([Target(url="http://x", engine="vllm")], prompts, [load],
                            SweepSettings(rounds=2, seed=3, warmup=False), SweepHooks(down=lambda name: ""))
    plan = plan_trace(load, prompts, rounds=2, seed=3)
    assert len(sent) == len(plan.rounds) == 2
    for (arrivals, lengths), one in zip(sent, plan.rounds):
        np.testing.assert_array_equal(one.arrivals_s, arrivals)
        assert list(one.output_lens) == lengths
    assert not np.array_equal(plan.rounds[0].arrivals_s, plan.rounds[1].arrivals_s)  # each round its own draw


def noise_free(summary: pd.DataFrame) -> pd.DataFrame:
    """The simulated sweep's summary with each row's TPOT speedup over spec-off at its level, its CI
    the point (the simulated engine is deterministic: no sampling, no launch noise)."""
    off = summary[summary["config"] == "spec-off"].set_index("concurrency")["mean_tpot_ms"]
    x = summary["concurrency"].map(off) / summary["mean_tpot_ms"]
    return summary.assign(speedup_tpot=x, speedup_tpot_lo=x, speedup_tpot_hi=x, tpot_log_var=0.0, launch_sigma=0.0,
                          launch_pairs=0, critical=0.0)


@pytest.fixture(scope="module")
def measured():
    """The closed-loop levels (1–16) and the policy from them, as the policy check has them before its
    trace, and that policy as one launch."""
    assert 1 < crossover(PREFILL_COST, K4, 64) < crossover(PREFILL_COST, K2, 64) < 16
    records, summary = sim_sweep(PREFILL_COST, [SPEC_OFF, K2, K4], [1, 2, 4, 8, 16], prompt_len=PROMPT_LEN)
    verdict = decide(noise_free(summary), engine="simulated")
    assert verdict.kind == "schedule", verdict.name()
    return summary, verdict.policy, verdict.launch


def traced(summary, launch, in_flight: float):
    """A bursty trace (burstiness 0.25, 48 requests, two rounds) at the rate that keeps ``in_flight``
    requests on spec-off: forecast first, from the summary and the launch alone, then run on the
    simulated engine; (forecast, the trace's records, its runs)."""
    load = Open(rate=trace_rate(summary, in_flight), burstiness=0.25, lengths=Lengths(tokens=48), seed=0)
    plan = plan_trace(load, pd.concat([PROMPTS] * 2, ignore_index=True), rounds=2, seed=0)
    forecast = predict_trace(summary, plan, launch)  # before any of the trace exists
    runs = [sim_trace(replace(PREFILL_COST, seed=r), [SPEC_OFF, K2, K4, adaptive_server(launch)],
                      list(one.arrivals_s), list(one.output_lens), prompt_len=PROMPT_LEN, round_index=r)
            for r, one in enumerate(plan.rounds)]
    return forecast, pd.concat([r[0] for r in runs], ignore_index=True), pd.concat([r[1] for r in runs],
                                                                                  ignore_index=True)


@pytest.mark.parametrize("load", ["the policy check's", "four in flight"])
def test_the_forecast_trace_speedups_match_the_simulated_engines_trace(measured, load):
    """Median error ≤ 10% over the configurations (the target) and ≤ 15% each: the forecast adds to the
    reconstruction's error (TPOT(b) read off closed-loop levels) its own queue — processor sharing with
    TTFT(b), where the engine steps and prefills in batches — and, for adaptive, the k = 0 price
    (the simulated engine's: none, its k = 0 step is spec-off's).
    At the policy check's rate (its switch-off load in flight) bursts pile past the measured 16, so half
    the decoding is read off a clamped end: k = 4, whose TPOT climbs fastest there, is the worst."""
    summary, policy, launch = measured
    in_flight = policy_switch(policy) if load == "the policy check's" else 4.0
    forecast, records, runs = traced(summary, launch, in_flight)
    assert set(forecast["config"]) == {"spec-off", "ngram k=2", "ngram k=4", "adaptive"}
    table = trace_prediction_table(forecast, trace_check(records, n_boot=50))
    assert set(table["config"]) == {"ngram k=2", "ngram k=4", "adaptive"}
    assert trace_median_error(table) <= 0.10 and (table["error"] <= 0.15).all(), table
    # the queue fills as the engine's did: its mean batch is within 15% of the batches the trace held
    held = predict_trace(summary, SampledTrace(runs=runs), launch).set_index("config")["trace_mean_batch"]
    mean_batch = forecast.set_index("config")["trace_mean_batch"]
    assert ((mean_batch / held.reindex(mean_batch.index) - 1).abs() <= 0.15).all(), (mean_batch, held)


def test_a_planned_and_a_sampled_trace_that_hold_the_same_batches_predict_the_same(measured):
    """One predictor: a plan only decides the occupancy. Handed the queue's occupancy as an engine's
    gauge samples, the reconstruction reads exactly the forecast's figures."""
    summary, _, launch = measured
    plan = PlannedTrace(rounds=(TraceRound(arrivals_s=np.linspace(0.0, 0.3, 12), output_lens=np.full(12, 20)),))
    forecast = predict_trace(summary, plan, launch)
    runs = []
    for config in forecast["config"]:
        curves = launch_curves(summary, launch) if config == "adaptive" else static_curves(summary, config)
        held = plan.occupancy(config, curves)
        starts = np.concatenate([[0.0], np.cumsum(held.to_numpy())])  # one sample per batch, then the close
        samples = [[float(t), float(b)] for t, b in zip(starts, held.index)] + [[float(starts[-1]), 0.0]]
        runs.append({"config": config, "batch_trace": json.dumps(samples)})
    rebuilt = predict_trace(summary, SampledTrace(runs=pd.DataFrame(runs)), launch)
    pd.testing.assert_frame_equal(rebuilt, forecast, rtol=1e-9)
    assert len(forecast) == 4 and forecast["predicted_speedup_tpot"].nunique() == 4


def test_adaptive_reads_its_schedules_configuration_and_prices_a_k0_range(measured):
    summary, policy, launch = measured
    assert policy.levels[0].k > 0 and policy.levels[-1].k == 0  # drafts at low load, not at the top
    tpot_of = launch_curves(summary, launch, zero_speedup=0.9).tpot  # the engine's k = 0 price, as the verdict's
    off = summary[summary["config"] == "spec-off"].set_index("concurrency")
    zero = 0.9
    batch = float(off.loc[16, "mean_batch"])  # a measured batch: no interpolation
    assert tpot_of(batch) == (pytest.approx(off.loc[16, "mean_tpot_ms"] / zero), False)
    k4 = summary[summary["config"] == "ngram k=4"].set_index("concurrency")
    assert policy.levels[0].config == "ngram k=4" and tpot_of(1)[0] == pytest.approx(
        float(np.interp(0.0, np.log(k4["mean_batch"]), k4["mean_tpot_ms"])))


def test_a_token_weighted_tpot_is_preferred_and_missing_figures_are_refused(measured):
    summary, _, _ = measured
    assert list(tpot_curve(summary.assign(tpot_weighted_ms=1.0), "spec-off")[1]) == [1.0] * 5  # weighted first
    trace = PlannedTrace(rounds=(TraceRound(arrivals_s=np.array([0.0, 0.1]), output_lens=np.array([8, 8])),))
    weighted = predict_trace(summary.assign(tpot_weighted_ms=summary["mean_tpot_ms"] * 2), trace)
    plain = predict_trace(summary, trace)
    assert weighted["predicted_tpot_ms"].iloc[0] > plain["predicted_tpot_ms"].iloc[0]
    with pytest.raises(ParameterError, match="no 'mean_ttft_ms' column"):
        predict_trace(summary.drop(columns="mean_ttft_ms"), trace)
    with pytest.raises(ParameterError, match="no 'spec-off' rows"):
        predict_trace(summary[summary["config"] != "spec-off"], trace)


@pytest.fixture(scope="module")
def sampled():
    """A sweep over 1–64 on FLAT_COST, its policy as one launch, and a trace of three bursts of 40 with a
    trickle between, run on every configuration: (summary, policy, launch, the trace's records, its runs)."""
    records, summary = sim_sweep(FLAT_COST, [SPEC_OFF, K2, K4], [1, 2, 4, 8, 16, 32, 64])
    verdict = decide(noise_free(summary), engine="simulated")
    assert verdict.kind == "schedule", verdict.name()
    policy, launch = verdict.policy, verdict.launch
    rng = np.random.default_rng(7)
    bursts = [start + rng.uniform(0.0, 0.1, 40) for start in (0.0, 4.0, 8.0)]  # 40 at once, three times
    arrivals = sorted(np.concatenate([*bursts, rng.uniform(0.0, 12.0, 40)]))  # and a trickle between
    trace_records, runs = sim_trace(FLAT_COST, [SPEC_OFF, K2, K4, adaptive_server(launch)], list(arrivals),
                                    list(rng.integers(24, 73, len(arrivals))))
    return summary, policy, launch, trace_records, runs


def test_the_reconstructed_trace_speedup_matches_the_simulated_engines_within_10_percent(sampled):
    summary, _, launch, trace_records, runs = sampled
    predicted = predict_trace(summary, SampledTrace(runs=runs), launch)
    assert set(predicted["config"]) == {"spec-off", "ngram k=2", "ngram k=4", "adaptive"}
    assert not predicted["clamped"].any()  # the trace stays within the measured batches
    check = trace_check(trace_records, n_boot=50)
    table = trace_prediction_table(predicted, check)
    assert set(table["config"]) == {"ngram k=2", "ngram k=4", "adaptive"}
    adaptive = table.set_index("config").loc["adaptive", "measured_speedup_tpot"]
    assert adaptive == check.set_index("config").loc["spec-off", "adaptive_speedup_tpot"]  # adaptive over spec-off
    assert (table["error"] < 0.10).all(), table
    assert trace_median_error(table) == pytest.approx(table["error"].median())


def test_adaptive_reads_each_batch_off_the_configuration_its_schedule_runs_there(sampled):
    summary, policy, launch, _, runs = sampled
    curves = launch_curves(summary, launch)
    for lo, hi, k in launch.ranges:
        for b in (lo, min(hi, 200)):
            config = launch.by_k[k] if k else "spec-off"  # the configuration its range runs
            assert scheduled_k(launch, b) == k and int(summary.set_index("config").loc[config, "k"].iloc[0]) == k
            own = tpot_at(tpot_curve(summary, config), b)
            if k:  # the configuration the policy chose there, read as it was measured
                assert curves.tpot(b) == (pytest.approx(own[0]), own[1])
            else:  # spec-off's step and the k = 0 path's own cost, never faster than spec-off
                assert curves.tpot(b)[0] >= own[0] * (1 - 1e-12) and config == "spec-off"
    assert predict_trace(summary, SampledTrace(runs=runs)).query("config == 'adaptive'").empty  # no launch


def test_a_trace_beyond_the_measured_batches_is_clamped_and_flagged(sampled):
    summary, _, launch, _, runs = sampled
    low = summary[summary["concurrency"] <= 8]
    predicted = predict_trace(low, SampledTrace(runs=runs[runs["config"] != "adaptive"])).set_index("config")
    assert predicted["clamped"].all() and (predicted["clamped_share"] > 0.3).all()
    with pytest.raises(ParameterError, match="no 'spec-off' run"):
        predict_trace(summary, SampledTrace(runs=runs[runs["config"] != "spec-off"]), launch)
