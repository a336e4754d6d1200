"""Which kernel a model's linear layers run on the CPU: PyTorch's default, or oneDNN with weights
prepacked once.

Why: decoding a small model on a CPU is memory-bound, so a forward of 2–9 tokens should cost about
what one token costs (the weights are read once either way). PyTorch's default fp32 linear goes to
MKL: for one row a matrix-vector kernel at streaming bandwidth, for two rows or more its GEMM
path, which on this kind of CPU packs the weight into its panel layout on every call and runs
small M far below both bandwidth and arithmetic peak, so verifying 2 tokens costs about twice one.
That jump is a kernel's tax, not physics. oneDNN's brgemm on a weight reordered once
(``torch.ops.mkldnn._reorder_linear_weight``) streams each weight block once for all rows: flat
from 1 to 2 rows and about 1.5x at 8 (measured in notebook 07). It is fp32 throughout, so decoding
stays exact up to float rounding.

``use_kernels(model, "onednn")`` swaps every bias-free ``nn.Linear`` (the LM head included) for a
``PackedLinear``: one row still goes to MKL's matrix-vector kernel (already at bandwidth), 2 to
``max_rows`` rows to oneDNN, and more (a prefill) back to MKL's GEMM, which is efficient there.
The packed copy doubles the linear weights' memory.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from specnb.core.errors import ParameterError

KERNELS = ("default", "onednn")


class PackedLinear(torch.nn.Module):
    """A bias-free fp32 linear with a oneDNN-prepacked copy of its weight. x [*, K] -> [*, N]"""

    def __init__(self, weight: torch.Tensor, max_rows: int = 64):
        super().__init__()
        self.weight = weight  # [N, K], shared with the module it replaces (a tied embedding stays tied)
        self.max_rows = max_rows
        with torch.no_grad():
            self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        if rows == 1 or rows > self.max_rows:
            return F.linear(x, self.weight)
        y = torch.ops.mkldnn._linear_pointwise(x.reshape(rows, x.shape[-1]), self.packed, None, "none", [], "")
        return y.reshape(*x.shape[:-1], y.shape[-1])


def check_kernels(kernels: str) -> str:
    if kernels not in KERNELS:
        raise ParameterError(f"unknown kernels {kernels!r}; use one of {', '.join(KERNELS)}")
    return kernels


def use_kernels(model, kernels: str = "default", max_rows: int = 64):
    """``model`` with its linear layers on ``kernels`` (in place; returns it). "onednn" needs fp32 on
    the CPU; anything else is left as it is with "default"."""
    if check_kernels(kernels) == "default":
        return model
    weight = next(model.parameters())
    if weight.device.type != "cpu" or weight.dtype != torch.float32:
        raise ParameterError(f"kernels='onednn' is for fp32 models on the CPU, got {weight.dtype} on {weight.device}")
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is torch.nn.Linear and child.bias is None:
                setattr(module, name, PackedLinear(child.weight, max_rows))
    model.kernels = kernels
    return model
