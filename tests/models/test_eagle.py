"""eagle: an EAGLE draft on a tiny verifier: its config follows the verifier, a save round-trips, and
a trimmed head maps its tokens back to the verifier's ids."""

import torch
from helpers import tiny_model

from specnb.models.eagle import EagleConfig, EagleDraft


def new_draft(verifier, **settings):
    torch.manual_seed(0)
    return EagleDraft(EagleConfig.from_verifier(verifier.config, **settings)).eval().attach(verifier)


def test_the_config_follows_the_verifier():
    verifier = tiny_model(vocab=50)
    config = EagleConfig.from_verifier(verifier.config)
    assert config.hidden_size == 64 and config.vocab_size == 50 and config.num_attention_heads == 4
    assert config.llama_config().num_hidden_layers == 1


def test_a_saved_draft_loads_with_the_same_outputs(tmp_path):
    verifier = tiny_model(vocab=50)
    draft = new_draft(verifier)
    draft.save(tmp_path / "eagle", dtype=torch.float32)
    loaded = EagleDraft.load(tmp_path / "eagle", dtype=torch.float32).attach(verifier).eval()
    features, tokens = torch.randn(1, 5, 64), torch.randint(3, 50, (1, 5))
    with torch.inference_mode():
        torch.testing.assert_close(loaded(features, tokens), draft(features, tokens))
    assert loaded.draft_kind == "eagle"


def test_a_trimmed_head_proposes_verifier_ids():
    verifier = tiny_model(vocab=50)
    head_ids = torch.tensor([0, 1, 2, 7, 11, 23, 42])
    torch.manual_seed(0)
    config = EagleConfig.from_verifier(verifier.config, head_tokens=len(head_ids))
    draft = EagleDraft(config, head_ids=head_ids).eval().attach(verifier)
    with torch.inference_mode():
        h = draft(torch.randn(1, 4, 64), torch.randint(3, 50, (1, 4)))[0]  # [4, d]
        logits = draft.logits(h, None)  # [4, 7]
    assert logits.shape == (4, 7) and set(draft.head_ids[logits.argmax(-1)].tolist()) <= set(head_ids.tolist())
