"""`specnb generate` end to end (tiny models through a patched load_pair, and the embedded verifier),
and the HF comparison harness."""

import json

import pytest
import torch
from helpers import peaked_pair

import specnb.decode.pairs
from specnb.app.cli import main
from specnb.decode.generate import generate
from specnb.decode.settings import Decoding
from specnb.decode.timing import STAGES
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

    def fake_load_pair(v, d=None, device="auto", dtype="auto", kernels="auto"):
        calls.append((v, d, device, dtype, kernels))
        return Pair(verifier=verifier, draft=draft if d else None, tokenizer=CharTokenizer(),
                    device=torch.device("cpu"), dtype=torch.float32, verifier_name=v, draft_name=d,
                    kernels={v: {"model": v, "path": "default", "asked": kernels}})

    monkeypatch.setattr(specnb.decode.pairs, "load_pair", fake_load_pair)
    return verifier, draft, calls


def run_json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_generate_json_batch_matches_library(tiny_pair, capsys):
    verifier, draft, calls = tiny_pair
    out = run_json(capsys, ["generate", "--verifier", "v", "--draft", "d", "--gamma", "3", "--max-new-tokens", "10",
                            "--prompt", "hello there", "--prompt", "hi", "--device", "cpu", "--json"])
    assert calls == [("v", "d", "cpu", "auto", "auto")]
    assert [r["prompt"] for r in out["results"]] == ["hello there", "hi"]
    from specnb.decode.inputs import encode_prompts

    ids, mask = encode_prompts(CharTokenizer(), ["hello there", "hi"])
    expected = generate(verifier, ids, mask, decoding=Decoding(max_new_tokens=10, eos_token_id=2)).tokens
    assert [r["tokens"] for r in out["results"]] == expected
    row = out["results"][0]
    assert set(row) >= {"prompt", "text", "tokens", "accepted", "acceptance_rate", "tokens_per_s", "stages"}
    assert set(row["stages"]) == {"prefill", "draft", "verify", "accept", "rollback", "other"}
    assert out["gamma"] == 3 and out["batch_size"] == 2 and 0 <= out["acceptance_rate"] <= 1
    assert out["kernels"] == {"v": {"model": "v", "path": "default", "asked": "auto"}}  # the run's settings


def test_generate_passes_kernels_through(tiny_pair, capsys):
    _, _, calls = tiny_pair
    out = run_json(capsys, ["generate", "--verifier", "v", "--kernels", "onednn", "--max-new-tokens", "2", "--json"])
    assert calls[0][-1] == "onednn" and out["kernels"]["v"]["asked"] == "onednn"
    assert main(["generate", "--verifier", "v", "--kernels", "mkl"]) == 2 and calls[1:] == []


@pytest.mark.parametrize("draft, verifier", [("smollm2-eagle", "smollm2-135m"), ("smollm2-medusa", "smollm2-135m"),
                                             ("smollm2-draft-s", "smollm2-135m"), ("prompt-lookup", "smollm2-135m"),
                                             (None, "smollm2-135m")])
def test_generate_without_verifier_runs_the_drafts_own(tiny_pair, capsys, draft, verifier):
    _, _, calls = tiny_pair
    flags = ["--draft", draft] if draft else []
    run_json(capsys, ["generate", *flags, "--max-new-tokens", "2", "--json"])
    assert calls[0][:2] == (verifier, draft)


