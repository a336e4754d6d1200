"""A level formed as issues 40 and 44 ask — drawn lengths, filler requests holding the level around
the measured ones, every prompt measured every round in a rotated order, only steady requests paired,
the engine's own batch sampled — checked on the simulated engine, where the truth is known: in
virtual time against the sustained load's own figures, and end to end on two simulated servers
against ``expected_speedup``. No wall-clock duration is compared with a tolerance; the end to end
checks compare a ratio, a batch size and which prompts were measured."""

import json

import numpy as np
import pandas as pd
import pytest
from helpers import closed

from specnb.core.errors import ParameterError
from specnb.measure import serving_steady
from specnb.measure.load_shapes import Closed, Lengths, Open, steady_flags
from specnb.measure.serving_load import ClosedFeed
from specnb.measure.serving_steady import batch_columns, level_batch, read_gauge, steady_records
from specnb.measure.serving_sweep import SweepSettings, cycles_of, length_keys
from specnb.serve.simulated.sim_engine import SimConfig, SimCost, SimRequests, SimServer, expected_speedup, run_closed
from specnb.serve.speculation import SPEC_OFF, Speculation

NGRAM3 = Speculation(entry="ngram", k=3, method="ngram", family="ngram")
COST = SimCost(fixed_ms=10.0, per_token_ms=0.5, draft_ms=1.0, acceptance=(0.8, 0.6, 0.4))


def steady(load, records: list[dict]) -> np.ndarray:
    """The steady rule over the virtual-time driver's records (seconds from the run's start)."""
    sent = np.array([r["start_time"] for r in records])
    return steady_flags(load, sent, sent + np.array([r["latency"] for r in records]))


def decode_s_per_token(records: list[dict], keep) -> float:
    return (sum(r["latency"] - r["ttft"] for r, k in zip(records, keep) if k)
            / sum(r["output_tokens"] - 1 for r, k in zip(records, keep) if k))


def tpot_speedup(lengths: list[int], prompt_len: int, c: int) -> float:
    """Spec-off's decode time per token over n-gram k=3's, both closed loops at ``c`` on the same lengths,
    every request counted."""
    requests = SimRequests(prompt_lens=[prompt_len] * len(lengths), output_lens=lengths)
    off, spec = run_closed(COST, SPEC_OFF, requests, c), run_closed(COST, NGRAM3, requests, c)
    return decode_s_per_token(off, [True] * len(lengths)) / decode_s_per_token(spec, [True] * len(lengths))


def filled_run(load, speculation, measured: list[int], fillers: list[int], prompt_len: int):
    """One run as a sweep sends it, in virtual time: the measured requests (``measured`` lengths) with
    the fillers (``fillers`` lengths) around them (``ClosedFeed``); (records: the measured, then the
    fillers sent; steady flags over them)."""
    n, c = len(measured), load.concurrency
    requests = SimRequests(prompt_lens=[prompt_len] * (n + len(fillers)), output_lens=measured + fillers)
    records = run_closed(COST, speculation, requests, c, feed=ClosedFeed(n, len(fillers), c))
    return records, steady(load, records)


def run_lengths(load, n_prompts: int) -> tuple[list[int], list[int]]:
    """A round's measured lengths (per prompt and cycle, as ``run_level`` draws them) and its fillers'."""
    rows = load.requests_for(n_prompts, 0)
    measured = load.lengths.draw(length_keys([f"p{r}" for r in rows], cycles_of(rows)), 0, 0)
    fillers = load.lengths.draw([f"f{j}" for j in range(len(load.fillers_for(n_prompts, 0, len(rows))))], 0, 0,
                                filler=True)
    return measured, fillers


