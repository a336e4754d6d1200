"""The simulated serving engine: its scheduler and counters (``SimEngine``), the virtual-time loops
against the stated truth (``expected_speedup``), and its server end to end under the project's own
client. Anything about time uses virtual time; no wall-clock duration is compared with a tolerance."""

import json
import os
import time
import zlib
from collections import Counter
from dataclasses import replace

import httpx
import numpy as np
import pytest

from specnb.core.errors import ParameterError
from specnb.serve import processes
from specnb.serve.engines import SPEC_OFF, Speculation
from specnb.serve.simulated import (
    SimConfig,
    SimCost,
    SimEngine,
    SimRequest,
    SimServer,
    crossover,
    expected_speedup,
    expected_tokens,
    run_closed,
    run_open,
    token_text,
)

NGRAM3 = Speculation(entry="ngram", k=3, method="ngram")
COST = SimCost(fixed_ms=10.0, per_token_ms=0.5, draft_ms=1.0, acceptance=(0.8, 0.6, 0.4))
COST_WITH_PREFILL = replace(COST, prefill_per_token_ms=0.2)


def requests(n: int, prompt_len: int = 4, max_tokens: int = 16) -> list[SimRequest]:
    return [SimRequest(id=i, prompt_len=prompt_len, max_tokens=max_tokens, key=1000 + i) for i in range(n)]


def drain(engine: SimEngine) -> list:
    steps = []
    while engine.busy:
        steps.append(engine.step())
    return steps


# ------------------------------------------------------------------ the scheduler


def test_admission_is_first_come_first_served_up_to_max_num_seqs_and_prefill_gives_the_first_token():
    engine = SimEngine(SimCost(fixed_ms=10.0, per_token_ms=0.5, max_num_seqs=4), SPEC_OFF)
    for request in requests(6, prompt_len=8):
        engine.add(request)
    first = engine.step()
    assert first.prefilled == (0, 1, 2, 3) and first.emitted == dict.fromkeys(range(4), 1)
    assert first.batch == 0 and first.waiting == 2
    assert first.duration_ms == pytest.approx(10.0 + 0.5 * 4 * 8)  # only prompt tokens in the batch
    second = engine.step()
    assert second.prefilled == () and second.batch == 4 and second.waiting == 2  # no free slot yet
    assert second.duration_ms == pytest.approx(10.0 + 0.5 * 4)
    assert engine.now_ms == pytest.approx(first.duration_ms + second.duration_ms)


def test_a_request_waits_for_a_slot_and_joins_the_batch_when_one_frees():
    engine = SimEngine(SimCost(max_num_seqs=1), SPEC_OFF)
    engine.add(SimRequest(id=0, prompt_len=2, max_tokens=2))
    engine.add(SimRequest(id=1, prompt_len=2, max_tokens=2))
    steps = drain(engine)
    assert [s.prefilled for s in steps] == [(0,), (), (1,), ()]
    assert [s.finished for s in steps] == [(), (0,), (), (1,)]


def test_k_follows_the_schedule_by_the_running_batch_size():
    schedule = Speculation(entry="ngram", k=4, method="ngram", schedule=((1, 2, 3), (3, 6, 1)))
    assert [schedule.k_at(b) for b in (1, 2, 3, 6, 7)] == [3, 3, 1, 1, 4]  # beyond the ranges: k
    assert SPEC_OFF.k_at(1) == 0 and NGRAM3.k_at(100) == 3
    engine = SimEngine(COST, schedule)
    for request in requests(2, max_tokens=200):
        engine.add(request)
    assert engine.step().k == 0  # prefill only: nothing decodes
    assert engine.step().k == 3  # batch 2
    for request in requests(6, max_tokens=200)[2:]:
        engine.add(request)
    joined = engine.step()
    assert joined.batch == 2 and joined.k == 3  # the newcomers are prefilled, not yet in the decode batch
    assert engine.step().batch == 6 and engine.step().k == 1


