"""defaults: which drafts a notebook compares when the reader names none."""

import pytest

from specnb.app import defaults
from specnb.app.defaults import alternative_speculation, parse_speculation
from specnb.core.errors import ParameterError
from specnb.models import registry


def smollm2_shaped(layers: int) -> dict:
    """A committed draft's config.json with SmolLM2's widths and ``layers`` layers."""
    return {"model_type": "llama", "hidden_size": 576, "num_hidden_layers": layers, "num_attention_heads": 9,
            "num_key_value_heads": 3, "intermediate_size": 1536, "vocab_size": 49152, "tie_word_embeddings": True,
            "architectures": ["LlamaForCausalLM"]}


def test_default_draft_prefers_best_predicted_and_falls_back(tmp_path, monkeypatch):
    import json

    monkeypatch.setattr("specnb.core.paths.DRAFTS_DIR", tmp_path)
    with pytest.raises(ParameterError, match="no default draft"):
        defaults.default_draft("Qwen/Qwen2.5-3B-Instruct")
    assert defaults.default_draft("smollm2-135m") == "smollm2-exit-4"  # nothing committed
    # named so the winner sorts last: ``max`` keeps the first of equal scores, so a predictor that scores
    # every draft alike picks "a-deep" and fails here
    for name, layers, agreement in (("z-cheap", 1, 0.6), ("a-deep", 8, 0.65)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(smollm2_shaped(layers)))
        (tmp_path / name / "meta.json").write_text(json.dumps({"heldout_top1_agreement": {"after": agreement}}))
    assert defaults.default_draft("smollm2-135m") == "z-cheap"  # slightly lower α, far cheaper
    (tmp_path / "a-deep" / "meta.json").write_text(json.dumps({"heldout_top1_agreement": {"after": 0.95}}))
    (tmp_path / "z-cheap" / "meta.json").write_text(json.dumps({"heldout_top1_agreement": {"after": 0.05}}))
    assert defaults.default_draft("smollm2-135m") == "a-deep"  # a useless cheap draft loses to an agreeing one


def test_notebook_drafts_named_listed_embedded_and_foreign_verifier(tmp_path, monkeypatch):
    import json

    monkeypatch.setattr("specnb.core.paths.DRAFTS_DIR", tmp_path)
    assert defaults.notebook_drafts("Qwen/Qwen2.5-3B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", ["x"]) == [
        "Qwen/Qwen2.5-0.5B-Instruct"
    ]
    assert defaults.notebook_drafts("smollm2-135m", None, "smollm2-exit-4") == ["smollm2-exit-4"]
    with pytest.raises(ParameterError, match="no default draft"):  # never SmolLM2 drafts for another verifier
        defaults.notebook_drafts("Qwen/Qwen2.5-3B-Instruct")
    assert defaults.notebook_drafts("smollm2-135m", kinds=("exits", "lookup")) == [
        *registry.EMBEDDED_EXITS,
        "prompt-lookup",
    ]
    for name, layers in (("d-big", 8), ("d-small", 2)):  # alphabetical order is not cost order
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(smollm2_shaped(layers)))
    assert defaults.notebook_drafts("smollm2-135m", kinds=("distilled", "lookup")) == [
        "d-small",
        "d-big",
        "prompt-lookup",
    ]
    for name, kind in (("h-medusa", "medusa"), ("h-eagle", "eagle")):  # heads are not distilled drafts
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({"kind": kind, "hidden_size": 576}))
    assert defaults.notebook_drafts("smollm2-135m", kinds=("distilled", "heads")) == [
        "d-small",
        "d-big",
        "h-eagle",
        "h-medusa",
    ]
    with pytest.raises(ParameterError, match="unknown draft kinds"):
        defaults.notebook_drafts("smollm2-135m", kinds=("exit",))


def test_speculation_items_parse_or_fail_in_one_line():
    assert [s.label for s in parse_speculation(["prompt-lookup:4", "smollm2-eagle:3x2"])] == \
        ["prompt-lookup γ=4", "smollm2-eagle tree=3x2"]
    with pytest.raises(ParameterError, match="DRAFT:GAMMA or DRAFT:TREE"):
        parse_speculation(["prompt-lookup"])
    with pytest.raises(ParameterError, match="name the speculation"):
        alternative_speculation("Qwen/Qwen2.5-3B", None)
    first = parse_speculation("prompt-lookup:4")[0]
    assert [s.label for s in alternative_speculation("x", ["prompt-lookup:4", "a:2"], pick=first)] == \
        ["prompt-lookup γ=4", "a γ=2"]