@pytest.mark.parametrize("c", [8, 32])
def test_a_level_held_by_fillers_finds_the_sustained_speedup_where_equal_lengths_do_not(c):
    """Prompts of 64 tokens make a prefill cost more than a decode step. The truth is the load sustained:
    1,500 drawn-length requests, ramp-up and drain a few percent of them. The old level (16 prompts
    or one wave, every request max_tokens long, all counted) runs in lockstep: spec-off's prefills
    batch into TTFT while speculation's land in its neighbours' TPOT — off by 7-11%. A level as the
    sweep forms it (16 prompts in whole cycles to 3 turnovers: 32 and 96 measured, fillers around
    them) has every measured request steady and lands within 3%."""
    load = Closed(concurrency=c, lengths=Lengths(tokens=32))
    truth = tpot_speedup(load.lengths.draw([f"t{i}" for i in range(1500)], 0, 1), 64, c)
    old = tpot_speedup([32] * max(16, c), 64, c)
    measured, fillers = run_lengths(load, 16)
    n = len(measured)
    (off, off_steady), (spec, spec_steady) = (filled_run(load, s, measured, fillers, 64) for s in (SPEC_OFF, NGRAM3))
    assert n == {8: 32, 32: 96}[c] and off_steady[:n].all() and spec_steady[:n].all()
    assert len(off) > n + c and not off_steady[n:n + c].any()  # c leading fillers, more at the end
    new = decode_s_per_token(off[:n], [True] * n) / decode_s_per_token(spec[:n], [True] * n)
    assert new == pytest.approx(truth, rel=0.03)
    assert abs(old / truth - 1) > 0.05


def test_measured_requests_decode_at_batch_c_where_the_drain_and_a_single_wave_do_not():
    """At concurrency 16, spec-off's measured requests cost the step at batch c (a neighbour's 4-token
    prefill now and then) and decode beside c − 1 others or more. The fillers still running when the
    last measured request finished drain: their batch shrinks and speculation's run cheaper steps than
    the sustained load gives — 20% here. One wave of equal requests (the old level at high
    concurrency: 16 prompts, one each) is all drain and ramp-up: 5% cheaper."""
    c = 16
    load = Closed(concurrency=c, lengths=Lengths(tokens=32))
    measured = load.lengths.draw([f"p{i}" for i in range(load.run_requests)], 0, 0)
    fillers = load.lengths.draw([f"f{j}" for j in range(4 * c + len(measured))], 0, 0, filler=True)
    n = len(measured)
    (off, off_steady), (spec, spec_steady) = (filled_run(load, s, measured, fillers, 4) for s in (SPEC_OFF, NGRAM3))
    assert off_steady[:n].all() and spec_steady[:n].all() and n == 3 * c
    tpot_ms = np.mean([r["tpot"] for r in off[:n]]) * 1e3
    assert tpot_ms == pytest.approx(COST.fixed_ms + COST.per_token_ms * c, rel=0.05)
    assert min(r["batch_mean"] for r in off[:n]) >= c - 1
    sustained = np.mean([r["tpot"] for r in spec[:n]])
    sent = np.array([r["start_time"] for r in spec])
    finished = sent + np.array([r["latency"] for r in spec])
    end = load.window(sent, finished)[1]
    drained = [r for r, f in zip(spec[n:], finished[n:]) if f > end]  # fillers the level drained with
    assert drained and np.mean([r["batch_mean"] for r in drained]) < c - 2
    assert np.mean([r["tpot"] for r in drained]) < 0.9 * sustained
    wave = run_closed(COST, NGRAM3, SimRequests(prompt_lens=[4] * c, output_lens=[32] * c), c)
    assert np.mean([r["tpot"] for r in wave]) < 0.95 * sustained


def test_the_feed_sends_c_fillers_then_the_measured_then_fillers_while_one_is_in_flight():
    feed = ClosedFeed(measured=3, fillers=10, concurrency=2)  # fillers are 3 onward
    assert [feed.next(), feed.next()] == [3, 4]  # one per slot: the ramp-up is theirs
    feed.finished(3)
    assert feed.next() == 0
    feed.finished(4)
    assert feed.next() == 1
    feed.finished(0)
    assert feed.next() == 2
    feed.finished(1)
    assert feed.next() == 5  # 2 still runs: the level is held
    feed.finished(2)
    assert feed.next() is None  # no measured request left: this slot stops, the other drains
    feed.finished(5)
    assert feed.next() is None
    capped = ClosedFeed(measured=2, fillers=3, concurrency=2)
    assert [capped.next() for _ in range(4)] == [2, 3, 0, 1]
    capped.finished(0)
    assert capped.next() == 4
    capped.finished(4)
    assert capped.next() is None  # 1 still runs, but the cap is reached: a failing server cannot spin the loop
    bare = ClosedFeed(measured=2, fillers=0, concurrency=4)  # no fillers (a warm-up): the requests, in order
    assert [bare.next() for _ in range(3)] == [0, 1, None]


