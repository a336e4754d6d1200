"""by_name: the FLOPs table of drafts given by name, the verifier a draft runs with."""

import json

import pytest

from specnb.core.errors import ParameterError
from specnb.decode.kinds import by_name
from specnb.models import registry


def test_flops_table_reproduces_reference_ratios_and_handles_every_draft_kind():
    ref = by_name.flops_table("Qwen/Qwen2.5-3B-Instruct", ["Qwen/Qwen2.5-0.5B-Instruct"], context=0).set_index("model")
    assert ref.loc["Qwen/Qwen2.5-3B-Instruct", "flops_per_token"] == 6_171_394_048
    assert round(ref.loc["Qwen/Qwen2.5-0.5B-Instruct", "c_flops"], 4) == 0.1601
    ours = by_name.flops_table("smollm2-135m", ["exit:4", "smollm2-exit-12", "prompt-lookup"], context=128)
    ours = ours.set_index("model")
    assert ours.loc["exit:4", "layers"] == 4 and ours.loc["smollm2-exit-12", "layers"] == 12
    assert ours.loc["prompt-lookup", "flops_per_token"] == 0
    # the shared lm_head keeps a 4-of-30-layer exit well above 4/30 of the verifier's FLOPs
    assert 4 / 30 < ours.loc["exit:4", "c_flops"] < ours.loc["smollm2-exit-12", "c_flops"] < 1
    assert (ours["flops_at_context"] > ours["flops_per_token"]).sum() == 3  # attention over 128 cached tokens


def test_a_draft_knows_the_verifier_it_was_made_for(tmp_path):
    for name in ("smollm2-eagle", "smollm2-medusa", "smollm2-draft-s", "smollm2-exit-4"):
        assert registry.made_for(name) == registry.EMBEDDED_VERIFIER
        assert by_name.pick_verifier(name) == registry.EMBEDDED_VERIFIER
    assert registry.made_for("prompt-lookup") is None and registry.made_for("exit:3") is None
    assert by_name.pick_verifier(None) == by_name.pick_verifier("prompt-lookup") == registry.EMBEDDED_VERIFIER
    (tmp_path / "config.json").write_text(json.dumps({"kind": "eagle", "verifier": "org/big-model"}))
    assert by_name.pick_verifier(str(tmp_path)) == "org/big-model"
    assert by_name.pick_verifier("smollm2-draft-s", "org/other") == "org/other"  # any verifier of its tokenizer
    with pytest.raises(ParameterError, match="made for verifier 'org/big-model', not 'org/other'"):
        by_name.pick_verifier(str(tmp_path), "org/other")
