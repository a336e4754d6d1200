"""`specnb generate` end to end (tiny models through a patched load_pair, and the embedded verifier),
and the HF comparison harness."""

import json

import pytest
import torch
from helpers import peaked_pair

import specnb.models.load
from specnb.app.cli import main
from specnb.engine.generate import generate
from specnb.measure.hf_baseline import compare_with_hf, fixed_gamma, tok_s_by_method
from specnb.models.load import Pair

pytestmark = pytest.mark.usefixtures("one_thread")


class CharTokenizer:
    """Bytes as token ids, a chat template that wraps the prompt, id 2 as EOS."""

    chat_template = "user: {prompt}"
    pad_token_id, eos_token_id = 0, 2

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False):
        return f"user: {messages[0]['content']}\nassistant:"

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [3 + (b % 190) for b in text.encode()]}

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(97 + i % 26) for i in ids)


@pytest.fixture
def tiny_pair(monkeypatch):
    verifier, draft = peaked_pair("llama")
    calls = []

    def fake_load_pair(v, d=None, device="auto", dtype="auto"):
        calls.append((v, d, device, dtype))
        return Pair(verifier, draft if d else None, CharTokenizer(), torch.device("cpu"), torch.float32, None, v, d)

    monkeypatch.setattr(specnb.models.load, "load_pair", fake_load_pair)
    return verifier, draft, calls


def run_json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_generate_json_batch_matches_library(tiny_pair, capsys):
    verifier, draft, calls = tiny_pair
    out = run_json(capsys, ["generate", "--verifier", "v", "--draft", "d", "--gamma", "3", "--max-new-tokens", "10",
                            "--prompt", "hello there", "--prompt", "hi", "--device", "cpu", "--json"])
    assert calls == [("v", "d", "cpu", "auto")]
    assert [r["prompt"] for r in out["results"]] == ["hello there", "hi"]
    from specnb.engine.inputs import encode_prompts

    ids, mask = encode_prompts(CharTokenizer(), ["hello there", "hi"])
    expected = generate(verifier, ids, mask, max_new_tokens=10, eos_token_id=2).tokens
    assert [r["tokens"] for r in out["results"]] == expected
    row = out["results"][0]
    assert set(row) >= {"prompt", "text", "tokens", "accepted", "acceptance_rate", "tokens_per_s", "stages"}
    assert set(row["stages"]) == {"prefill", "draft", "verify", "accept", "rollback", "other"}
    assert out["gamma"] == 3 and out["batch_size"] == 2 and 0 <= out["acceptance_rate"] <= 1


def test_generate_verifier_only_sampling_and_raw_prompt(tiny_pair, capsys):
    out = run_json(capsys, ["generate", "--verifier", "v", "--max-new-tokens", "5", "--sample", "--seed", "1",
                            "--temperature", "0.8", "--top-p", "0.9", "--no-chat-template", "--prompt", "x", "--json"])
    again = run_json(
        capsys,
        [
            "generate",
            "--verifier",
            "v",
            "--max-new-tokens",
            "5",
            "--sample",
            "--seed",
            "1",
            "--temperature",
            "0.8",
            "--top-p",
            "0.9",
            "--no-chat-template",
            "--prompt",
            "x",
            "--json",
        ],
    )
    assert out["results"][0]["tokens"] == again["results"][0]["tokens"]  # seeded
    assert out["draft"] is None and out["results"][0]["acceptance_rate"] is None and out["draft_forwards"] == 0


def test_generate_table_output(tiny_pair, capsys):
    assert main(["generate", "--verifier", "v", "--draft", "d", "--max-new-tokens", "4", "--prompt", "abc"]) == 0
    text = capsys.readouterr().out
    assert "tokens_per_s" in text and "acceptance_rate" in text


@pytest.mark.parametrize("flags", [["--gamma", "0"], ["--max-new-tokens", "0"], ["--sample", "--temperature", "0"]])
def test_generate_bad_parameters_fail_before_loading(tiny_pair, capsys, flags):
    _, _, calls = tiny_pair
    assert main(["generate", "--verifier", "v", *flags]) == 2
    assert "error" in capsys.readouterr().err and calls == []


@pytest.mark.slow
def test_generate_with_embedded_verifier(capsys):
    out = run_json(
        capsys,
        [
            "generate",
            "--verifier",
            "smollm2-135m",
            "--draft",
            "prompt-lookup",
            "--max-new-tokens",
            "6",
            "--prompt",
            "Repeat exactly: red green blue red green blue",
            "--device",
            "cpu",
            "--json",
        ],
    )
    row = out["results"][0]
    assert 1 <= len(row["tokens"]) <= 6 and isinstance(row["text"], str) and row["text"]
    assert abs(sum(out["stages_ms"].values()) - out["wall_ms"]) / out["wall_ms"] < 0.02


def test_fixed_gamma_sets_and_restores_assistant_config():
    _, draft = peaked_pair("llama")
    config = draft.generation_config
    before = (config.num_assistant_tokens, config.num_assistant_tokens_schedule, config.assistant_confidence_threshold)
    with fixed_gamma(draft, 3):
        assert (
            config.num_assistant_tokens,
            config.num_assistant_tokens_schedule,
            config.assistant_confidence_threshold,
        ) == (3, "constant", 0.0)
    assert (
        config.num_assistant_tokens,
        config.num_assistant_tokens_schedule,
        config.assistant_confidence_threshold,
    ) == before


def test_compare_with_hf_records_agree_token_for_token():
    verifier, draft = peaked_pair("qwen2")
    prompts = [torch.randint(3, 200, (n,), generator=torch.Generator().manual_seed(n)) for n in (5, 9)]
    records = compare_with_hf(verifier, draft, prompts, gamma=3, max_new_tokens=10, repeats=1)
    assert len(records) == 2 * 4
    by_prompt = {}
    for r in records:
        assert r["new_tokens"] == 10 and r["wall_ms"] > 0 and r["tok_s"] > 0
        by_prompt.setdefault(r["prompt"], set()).add(tuple(r["tokens"]))
    assert all(len(v) == 1 for v in by_prompt.values())  # all four methods: identical greedy tokens
    first_method = [r["method"] for r in records if r["prompt"] == 1][0]
    assert first_method != records[0]["method"]  # the order rotates between prompts
    assert set(tok_s_by_method(records)) == {"hf_greedy", "hf_assisted", "specnb_verifier", "specnb_speculative"}