def test_the_window_runs_from_the_first_completion_to_the_first_completion_after_the_last_send():
    # concurrency 2: fillers f1 (0-3 s) and f2 (0-5 s) ramp up; measured m1 is sent at 3 s and m2 at 5 s;
    # m1 ends at 6 s while m2 runs, so filler f3 is sent then; m2 ends at 8 s and the loop stops; f3 drains
    load = Closed(concurrency=2, turnovers=1)
    sent, finished = np.array([0.0, 0.0, 3.0, 5.0, 6.0]), np.array([3.0, 5.0, 6.0, 8.0, 9.0])
    assert load.window(sent, finished) == (3.0, 8.0)
    assert list(steady_flags(load, sent, finished)) == [False, False, True, True, False]
    sent, finished = sent[:4], finished[:4]  # fillers capped: no f3, the level fell to 1 at 6 s while m2 ran
    assert load.window(sent, finished) == (3.0, 6.0)
    assert list(steady_flags(load, sent, finished)) == [False, False, True, False]
    finished[2] = np.nan  # a request that never finished is never steady
    assert not steady_flags(load, sent, finished)[2]
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


def test_the_batch_mean_leaves_out_the_samples_where_the_engine_idled():
    # at 1 concurrent the engine idles between a request and its successor: a 0 there is no step's batch
    run = batch_columns([(0.5, 1.0), (0.75, 0.0), (1.0, 1.0), (1.25, 0.0), (1.5, 2.0), (3.0, 0.0)], (0.4, 2.0))
    assert run["batch_mean"] == pytest.approx(4.0 / 3) and run["batch_samples"] == 3
    assert np.isnan(batch_columns([(0.5, 0.0)], (0.0, 1.0))["batch_mean"])
    assert len(json.loads(run["batch_trace"])) == 6  # every sample kept


def test_speedups_pair_only_steady_requests_where_the_records_say():
    records = pd.DataFrame({"steady": [True, False, True], "x": [1, 2, 3]})
    assert list(steady_records(records)["x"]) == [1, 3]
    assert list(steady_records(records.drop(columns="steady"))["x"]) == [1, 2, 3]  # a vLLM bench file


def test_a_sweep_on_two_simulated_servers_finds_the_batch_and_the_speedup_the_cost_model_gives(monkeypatch):
    """Spec-off and n-gram k=3 at concurrency 4, 32 tokens drawn over [16, 48], 20 prompts (each its own
    acceptance draws, so their mean is the cost model's), the engine at 2x real time, its gauge
    sampled every 50 ms. The engine's batch is c less a slot's idle step or two between a request
    and its successor; the TPOT speedup is the cost model's at batch c (virtual time gives 2% below)."""
    from specnb.measure.serving_stats import summarise_sweep
    from specnb.measure.serving_sweep import Target, run_sweep

    monkeypatch.setattr(serving_steady, "BATCH_EVERY_S", 0.05)
    c, cost = 4, SimCost(fixed_ms=20.0, per_token_ms=1.0, draft_ms=1.0, acceptance=(0.8, 0.6, 0.4), speed=2.0)
    prompts = pd.DataFrame({"prompt": [f"prompt {i} words" for i in range(20)], "category": "a"})
    with SimServer(SimConfig(speculation=SPEC_OFF, cost=cost)) as off, \
            SimServer(SimConfig(speculation=NGRAM3, cost=cost)) as spec:
        targets = [Target(url=s.url, engine="simulated", model=s.model, speculation=s.config.speculation)
                   for s in (off, spec)]
        sweep = run_sweep(targets, prompts, closed(c, tokens=32, range_ratio=0.5))
    measured = sweep.records[~sweep.records["filler"]]
    assert sweep.stopped == "" and len(measured) == 2 * 20 and sweep.records["success"].all()  # whole cycles: 20
    assert measured["steady"].all() and not sweep.records.loc[sweep.records["filler"], "steady"].any()
    assert sweep.records["filler"].sum() >= 2 * c  # c leading fillers a run, more while the last ones run
    assert (sweep.runs["batch_samples"] > 0).all()
    assert ((c - 1 <= sweep.runs["batch_mean"]) & (sweep.runs["batch_mean"] <= c)).all()
    trace = json.loads(sweep.runs["batch_trace"].iloc[0])
    assert len(trace) > sweep.runs["batch_samples"].iloc[0] and all(0 <= b <= c for _, b in trace)
    row = summarise_sweep(sweep.records, sweep.runs, n_boot=100).set_index("config").loc["ngram k=3"]
    assert c - 1 <= row["mean_batch"] <= c and row["turnovers"] == 3
    assert row["paired_requests"] == row["steady_requests"] == row["completed"] == 20  # fillers never counted
    assert row["speedup_tpot"] == pytest.approx(expected_speedup(cost, NGRAM3, c), rel=0.15)  # 1.60


