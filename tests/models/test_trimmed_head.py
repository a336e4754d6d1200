"""Trimmed draft heads: same logits on the kept tokens, -inf elsewhere, and still lossless."""

import json

import pytest
import torch
from helpers import tiny_model

from specnb.decode.generate import generate
from specnb.decode.settings import Decoding
from specnb.models.trimmed_head import TrimmedHead, most_frequent_tokens, read_head_tokens, trim_head


def tiny_llama(seed: int, layers: int = 2):
    return tiny_model(vocab=80, hidden=32, layers=layers, seed=seed, tie_word_embeddings=True, initializer_range=0.3)


def test_trimmed_head_matches_the_full_head_on_kept_tokens():
    model = tiny_llama(0)
    ids = torch.tensor([[3, 7, 11, 2]])  # [1, 4]
    with torch.no_grad():
        full = model(ids).logits  # [1, 4, 80]
        keep = [0, 2, 5, 7, 11, 40, 79]
        trimmed = trim_head(model, keep)(ids).logits  # [1, 4, 80]
    assert isinstance(model.lm_head, TrimmedHead)
    torch.testing.assert_close(trimmed[..., keep], full[..., keep])
    others = [i for i in range(80) if i not in keep]
    assert torch.isneginf(trimmed[..., others]).all()


def test_speculation_with_a_trimmed_draft_stays_lossless():
    verifier, draft = tiny_llama(1, layers=3), trim_head(tiny_llama(2, layers=1), list(range(0, 80, 2)))
    ids = torch.tensor([[5, 9, 14, 3, 22]])
    alone = generate(verifier, ids, decoding=Decoding(max_new_tokens=20))
    for gamma in (1, 3, 5):
        spec = generate(verifier, ids, draft=draft, decoding=Decoding(gamma=gamma, max_new_tokens=20))
        assert spec.tokens == alone.tokens


def test_most_frequent_tokens_breaks_ties_by_id_and_keeps_forced_ids():
    counts = torch.tensor([5, 9, 9, 0, 1, 7])
    assert most_frequent_tokens(counts, 3) == [1, 2, 5]
    assert most_frequent_tokens(counts, 3, always=[3]) == [1, 2, 3]


def test_head_file_must_be_sorted_distinct_ids(tmp_path):
    assert read_head_tokens(tmp_path) is None
    (tmp_path / "head_tokens.json").write_text(json.dumps([3, 1]))
    with pytest.raises(ValueError, match="sorted list"):
        read_head_tokens(tmp_path)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        trim_head(tiny_llama(0), [1, 99])
