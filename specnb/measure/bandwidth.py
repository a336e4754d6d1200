"""The machine's memory bandwidth as the decoding kernels reach it, and the speed floor it implies.

Why: a batch-1 decoding step reads every weight once, so its best possible time is weight bytes ÷
bandwidth. An engine's tok/s next to that floor says how much of its per-forward time is physics
(bytes) and how much is tax (framework dispatch, kernels running below bandwidth). The bandwidth
is measured here, never assumed: a shared VM reaches a fraction of its DIMMs' peak, and a
matrix-vector product — the access pattern of one decoding step — is what the floor must use.

Two probes over a buffer far larger than the last-level cache, interleaved, medians:
``matvec`` (``F.linear`` of one row against W [N, K]; bytes = W) and ``copy`` (read + write).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(kw_only=True)
class Bandwidth:
    """Median GB/s (1e9 bytes/s) of each probe and the settings that produced them."""

    matvec_gbs: float
    copy_gbs: float
    threads: int
    buffer_mib: int
    matvec_samples: list[float]

    def floor_tok_s(self, step_bytes: int) -> float:
        """Tokens/s if a decoding step only streamed ``step_bytes`` once at the mat-vec bandwidth."""
        return self.matvec_gbs * 1e9 / step_bytes


def seconds_per_call(fn, inner: int) -> float:
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t0) / inner


def measure_bandwidth(buffer_mib: int = 256, repeats: int = 9, inner: int = 3, cols: int = 4096) -> Bandwidth:
    """Median bandwidth of a matrix-vector product and a copy over ``repeats`` interleaved rounds,
    at the process's current thread setting."""
    rows = buffer_mib * 2**20 // 4 // cols
    weight = torch.randn(rows, cols)  # [N, K] fp32, buffer_mib MiB
    x = torch.randn(1, cols)  # [1, K]
    src, dst = torch.randn(rows * cols), torch.empty(rows * cols)
    moved = weight.numel() * 4
    probes = {"matvec": (lambda: F.linear(x, weight), moved), "copy": (lambda: dst.copy_(src), 2 * moved)}
    for fn, _ in probes.values():  # page the buffers in, let MKL pick its kernels
        seconds_per_call(fn, 2)
    samples: dict[str, list[float]] = {name: [] for name in probes}
    for _ in range(repeats):
        for name, (fn, nbytes) in probes.items():
            samples[name].append(nbytes / seconds_per_call(fn, inner) / 1e9)
    return Bandwidth(matvec_gbs=statistics.median(samples["matvec"]), copy_gbs=statistics.median(samples["copy"]),
                     threads=torch.get_num_threads(), buffer_mib=buffer_mib, matvec_samples=samples["matvec"])


def step_bytes(model) -> int:
    """Bytes one batch-1 decoding step of a torch model streams: every distinct parameter and buffer
    once (a tied embedding and LM head count once), quantized linears by their int8 weights, and
    without the input embedding when the head no longer shares it (one row of it is read per token:
    memory, not traffic)."""
    seen, total = set(), 0
    for tensor in [*model.parameters(), *model.buffers()]:
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            total += tensor.numel() * tensor.element_size()
    for module in model.modules():
        packed = getattr(module, "_packed_params", None)  # torch.ao dynamic int8 linear
        if packed is not None and hasattr(packed, "_weight_bias"):
            weight, bias = packed._weight_bias()
            total += weight.numel() + weight.shape[0] * 8  # int8 values, per-channel scale and zero point
            total += bias.numel() * 4 if bias is not None else 0
    embed = model.get_input_embeddings().weight
    head = getattr(model.get_output_embeddings(), "weight", None)  # a method on a quantized head
    if not isinstance(head, torch.Tensor) or head.data_ptr() != embed.data_ptr():
        total -= embed.numel() * embed.element_size()
    return total