def test_every_prompt_is_measured_every_round_at_every_level_in_a_rotated_order():
    """8 prompts in 8 categories at 1 and 4 concurrent, 3 rounds, on two simulated servers: every round
    of every level measures each prompt, as often as every other (the same mix at each level), and
    each round starts at another prompt; fillers are recorded, never paired."""
    from specnb.measure.serving_stats import decode_timed, paired_requests, summarise_sweep
    from specnb.measure.serving_sweep import Target, run_sweep

    cost = SimCost(fixed_ms=10.0, per_token_ms=0.5, draft_ms=1.0, acceptance=(0.8, 0.6, 0.4), speed=20.0)
    prompts = pd.DataFrame({"prompt": [f"prompt {i} says {'w ' * i}" for i in range(8)],
                            "id": [f"q{i}" for i in range(8)], "category": [f"c{i}" for i in range(8)]})
    with SimServer(SimConfig(speculation=SPEC_OFF, cost=cost)) as off, \
            SimServer(SimConfig(speculation=NGRAM3, cost=cost)) as spec:
        targets = [Target(url=s.url, engine="simulated", model=s.model, speculation=s.config.speculation)
                   for s in (off, spec)]
        sweep = run_sweep(targets, prompts, closed(1, 4, tokens=8, range_ratio=0.5), SweepSettings(rounds=3))
    records = sweep.records
    assert sweep.stopped == "" and records["success"].all()
    counted = records[records["steady"]]
    for (config, level, r), group in counted.groupby(["config", "concurrency", "round"]):
        counts = group["prompt_id"].value_counts()
        assert sorted(counts.index) == sorted(prompts["id"]), (config, level, r)  # every prompt, every round
        assert counts.nunique() == 1, (config, level, r)  # each as often: the same mix at each level
    measured = records[~records["filler"]]
    firsts = measured[measured["position"] == 0].groupby(["config", "concurrency"])["prompt_id"].nunique()
    assert (firsts == 3).all()  # each round starts at another prompt
    summary = summarise_sweep(records, sweep.runs, n_boot=50)
    assert (summary["prompts_measured"] == 8).all() and (summary["prompts_total"] == 8).all()
    timed = decode_timed(records)
    for level in (1, 4):
        paired = paired_requests(timed, "ngram k=3", level, "spec-off")
        ours = measured[(measured["config"] == "ngram k=3") & (measured["concurrency"] == level)]
        assert not paired["filler"].any() and len(paired) == len(ours) == 3 * {1: 8, 4: 16}[level]  # one per request
        assert (paired["max_tokens"] == paired["max_tokens_base"]).all()  # the same prompt and cycle, the same length
        assert (paired["generated_text"] == paired["generated_text_base"]).all()
