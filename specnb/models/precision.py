"""Lower-precision copies of a torch verifier: the quantization alternatives to speculation.

Why: the evaluation paper behind our second reference finds that quantization often buys as much
as speculative decoding with less complexity. On a memory-bound CPU a decoding step costs about
its weight bytes, so fewer bytes per weight is the direct lever — at a price in fidelity, which
``specnb.measure.fidelity`` puts next to the speed.

- ``int8``: every linear layer, the LM head included, as PyTorch's dynamic int8 linear (weights
  int8 per channel, activations quantized per call; fbgemm/x86 kernels). Its cost is nearly flat
  from 1 to 8 rows, like oneDNN's fp32 path. Weight-only int8/int4 (torchao) have no fast AVX2
  kernels in eager mode and ran 2–10x *slower* than fp32 here, so they are not offered.
- ``bf16``: the whole model in bfloat16. Half the bytes; CPUs without native bf16 (AVX2 only)
  convert in registers, so multi-row products get slower, not faster.
"""

from __future__ import annotations

import copy
import warnings

import torch

from specnb.core.errors import ParameterError

PRECISIONS = ("fp32", "bf16", "int8")


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ParameterError(f"unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}")
    return precision


def with_precision(model, precision: str):
    """A copy of ``model`` (fp32, on the CPU) at ``precision``; the original is left as it is."""
    if check_precision(precision) == "fp32":
        return model
    weight = next(model.parameters())
    if weight.device.type != "cpu" or weight.dtype != torch.float32:
        raise ParameterError(f"precision {precision!r} is made from an fp32 model on the CPU, got {weight.dtype} "
                             f"on {weight.device}")
    copied = copy.deepcopy(model)
    if precision == "bf16":
        return copied.to(torch.bfloat16)
    # The tied embedding keeps its fp32 tensor (one row is read per token); the head gets an int8 copy.
    with warnings.catch_warnings():  # torch.ao's quantized dtypes are deprecated in favour of torchao
        warnings.simplefilter("ignore")
        quantized = torch.ao.quantization.quantize_dynamic(copied, {torch.nn.Linear}, dtype=torch.qint8)
    quantized.precision = precision
    return quantized
