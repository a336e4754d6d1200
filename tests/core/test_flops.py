"""FLOPs: analytic (config only) == fvcore == FlopCounterMode, the reference figures, config resolution."""

import json
import resource

import pytest
import torch
from transformers import LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

from specnb.core.configs import resolve_config
from specnb.core.errors import ConfigError, ParameterError
from specnb.core.flops import analytic_flops, cost_ratio
from specnb.models.flop_count import build_model, measure_flops, measure_flops_breakdown

TINY = dict(hidden_size=64, num_hidden_layers=2, intermediate_size=128, vocab_size=160)


def llama_gqa_tied():
    return LlamaConfig(**TINY, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)


def llama_mha_untied_biased():
    return LlamaConfig(**TINY, num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=False,
                       attention_bias=True, mlp_bias=True)


def qwen2_gqa_untied():
    return Qwen2Config(**TINY, num_attention_heads=8, num_key_value_heads=2, tie_word_embeddings=False)


def qwen2_gqa_tied():
    return Qwen2Config(**TINY, num_attention_heads=4, num_key_value_heads=1, tie_word_embeddings=True)


CONFIGS = [llama_gqa_tied, llama_mha_untied_biased, qwen2_gqa_untied, qwen2_gqa_tied]


# --- reference figures (seed convention, biases excluded) ---------------------------------------


def test_reference_flops_per_token_are_exact():
    assert analytic_flops("Qwen/Qwen2.5-3B-Instruct").flops_per_token == 6_171_394_048
    assert analytic_flops("Qwen/Qwen2.5-0.5B-Instruct").flops_per_token == 987_922_432
    assert analytic_flops("Qwen/Qwen2.5-1.5B-Instruct").flops_per_token == 3_087_138_816


def test_reference_cost_ratios():
    assert f"{cost_ratio('Qwen/Qwen2.5-0.5B-Instruct', 'Qwen/Qwen2.5-3B-Instruct'):.4f}" == "0.1601"
    assert f"{cost_ratio('Qwen/Qwen2.5-1.5B-Instruct', 'Qwen/Qwen2.5-3B-Instruct'):.4f}" == "0.5002"


def test_shipped_param_counts_match_published_sizes():
    # Published sizes: 0.49B, 1.54B, 3.09B, 7.61B, 135M (tied embeddings counted once).
    assert analytic_flops("Qwen/Qwen2.5-0.5B-Instruct").params == 494_032_768
    assert analytic_flops("Qwen/Qwen2.5-1.5B-Instruct").params == 1_543_714_304
    assert analytic_flops("Qwen/Qwen2.5-3B-Instruct").params == 3_085_938_688
    assert analytic_flops("Qwen/Qwen2.5-7B-Instruct").params == 7_615_616_512
    assert analytic_flops("smollm2-135m").params == 134_515_008


def test_context_adds_four_l_h_d_per_position():
    report = analytic_flops("Qwen/Qwen2.5-3B-Instruct", context=1000)
    assert report.attention_flops_per_position == 4 * 36 * 16 * 128
    assert report.flops_per_token_at_context == 6_171_394_048 + 1000 * 4 * 36 * 16 * 128


# --- analytic vs measured ---------------------------------------------------------------------


