"""serving_load: the load's shape (arrivals rescaled to their rate, the steady window, the closed loop's
feed), the requests against a fake OpenAI streaming server on loopback (vLLM's names, token counts
from usage, SGLang's meta_info), the engine's batch gauge, the counter arithmetic on a hand-worked
scrape and SGLang's gauges, and the forward probe. No wall-clock duration is compared with a tolerance."""

import json
from http.server import BaseHTTPRequestHandler

import numpy as np
import pandas as pd
import pytest
from helpers import SGLANG_SCRAPE, fake_server, spec

from specnb.core.errors import ParameterError
from specnb.measure.acceptance import counter_rates
from specnb.measure.serving_load import (
    Closed,
    ClosedFeed,
    Counters,
    EndpointError,
    Open,
    RequestRecord,
    Target,
    arrival_gaps,
    batch_columns,
    check_target,
    level_batch,
    parse_counters,
    probe_forward,
    probe_tokens,
    read_gauge,
    read_usage,
    request_body,
    run_async,
    send_closed,
    send_open,
    steady_flags,
    steady_records,
)

# ---------------------------------------------------------------------------- the load's shape and arrivals


@pytest.mark.parametrize("burstiness", [1.0, 0.25])
def test_arrivals_are_rescaled_to_the_nominal_rate(burstiness):
    # seeds 0-3 drew 1.47, 0.89, 1.11, 0.93 req/s for a nominal 1.14 before the rescaling
    for seed in range(4):
        gaps = arrival_gaps(16, 1.14, burstiness, seed)
        assert 16 / gaps.sum() == pytest.approx(1.14, rel=1e-9, abs=1e-9)


def test_rescaled_bursts_still_bunch_up():
    # coefficient of variation: 1 for exponential gaps, 1/sqrt(shape) = 2 for gamma(0.25); a common
    # factor leaves it as drawn
    cv = [np.std(g) / np.mean(g) for g in (arrival_gaps(2000, 2.0, 1.0, 3), arrival_gaps(2000, 2.0, 0.25, 3))]
    assert cv[0] == pytest.approx(1.0, rel=0.1) and cv[1] > 1.6


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


# ---------------------------------------------------------------------------- the requests


def test_closed_loop_records_use_vllm_names_and_tpot(fake_engine):
    _, url = fake_engine
    records, duration = run_async(send_closed(Target(url=url), ["say a", "say bb", "say ccc", "say dddd"], 2, [6] * 4))
    assert len(records) == 4 and all(r.success for r in records) and duration > 0
    first = records[0]
    assert first.output_tokens == 6 and first.prompt_len == len("say a") and len(first.itl) == 5
    assert first.ttft > 0 and first.latency >= first.ttft
    assert first.tpot == pytest.approx((first.latency - first.ttft) / 5)
    assert (first.draft_n, first.draft_n_accepted) == (2, 1) and first.generated_text.startswith("w0 w1")


def test_poisson_arrivals_are_seeded(fake_engine):
    """Each request starts at its seeded arrival time or later, never before (how much later is the
    machine's load: not asserted)."""
    _, url = fake_engine
    records, _ = run_async(send_open(Target(url=url), ["p"] * 5, [3] * 5, arrival_gaps(5, 50.0, seed=1)))
    starts = np.array([r.start_time for r in records])
    assert all(r.success for r in records) and list(starts) == sorted(starts)
    arrivals = np.cumsum(arrival_gaps(5, 50.0, seed=1))
    assert (starts >= arrivals - 1e-3).all(), (starts, arrivals)  # 1 ms: the event loop's and perf_counter's clocks


def test_an_engines_own_request_fields_ride_in_every_body():
    llama = request_body(Target(url="http://127.0.0.1:1", engine="llama.cpp"), "p", 4, True)
    vllm = request_body(Target(url="http://127.0.0.1:1", engine="vllm"), "p", 4, True)
    assert llama["cache_prompt"] is False and "cache_prompt" not in vllm  # vLLM: off at launch instead
    assert {k: v for k, v in llama.items() if k != "cache_prompt"} == vllm


