"""Head checkpoints: specnb's own layout and the published EAGLE-1/-2 layout load onto a verifier by
name, round-trip exactly, and a head made for another verifier is a one-line error before any
generation."""

import pytest
import torch

from specnb.app.cli import main
from specnb.core.errors import IncompatibleModelsError, ParameterError
from specnb.decode.generate import generate
from specnb.decode.pairs import load_pair
from specnb.decode.settings import Decoding
from specnb.models import registry
from specnb.models.eagle import EagleConfig, EagleDraft
from specnb.models.heads import head_kind, write_published
from specnb.models.medusa import MedusaConfig, MedusaHeads

pytestmark = pytest.mark.usefixtures("one_thread")


def random_eagle(verifier, **options) -> EagleDraft:
    torch.manual_seed(3)
    draft = EagleDraft(EagleConfig.from_verifier(verifier.config, **options))
    with torch.no_grad():
        for p in draft.parameters():
            p.normal_(0, 0.05)
    return draft.eval()


def check_same_draft(verifier_folder, folder, original, verifier, feature_width: int):
    """Load the head saved in ``folder`` beside the verifier: it computes what ``original`` computes on
    features [1, 5, feature_width], and drafts losslessly. Returns the loaded pair."""
    loaded = load_pair(str(verifier_folder), str(folder), device="cpu")
    feats, ids = torch.randn(1, 5, feature_width), torch.randint(0, 60, (1, 5))
    with torch.no_grad():
        torch.testing.assert_close(loaded.draft(feats, ids), original(feats, ids), rtol=0, atol=0)
    prompt = torch.randint(3, 60, (2, 7))
    expected = generate(verifier, prompt, decoding=Decoding(max_new_tokens=10)).tokens
    assert generate(loaded.verifier, prompt, draft=loaded.draft,
                    decoding=Decoding(gamma=3, max_new_tokens=10)).tokens == expected
    return loaded


def test_published_layout_round_trip_is_exact(verifier_folder, tmp_path):
    pair = load_pair(str(verifier_folder), None, device="cpu")
    original = random_eagle(pair.verifier, input_norm=False, out_norm=False).attach(pair.verifier)
    write_published(original, tmp_path / "eagle-published")
    assert sorted(p.name for p in (tmp_path / "eagle-published").iterdir()) == ["config.json", "model.safetensors"]
    assert head_kind(tmp_path / "eagle-published") == "eagle"
    assert registry.resolve_draft(str(tmp_path / "eagle-published")).kind == "eagle"
    check_same_draft(verifier_folder, tmp_path / "eagle-published", original, pair.verifier, feature_width=64)


def test_specnb_layout_eagle_and_medusa_load_by_folder(verifier_folder, tmp_path):
    pair = load_pair(str(verifier_folder), None, device="cpu")
    random_eagle(pair.verifier).save(tmp_path / "eagle")
    MedusaHeads(MedusaConfig(hidden_size=64, num_heads=3, vocab_size=pair.verifier.config.vocab_size)).save(
        tmp_path / "medusa")
    for name, kind in (("eagle", "eagle"), ("medusa", "medusa")):
        loaded = load_pair(str(verifier_folder), str(tmp_path / name), device="cpu")
        assert loaded.draft.draft_kind == kind and registry.resolve_draft(str(tmp_path / name)).kind == kind
        prompt = torch.randint(3, 60, (1, 6))
        expected = generate(loaded.verifier, prompt, decoding=Decoding(max_new_tokens=8)).tokens
        assert generate(loaded.verifier, prompt, draft=loaded.draft,
                        decoding=Decoding(gamma=2, max_new_tokens=8)).tokens == expected


def test_an_eagle3_head_round_trips_and_generates_losslessly(verifier_folder, tmp_path):
    pair = load_pair(str(verifier_folder), None, device="cpu")
    original = random_eagle(pair.verifier, feature_layers=(1, 0)).attach(pair.verifier)
    original.save(tmp_path / "eagle3", dtype=torch.float32)
    loaded = check_same_draft(verifier_folder, tmp_path / "eagle3", original, pair.verifier, feature_width=128)
    assert loaded.draft.config.feature_layers == (1, 0)
    with pytest.raises(ParameterError, match="feature_layers"):
        write_published(original, tmp_path / "x")


def test_a_head_for_another_verifier_is_one_line_before_generation(verifier_folder, tmp_path, capsys):
    # a head built for a narrower model
    narrow = EagleDraft(EagleConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
                                    head_dim=8, vocab_size=63, input_norm=False, out_norm=False))
    write_published(narrow, tmp_path / "narrow")
    with pytest.raises(IncompatibleModelsError, match="made for another verifier .hidden size 32 vs the verifier's 64"):
        load_pair(str(verifier_folder), str(tmp_path / "narrow"), device="cpu")
    wrong_vocab = MedusaHeads(MedusaConfig(hidden_size=64, num_heads=2, vocab_size=1000))
    wrong_vocab.save(tmp_path / "medusa-1000")
    code = main(["generate", "--verifier", str(verifier_folder), "--draft", str(tmp_path / "medusa-1000"),
                 "--prompt", "w1 w2", "--device", "cpu"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "vocabulary 1000 vs 63" in err


def test_the_published_layout_has_no_place_for_norms_or_a_trimmed_head(verifier_folder, tmp_path):
    pair = load_pair(str(verifier_folder), None, device="cpu")
    with pytest.raises(ParameterError, match="no input norm"):
        write_published(random_eagle(pair.verifier, input_norm=True), tmp_path / "x")


def test_cli_generates_with_a_head_and_a_tree(verifier_folder, tmp_path, capsys):
    import json

    pair = load_pair(str(verifier_folder), None, device="cpu")
    random_eagle(pair.verifier).save(tmp_path / "eagle")
    base = ["generate", "--verifier", str(verifier_folder), "--prompt", "w1 w2 w3", "--max-new-tokens", "9",
            "--device", "cpu", "--no-chat-template", "--json"]
    assert main(base) == 0
    expected = json.loads(capsys.readouterr().out)["results"][0]["tokens"]
    assert main([*base, "--draft", str(tmp_path / "eagle"), "--tree", "2,2,1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["results"][0]["tokens"] == expected and out["tree"] == [2, 2, 1] and out["gamma"] == 3
    assert main([*base, "--draft", "prompt-lookup", "--tree", "2,1"]) == 2
    assert "drafts trees" in capsys.readouterr().err
