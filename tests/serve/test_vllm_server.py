"""The real vLLM (skipped, with setup's one-line reason, only where setup marked it absent) on the
embedded verifier, in one sweep over spec-off, n-gram and the EAGLE-3 head (``"method": "eagle3"``, the
head's folder as it is): each speculation is lossless against spec-off, its counters move, and no
process of any server's group is left afterwards. Three server starts (minutes on a busy 2-core
machine), each once for the module: a generous start timeout, no timing assertions.

The head is the embedded ``smollm2-eagle3`` once that folder holds the standard EAGLE-3 layout, else an
untrained head started from the verifier (``helpers.engine_eagle3_head``); its prompt here is one where
that head's first draft matches the verifier's token with a wide margin, three times in 48 tokens."""

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from helpers import closed, engine_eagle3_head

from specnb.serve.processes import group_pids
from specnb.serve.vllm import VllmConfig, missing_note

pytestmark = [pytest.mark.slow, pytest.mark.skipif(missing_note() is not None, reason=str(missing_note()))]

COPY = "Copy this sentence word for word: The committee will meet on Tuesday to discuss the budget for the new library."
PROMPTS = pd.DataFrame({"prompt": [COPY, "Write one sentence about rivers.",
                                   "Write a Python function that adds two numbers."],
                        "category": ["copy", "chat", "code"]})
NGRAM, EAGLE3 = "ngram k=4", "eagle3 k=3"


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """(sweep, servers by name, each server's log as it stopped, configurations) of one sweep at
    concurrency 1 on the configurations notebook 08 builds for ``["ngram:4", "eagle3:3"]``."""
    from specnb.measure.serving_sweep import SweepSettings
    from specnb.measure.serving_sweep import sweep_servers as sweep
    from specnb.serve import engines, processes, vllm

    seen, logs = {}, {}
    real = processes.server_for

    def remember(config, timeout_s=None):  # keep each server's process group, and its log before it goes
        server = real(config, 900)
        stop = server.stop
        server.stop = lambda: (logs.setdefault(config.name, server.log_text()), stop())
        seen[config.name] = server
        return server

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engines, "EAGLE3_HEAD", engine_eagle3_head(tmp_path_factory.mktemp("eagle3") / "init-head"))
        configs = vllm.ENGINE.configs("smollm2-135m", "f32", ["ngram:4", "eagle3:3"], 2)
        patch.setattr(processes, "server_for", remember)
        result = sweep(configs, PROMPTS, closed(1, tokens=48), SweepSettings(ignore_eos=False, warmup=False))
    return result, seen, logs, configs


def test_every_server_of_the_sweep_is_gone(swept):
    result, seen, _, _ = swept
    assert set(seen) == {"spec-off", NGRAM, EAGLE3}
    assert all(group_pids(server.pid) == [] for server in seen.values())  # API server, engine core, worker


def test_ngram_speculation_on_vllm_is_lossless_and_counts_acceptance(swept):
    from specnb.measure.serving_stats import summarise_sweep

    result, _, _, _ = swept
    assert NGRAM not in result.stopped, result.stopped
    records = result.records
    assert records["success"].all() and set(records["engine"]) == {"vllm"}
    measured = records[~records["filler"]]  # fillers only held the level
    texts = measured.pivot(index=["prompt_index", "cycle"], columns="config", values="generated_text")
    assert (texts["spec-off"] == texts[NGRAM]).all(), texts  # greedy: the same tokens
    runs = result.runs.set_index("config")
    assert runs.loc[NGRAM, "spec_decode_accepted_tokens"] > 0 < runs.loc[NGRAM, "spec_decode_num_drafts"]
    assert runs.loc["spec-off", "spec_decode_num_drafts"] == 0
    per_position = json.loads(runs.loc[NGRAM, "accepted_per_pos"])
    assert len(per_position) == 4 and per_position == sorted(per_position, reverse=True) and per_position[0] > 0
    row = summarise_sweep(records, result.runs, n_boot=50).set_index("config").loc[NGRAM]
    assert 0 < row["alpha"] <= 1 and row["tau"] > 1 and row["identical_outputs"] == len(PROMPTS)


