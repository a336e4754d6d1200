"""Distillation of drafts: learning, file format, determinism, atomic writes, training prompts.

All on a tiny random-init verifier (vocab 96, width 64) so the file runs in seconds.
"""

import json
import random
from dataclasses import replace

import pytest
import torch
from helpers import tiny_model
from safetensors.torch import load_file
from transformers import LlamaConfig

from specnb.core.errors import ParameterError
from specnb.core.flops import analytic_flops
from specnb.models.embedded import build_draft
from specnb.models.training import corpus as C
from specnb.models.training import distill
from specnb.models.training.distill import DistillConfig, DraftSpec
from specnb.models.training.train_prompts import build_instructions
from specnb.models.trimmed_head import read_head_tokens

SPECS = {
    "narrow": DraftSpec(name="narrow", hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64,
                        init_layers=(), lr=1e-2),
    "wide": DraftSpec(name="wide", hidden_size=64, num_layers=1, num_heads=4, num_kv_heads=2, intermediate_size=128,
                      init_layers=(0,), lr=3e-3),
}
CFG = DistillConfig(n_prompts=12, max_new_tokens=10, gen_batch=6, top_k=16, heldout_frac=0.25, epochs=3,
                    batch_seqs=3, warmup_steps=2, threads=1, head_tokens=0)


@pytest.fixture(scope="module")
def verifier():
    return tiny_model(vocab=96, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                      initializer_range=0.2)  # peaked teacher


@pytest.fixture(scope="module")
def prompts():
    rng = random.Random(0)
    return [[1] + [rng.randrange(3, 96) for _ in range(rng.randrange(3, 8))] for _ in range(CFG.n_prompts)]


@pytest.fixture(scope="module")
def corpus(verifier, prompts):
    return C.generate_corpus(verifier, prompts, CFG)


def test_corpus_aligns_teacher_logits_with_answer_tokens(verifier, prompts, corpus):
    assert len(corpus) == len(prompts)
    for sample, prompt in zip(corpus, prompts):
        answer = sample.ids[sample.prompt_len:]
        assert sample.ids[: sample.prompt_len].tolist() == prompt
        assert sample.top_vals.shape == sample.top_idx.shape == (len(answer), CFG.top_k)
        # greedy decoding: the answer token is the teacher's top-1 at its position
        assert torch.equal(sample.top_idx[:, 0].long(), answer)


def test_text_corpus_keeps_teacher_top_k_at_every_next_token(verifier):
    chunks = [[5, 9, 11, 40, 7, 3], [8, 8, 30, 31, 32, 33]]
    samples = C.text_corpus(verifier, chunks, CFG)
    with torch.no_grad():
        logits = verifier(torch.tensor(chunks)).logits  # [2, 6, V]
    for sample, row in zip(samples, logits):
        assert sample.prompt_len == 1 and sample.top_idx.shape == (5, CFG.top_k)
        assert torch.equal(sample.top_idx[:, 0].long(), row[:-1].argmax(-1))  # position t predicts t+1


def test_corpus_cache_resumes_from_shards(verifier, prompts, corpus, tmp_path):
    first = C.generate_corpus(verifier, prompts, CFG, cache=tmp_path)
    assert len(list(tmp_path.glob("*.pt"))) == 2  # one file per batch
    again = C.generate_corpus(verifier, prompts, CFG, cache=tmp_path)  # read back, not regenerated
    for a, b, c in zip(first, again, corpus):
        assert torch.equal(a.ids, b.ids) and torch.equal(a.top_vals, b.top_vals) and torch.equal(a.ids, c.ids)


@pytest.mark.parametrize("name", ["narrow", "wide"])
def test_training_lowers_loss_and_raises_agreement(verifier, corpus, name):
    cfg = replace(CFG, epochs=12)
    body, proj, stats = distill.train_draft(SPECS[name], verifier, corpus, corpus, cfg)
    losses = stats["losses"]
    assert sum(losses[-3:]) / 3 < 0.8 * sum(losses[:3]) / 3
    assert stats["agreement_after"] > stats["agreement_before"] + 0.1
    assert (proj is None) == (name == "wide")


def test_files_follow_the_storage_contract(verifier, prompts, tmp_path):
    reports = distill.build_family(verifier, C.CorpusSource(prompts=prompts), CFG, tmp_path, specs=SPECS)
    assert [r.name for r in reports] == ["narrow", "wide"]
    for report in reports:
        folder = tmp_path / report.name
        assert sorted(p.name for p in folder.iterdir()) == ["config.json", "meta.json", "weights.safetensors"]
        config = LlamaConfig(**json.loads((folder / "config.json").read_text()))
        assert config.vocab_size == 96 and config.tie_word_embeddings and config.eos_token_id == 2
        assert config.architectures == ["LlamaForCausalLM"]
        state = load_file(str(folder / "weights.safetensors"))
        assert all(t.dtype == torch.float16 for t in state.values())
        assert "model.embed_tokens.weight" not in state and "lm_head.weight" not in state
        spec = SPECS[report.name]
        if spec.hidden_size != 64:
            assert state["embed_proj.weight"].shape == (spec.hidden_size, 64)
        else:
            assert "embed_proj.weight" not in state
        meta = json.loads((folder / "meta.json").read_text())
        assert meta["seed"] == CFG.seed and meta["steps"] == CFG.epochs * 3  # 9 train sequences, 3 a batch
        assert meta["heldout_top1_agreement"]["after"] == report.agreement_after
        assert meta["params"]["non_embedding"] == sum(t.numel() for k, t in state.items() if k != "embed_proj.weight")
    # no temporary folders left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["narrow", "wide"]


