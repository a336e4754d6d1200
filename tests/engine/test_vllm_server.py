"""The real vLLM (skipped, with setup's one-line reason, only where setup marked it absent) on the
embedded verifier: n-gram speculation is lossless against spec-off, its counters move on a
copy-heavy prompt, and no process of either server's group is left afterwards. Two server starts
(minutes on a busy 2-core machine): a generous start timeout, no timing assertions."""

import json

import pandas as pd
import pytest

from specnb.engine.server_process import group_pids
from specnb.engine.vllm_server import VllmConfig, missing_note

pytestmark = [pytest.mark.slow, pytest.mark.skipif(missing_note() is not None, reason=str(missing_note()))]

COPY = "Copy this sentence word for word: The committee will meet on Tuesday to discuss the budget for the new library."
PROMPTS = pd.DataFrame({"prompt": [COPY, "Write one sentence about rivers."], "category": ["copy", "chat"]})


def test_ngram_speculation_on_vllm_is_lossless_counts_acceptance_and_leaves_no_process():
    from specnb.engine import servers as engine_servers
    from specnb.measure.serving_summary import summarise_sweep
    from specnb.measure.serving_sweep import sweep_servers as sweep
    from specnb.models.embedded import embedded_verifier_path

    model = str(embedded_verifier_path())
    configs = [VllmConfig(name="spec-off", model=model, max_num_seqs=2),
               VllmConfig(name="ngram k=4", model=model, method="ngram", k=4, max_num_seqs=2)]
    seen = {}
    real = engine_servers.server_for

    def remember(config, timeout_s=None):  # keep each server's process group to look for it afterwards
        server = real(config, 900)
        seen[config.name] = server
        return server

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine_servers, "server_for", remember)
        result = sweep(configs, PROMPTS, [1], max_tokens=24, ignore_eos=False, warmup=False)
    assert result.stopped == "", result.stopped
    groups = [server.pid for server in seen.values()]
    assert len(groups) == 2 and all(group_pids(pgid) == [] for pgid in groups)  # API server, engine core, worker
    records = result.records
    assert records["success"].all() and set(records["engine"]) == {"vllm"}
    texts = records.pivot(index="prompt_index", columns="config", values="generated_text")
    assert (texts["spec-off"] == texts["ngram k=4"]).all(), texts  # greedy: the same tokens
    runs = result.runs.set_index("config")
    assert runs.loc["ngram k=4", "spec_decode_accepted_tokens"] > 0 < runs.loc["ngram k=4", "spec_decode_num_drafts"]
    assert runs.loc["spec-off", "spec_decode_num_drafts"] == 0
    per_position = json.loads(runs.loc["ngram k=4", "accepted_per_pos"])
    assert len(per_position) == 4 and per_position == sorted(per_position, reverse=True) and per_position[0] > 0
    row = summarise_sweep(records, result.runs, n_boot=50).set_index("config").loc["ngram k=4"]
    assert 0 < row["alpha"] <= 1 and row["tau"] > 1 and row["identical_outputs"] == 2


def test_a_port_taken_is_one_line_with_vllms_cause_and_leaves_no_process():
    """A port the caller names, already listening: vLLM exits at start (before its engine loads); the
    error is one line ending with vLLM's own cause, and nothing of its group is left."""
    import socket

    from specnb.engine.server_process import ServerFailed
    from specnb.engine.vllm_server import VllmServer
    from specnb.models.embedded import embedded_verifier_path

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        server = VllmServer(VllmConfig(name="spec-off", model=str(embedded_verifier_path())), port=port, timeout_s=900)
        exited = f"spec-off: vLLM exited with code -?\\d+ at start on port {port}: "
        with pytest.raises(ServerFailed, match=exited) as err:
            server.start()
    assert "\n" not in str(err.value) and "Address already in use" in str(err.value), err.value
    assert group_pids(server.pid) == []
