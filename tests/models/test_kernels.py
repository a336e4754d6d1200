"""oneDNN-prepacked linears compute what PyTorch's default linears compute (to float rounding), for
one row, a few rows and a prefill, and keep speculative decoding lossless."""

import copy

import pytest
import torch
from helpers import peaked_pair, ragged_prompts

from specnb.core.errors import ParameterError
from specnb.engine.generate import generate
from specnb.models.kernels import PackedLinear, use_kernels

pytestmark = pytest.mark.usefixtures("one_thread")


def test_packed_linear_matches_the_default_for_every_row_count():
    torch.manual_seed(0)
    weight = torch.randn(96, 64)
    packed = PackedLinear(weight, max_rows=8)
    for rows in (1, 2, 3, 8, 9, 40):  # 1: MKL's matrix-vector kernel; 2..8: oneDNN; more: MKL's GEMM
        x = torch.randn(2, rows, 64) if rows == 40 else torch.randn(rows, 64)
        torch.testing.assert_close(packed(x), x @ weight.T, rtol=1e-5, atol=1e-5)


def test_a_swapped_model_keeps_its_ties_and_its_outputs():
    verifier, draft = peaked_pair("llama")
    swapped = use_kernels(copy.deepcopy(verifier), "onednn")
    assert sum(isinstance(m, PackedLinear) for m in swapped.modules()) == 7 * 2 + 1  # 7 per layer, the head
    ids, mask = ragged_prompts()
    with torch.inference_mode():
        torch.testing.assert_close(swapped(input_ids=ids, attention_mask=mask).logits,
                                   verifier(input_ids=ids, attention_mask=mask).logits, rtol=1e-4, atol=1e-4)
    expected = generate(verifier, ids, mask, max_new_tokens=12).tokens
    use_kernels(draft, "onednn")
    assert generate(swapped, ids, mask, max_new_tokens=12).tokens == expected
    assert generate(swapped, ids, mask, draft=draft, gamma=3, max_new_tokens=12).tokens == expected


def test_unknown_kernels_or_a_half_precision_model_are_one_line_errors():
    verifier, _ = peaked_pair("llama")
    with pytest.raises(ParameterError, match="unknown kernels 'mkl'"):
        use_kernels(verifier, "mkl")
    with pytest.raises(ParameterError, match="fp32 models on the CPU"):
        use_kernels(copy.deepcopy(verifier).to(torch.bfloat16), "onednn")