def test_a_head_with_another_verifier_is_one_line_before_loading(tiny_pair, capsys):
    _, _, calls = tiny_pair
    assert main(["generate", "--draft", "smollm2-eagle", "--verifier", "Qwen/Qwen2.5-0.5B-Instruct"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "made for verifier 'smollm2-135m'" in err[0] and calls == []
    run_json(capsys, ["generate", "--draft", "smollm2-draft-s", "--verifier", "v", "--max-new-tokens", "2", "--json"])
    assert calls[0][:2] == ("v", "smollm2-draft-s")  # a distilled draft drafts for any verifier of its tokenizer


def test_gamma_auto_asks_this_machines_predictor(tiny_pair, capsys, monkeypatch):
    """``--gamma auto`` hands the engine ``auto_gamma``'s choice; the γ it took and why are reported."""
    import specnb.predict.auto_gamma as auto

    asked = []

    class Choice:
        def choose(self, batch_size):
            asked.append(batch_size)
            return 2, "auto: test choice"

    def auto_gamma(verifier, draft, **settings):
        asked.append((verifier, draft, settings))
        return Choice()

    monkeypatch.setattr(auto, "auto_gamma", auto_gamma)
    out = run_json(capsys, ["generate", "--verifier", "v", "--draft", "d", "--gamma", "auto", "--confidence", "0.4",
                            "--max-new-tokens", "4", "--prompt", "a", "--prompt", "b", "--json"])
    assert asked[0][:2] == ("v", "d") and asked[0][2]["confidence"] == 0.4 and asked[1] == 2  # the batch size
    assert out["gamma"] == 2 and out["gamma_reason"] == "auto: test choice" and out["confidence"] == 0.4


@pytest.mark.parametrize("flags, message", [(["--gamma", "auto"], "--gamma auto"),
                                            (["--draft", "d", "--gamma", "auto", "--tree", "3,2"], "--gamma auto"),
                                            (["--draft", "d", "--confidence", "1.5"], "confidence")])
def test_gamma_auto_and_confidence_misuse_is_one_line_before_loading(tiny_pair, capsys, flags, message):
    _, _, calls = tiny_pair
    assert main(["generate", "--verifier", "v", *flags, "--json"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and calls == []
    with pytest.raises(SystemExit) as exit_:  # argparse's usage line, then one error line
        main(["generate", "--verifier", "v", "--gamma", "four"])
    assert exit_.value.code == 2 and "whole number or auto" in capsys.readouterr().err


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
    stages = out["stages_ms"]
    assert set(stages) == set(STAGES) and stages["verify"] > 0
    assert 0 < sum(stages.values()) <= out["wall_ms"] + len(stages) * 0.0005  # inside the wall time (3 decimals each)


@pytest.mark.slow
def test_generate_with_the_eagle_head_alone(capsys):
    """``--draft smollm2-eagle`` and no ``--verifier``: the head's own verifier, each model's kernels recorded,
    and the verifier's greedy tokens (speculation is lossless)."""
    argv = ["generate", "--draft", "smollm2-eagle", "--max-new-tokens", "3", "--prompt", "Name three colours.",
            "--kernels", "default", "--json"]
    out = run_json(capsys, argv)
    assert (out["verifier"], out["draft"]) == ("smollm2-135m", "smollm2-eagle")
    assert out["gamma"] == 2  # the head's own γ (registry.DRAFT_GAMMA)
    assert {k: v["path"] for k, v in out["kernels"].items()} == {"smollm2-135m": "default", "smollm2-eagle": "default"}
    alone = run_json(capsys, ["generate", "--max-new-tokens", "3", "--prompt", "Name three colours.",
                              "--kernels", "onednn", "--json"])
    assert alone["verifier"] == "smollm2-135m" and alone["kernels"]["smollm2-135m"]["path"] == "onednn"
    assert alone["results"][0]["tokens"] == out["results"][0]["tokens"]


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
    records = compare_with_hf(verifier, draft, prompts, Decoding(gamma=3, max_new_tokens=10), repeats=1)
    assert len(records) == 2 * 4
    by_prompt = {}
    for r in records:
        assert r["new_tokens"] == 10 and r["wall_ms"] > 0 and r["tok_s"] > 0
        by_prompt.setdefault(r["prompt"], set()).add(tuple(r["tokens"]))
    assert all(len(v) == 1 for v in by_prompt.values())  # all four methods: identical greedy tokens
    first_method = [r["method"] for r in records if r["prompt"] == 1][0]
    assert first_method != records[0]["method"]  # the order rotates between prompts
    assert set(tok_s_by_method(records)) == {"hf_greedy", "hf_assisted", "specnb_verifier", "specnb_speculative"}
