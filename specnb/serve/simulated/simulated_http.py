"""The simulated engine's HTTP face: an OpenAI-compatible server on asyncio's streams, nothing else.

Minimal HTTP/1.1, one request per connection (``Connection: close`` on every response, a stream's
body ends when the connection does). The engine (``specnb.serve.simulated.sim_engine.SimEngine``, passed in)
runs as one task: while a request waits or runs it computes a step, sleeps its cost ÷ ``speed`` and
then hands each request its tokens, one SSE chunk per step — so accepted drafts arrive as a burst,
as they do from vLLM. Endpoints and their shapes follow vLLM's OpenAI server:

- ``GET /health``, ``GET /v1/models``, ``GET /metrics`` (Prometheus text in vLLM's counter names,
  labelled ``model_name``, plus ``specnb_sim:batch_size_sum`` / ``specnb_sim:steps_total``);
- ``POST /v1/chat/completions`` (streamed with ``stream_options.include_usage`` and
  ``continuous_usage_stats``, or one JSON) and ``POST /v1/completions`` (a prompt of token ids or
  text; what ``serving_load.probe_forward`` times).

A prompt's length is its word count (or its number of token ids) and its key a CRC-32 of its text,
so the same prompt gets the same text and the same acceptance whatever the load.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import sys
import time
import zlib
from dataclasses import asdict, replace
from pathlib import Path

from specnb.serve.server_process import ServerProcess
from specnb.serve.speculation import Speculation

REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}
PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"
MAX_HEADER_LINES = 100
LAUNCHES = itertools.count(1)  # this process's server launches, numbered: each its own launch_seed
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder holding ``specnb``: the child imports ours


class BadRequest(ValueError):
    """The request cannot be served; the message is the 400 answer's."""


def head(status: int, content_type: str, length: int | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status} {REASONS[status]}", f"Content-Type: {content_type}", "Connection: close"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def json_response(status: int, payload: dict) -> bytes:
    body = json.dumps(payload).encode()
    return head(status, "application/json", len(body)) + body


def error_response(status: int, message: str) -> bytes:
    return json_response(status, {"object": "error", "message": message, "code": status})


def sse(payload: dict) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


async def read_request(reader: asyncio.StreamReader) -> tuple[str, str, bytes]:
    """(method, path without query, body) of one HTTP/1.1 request."""
    request_line = (await reader.readline()).decode("latin-1").split()
    if len(request_line) != 3:
        raise BadRequest("malformed request line")
    headers = {}
    for _ in range(MAX_HEADER_LINES):
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length") or 0)
    body = await reader.readexactly(length) if length else b""
    return request_line[0], request_line[1].split("?")[0], body


def prompt_of(body: dict, chat: bool) -> tuple[int, int]:
    """(prompt length in tokens, key): words of every message (chat) or of the prompt text, or the
    number of token ids; the key is a CRC-32 of the prompt."""
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list")
        text = "\n".join(str(m.get("content") or "") for m in messages if isinstance(m, dict))
        return max(1, len(text.split())), zlib.crc32(text.encode())
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return len(prompt), zlib.crc32(json.dumps(prompt).encode())
    if isinstance(prompt, str):
        return max(1, len(prompt.split())), zlib.crc32(prompt.encode())
    raise BadRequest("prompt must be text or a non-empty list of token ids")


def metrics_text(engine, model: str) -> str:
    """The engine's counters as vLLM exposes them (spec-decode series only when it speculates, as vLLM
    registers them only with a speculative config)."""
    escaped = model.replace("\\", "\\\\").replace('"', '\\"')  # Prometheus label value escaping
    label, c = f'model_name="{escaped}"', engine.counters
    series = [("counter", "vllm:generation_tokens_total", c["generation_tokens_total"]),
              ("counter", "vllm:prompt_tokens_total", c["prompt_tokens_total"]),
              ("gauge", "vllm:num_requests_running", len(engine.running)),
              ("gauge", "vllm:num_requests_waiting", len(engine.waiting)),
              ("counter", "specnb_sim:batch_size_sum", c["batch_size_sum"]),
              ("counter", "specnb_sim:steps_total", c["steps_total"])]
    if engine.speculation.speculative:
        series += [("counter", f"vllm:{name}", c[name]) for name in (
            "spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total",
            "spec_decode_num_accepted_tokens_total")]
    lines = []
    for kind, name, value in series:
        lines += [f"# TYPE {name} {kind}", f"{name}{{{label}}} {float(value)}"]
    if engine.speculation.speculative:
        name = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
        lines.append(f"# TYPE {name} counter")
        lines += [f'{name}{{{label},position="{j}"}} {float(v)}' for j, v in enumerate(engine.accepted_per_pos)]
    return "\n".join(lines) + "\n"


