"""A trace forecast made before the trace is sent: the queue worked by hand, the requests it draws
held against the ones a sweep sends, and the forecast held against the simulated engine's trace in
virtual time, where the truth is known."""

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from helpers import sim_sweep, sim_trace

from specnb.core.errors import ParameterError
from specnb.measure import serving_load, serving_sweep
from specnb.measure.load_shapes import Lengths, Open
from specnb.measure.serving_load import RequestRecord, Target
from specnb.measure.serving_stats import trace_check, trace_rate
from specnb.measure.serving_steady import Run
from specnb.measure.serving_sweep import SweepHooks, SweepSettings
from specnb.predict.noise_aware import noise_aware_policy
from specnb.predict.serving_launch import zero_range_speedup
from specnb.predict.serving_policy import policy_ranges, policy_switch
from specnb.predict.trace_forecast import (
    TraceRound,
    adaptive_readers,
    forecast_trace,
    launch_base,
    simulate,
    trace_rounds,
)
from specnb.predict.trace_prediction import predict_trace, tpot_curve, trace_median_error, trace_prediction_table
from specnb.serve.simulated.sim_engine import SimCost, crossover
from specnb.serve.speculation import SPEC_OFF, Speculation

# every admitted prompt costs 8 ms of prefill in its step; n-gram k = 4 stops paying at a batch of 8, k = 2 at 14,
# inside the measured 1–16; a k = 0 step still pays the speculative path's 0.5 ms (draft_ms)
COST = SimCost(fixed_ms=10.0, per_token_ms=1.0, prefill_per_token_ms=0.25, draft_ms=0.5, acceptance=(0.7,))
PROMPT_LEN = 32
K2 = Speculation(entry="ngram", k=2, method="ngram", family="ngram")
K4 = Speculation(entry="ngram", k=4, method="ngram", family="ngram")
PROMPTS = pd.DataFrame({"prompt": [f"prompt {i}" for i in range(24)], "id": [f"p{i}" for i in range(24)]})


def test_the_queue_shares_decoding_among_the_batch_and_waits_each_arrival_its_ttft():
    trace = TraceRound(arrivals_s=np.array([0.05, 0.0]), output_lens=np.array([6, 11]))  # out of order on purpose
    # TPOT 10 ms alone, 20 ms two at a time; TTFT 10 ms with nothing decoding, 20 ms with one
    queue = simulate(trace, lambda b: (10.0 * b, b > 1), lambda b: 10.0 * (1 + b))
    # A decodes alone from 0.01 s to 0.07 s (B's first token): 6 of its 10 tokens; then both at 20 ms a token:
    # A's 4 left by 0.15 s, B's 4 of 5 by then and its last alone by 0.16 s
    assert queue.decode_tokens == 15
    assert queue.sequence_s == pytest.approx(0.06 + 2 * 0.08 + 0.01)
    assert queue.busy_s == pytest.approx(0.15) and queue.clamped_s == pytest.approx(2 * 0.08)


def test_the_forecast_draws_the_requests_the_sweep_will_send(monkeypatch):
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
    forecast = trace_rounds(load, prompts, rounds=2, seed=3)
    assert len(sent) == len(forecast) == 2
    for (arrivals, lengths), one in zip(sent, forecast):
        np.testing.assert_array_equal(one.arrivals_s, arrivals)
        assert list(one.output_lens) == lengths
    assert not np.array_equal(forecast[0].arrivals_s, forecast[1].arrivals_s)  # each round its own draw


@pytest.fixture(scope="module")
def measured():
    """The closed-loop levels (1–16) and the policy from them, as the policy check has them before its trace."""
    assert 1 < crossover(COST, K4, 64) < crossover(COST, K2, 64) < 16
    records, summary = sim_sweep(COST, [SPEC_OFF, K2, K4], [1, 2, 4, 8, 16], prompt_len=PROMPT_LEN)
    return summary, noise_aware_policy(records, summary)


