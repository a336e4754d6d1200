"""llama-server drafting with the EAGLE-3 head (``--spec-type draft-eagle3``, the head converted to GGUF by
llama.cpp's own converter): greedy text identical to spec-off, drafts accepted, and no server left.

The head is the embedded ``smollm2-eagle`` once that folder holds the standard EAGLE-3 layout; until
then an untrained head started from the verifier (``Eagle3Draft.init_from_verifier``), which gets some
drafts accepted all the same. Each server runs alone, one after the other."""

import re

import httpx
import pytest
from helpers import engine_eagle3_head, gone

from specnb.native.llama_build import converter_path
from specnb.serve import engines, llama
from specnb.serve.llama import LlamaServer, missing_note

pytestmark = [pytest.mark.slow, pytest.mark.skipif(missing_note() is not None, reason="no llama-server built"),
              pytest.mark.skipif(not converter_path().is_file(), reason="no llama.cpp source (make setup)")]

PROMPTS = ["Copy this sentence word for word: The committee will meet on Tuesday to discuss the budget for the "
           "new library.", "Write one sentence about rivers.", "List three colours of the rainbow."]
MAX_TOKENS = 32
START_S = 600  # /health is polled: a slow start on a loaded machine passes, a dead one fails at once


@pytest.fixture(scope="module")
def head(tmp_path_factory) -> str:
    return engine_eagle3_head(tmp_path_factory.mktemp("eagle3") / "init-head")


def complete(url: str, prompt: str) -> dict:
    reply = httpx.post(f"{url}/v1/completions", timeout=600,
                       json={"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0.0, "seed": 0})
    reply.raise_for_status()
    return reply.json()


def counter(url: str, name: str) -> float:
    metrics = httpx.get(f"{url}/metrics", timeout=30).text
    match = re.search(rf"^llamacpp:{name} (\S+)$", metrics, re.M)
    return float(match.group(1)) if match else 0.0


def test_the_eagle3_head_drafts_on_llama_server_losslessly(head, monkeypatch, capsys):
    monkeypatch.setattr(engines, "EAGLE3_HEAD", head)
    configs = llama.ENGINE.configs("smollm2-135m", "f32", ["eagle3:3"], 1, threads=1)
    assert [c.spec_type for c in configs] == ["none", "draft-eagle3"]
    seen = {}
    for config in configs:
        with LlamaServer(config, timeout_s=START_S) as server:
            pid = server.pid
            replies = [complete(server.url, prompt) for prompt in PROMPTS]
            seen[config.spec_type] = {
                "texts": [r["choices"][0]["text"] for r in replies],
                "tpot_ms": [r["timings"]["predicted_per_token_ms"] for r in replies],
                "accepted": counter(server.url, "spec_decode_num_accepted_tokens_total"),
                "drafted": counter(server.url, "spec_decode_num_draft_tokens_total")}
        assert gone(pid)
    off, eagle = seen["none"], seen["draft-eagle3"]
    assert eagle["texts"] == off["texts"]  # greedy: the verifier's tokens whatever the head drafts
    assert eagle["accepted"] > 0 and eagle["drafted"] >= eagle["accepted"] and off["drafted"] == 0
    with capsys.disabled():  # what the run saw (a loaded machine's TPOT, never compared)
        print(f"\nhead {head}: accepted {eagle['accepted']:.0f} of {eagle['drafted']:.0f} drafted; TPOT ms "
              f"(loaded) spec-off {off['tpot_ms']}, draft-eagle3 {eagle['tpot_ms']}")
