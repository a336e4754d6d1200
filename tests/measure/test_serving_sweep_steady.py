"""A level formed as issue 40 asks — drawn lengths, runs long enough for a steady window, only steady
requests paired, the engine's own batch sampled — checked on the simulated engine, where the truth
is known: in virtual time against the sustained load's own figures, and end to end on two simulated
servers against ``expected_speedup``. No wall-clock duration is compared with a tolerance; the end
to end check compares a ratio and a batch size."""

import json

import numpy as np
import pandas as pd
import pytest
from helpers import closed

from specnb.core.errors import ParameterError
from specnb.engine.engines.seam import SPEC_OFF, Speculation
from specnb.engine.simulated import SimConfig, SimCost, SimServer, expected_speedup, run_closed
from specnb.measure import serving_steady
from specnb.measure.load_shapes import Closed, Lengths, Open, steady_flags
from specnb.measure.serving_steady import batch_columns, level_batch, read_gauge, steady_records

NGRAM3 = Speculation(entry="ngram", k=3, method="ngram", family="ngram")
COST = SimCost(fixed_ms=10.0, per_token_ms=0.5, draft_ms=1.0, acceptance=(0.8, 0.6, 0.4))


def steady(load, records: list[dict]) -> np.ndarray:
    """The steady rule over the virtual-time driver's records (seconds from the run's start)."""
    sent = np.array([r["start_time"] for r in records])
    return steady_flags(load, sent, sent + np.array([r["latency"] for r in records]))


def decode_s_per_token(records: list[dict], keep) -> float:
    return (sum(r["latency"] - r["ttft"] for r, k in zip(records, keep) if k)
            / sum(r["output_tokens"] - 1 for r, k in zip(records, keep) if k))


def tpot_speedup(lengths: list[int], prompt_len: int, c: int, keep=None) -> float:
    """Spec-off's decode time per token over n-gram k=3's, both closed loops at ``c`` on the same lengths,
    over the requests ``keep`` says (a function of the load and the two runs' records; None: all)."""
    off = run_closed(COST, SPEC_OFF, [prompt_len] * len(lengths), lengths, c)
    spec = run_closed(COST, NGRAM3, [prompt_len] * len(lengths), lengths, c)
    mask = [True] * len(lengths) if keep is None else keep(off, spec)
    return decode_s_per_token(off, mask) / decode_s_per_token(spec, mask)


@pytest.mark.parametrize("c", [8, 32])
def test_a_level_in_its_steady_window_finds_the_sustained_speedup_where_equal_lengths_do_not(c):
    """Prompts of 64 tokens make a prefill cost more than a decode step. The truth is the load sustained:
    1,500 drawn-length requests, ramp-up and drain a few percent of them. The old level (16 prompts
    or one wave, every request max_tokens long, all counted) runs in lockstep: spec-off's prefills
    batch into TTFT while speculation's land in its neighbours' TPOT — off by 7-11%."""
    load = Closed(concurrency=c, lengths=Lengths(tokens=32))
    truth = tpot_speedup(load.lengths.draw([f"t{i}" for i in range(1500)], 0, 1), 64, c)
    old = tpot_speedup([32] * max(16, c), 64, c)
    n = len(load.requests_for([f"p{i}" for i in range(16)]))  # (3 + 2)·c: 40 and 160
    both = lambda off, spec: steady(load, off) & steady(load, spec)  # noqa: E731
    new = tpot_speedup(load.lengths.draw([f"p{i}" for i in range(n)], 0, 0), 64, c, keep=both)
    assert new == pytest.approx(truth, rel=0.03)
    assert abs(old / truth - 1) > 0.05


def test_steady_requests_decode_at_batch_c_where_the_drain_and_a_single_wave_do_not():
    """At concurrency 16, spec-off's steady requests cost the step at batch c (a neighbour's 4-token
    prefill now and then) and decode beside c − 1 others or more. The requests the rule leaves out
    at the end drain: their batch shrinks and speculation's run cheaper steps than the sustained load
    gives — 20% here. One wave of equal requests (the old level at high concurrency: 16 prompts, one
    each) is all drain and ramp-up: 8% cheaper."""
    c = 16
    load = Closed(concurrency=c, lengths=Lengths(tokens=32))
    lengths = load.lengths.draw([f"p{i}" for i in range(load.run_requests)], 0, 0)
    off = run_closed(COST, SPEC_OFF, [4] * len(lengths), lengths, c)
    spec = run_closed(COST, NGRAM3, [4] * len(lengths), lengths, c)
    off_steady, spec_steady = steady(load, off), steady(load, spec)
    assert off_steady.sum() >= 2 * c and spec_steady.sum() >= 2 * c  # about turnovers · c of (3 + 2)·c
    tpot_ms = np.mean([r["tpot"] for r, s in zip(off, off_steady) if s]) * 1e3
    assert tpot_ms == pytest.approx(COST.fixed_ms + COST.per_token_ms * c, rel=0.05)
    assert min(r["batch_mean"] for r, s in zip(off, off_steady) if s) >= c - 1
    sustained = np.mean([r["tpot"] for r, s in zip(spec, spec_steady) if s])
    drained = [r for r, s in zip(spec, spec_steady) if not s and r["start_time"] > 0]  # sent after the first wave
    assert np.mean([r["batch_mean"] for r in drained]) < c - 2
    assert np.mean([r["tpot"] for r in drained]) < 0.9 * sustained
    wave = run_closed(COST, NGRAM3, [4] * c, [32] * c, c)
    assert np.mean([r["tpot"] for r in wave]) < 0.95 * sustained


