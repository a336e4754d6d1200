"""registry: draft names and the FLOPs table of a verifier and drafts given by name."""

from specnb.models import registry


def test_flops_table_reproduces_reference_ratios_and_handles_every_draft_kind():
    ref = registry.flops_table("Qwen/Qwen2.5-3B-Instruct", ["Qwen/Qwen2.5-0.5B-Instruct"], context=0).set_index("model")
    assert ref.loc["Qwen/Qwen2.5-3B-Instruct", "flops_per_token"] == 6_171_394_048
    assert round(ref.loc["Qwen/Qwen2.5-0.5B-Instruct", "c_flops"], 4) == 0.1601
    ours = registry.flops_table("smollm2-135m", ["exit:4", "smollm2-exit-12", "prompt-lookup"], context=128)
    ours = ours.set_index("model")
    assert ours.loc["exit:4", "layers"] == 4 and ours.loc["smollm2-exit-12", "layers"] == 12
    assert ours.loc["prompt-lookup", "flops_per_token"] == 0
    # the shared lm_head keeps a 4-of-30-layer exit well above 4/30 of the verifier's FLOPs
    assert 4 / 30 < ours.loc["exit:4", "c_flops"] < ours.loc["smollm2-exit-12", "c_flops"] < 1
    assert (ours["flops_at_context"] > ours["flops_per_token"]).sum() == 3  # attention over 128 cached tokens