def traced(summary, policy, in_flight: float):
    """A bursty trace (burstiness 0.25, 48 requests, two rounds) at the rate that keeps ``in_flight``
    requests on spec-off: forecast first, from the summary and the policy alone, then run on the
    simulated engine; (forecast, the trace's records, its runs)."""
    load = Open(rate=trace_rate(summary, in_flight), burstiness=0.25, lengths=Lengths(tokens=48), seed=0)
    rounds = trace_rounds(load, pd.concat([PROMPTS] * 2, ignore_index=True), rounds=2, seed=0)
    forecast = forecast_trace(summary, rounds, policy)  # before any of the trace exists
    adaptive = Speculation(entry="ngram", k=4, method="ngram", family="ngram", adaptive=True,
                           schedule=tuple(tuple(r) for r in policy_ranges(policy)))
    runs = [sim_trace(replace(COST, seed=r), [SPEC_OFF, K2, K4, adaptive], list(one.arrivals_s),
                      list(one.output_lens), prompt_len=PROMPT_LEN, round_index=r) for r, one in enumerate(rounds)]
    return forecast, pd.concat([r[0] for r in runs], ignore_index=True), pd.concat([r[1] for r in runs],
                                                                                  ignore_index=True)


@pytest.mark.parametrize("load", ["the policy check's", "four in flight"])
def test_the_forecast_trace_speedups_match_the_simulated_engines_trace(measured, load):
    """Median error ≤ 10% over the configurations (the target) and ≤ 15% each: the forecast adds to the
    reconstruction's error (TPOT(b) read off closed-loop levels) its own queue — processor sharing with
    TTFT(b), where the engine steps and prefills in batches — and, for adaptive, the k = 0 price
    (``zero_range_speedup`` scales the path's cost with the step, the simulated engine pays it flat).
    At the policy check's rate (its switch-off load in flight) bursts pile past the measured 16, so half
    the decoding is read off a clamped end: k = 4, whose TPOT climbs fastest there, is the worst."""
    summary, policy = measured
    in_flight = policy_switch(policy) if load == "the policy check's" else 4.0
    forecast, records, runs = traced(summary, policy, in_flight)
    assert set(forecast["config"]) == {"spec-off", "ngram k=2", "ngram k=4", "adaptive"}
    table = trace_prediction_table(forecast, trace_check(records, n_boot=50))
    assert set(table["config"]) == {"ngram k=2", "ngram k=4", "adaptive"}
    assert trace_median_error(table) <= 0.10 and (table["error"] <= 0.15).all(), table
    # the queue fills as the engine's did: its mean batch is within 15% of the batches the trace held
    held = predict_trace(summary, runs, policy).set_index("config")["trace_mean_batch"]
    mean_batch = forecast.set_index("config")["trace_mean_batch"]
    assert ((mean_batch / held.reindex(mean_batch.index) - 1).abs() <= 0.15).all(), (mean_batch, held)


def test_adaptive_reads_its_schedules_configuration_and_prices_a_k0_range(measured):
    summary, policy = measured
    assert policy.levels[0].k > 0 and policy.levels[-1].k == 0  # drafts at low load, not at the top
    assert launch_base(summary, policy) == "ngram k=4"  # the family's largest k, as adaptive_config launches
    tpot_of, _ = adaptive_readers(summary, policy)
    off = summary[summary["config"] == "spec-off"].set_index("concurrency")
    zero = zero_range_speedup(summary, "ngram k=4", [16])[16]
    batch = float(off.loc[16, "mean_batch"])  # a measured batch: no interpolation
    assert tpot_of(batch) == (pytest.approx(off.loc[16, "mean_tpot_ms"] / zero), False)
    k4 = summary[summary["config"] == "ngram k=4"].set_index("concurrency")
    assert policy.levels[0].config == "ngram k=4" and tpot_of(1)[0] == pytest.approx(
        float(np.interp(0.0, np.log(k4["mean_batch"]), k4["mean_tpot_ms"])))


def test_a_token_weighted_tpot_is_preferred_and_missing_figures_are_refused(measured):
    summary, policy = measured
    assert list(tpot_curve(summary.assign(tpot_weighted_ms=1.0), "spec-off")[1]) == [1.0] * 5  # weighted first
    trace = [TraceRound(arrivals_s=np.array([0.0, 0.1]), output_lens=np.array([8, 8]))]
    weighted = forecast_trace(summary.assign(tpot_weighted_ms=summary["mean_tpot_ms"] * 2), trace)
    plain = forecast_trace(summary, trace)
    assert weighted["predicted_tpot_ms"].iloc[0] > plain["predicted_tpot_ms"].iloc[0]
    with pytest.raises(ParameterError, match="no 'mean_ttft_ms' column"):
        forecast_trace(summary.drop(columns="mean_ttft_ms"), trace)
    with pytest.raises(ParameterError, match="no 'spec-off' rows"):
        forecast_trace(summary[summary["config"] != "spec-off"], trace)
