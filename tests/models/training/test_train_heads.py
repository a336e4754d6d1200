"""Building the EAGLE / Medusa training corpus and training both heads, on a tiny random-init verifier.

The verifier has SmolLM2's vocabulary (so the embedded tokenizer's chat template applies) but width 64
and two layers, so the whole file runs in seconds.
"""

import json
from dataclasses import replace

import pytest
import torch
from helpers import tiny_model
from transformers import AutoModelForCausalLM, AutoTokenizer

from specnb.app import cli
from specnb.models.eagle import EagleDraft
from specnb.models.eagle3 import Eagle3Draft
from specnb.models.features import capture_hidden
from specnb.models.heads import head_kind, load_head
from specnb.models.medusa import MedusaHeads
from specnb.models.training import head_corpus
from specnb.models.training import train_heads as T
from specnb.models.training.head_corpus import HeadCorpus, HeadCorpusConfig, build_head_corpus, plan_openers
from specnb.models.training.head_losses import ttt_mask, ttt_unroll

pytestmark = pytest.mark.usefixtures("one_thread")

CORPUS = HeadCorpusConfig(n_chats=4, batch=2, instr_cap=6, steps=24, feature_layers=(1, 0))
EAGLE = replace(T.HEADS["smollm2-eagle"], head_tokens=64, epochs=15, batch_positions=64, warmup=2, threads=1)
CONFIGS = {
    "eagle": replace(EAGLE, feature_layers=(), ttt_steps=1, w_reg=1.0, w_cls=0.1, noise=0.1, standard=False,
                     lookup_ngram=3, copy_bias=True),  # EAGLE-1/2 style, specnb's own layout
    "eagle3": replace(T.HEADS["smollm2-eagle3"], head_tokens=64, epochs=15, batch_positions=64, warmup=2, threads=1,
                      feature_layers=(1, 0), ttt_steps=3),  # the standard layout (specnb.models.eagle3)
    "medusa": replace(T.HEADS["smollm2-medusa"], head_tokens=64, epochs=15, batch_positions=64, warmup=2, lr=5e-3,
                     threads=1),
}


@pytest.fixture(scope="module")
def tokenizer():
    from specnb.models.embedded import embedded_verifier_path

    return AutoTokenizer.from_pretrained(embedded_verifier_path())


@pytest.fixture(scope="module")
def verifier(tokenizer):
    return tiny_model(vocab=len(tokenizer), tie_word_embeddings=True, initializer_range=0.2).requires_grad_(False)


@pytest.fixture(scope="module")
def corpus(verifier, tokenizer, tmp_path_factory):
    return build_head_corpus(verifier, tokenizer, CORPUS, tmp_path_factory.mktemp("corpus"), progress=False)