def test_counters_add_up_as_vllm_counts_them():
    engine = SimEngine(COST, NGRAM3)
    for request in requests(12, max_tokens=40):
        engine.add(request)
    steps = drain(engine)
    c = engine.counters
    assert c["spec_decode_num_drafts_total"] == sum(s.batch for s in steps if s.k > 0)  # one per sequence per step
    assert c["spec_decode_num_draft_tokens_total"] == 3 * c["spec_decode_num_drafts_total"]
    assert 0 < c["spec_decode_num_accepted_tokens_total"] <= c["spec_decode_num_draft_tokens_total"]
    assert sum(engine.accepted_per_pos) == c["spec_decode_num_accepted_tokens_total"]
    assert engine.accepted_per_pos == sorted(engine.accepted_per_pos, reverse=True)  # a later position is reached less
    assert c["generation_tokens_total"] == 12 * 40 and c["prompt_tokens_total"] == 12 * 4
    assert c["steps_total"] == sum(1 for s in steps if s.batch) and c["batch_size_sum"] == sum(s.batch for s in steps)


def streamed_texts(speculation: Speculation, n: int = 6, ignore_eos: bool = True) -> tuple[dict, dict]:
    """Each request's text as its chunks arrived, and its number of chunks."""
    engine = SimEngine(COST, speculation)
    sent = {r.id: engine.add(SimRequest(id=r.id, prompt_len=4, max_tokens=64, ignore_eos=ignore_eos, key=r.key))
            for r in requests(n)}
    texts, chunks, done = dict.fromkeys(sent, ""), Counter(), Counter()
    for step in drain(engine):
        for rid, count in step.emitted.items():
            texts[rid] += engine.text(sent[rid], done[rid], done[rid] + count)
            done[rid] += count
            chunks[rid] += 1
    return texts, dict(chunks)


def test_speculation_is_lossless_and_fewer_chunks_carry_the_same_text():
    off_text, off_chunks = streamed_texts(SPEC_OFF)
    spec_text, spec_chunks = streamed_texts(NGRAM3)
    assert spec_text == off_text and off_text[0] == "".join(token_text(1000, i) for i in range(64))
    assert all(off_chunks[r] == 64 for r in off_chunks) and sum(spec_chunks.values()) < sum(off_chunks.values())


def test_without_ignore_eos_a_request_stops_at_a_length_fixed_by_its_prompt():
    texts, _ = streamed_texts(SPEC_OFF, ignore_eos=False)
    lengths = [len(t.split()) for t in texts.values()]
    assert lengths == [min(64, 8 + (1000 + i) % 56) for i in range(6)]
    assert streamed_texts(NGRAM3, ignore_eos=False)[0] == texts


def test_a_prompt_accepts_the_same_way_whatever_the_load():
    def chunk_sizes(crowd: int) -> list[int]:
        engine = SimEngine(SimCost(acceptance=(0.7,)), NGRAM3)
        for request in [SimRequest(id=0, prompt_len=4, max_tokens=64, key=42), *requests(crowd)[1:]]:
            engine.add(request)
        return [s.emitted[0] for s in drain(engine) if 0 in s.emitted]

    alone, crowded = chunk_sizes(1), chunk_sizes(16)
    assert alone == crowded and len(set(alone)) > 1  # same draws, and they do vary


def test_a_cost_with_an_impossible_value_is_refused():
    with pytest.raises(ParameterError, match="acceptance"):
        SimCost(acceptance=(1.5,))
    with pytest.raises(ParameterError, match="max_num_seqs"):
        SimCost(max_num_seqs=0)
    with pytest.raises(ParameterError, match="launch_jitter"):
        SimCost(launch_jitter=-0.1)