@pytest.mark.parametrize("make_config", CONFIGS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("context", [0, 1, 9])
def test_analytic_equals_both_counters(make_config, context):
    config = make_config()
    expected = analytic_flops(config, context).flops_per_token_at_context
    assert measure_flops(config, context, counter="fvcore") == expected
    assert measure_flops(config, context, counter="flop_counter") == expected


def test_attention_is_counted_per_attended_position():
    config = qwen2_gqa_untied()
    per_position = analytic_flops(config).attention_flops_per_position
    for counter in ("fvcore", "flop_counter"):
        assert measure_flops_breakdown(config, 5, counter).attention_flops == 5 * per_position
        # context 0 still runs one token (attending to itself) but reports the seed convention
        zero = measure_flops_breakdown(config, 0, counter)
        assert zero.attention_flops == per_position and zero.total == zero.linear_flops


@pytest.mark.parametrize("counter", ["fvcore", "flop_counter"])
def test_real_cpu_model_counts_like_meta(counter):
    config = llama_gqa_tied()
    assert measure_flops_breakdown(config, 6, counter, device="cpu") == measure_flops_breakdown(config, 6, counter)


def test_conventions_reconciled_on_a_real_model():
    """Plain fvcore (1 per MAC, SDPA silently dropped) × 2 is the seed convention; FlopCounterMode is 2 per MAC."""
    from fvcore.nn import FlopCountAnalysis
    from torch.utils.flop_counter import FlopCounterMode

    config = qwen2_gqa_untied()
    model = build_model(config, device="cpu")
    ids = torch.zeros(1, 1, dtype=torch.long)  # [B, S]

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, x):
            return self.inner(input_ids=x).logits

    plain = FlopCountAnalysis(Logits(), (ids,)).unsupported_ops_warnings(False).uncalled_modules_warnings(False)
    report = analytic_flops(config)
    assert 2 * plain.total() == report.flops_per_token
    assert "scaled_dot_product_attention" not in plain.by_operator()
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(input_ids=ids)
    linear = sum(
        v for op, v in counter.get_flop_counts()["Global"].items() if op in (torch.ops.aten.mm, torch.ops.aten.addmm)
    )
    assert linear == report.flops_per_token


@pytest.mark.parametrize(
    "make_config",
    [
        *CONFIGS,
        lambda: Qwen3Config(**TINY, num_attention_heads=4, num_key_value_heads=2, head_dim=24),
        lambda: MistralConfig(**TINY, num_attention_heads=4, num_key_value_heads=2),
    ],
)
def test_params_and_bias_flops_match_the_module_tree(make_config):
    config = make_config()
    model = build_model(config)
    report = analytic_flops(config)
    assert report.params == sum(p.numel() for p in model.parameters())
    biases = sum(m.bias.numel() for m in model.modules() if isinstance(m, torch.nn.Linear) and m.bias is not None)
    assert report.bias_flops_per_token == biases


def test_qwen2_biases_reported_separately():
    report = analytic_flops(qwen2_gqa_untied())
    assert report.bias_flops_per_token == 2 * (64 + 2 * 2 * 8)  # q + k + v outputs per layer, 2 layers
    assert analytic_flops(llama_gqa_tied()).bias_flops_per_token == 0


def test_tied_and_untied_cost_the_same_flops_but_not_params():
    tied, untied = (
        analytic_flops(qwen2_gqa_tied()),
        analytic_flops(
            qwen2_gqa_tied().__class__(**TINY, num_attention_heads=4, num_key_value_heads=1, tie_word_embeddings=False)
        ),
    )
    assert tied.flops_per_token == untied.flops_per_token
    assert untied.params - tied.params == 64 * 160


def test_3b_counts_on_meta_without_weights():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    measured = measure_flops("Qwen/Qwen2.5-3B-Instruct", context=64, counter="flop_counter")
    grown_gib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 2**20
    assert measured == analytic_flops("Qwen/Qwen2.5-3B-Instruct", 64).flops_per_token_at_context
    assert grown_gib < 2.0  # fp32 weights would be ~11.5 GiB
    model = build_model(resolve_config("Qwen/Qwen2.5-3B-Instruct"))
    assert all(p.is_meta for p in model.parameters())


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize("context", [-1, 2.5, True, "3"])
def test_bad_context(context):
    with pytest.raises(ParameterError, match="context"):
        analytic_flops(llama_gqa_tied(), context)


def test_bad_counter():
    with pytest.raises(ParameterError, match="counter"):
        measure_flops(llama_gqa_tied(), counter="ptflops")


def test_config_missing_field(tmp_path):
    config = llama_gqa_tied()
    object.__setattr__(config, "intermediate_size", None)  # bypass transformers' own validation
    with pytest.raises(ConfigError, match="intermediate_size"):
        analytic_flops(config)
    for bad in ({"hidden_size": 64}, {"model_type": "llama", "num_attention_heads": None}):
        (tmp_path / "config.json").write_text(json.dumps(bad))
        with pytest.raises(ConfigError, match="config.json"):
            analytic_flops(str(tmp_path))


def test_unsupported_architecture():
    from transformers import GPT2Config

    with pytest.raises(ConfigError, match="gpt2"):
        analytic_flops(GPT2Config(n_layer=2, n_embd=64, n_head=4))
