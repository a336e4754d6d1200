"""The real llama-server on the embedded verifier's GGUF (skipped when no binary is built): n-gram
speculation is lossless against spec-off, its counters move on a copy-heavy prompt, a bad GGUF is
one line with the server's last log line, and no server outlives its context."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import httpx
import pandas as pd
import pytest
from helpers import closed, gone

from specnb.measure.serving_stats import summarise_sweep
from specnb.measure.serving_sweep import SweepSettings, run_sweep, sweep_servers, targets_of
from specnb.serve.llama import LlamaServer, LlamaServerConfig, missing_note, server_args
from specnb.serve.processes import ServerFailed, servers

pytestmark = [pytest.mark.slow, pytest.mark.skipif(missing_note() is not None, reason="no llama-server built")]

COPY = "Copy this sentence word for word: The committee will meet on Tuesday to discuss the budget for the new library."
PROMPTS = pd.DataFrame({"prompt": [COPY, "Write one sentence about rivers."], "category": ["copy", "chat"]})
START_S = 600  # /health is polled: a start that takes minutes on a loaded machine passes, a dead one fails at once


@pytest.fixture(scope="module")
def verifier():
    from specnb.models.gguf import embedded_gguf

    return str(embedded_gguf("smollm2-135m", "q4_1"))


def test_ngram_speculation_is_lossless_and_counts_acceptance(verifier):
    configs = [LlamaServerConfig(model=verifier, slots=2, ctx_per_slot=512, threads=1),
               LlamaServerConfig(model=verifier, spec_type="ngram-simple", entry="ngram", n_max=4, slots=2,
                            ctx_per_slot=512, threads=1)]
    with servers(configs, timeout_s=START_S) as running:
        pids = [s.pid for s in running.servers.values()]
        targets = targets_of(configs, running.servers)
        sweep = run_sweep(targets, PROMPTS, closed(1, tokens=24),
                          SweepSettings(ignore_eos=False, warmup=False, probe_max_tokens=2))
    assert all(gone(pid) for pid in pids)
    assert list(sweep.probe["tokens"]) == [1, 2] and (sweep.probe["forward_ms"] > 0).all()
    records = sweep.records
    assert records["success"].all()
    measured = records[~records["filler"]]  # fillers only held the level
    texts = measured.pivot(index=["prompt_index", "cycle"], columns="config", values="generated_text")
    assert (texts["spec-off"] == texts["ngram k=4"]).all(), texts  # greedy: the same tokens
    runs = sweep.runs.set_index("config")
    assert runs.loc["ngram k=4", "spec_decode_accepted_tokens"] > 0
    assert runs.loc["spec-off", "spec_decode_num_drafts"] == 0
    row = summarise_sweep(records, sweep.runs, n_boot=50).set_index("config").loc["ngram k=4"]
    assert 0 < row["alpha"] <= 1 and row["tau"] > 1 and row["identical_outputs"] == row["paired_requests"] > 0
    per_position = json.loads(row["per_position"])
    assert len(per_position) == 4 and per_position == sorted(per_position, reverse=True)  # reaching i needs i − 1


def test_a_bad_gguf_is_one_line_with_the_last_log_line(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    server = LlamaServer(LlamaServerConfig(model=str(bad), threads=1), timeout_s=START_S)
    with pytest.raises(ServerFailed, match="exited with code") as err:
        server.start()
    assert "\n" not in str(err.value) and gone(server.pid)
    assert "model loading error" in str(err.value) and "GGUF" in str(err.value)  # last line, and the cause


def tiny(name: str, model: str) -> LlamaServerConfig:
    return LlamaServerConfig(model=model, slots=1, ctx_per_slot=256, threads=1)


def test_a_port_the_caller_names_that_is_taken_is_one_line_with_the_last_log_line(verifier):
    with LlamaServer(tiny("first", verifier), timeout_s=START_S) as first:
        second = LlamaServer(tiny("second", verifier), port=first.port, timeout_s=START_S)
        with pytest.raises(ServerFailed, match=f"couldn't bind HTTP server socket.*port: {first.port}") as err:
            second.start()
        assert "\n" not in str(err.value) and gone(second.pid) and first.healthy()


def test_a_port_taken_between_picking_and_binding_is_retried_on_another(verifier, monkeypatch):
    """The race, forced: the port the project picks is already held by another llama-server, which
    answers /health too. The new server must not take that one for its own, but retry elsewhere."""
    from specnb.serve import processes

    with LlamaServer(tiny("first", verifier), timeout_s=START_S) as first:
        picks = iter([first.port])
        real = processes.free_port
        monkeypatch.setattr(processes, "free_port", lambda: next(picks, None) or real())
        with LlamaServer(tiny("second", verifier), timeout_s=START_S) as second:
            assert second.port != first.port and second.healthy()
            assert processes.owns_port(second.pid, second.port)
            assert not processes.owns_port(second.pid, first.port)


def test_server_arguments_are_loopback_with_the_speculation_flags():
    args = server_args(LlamaServerConfig(model="v.gguf", spec_type="draft-simple", draft="d.gguf", n_max=3,
                                    slots=4,
                                    ctx_per_slot=256, threads=1), port=8123)
    assert args[args.index("--host") + 1] == "127.0.0.1" and args[args.index("-c") + 1] == "1024"
    assert args[args.index("-md") + 1] == "d.gguf" and args[args.index("--spec-draft-n-max") + 1] == "3"


def server_children() -> list[int]:
    """llama-server processes this test process started."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{pid}/stat").read()
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid() and b"llama-server" in cmdline:
            found.append(int(pid))
    return found