def test_the_window_runs_from_the_first_completion_to_the_last_send():
    # 4 requests at concurrency 2: a (0-3 s) and b (0-5 s) ramp up; c is sent at 3 s when a finishes and
    # ends at 6 s, after the last send (d at 5 s): c drains, and so does d
    load = Closed(concurrency=2, turnovers=1)
    sent, finished = np.array([0.0, 0.0, 3.0, 5.0]), np.array([3.0, 5.0, 6.0, 7.0])
    assert load.window(sent, finished) == (3.0, 5.0) and list(steady_flags(load, sent, finished)) == [False] * 4
    finished[2] = 4.5  # c now ends before d is sent
    assert list(steady_flags(load, sent, finished)) == [False, False, True, False]
    finished[2] = np.nan  # a request that never finished is never steady
    assert not steady_flags(load, sent, finished).any()
    assert steady_flags(Open(rate=1.0), sent, np.array([3.0, 5.0, 6.0, np.nan])).tolist() == [True] * 3 + [False]


@pytest.mark.parametrize("turnovers", [0, -1, 1.5, True])
def test_a_window_that_would_hold_no_request_is_refused_in_one_line(turnovers):
    with pytest.raises(ParameterError, match="turnovers must be a whole number >= 1") as err:
        Closed(concurrency=4, turnovers=turnovers)
    assert "\n" not in str(err.value) and repr(turnovers) in str(err.value)


def test_the_batch_gauge_is_read_summed_over_labels_and_averaged_inside_the_window():
    text = ('vllm:num_requests_running{model_name="m",engine="0"} 3.0\n'
            'vllm:num_requests_running{model_name="m",engine="1"} 2.0\nvllm:num_requests_waiting 7\n')
    assert read_gauge(text, "vllm:num_requests_running") == 5.0 and read_gauge(text, "llamacpp:x") is None
    run = batch_columns([(0.1, 1.0), (0.5, 4.0), (0.9, 3.0), (1.4, 1.0)], (0.4, 1.0))
    assert run["batch_mean"] == 3.5 and run["batch_samples"] == 2 and len(json.loads(run["batch_trace"])) == 4
    runs = pd.DataFrame([run, batch_columns([(0.5, 8.0)], (0.0, 1.0)), batch_columns([], (0.0, 1.0))])
    assert level_batch(runs) == pytest.approx((3.5 * 2 + 8.0) / 3) and np.isnan(runs["batch_mean"].iloc[2])
    assert np.isnan(level_batch(pd.DataFrame({"config": ["a"]})))  # tables from before the gauge


def test_speedups_pair_only_steady_requests_where_the_records_say():
    records = pd.DataFrame({"steady": [True, False, True], "x": [1, 2, 3]})
    assert list(steady_records(records)["x"]) == [1, 3]
    assert list(steady_records(records.drop(columns="steady"))["x"]) == [1, 2, 3]  # a vLLM bench file


def test_a_sweep_on_two_simulated_servers_finds_the_batch_and_the_speedup_the_cost_model_gives(monkeypatch):
    """Spec-off and n-gram k=3 at concurrency 4, 32 tokens drawn over [16, 48], 20 prompts (each its own
    acceptance draws, so their mean is the cost model's), the engine at 2x real time, its gauge
    sampled every 50 ms. The engine's batch is c less a slot's idle step or two between a request
    and its successor; the TPOT speedup is the cost model's at batch c (virtual time gives 2% below)."""
    from specnb.measure.serving_summary import summarise_sweep
    from specnb.measure.serving_sweep import Target, run_sweep

    monkeypatch.setattr(serving_steady, "BATCH_EVERY_S", 0.05)
    c, cost = 4, SimCost(fixed_ms=20.0, per_token_ms=1.0, draft_ms=1.0, acceptance=(0.8, 0.6, 0.4), speed=2.0)
    prompts = pd.DataFrame({"prompt": [f"prompt {i} words" for i in range(20)], "category": "a"})
    with SimServer(SimConfig(speculation=SPEC_OFF, cost=cost)) as off, \
            SimServer(SimConfig(speculation=NGRAM3, cost=cost)) as spec:
        targets = [Target(url=s.url, engine="simulated", model=s.model, speculation=s.config.speculation)
                   for s in (off, spec)]
        sweep = run_sweep(targets, prompts, closed(c, tokens=32, range_ratio=0.5))
    assert sweep.stopped == "" and len(sweep.records) == 2 * 5 * c and sweep.records["success"].all()
    assert 0 < sweep.records["steady"].sum() < len(sweep.records)  # ramp-up and drain kept, marked
    assert (sweep.runs["batch_samples"] > 0).all()
    assert ((c - 1 <= sweep.runs["batch_mean"]) & (sweep.runs["batch_mean"] <= c)).all()
    trace = json.loads(sweep.runs["batch_trace"].iloc[0])
    assert len(trace) > sweep.runs["batch_samples"].iloc[0] and all(0 <= b <= c for _, b in trace)
    row = summarise_sweep(sweep.records, sweep.runs, n_boot=100).set_index("config").loc["ngram k=3"]
    assert c - 1 <= row["mean_batch"] <= c and row["turnovers"] == 3
    assert 0 < row["paired_requests"] <= row["steady_requests"] < row["completed"]
    assert row["speedup_tpot"] == pytest.approx(expected_speedup(cost, NGRAM3, c), rel=0.15)  # 1.60