class BurstEngine(BaseHTTPRequestHandler):
    """Streams 6 tokens as chunks of 1, 3 (an accepted draft burst) and 2; with ``usage``, sends usage
    on every chunk when asked for continuous usage (vLLM's ``continuous_usage_stats``), none otherwise."""

    usage = True
    bodies: list = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        continuous = self.usage and body.get("stream_options", {}).get("continuous_usage_stats")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        done = 0
        for words in (["a "], ["b ", "c ", "d "], ["e ", "f "]):
            done += len(words)
            chunk = {"choices": [{"index": 0, "delta": {"content": "".join(words)}}]}
            chunk |= {"usage": {"prompt_tokens": 2, "completion_tokens": done}} if continuous else {}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


def stream_from(usage: bool):
    handler = type("Engine", (BurstEngine,), {"usage": usage, "bodies": []})
    with fake_server(handler) as url:
        records, _ = run_async(send_closed(Target(url=url), ["p"], 1, [6]))
    return records[0], handler.bodies[0]


def test_token_counts_come_from_usage_not_from_counting_chunks():
    record, body = stream_from(usage=True)
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert record.success and record.output_tokens == 6  # 3 chunks, 6 tokens
    assert record.tpot == pytest.approx((record.latency - record.ttft) / 5)


def test_a_stream_without_usage_is_a_failed_request_not_a_guess():
    record, _ = stream_from(usage=False)
    assert not record.success and record.error == "no token counts (usage) in the stream"
    assert record.generated_text == "a b c d e f "


def test_sglang_meta_info_lands_in_the_request_record():
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


# ---------------------------------------------------------------------------- a run's steady state and batch


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


# ---------------------------------------------------------------------------- the counters and the probe


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


def test_sglang_gauges_are_read_as_they_are_never_differenced():
    after = parse_counters(SGLANG_SCRAPE)
    assert (after.accept_length_gauge, after.accept_rate_gauge, after.tokens_predicted) == (2.8, 0.6, 120)
    before = Counters(tokens_predicted=100, accept_rate_gauge=0.9, accept_length_gauge=3.5)
    run = after.minus(before)
    assert run.tokens_predicted == 20 and (run.accept_length_gauge, run.accept_rate_gauge) == (2.8, 0.6)
    never = parse_counters(SGLANG_SCRAPE.replace("} 2.8", "} 0").replace("} 0.6", "} 0"))  # spec-off reads 0
    assert np.isnan(never.accept_length_gauge) and np.isnan(never.accept_rate_gauge)


def test_unreachable_or_not_openai_endpoints_are_one_line(fake_engine):
    _, url = fake_engine
    assert check_target(Target(url=url)).model == "fake"
    with pytest.raises(EndpointError, match="unreachable"):
        check_target(Target(url="http://127.0.0.1:9"), timeout_s=2)
    handler_html = Target(speculation=spec("b", 1), url=url + "/html")
    with pytest.raises(EndpointError, match="not an OpenAI-compatible"):
        check_target(handler_html)


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
    ticks = []

    def clock():  # read before and after each request: the request takes 50 ms + 1 ms per prompt token
        ticks.append(0.0 if len(ticks) % 2 == 0 else 0.050 + 0.001 * len(handler.bodies[-1]["prompt"]))
        return ticks[-1]

    with fake_server(handler) as url:
        target = Target(url=url, engine="vllm", model="m")
        probe = probe_forward(target, [4, 40, 80], repeats=2, clock=clock).set_index("tokens")["forward_ms"]
    assert list(probe.index) == [4, 40, 80] and list(probe) == pytest.approx([54.0, 90.0, 130.0])
    assert all(b["max_tokens"] == 1 and b["model"] == "m" for b in handler.bodies) and len(handler.bodies) == 6
    prompts = [tuple(b["prompt"]) for b in handler.bodies]
    assert len(set(prompts)) == 6  # fresh ids every time: vLLM's prefix cache cannot answer a repeat


def test_probe_sizes_reach_the_largest_verification_batch():
    assert probe_tokens(1) == [1] and probe_tokens(5) == [1, 2, 3, 4, 6]
    assert probe_tokens(40) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48]