def test_corpus_keeps_the_verifier_features_of_every_fed_token(verifier, tokenizer, corpus):
    assert len(corpus) == CORPUS.n_chats
    header = tokenizer("<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    for seq in corpus:
        assert seq.loss_from < seq.answer_from <= len(seq.ids)
        assert seq.ids[seq.answer_from - len(header):seq.answer_from].tolist() == header  # the forced header
        assert len(seq.ids) - 1 <= len(seq.feats) <= len(seq.ids)
        with torch.no_grad():  # teacher-forced on the sequence alone: the same features as the batched loop
            h = verifier.model(input_ids=seq.ids[None, :len(seq.feats)].long()).last_hidden_state[0]
        torch.testing.assert_close(seq.feats.float(), h, atol=2e-2, rtol=1e-2)
        with torch.no_grad(), capture_hidden(verifier, CORPUS.feature_layers) as captured:
            verifier.model(input_ids=seq.ids[None, :len(seq.feats)].long())
        torch.testing.assert_close(seq.fused.float(), captured["features"][0], atol=2e-2, rtol=1e-2)
        assert seq.fused.shape[1] == 2 * verifier.config.hidden_size
        # the answer is greedy: each answer token is the verifier's argmax at the position before it
        targets = seq.ids[seq.answer_from:len(seq.feats)].long()
        assert torch.equal(verifier.lm_head(h[seq.answer_from - 1:len(seq.feats) - 1]).argmax(-1), targets)


def test_corpus_resumes_from_shards_and_is_deterministic(verifier, tokenizer, corpus, tmp_path):
    fresh = build_head_corpus(verifier, tokenizer, CORPUS, None, progress=False)
    first = build_head_corpus(verifier, tokenizer, CORPUS, tmp_path, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chat-0000.pt", "chat-0001.pt"]
    (tmp_path / "chat-0001.pt").unlink()  # an interrupted build: the finished batch is kept, the other rebuilt
    again = build_head_corpus(verifier, tokenizer, CORPUS, tmp_path, progress=False)
    for a, b, c, d in zip(fresh, first, again, corpus):
        assert torch.equal(a.ids, b.ids) and torch.equal(b.ids, c.ids) and torch.equal(c.ids, d.ids)
        assert torch.equal(a.feats, c.feats)
    other = build_head_corpus(verifier, tokenizer, replace(CORPUS, seed=1), None, progress=False)
    assert [s.ids.tolist() for s in other] != [s.ids.tolist() for s in corpus]


def test_corpus_built_by_two_processes_is_the_same(verifier, tokenizer, corpus, tmp_path, monkeypatch):
    verifier.save_pretrained(tmp_path / "verifier")  # a helper process loads the verifier from its folder
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "verifier", dtype=torch.float32).requires_grad_(False)
    built_here = []
    build_batch = head_corpus.build_batch
    monkeypatch.setattr(head_corpus, "build_batch", lambda *a: built_here.append(a[1]) or build_batch(*a))
    folder = tmp_path / "corpus"
    both = build_head_corpus(saved, tokenizer, CORPUS, folder, progress=False, workers=2)
    assert built_here == [0]  # batch 1 came from the helper
    assert sorted(p.name for p in folder.iterdir()) == ["chat-0000.pt", "chat-0001.pt"]
    for a, b in zip(both, corpus):
        assert torch.equal(a.ids, b.ids) and torch.equal(a.feats, b.feats) and torch.equal(a.fused, b.fused)


def test_plan_is_a_prefix_of_a_longer_plan():
    assert plan_openers(replace(CORPUS, n_chats=64))[:4] == plan_openers(CORPUS)
    assert replace(CORPUS, n_chats=64).key() == CORPUS.key() != replace(CORPUS, steps=25).key()


@pytest.mark.parametrize("kind", ["eagle", "eagle3", "medusa"])
def test_training_lowers_the_loss(verifier, corpus, kind):
    cfg = CONFIGS[kind]
    head_ids = T.head_token_ids(corpus, cfg.head_tokens, verifier.config.vocab_size)
    assert len(head_ids) == 64 and {0, 1, 2} <= set(head_ids.tolist())
    model = T.RECIPES[cfg.kind].new(verifier, head_ids, cfg)
    assert isinstance(model, Eagle3Draft) == (kind == "eagle3")  # the standard layout (specnb.models.eagle3)
    report = T.train_head(model, corpus, cfg, progress=False)
    assert report.steps == cfg.epochs * len(T.make_batches(corpus, cfg.batch_positions, cfg.seed, 0))
    assert report.last["loss"] < 0.8 * report.first["loss"]


def test_heads_are_saved_loadable_and_the_same_for_the_same_seed(verifier, corpus, tmp_path):
    configs = {"e": replace(CONFIGS["eagle"], epochs=1), "m": replace(CONFIGS["medusa"], epochs=1),
               "e3": replace(CONFIGS["eagle3"], epochs=1)}
    for out, seed in (("a", 0), ("b", 0), ("c", 1)):
        seeded = {n: replace(c, seed=seed) for n, c in configs.items()}
        T.train_heads(verifier, HeadCorpus(seqs=corpus, cfg=CORPUS), ["e", "m", "e3"], tmp_path / out, seeded,
                      progress=False)
    read = {o: (tmp_path / o / "e3" / "model.safetensors").read_bytes() for o in "abc"}
    assert read["a"] == read["b"] != read["c"]
    standard = load_head(tmp_path / "a" / "e3", verifier, EagleDraft)
    assert isinstance(standard, Eagle3Draft) and standard.head_ids.tolist() == \
        T.head_token_ids(corpus, 64, verifier.config.vocab_size).tolist()
    for name, kind, cls in (("e", "eagle", EagleDraft), ("m", "medusa", MedusaHeads)):
        read = {o: (tmp_path / o / name / "weights.safetensors").read_bytes() for o in "abc"}
        assert read["a"] == read["b"] != read["c"]
        folder = tmp_path / "a" / name
        assert head_kind(folder) == kind and json.loads((folder / "config.json").read_text())["head_tokens"] == 64
        head = load_head(folder, verifier, cls)
        assert head.head_weight.shape == (64, 64)
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["e", "e3", "m"]  # no temporary folders left


def test_unknown_head_name_is_one_line_and_exit_2(capsys):
    assert cli.main(["build-heads", "--only", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown head name" in err


@pytest.mark.parametrize("name, kind", [("smollm2-eagle", "eagle"), ("smollm2-eagle3", "eagle"),
                                        ("smollm2-medusa", "medusa")])
def test_the_committed_heads_resolve_by_name(name, kind):
    from specnb.decode.kinds.by_name import list_embedded
    from specnb.models.load import locate
    from specnb.models.registry import embedded_draft_names, resolve_draft

    assert name in embedded_draft_names() and resolve_draft(name).kind == kind
    assert not locate(name).has_tokenizer  # a head reads the verifier's features: no tokenizer of its own
    row = next(r for r in list_embedded() if r["name"] == name)
    assert row["kind"] == kind and row["params"] > 0 and row["flops_per_token"] > 0


def test_ttt_mask_worked_by_hand():
    mask = ttt_mask(3, 2)[0, 0].int().tolist()
    assert mask == [[1, 0, 0, 1, 0, 0, 1, 0, 0],
                    [1, 1, 0, 0, 1, 0, 0, 1, 0],
                    [1, 1, 1, 0, 0, 1, 0, 0, 1]]


@pytest.mark.parametrize("standard", [False, True])
def test_training_time_test_unroll_is_what_the_draft_computes_when_it_drafts(verifier, standard):
    """Unroll s of chain a is the draft's step s+1 at decoding time: a cache of the true entries up to a,
    then its own outputs fed back (with the true tokens, i.e. when every earlier draft was right)."""
    from transformers import DynamicCache

    new = T.new_eagle3 if standard else T.new_eagle
    draft = new(verifier, None, replace(CONFIGS["eagle3"], lookup_ngram=0, copy_bias=False, standard=standard)).eval()
    torch.manual_seed(0)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn_like(p) * 0.05)  # away from the init's identities
    d, width, steps = verifier.config.hidden_size, 9, 3
    first = torch.randn(1, width, 2 * d)
    ids = torch.randint(0, verifier.config.vocab_size, (1, width + steps + 1))
    with torch.no_grad():
        unrolled = [h for _, h, _ in ttt_unroll(draft, first, ids, steps)]
        for a in (0, 4, width - 1):
            cache = DynamicCache(config=draft.config.llama_config())
            h = draft(first[:, :a + 1], ids[:, 1:a + 2], cache=cache)[:, -1:]  # true entries 0..a
            for s in range(1, steps):
                h = draft(h, ids[:, a + s + 1:a + s + 2], cache=cache, position_ids=torch.tensor([[a + s]]))
                torch.testing.assert_close(h[0, 0], unrolled[s][0, a], atol=1e-4, rtol=1e-4)