def test_the_eagle3_head_on_vllm_is_lossless_counts_acceptance_and_reads_the_layout_as_written(swept, capsys):
    """vLLM reads the head's folder as specnb wrote it: the verifier layers its config names, the
    verifier's embedding (the head has none), the head's own reduced lm_head. Where vLLM's CPU build
    refuses eagle3 at start, its own line is what the sweep left the configuration out with."""
    result, _, logs, configs = swept
    if EAGLE3 in result.stopped:
        line = re.search(rf"{EAGLE3} left out: ({EAGLE3}: vLLM exited with code -?\d+ at start [^;]+)", result.stopped)
        assert line, result.stopped
        pytest.skip(f"vLLM refused eagle3 on this CPU: {line.group(1)}")
    records = result.records
    measured = records[~records["filler"]]  # fillers only held the level
    texts = measured.pivot(index=["prompt_index", "cycle"], columns="config", values="generated_text")
    assert (texts["spec-off"] == texts[EAGLE3]).all(), texts  # greedy: the verifier's tokens whatever it drafts
    runs = result.runs.set_index("config")
    assert runs.loc[EAGLE3, "spec_decode_num_drafts"] > 0 and runs.loc[EAGLE3, "spec_decode_accepted_tokens"] > 0
    per_position = json.loads(runs.loc[EAGLE3, "accepted_per_pos"])
    assert len(per_position) == 3 and per_position[0] > 0
    folder = Path(next(c.draft for c in configs if c.name == EAGLE3))
    head = json.loads((folder / "config.json").read_text())
    log = logs[EAGLE3]
    assert f"Using auxiliary layers from speculative config: {tuple(head['eagle_aux_hidden_state_layer_ids'])}" in log
    assert "EAGLE model without its own embed_tokens" in log and "distinct lm_head weights" in log
    tpot = records.groupby("config")["tpot"].mean() * 1e3
    with capsys.disabled():  # what the run saw (a loaded machine's TPOT, never compared)
        print(f"\neagle3 head {folder}: accepted {runs.loc[EAGLE3, 'spec_decode_accepted_tokens']:.0f} of "
              f"{runs.loc[EAGLE3, 'spec_decode_draft_tokens']:.0f} drafted, per position {per_position}; mean TPOT "
              f"(loaded, concurrency 1) spec-off {tpot['spec-off']:.1f} ms, eagle3 {tpot[EAGLE3]:.1f} ms")


def test_a_port_taken_is_one_line_with_vllms_cause_and_leaves_no_process():
    """A port the caller names, already listening: vLLM exits at start (before its engine loads); the
    error is one line ending with vLLM's own cause, and nothing of its group is left."""
    import socket

    from specnb.models.embedded import embedded_verifier_path
    from specnb.serve.processes import ServerFailed
    from specnb.serve.vllm import VllmServer

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        server = VllmServer(VllmConfig(model=str(embedded_verifier_path())), port=port, timeout_s=900)
        exited = f"spec-off: vLLM exited with code -?\\d+ at start on port {port}: "
        with pytest.raises(ServerFailed, match=exited) as err:
            server.start()
    assert "\n" not in str(err.value) and "Address already in use" in str(err.value), err.value
    assert group_pids(server.pid) == []


def test_ctrl_c_during_a_vllm_sweep_stops_every_server_and_keeps_the_finished_records():
    """Two vLLMs (spec-off and n-gram, started at once); Ctrl-C after the first run: the sweep raises
    KeyboardInterrupt, what it had finished is what ``on_run`` last saw (as notebook 08 saves it), and no
    process of either server's group (API server, engine core, worker) is left."""
    from specnb.measure.serving_sweep import SweepSettings
    from specnb.measure.serving_sweep import sweep_servers as sweep
    from specnb.serve import processes, vllm

    seen, kept = {}, {}
    real = processes.server_for

    def remember(config, timeout_s=None):
        seen[config.name] = real(config, 900)
        return seen[config.name]

    def interrupt(so_far):
        kept["records"] = len(so_far.records)
        kept["groups"] = {name: group_pids(server.pid) for name, server in seen.items()}
        raise KeyboardInterrupt

    configs = vllm.ENGINE.configs("smollm2-135m", "f32", ["ngram:2"], 1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(processes, "server_for", remember)
        with pytest.raises(KeyboardInterrupt):
            sweep(configs, PROMPTS[:1], closed(1, tokens=4), SweepSettings(warmup=False), on_run=interrupt)
    # one run: 3 measured requests (3 turnovers · 1) after the 1 filler that ramps it up
    assert set(seen) == {"spec-off", "ngram k=2"} and kept["records"] == 4
    assert all(len(group) >= 3 for group in kept["groups"].values()), kept  # each had its engine core and worker
    assert all(group_pids(server.pid) == [] for server in seen.values())


def test_a_killed_kernel_takes_every_vllm_process_with_it():
    """The notebook's kernel SIGKILLed (no atexit, no context manager): Linux's parent-death signal ends the
    API server, and its engine core and worker must not outlive it (orphans would hold the cores and GBs)."""
    import signal
    import subprocess
    import sys
    import time

    script = ("import time\nfrom specnb.serve.vllm import VllmConfig, VllmServer\n"
              "from specnb.models.embedded import embedded_verifier_path\n"
              "s = VllmServer(VllmConfig(model=str(embedded_verifier_path()), max_num_seqs=1), "
              "timeout_s=900).start()\nprint(s.pid, flush=True)\ntime.sleep(600)\n")
    kernel = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        group = int(kernel.stdout.readline())
        assert len(group_pids(group)) >= 3, group_pids(group)
        kernel.send_signal(signal.SIGKILL)
        kernel.wait()
        deadline = time.monotonic() + 120  # polled: on a loaded machine the processes take a while to go
        while group_pids(group) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert group_pids(group) == [], group_pids(group)
    finally:
        kernel.kill()
