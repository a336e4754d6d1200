"""The load's own numbers: a trace's arrivals span exactly n/rate seconds, and a request's token count
comes from the server's usage, never from counting streamed chunks."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from specnb.measure.serving_load import Target, arrival_gaps, run_async, send_closed


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
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        target = Target(url=f"http://127.0.0.1:{server.server_address[1]}")
        records, _ = run_async(send_closed(target, ["p"], 1, [6]))
    finally:
        server.shutdown()
        server.server_close()
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