def test_assembled_draft_reproduces_the_trained_student(verifier, corpus, tmp_path):
    spec = SPECS["narrow"]
    body, proj, _ = distill.train_draft(spec, verifier, corpus, corpus, replace(CFG, epochs=1))
    # round to fp16 first, as the saved file does
    body.half().float()
    proj.half().float()
    config = distill.llama_config(spec, verifier.config)
    folder = distill.save_draft(tmp_path / "d", config, distill.draft_state_dict(body, proj), {})
    model = build_draft(folder, verifier.get_input_embeddings().weight)
    ids = corpus[0].ids[None]  # [1, S]
    emb = verifier.get_input_embeddings().weight.detach().float()
    cols = torch.arange(ids.shape[1])
    with torch.no_grad():
        student = distill.Student(body=body, proj=proj, emb=emb)
        expected = distill._student_logits(student, ids, torch.ones_like(ids), torch.zeros_like(cols), cols)
        got = model(ids).logits[0]  # [S, V]
    torch.testing.assert_close(got, expected, atol=2e-3, rtol=2e-3)


def test_trimmed_head_keeps_the_most_frequent_tokens(verifier, prompts, tmp_path):
    cfg = replace(CFG, head_tokens=32)
    distill.build_family(verifier, C.CorpusSource(prompts=prompts), cfg, tmp_path, specs={"wide": SPECS["wide"]})
    folder = tmp_path / "wide"
    head = read_head_tokens(folder)
    config = json.loads((folder / "config.json").read_text())
    assert len(head) == 32 == config["head_tokens"] and 2 in head  # EOS is always kept
    assert analytic_flops(LlamaConfig(**config)).lm_head_flops_per_token == 2 * 64 * 32
    model = build_draft(folder, verifier.get_input_embeddings().weight)
    with torch.no_grad():
        logits = model(torch.tensor([[1, 5, 9, 40]])).logits[0]  # [4, V]
    outside = torch.ones(96, dtype=torch.bool)
    outside[head] = False
    assert torch.isinf(logits[:, outside]).all() and torch.isfinite(logits[:, head]).all()
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["head"]["tokens"] == 32 and 0 < meta["head"]["heldout_coverage"] <= 1


def test_same_seed_same_weights_other_seed_differs(verifier, prompts, tmp_path):
    specs = {"narrow": SPECS["narrow"]}
    cfg = replace(CFG, epochs=1)
    source = C.CorpusSource(prompts=prompts)
    for out, seed in (("a", 0), ("b", 0), ("c", 1)):
        distill.build_family(verifier, source, replace(cfg, seed=seed), tmp_path / out, specs=specs)
    read = {o: (tmp_path / o / "narrow" / "weights.safetensors").read_bytes() for o in "abc"}
    assert read["a"] == read["b"]
    assert read["a"] != read["c"]


def test_failed_save_leaves_no_partial_folder(tmp_path):
    good = {"model.norm.weight": torch.ones(4, dtype=torch.float16)}
    distill.save_draft(tmp_path / "d", {"hidden_size": 4}, good, {"ok": 1})
    with pytest.raises(ValueError):
        distill.save_draft(tmp_path / "d", {"hidden_size": 4}, {"bad": "not a tensor"}, {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]  # the old draft is intact, no temp folder
    assert json.loads((tmp_path / "d" / "meta.json").read_text()) == {"ok": 1}
    with pytest.raises(ValueError):
        distill.save_draft(tmp_path / "e", {}, {"bad": "not a tensor"}, {})
    assert not (tmp_path / "e").exists()


def test_unknown_draft_name_is_a_parameter_error(verifier, prompts, tmp_path):
    with pytest.raises(ParameterError, match="unknown draft"):
        distill.build_family(verifier, C.CorpusSource(prompts=prompts), CFG, tmp_path, names=["nope"], specs=SPECS)


def test_instructions_are_deterministic_distinct_and_avoid_excluded_tasks():
    first = build_instructions(200, seed=3, exclude=[])
    assert first == build_instructions(200, seed=3, exclude=[])
    assert len(set(first)) == 200 and first != build_instructions(200, seed=4, exclude=[])
    banned = [t for t in first if t.startswith("Summarize")][:1] or [first[0]]
    kept = build_instructions(200, seed=3, exclude=banned)
    assert banned[0] not in kept
    # the shipped evaluation prompts: no training instruction repeats a 4-word phrase of their tasks
    from specnb.models.training.train_prompts import _grams, _template_grams, evaluation_prompts

    task_grams = set().union(*(_grams(p) for p in evaluation_prompts())) - _template_grams()
    assert not any(_grams(t) & task_grams for t in build_instructions(288, seed=0))