class Service:
    """The server's state: the engine, a queue per request in flight, the tasks to cancel at the end."""

    def __init__(self, engine, *, model: str, speed: float):
        self.engine, self.model, self.speed = engine, model, speed
        self.queues: dict[int, asyncio.Queue] = {}
        self.work = asyncio.Event()  # set when a request arrives: the engine loop wakes
        self.handlers: set[asyncio.Task] = set()

    async def run_engine(self) -> None:
        while True:
            if not self.engine.busy:
                self.work.clear()
                await self.work.wait()
                continue
            step = self.engine.step()
            await asyncio.sleep(step.duration_ms / 1e3 / self.speed)  # the step's cost, then its tokens
            for rid, n in step.emitted.items():
                if rid in self.queues:
                    self.queues[rid].put_nowait((n, rid in step.finished))

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.handlers.add(asyncio.current_task())
        try:
            method, path, body = await read_request(reader)
            await self.route(method, path, body, writer)
        except BadRequest as err:
            writer.write(error_response(400, str(err)))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away
        finally:
            self.handlers.discard(asyncio.current_task())
            with contextlib.suppress(ConnectionError):
                await writer.drain()
            writer.close()

    async def route(self, method: str, path: str, raw: bytes, writer: asyncio.StreamWriter) -> None:
        gets = {"/health": lambda: head(200, "text/plain", 0),
                "/v1/models": lambda: json_response(200, {"object": "list", "data": [
                    {"id": self.model, "object": "model", "owned_by": "specnb"}]}),
                "/metrics": self.metrics}
        posts = {"/v1/chat/completions": True, "/v1/completions": False}  # path → chat
        if method == "GET" and path in gets:
            writer.write(gets[path]())
        elif method == "POST" and path in posts:
            try:
                body = json.loads(raw or b"{}")
            except ValueError as err:
                raise BadRequest(f"body is not JSON: {err}") from None
            if not isinstance(body, dict):
                raise BadRequest("body must be a JSON object")
            await self.generate(body, posts[path], writer)
        elif path in gets or path in posts:
            writer.write(error_response(405, f"{method} {path} is not served"))
        else:
            writer.write(error_response(404, f"{path} not found"))

    def metrics(self) -> bytes:
        body = metrics_text(self.engine, self.model).encode()
        return head(200, PROMETHEUS, len(body)) + body

    async def generate(self, body: dict, chat: bool, writer: asyncio.StreamWriter) -> None:
        prompt_len, key = prompt_of(body, chat)
        try:
            max_tokens = int(body.get("max_tokens") or 16)
        except (TypeError, ValueError):
            raise BadRequest("max_tokens must be an integer") from None
        if max_tokens < 1:
            raise BadRequest("max_tokens must be >= 1")
        request = self.engine.submit(prompt_len=prompt_len, max_tokens=max_tokens,
                                     ignore_eos=bool(body.get("ignore_eos")), key=key)
        self.queues[request.id] = asyncio.Queue()
        self.work.set()
        reply = Reply(request=request, chat=chat, model=self.model, created=int(time.time()))
        try:
            if body.get("stream"):
                await self.stream(reply, body.get("stream_options") or {}, writer)
            else:
                await self.answer(reply, writer)
        finally:  # done, or the client went away: its slot is freed
            self.queues.pop(request.id, None)
            self.engine.abort(request.id)

    async def tokens(self, reply: Reply):
        """Each step's text for this request, until it finishes."""
        queue = self.queues[reply.request.id]
        while True:
            n, done = await queue.get()
            text = self.engine.text(reply.request, reply.sent, reply.sent + n)
            reply.sent += n
            yield text, done
            if done:
                return

    async def stream(self, reply: Reply, options: dict, writer: asyncio.StreamWriter) -> None:
        writer.write(head(200, "text/event-stream"))
        if reply.chat:  # vLLM's first chunk names the role, with no content
            writer.write(sse(reply.chunk("", None, role=True)))
        async for text, done in self.tokens(reply):
            chunk = reply.chunk(text, reply.request.finish_reason if done else None)
            writer.write(sse(chunk | ({"usage": reply.usage()} if options.get("continuous_usage_stats") else {})))
            await writer.drain()
        if options.get("include_usage"):
            writer.write(sse(reply.chunk(None, None) | {"choices": [], "usage": reply.usage()}))
        writer.write(b"data: [DONE]\n\n")

    async def answer(self, reply: Reply, writer: asyncio.StreamWriter) -> None:
        text = "".join([t async for t, _ in self.tokens(reply)])
        choice = ({"message": {"role": "assistant", "content": text}} if reply.chat else {"text": text})
        writer.write(json_response(200, {
            "id": reply.id, "object": "chat.completion" if reply.chat else "text_completion",
            "created": reply.created, "model": self.model, "usage": reply.usage(),
            "choices": [{"index": 0, **choice, "finish_reason": reply.request.finish_reason}]}))