def test_ctrl_c_stops_the_server_and_keeps_the_records(verifier):
    seen = {}

    def interrupt(sweep):
        seen["pids"], seen["records"] = server_children(), len(sweep.records)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sweep_servers([LlamaServerConfig(model=verifier, slots=1, ctx_per_slot=256, threads=1)], PROMPTS,
                      closed(1, tokens=4), SweepSettings(warmup=False), on_run=interrupt)
    # the first run, (3 turnovers + 2) · 1 requests, finished before Ctrl-C
    assert seen["pids"] and seen["records"] == 5 and all(gone(pid) for pid in seen["pids"])


def kill_when_busy(server: LlamaServer) -> threading.Thread:
    """SIGKILL the server as soon as its metrics show a request in progress (mid-request, every time)."""
    def watch():
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and server.alive():
            metrics = httpx.get(f"{server.url}/metrics", timeout=5).text
            if re.search(r"^llamacpp:requests_processing [1-9]", metrics, re.M):
                os.kill(server.pid, signal.SIGKILL)
                return
            time.sleep(0.01)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_server_killed_mid_level_keeps_finished_levels_and_marks_the_partial_one(verifier):
    """Level 1 runs whole; during level 2 the server is SIGKILLed with a request in flight: level 1's
    rows are kept as they were, level 2's marked partial, and one line says how the server died."""
    seen = {}

    def after_run(sweep):
        if (sweep.runs["concurrency"] == 1).sum() == 2 and "watch" not in seen:  # level 1: 2 runs of 4 measured
            seen["watch"] = kill_when_busy(seen["server"])

    from specnb.serve import llama

    real = llama.LlamaServer.launch

    def remember(self):  # the sweep starts its own server: keep a handle to kill it
        seen["server"] = self
        return real(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(llama.LlamaServer, "launch", remember)
        sweep = sweep_servers([LlamaServerConfig(model=verifier, slots=2, ctx_per_slot=256, threads=1)],
                              pd.concat([PROMPTS] * 4, ignore_index=True), closed(1, 2, tokens=16),
                              SweepSettings(warmup=False), on_run=after_run)
    seen["watch"].join()
    assert "\n" not in sweep.stopped and sweep.stopped.startswith(
        "spec-off's server went down at 2 concurrent (llama-server killed by SIGKILL: "), sweep.stopped
    assert sweep.stopped.endswith("levels before it are kept, 2 concurrent is marked partial")
    runs, records = sweep.runs, sweep.records
    assert list(runs.loc[runs["concurrency"] == 1, "partial"]) == [False, False]
    assert runs.loc[runs["concurrency"] == 2, "partial"].all() and (runs["concurrency"] == 2).any()
    level_1 = records[records["concurrency"] == 1]
    assert (~level_1["filler"]).sum() == 8 and level_1["success"].all() and not level_1["partial"].any()
    assert records.loc[records["concurrency"] == 2, "partial"].all()
    assert not records.loc[records["concurrency"] == 2, "success"].all()  # killed with requests in flight
    assert gone(seen["server"].pid)


def test_the_server_dies_with_a_killed_kernel(verifier):
    script = ("import sys, time\nfrom specnb.serve.llama import LlamaServer, LlamaServerConfig\n"
              f"s = LlamaServer(LlamaServerConfig(model={verifier!r}, slots=1, ctx_per_slot=256, threads=1), "
              f"timeout_s={START_S})"
              ".start()\n"
              "print(s.pid, flush=True)\ntime.sleep(60)\n")
    kernel = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pid = int(kernel.stdout.readline())
    assert not gone(pid)
    kernel.send_signal(signal.SIGKILL)  # no atexit, no context manager: only the parent-death signal
    kernel.wait()
    deadline = time.monotonic() + 120  # polled: on a loaded machine the server takes a while to go
    while not gone(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gone(pid)