def test_prompts_differ_in_acceptance_each_fixed_by_its_key_and_a_resent_prompt_accepts_as_before():
    cost = SimCost(acceptance=(0.7, 0.5), prompt_acceptance_spread=1.0)
    per_key = [cost.prompt_acceptance(key) for key in range(40)]
    assert per_key == [cost.prompt_acceptance(key) for key in range(40)]  # a function of (seed, key)
    firsts = np.array([a[0] for a in per_key])
    assert firsts.std() > 0.1 and 0 < firsts.min() and firsts.max() < 1
    assert all((a[0] > 0.7) == (a[1] > 0.5) for a in per_key)  # one shift per prompt, every position
    assert SimCost(acceptance=(0.7, 0.5)).prompt_acceptance(3) == (0.7, 0.5)  # spread 0: the cost's own
    assert SimCost(acceptance=(1.0, 0.0), prompt_acceptance_spread=2.0).prompt_acceptance(3) == (1.0, 0.0)
    # six prompts sent twice (rounds): each round accepts exactly as the first; prompts differ
    keys = [k for _ in range(2) for k in range(6)]
    records = run_closed(cost, NGRAM3, [8] * 12, [48] * 12, 1, keys=keys)
    gaps = [r["latency"] - r["ttft"] for r in records]
    assert gaps[:6] == pytest.approx(gaps[6:]) and len({round(g, 6) for g in gaps[:6]}) > 1


def test_every_step_of_a_launch_carries_its_one_factor_and_launches_differ():
    cost = replace(COST, launch_jitter=0.05, prefill_per_token_ms=0.2)
    base = run_closed(COST_WITH_PREFILL, NGRAM3, [8] * 12, [24] * 12, 3)
    factors = []
    for seed in range(4):
        launched = replace(cost, launch_seed=seed)
        records = run_closed(launched, NGRAM3, [8] * 12, [24] * 12, 3)
        factor = launched.launch_factor()
        assert [r["latency"] for r in records] == pytest.approx([factor * r["latency"] for r in base])
        assert [r["ttft"] for r in records] == pytest.approx([factor * r["ttft"] for r in base])
        assert [r["output_tokens"] for r in records] == [r["output_tokens"] for r in base]  # only speed changes
        factors.append(factor)
    assert len(set(factors)) == 4 and all(0.8 < f < 1.25 for f in factors)
    assert replace(COST, launch_seed=7).launch_factor() == 1.0  # no jitter: every launch alike


def test_each_simulated_server_started_is_a_launch_of_its_own():
    cost = SimCost(launch_jitter=0.03)
    off, twin = SimConfig(speculation=SPEC_OFF, cost=cost), SimConfig(speculation=Speculation(aa_twin=True), cost=cost)
    seeds = [SimServer(c).cost.launch_seed for c in (off, off, twin)]  # built, never started
    assert len(set(seeds)) == 3
    server = SimServer(off)
    assert replace(server.cost, launch_seed=cost.launch_seed) == cost  # only the launch's seed is its own
    command = server.command()
    assert json.loads(command[command.index("--cost") + 1])["launch_seed"] == server.cost.launch_seed
    assert twin.name == "spec-off-aa" and not twin.speculative


# ------------------------------------------------------------------ virtual-time loops and the truth


def neighbours(records: list[dict]) -> float:
    """Mean number of other requests that started at the same (virtual) instant."""
    starts = Counter(r["start_time"] for r in records)
    return float(np.mean([starts[r["start_time"]] - 1 for r in records]))