class Reply:
    """What one request's chunks and usage say (OpenAI's shapes, as vLLM fills them)."""

    def __init__(self, *, request, chat: bool, model: str, created: int):
        self.request, self.chat, self.model, self.created = request, chat, model, created
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{request.id}"
        self.sent = 0  # tokens delivered (the engine's count may be a step ahead: it steps while we write)

    def usage(self) -> dict:
        prompt, done = self.request.prompt_len, self.sent
        return {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}

    def chunk(self, text: str | None, finish_reason: str | None, role: bool = False) -> dict:
        if self.chat:
            delta = {"role": "assistant", "content": ""} if role else {"content": text}
            choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish_reason}
        return {"id": self.id, "object": "chat.completion.chunk" if self.chat else "text_completion",
                "created": self.created, "model": self.model, "choices": [choice]}


async def serve(engine, *, host: str, port: int, model: str, speed: float) -> None:
    """Serve ``engine`` until SIGTERM or SIGINT; every task is ended before returning."""
    service, stop = Service(engine, model=model, speed=speed), asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = await asyncio.start_server(service.handle, host, port)
    print(f"simulated engine serving {model!r} on http://{host}:{port}", flush=True)
    engine_task = asyncio.create_task(service.run_engine())
    await stop.wait()
    server.close()
    tasks = [engine_task, *service.handlers]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await server.wait_closed()
    print("simulated engine stopped", flush=True)


# ------------------------------------------------------------------ the launched server


def cost_json(cost) -> str:
    return json.dumps(asdict(cost))


def speculation_json(speculation: Speculation) -> str:
    return json.dumps(asdict(speculation))


def launched_cost(cost, name: str, launch: int):
    """``cost`` as one launch runs it: its ``launch_seed`` mixed with the configuration's name and the
    launch's number, so every server started is a launch of its own (its own ``launch_factor``), as
    two starts of one vLLM configuration are, while a sweep repeated in a fresh process draws the same."""
    return replace(cost, launch_seed=zlib.crc32(f"{cost.launch_seed}:{name}:{launch}".encode()))


class SimServer(ServerProcess):
    """The simulated engine as a launched server (``ServerProcess``): ``config`` is a
    ``simulated.SimConfig`` (its speculation, cost model and served ``model`` name). Each instance is
    one launch, numbered in this process (``LAUNCHES``), its cost's ``launch_seed`` its own (``launched_cost``)."""

    engine = "simulated"

    def __init__(self, config, timeout_s: float = 30.0, port: int = 0):
        self.config = config
        self.cost = launched_cost(config.cost, config.name, next(LAUNCHES))
        super().__init__(config.name, timeout_s, port)

    @property
    def model(self) -> str:
        return self.config.model

    def command(self) -> list[str]:
        return [sys.executable, "-m", "specnb.serve.simulated.sim_engine",
                "--host", "127.0.0.1", "--port", str(self.port),
                "--cost", cost_json(self.cost), "--speculation", speculation_json(self.config.speculation),
                "--model", self.config.model]

    def environment(self) -> dict[str, str]:
        path = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), os.environ.get("PYTHONPATH")]))
        return {**os.environ, "PYTHONPATH": path}

    def is_error_line(self, line: str) -> bool:
        return line.startswith("error:") or "Error" in line