def test_a_closed_loop_at_equal_lengths_runs_in_lockstep_and_drawn_lengths_break_it():
    c, n, length = 8, 64, 32
    drawn_lens = np.random.default_rng(0).integers(length // 2, 3 * length // 2 + 1, n)
    fixed = run_closed(COST, SPEC_OFF, [4] * n, [length] * n, c)
    drawn = run_closed(COST, SPEC_OFF, [4] * n, drawn_lens, c)
    assert neighbours(fixed) == c - 1  # every wave starts together: what a serving study must avoid
    assert neighbours(drawn) < (c - 1) / 4


def test_expected_speedup_on_a_hand_worked_case_and_its_crossover():
    # E[tokens per step] = 1 + 0.8 + 0.8·0.6 + 0.8·0.6·0.4 = 2.472
    assert expected_tokens(COST, 3) == pytest.approx(2.472)
    # b = 1: off = 10 + 0.5·1 = 10.5 ms; spec = 10 + 0.5·1·4 + 1 = 13 ms → 2.472 · 10.5 / 13
    assert expected_speedup(COST, NGRAM3, 1) == pytest.approx(2.472 * 10.5 / 13)
    # speedup(b) = 2.472 (10 + 0.5 b) / (11 + 2 b) < 1  ⇔  b > 13.72 / 0.764 = 17.96 → 18
    assert expected_speedup(COST, NGRAM3, 17) > 1 > expected_speedup(COST, NGRAM3, 18)
    assert crossover(COST, NGRAM3, 64) == 18 and crossover(COST, NGRAM3, 17) is None
    # k = 0 from batch 9 still pays vLLM's speculative path: 1 · (10 + 4.5) / (10 + 4.5 + 1) < 1
    scheduled = Speculation(entry="ngram", k=3, method="ngram", schedule=((1, 8, 3), (9, 64, 0)))
    assert expected_speedup(COST, scheduled, 9) == pytest.approx(14.5 / 15.5)
    assert crossover(COST, scheduled, 64) == 9


def test_a_closed_loop_at_high_concurrency_measures_the_expected_speedup():
    cost = SimCost(fixed_ms=20.0, per_token_ms=0.25, draft_ms=1.0, acceptance=(0.8, 0.6, 0.4))
    c, n, length = 32, 64, 256
    off, spec = run_closed(cost, SPEC_OFF, [4] * n, [length] * n, c), run_closed(cost, NGRAM3, [4] * n, [length] * n, c)
    measured = np.mean([r["tpot"] for r in off]) / np.mean([r["tpot"] for r in spec])
    assert np.mean([r["batch_mean"] for r in spec]) == pytest.approx(c, rel=0.05)
    assert measured == pytest.approx(expected_speedup(cost, NGRAM3, c), rel=0.03)  # 2.472 · 28 / 53 = 1.31
    assert all(r["output_tokens"] == length for r in off + spec)


def test_an_open_loop_at_a_low_rate_sees_the_bare_step_costs():
    arrivals_s = [0.0, 10.0, 20.0]  # far apart: each request runs alone
    records = run_open(COST, SPEC_OFF, arrivals_s, [8, 8, 8], [5, 5, 5])
    assert [r["start_time"] for r in records] == arrivals_s
    for r in records:
        assert r["ttft"] == pytest.approx((10.0 + 0.5 * 8) / 1e3)  # one prefill step
        assert r["tpot"] == pytest.approx((10.0 + 0.5) / 1e3) and r["itl"] == pytest.approx([0.0105] * 4)
        assert r["batch_mean"] == 1.0


# ------------------------------------------------------------------ the server, end to end


def test_the_server_streams_counts_and_answers_the_forward_probe_as_vllm_does():
    from specnb.measure.serving_load import Target, parse_counters, probe_forward, run_async, send_closed

    config = SimConfig(speculation=NGRAM3, cost=SimCost(fixed_ms=10.0, per_token_ms=0.5, acceptance=(0.8, 0.6, 0.4),
                                                        speed=50.0), model="sim-model")
    with SimServer(config) as server:
        target = Target(url=server.url, engine="simulated", model=server.model, speculation=config.speculation)
        assert httpx.get(f"{server.url}/v1/models").json()["data"][0]["id"] == "sim-model"
        prompts = ["the quick brown fox", "jumps over the lazy dog today"]
        records, _ = run_async(send_closed(target, prompts, concurrency=2, max_tokens=[12, 12]))
        for prompt, record in zip(prompts, records):
            key = zlib.crc32(prompt.encode())
            assert record.success and record.output_tokens == 12 and record.prompt_len == len(prompt.split())
            assert record.generated_text == "".join(token_text(key, i) for i in range(12))
        counters = parse_counters(httpx.get(f"{server.url}/metrics").text)
        assert counters.tokens_predicted == 24 and counters.drafts > 0
        assert counters.draft_tokens == 3 * counters.drafts and 0 <= counters.accepted <= counters.draft_tokens
        assert len(counters.accepted_per_pos) == 3 and sum(counters.accepted_per_pos) == counters.accepted
        reply = httpx.post(f"{server.url}/v1/completions", json={"prompt": [5, 6, 7], "max_tokens": 1}).json()
        assert reply["usage"] == {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
        assert reply["choices"][0]["text"].startswith(" w")
        probe = probe_forward(target, [1, 4], repeats=1)
        assert list(probe["tokens"]) == [1, 4]
        pid = server.pid
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert processes.group_pids(pid) == [] and server.process.returncode == 0  # SIGTERM: a clean exit


def test_the_stream_carries_usage_per_chunk_and_at_the_end_when_asked():
    body = {"messages": [{"role": "user", "content": "one two three"}], "max_tokens": 6, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    with SimServer(SimConfig(speculation=SPEC_OFF, cost=SimCost(speed=50.0))) as server:
        with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body) as response:
            lines = [line for line in response.iter_lines() if line.startswith("data:")]
        plain = httpx.post(f"{server.url}/v1/chat/completions", json=body | {"stream": False}).json()
    chunks = [json.loads(line[5:]) for line in lines[:-1]]
    assert lines[-1] == "data: [DONE]" and chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6
    content = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert [c["usage"]["completion_tokens"] for c in content] == [1, 2, 3, 4, 5, 6]  # spec-off: a token a step
    assert content[-1]["choices"][0]["finish_reason"] == "length"
    assert plain["choices"][0]["message"]["content"] == "".join(c["choices"][0]["delta"]["content"] for c in content)


def test_a_client_that_goes_away_frees_its_slot():
    from specnb.measure.serving_load import metric_line

    def running(url: str) -> float:
        lines = [metric_line().match(line) for line in httpx.get(f"{url}/metrics").text.splitlines()]
        return next(float(m.group(3)) for m in lines if m and m.group(1) == "num_requests_running")

    body = {"messages": [{"role": "user", "content": "a long answer"}], "max_tokens": 100_000, "stream": True,
            "ignore_eos": True}
    with SimServer(SimConfig(speculation=SPEC_OFF, cost=SimCost(speed=50.0), model='odd "name"')) as server:
        with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body) as response:
            lines = response.iter_lines()  # held: a closed line iterator closes httpx's response
            next(line for line in lines if '"content": " w' in line)
            assert running(server.url) == 1
        deadline = time.monotonic() + 10  # a bound on waiting, not a measured duration
        while running(server.url) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert running(server.url) == 0  # 100,000 tokens would have run for 20 s


def test_the_batch_trace_holds_every_decoding_sequence_second_and_the_idle_spells():
    arrivals_s, lengths = [0.0, 0.0, 0.001, 10.0], [6, 9, 4, 5]
    plain = run_open(COST, NGRAM3, arrivals_s, [8] * 4, lengths)
    records, trace = run_open(COST, NGRAM3, arrivals_s, [8] * 4, lengths, with_batch_trace=True)
    assert records == plain  # asking for the trace changes nothing else
    t, batch = np.array(trace).T
    assert (np.diff(t) >= 0).all() and batch[-1] == 0
    assert 0 in batch[:-1]  # the idle spell before the last arrival reads as batch 0
    sequence_s = float(np.sum(batch[:-1] * np.diff(t)))  # Σ b·dt: each decoding sequence's time in the steps
    assert sequence_s == pytest.approx(sum(r["latency"] - r["ttft"] for r in records))
    closed, closed_trace = run_closed(COST, NGRAM3, [4] * 12, [8] * 12, 3, with_batch_trace=True)
    t, batch = np.array(closed_trace).T
    assert float(np.sum(batch[:-1] * np.diff(t))) == pytest.approx(sum(r["latency"] - r["ttft"] for r in closed))
