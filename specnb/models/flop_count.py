"""FLOPs per generated token measured on a meta-device forward, to check ``specnb.core.flops``.

The model is built on the meta device, so a 7B config costs no weight memory, and one new token is
counted with either fvcore (given an SDPA handle so attention is not dropped) or
``torch.utils.flop_counter.FlopCounterMode`` (which counts 2 per MAC). Both are reported at 2 FLOPs
per MAC, comparable to ``analytic_flops(...).flops_per_token_at_context``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from specnb.core.configs import resolve_config
from specnb.core.errors import ParameterError
from specnb.core.flops import ModelDims, check_context, model_dims

COUNTERS = ("fvcore", "flop_counter")


@dataclass(kw_only=True)
class MeasuredFlops:
    """One new token counted by a FLOP counter, split into matrix multiplies and attention (2 per MAC)."""

    counter: str
    context: int
    linear_flops: int
    attention_flops: int

    @property
    def total(self) -> int:
        """Seed-comparable total: linear always, attention only when the token attends (context ≥ 1)."""
        return self.linear_flops + (self.attention_flops if self.context > 0 else 0)


def build_model(config, device: str = "meta"):
    """A random-init (or, on meta, storage-free) causal LM with SDPA attention, in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(config)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    return model.eval()


def _prefilled_cache(config, d: ModelDims, positions: int, device: str):
    """A DynamicCache holding ``positions`` zero keys/values per layer (content does not change FLOPs)."""
    import torch
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    for layer in range(d.layers):
        keys = torch.zeros(1, d.kv_heads, positions, d.head_dim, device=device)  # [B, H_kv, N, D]
        cache.update(keys, keys.clone(), layer)
    return cache


class _OneToken:
    """Callable wrapper: one new token after ``cached`` positions (fvcore traces a module's forward)."""

    def __init__(self, model, config, d: ModelDims, cached: int, device: str):
        self.model, self.config, self.d, self.cached, self.device = model, config, d, cached, device

    def __call__(self, input_ids):
        import torch

        kwargs = {}
        if self.cached:
            kwargs["cache"] = _prefilled_cache(self.config, self.d, self.cached, self.device)
            kwargs["position_ids"] = torch.full((1, 1), self.cached, dtype=torch.long, device=self.device)
        return self.model(input_ids=input_ids, use_cache=True, **kwargs).logits  # [1, 1, V]


def _sdpa_macs(query_shape, key_shape, value_shape) -> int:
    """q·kᵀ and p·v for every query head: B·H·Lq·Lk·(D + Dv) multiply-accumulates."""
    batch, heads, q_len, dim = query_shape
    return batch * heads * q_len * key_shape[-2] * (dim + value_shape[-1])


def _count_fvcore(step, input_ids) -> tuple[int, int]:
    import torch
    from fvcore.nn import FlopCountAnalysis
    from fvcore.nn.jit_handles import get_shape

    def sdpa_handle(inputs, outputs):
        return _sdpa_macs(get_shape(inputs[0]), get_shape(inputs[1]), get_shape(inputs[2]))

    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = step.model

        def forward(self, ids):
            return step(ids)

    analysis = FlopCountAnalysis(Step(), (input_ids,))
    analysis.set_op_handle("aten::scaled_dot_product_attention", sdpa_handle)
    analysis.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
    by_op = analysis.by_operator()
    attention = by_op.pop("scaled_dot_product_attention", 0)
    return 2 * sum(by_op.values()), 2 * attention  # fvcore: 1 per MAC -> 2 per MAC


def _count_flop_counter(step, input_ids) -> tuple[int, int]:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    def cpu_sdpa(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        return 2 * _sdpa_macs(query_shape, key_shape, value_shape)

    aten = torch.ops.aten
    # On real CPU tensors SDPA runs a fused kernel FlopCounterMode does not know; on meta it
    # decomposes to bmm. Map the CPU kernel too so neither path silently drops attention.
    mapping = {aten._scaled_dot_product_flash_attention_for_cpu: cpu_sdpa}
    attention_ops = {aten.bmm, aten.baddbmm, aten._scaled_dot_product_flash_attention_for_cpu,
                     aten._scaled_dot_product_efficient_attention, aten._scaled_dot_product_flash_attention,
                     aten._scaled_dot_product_cudnn_attention}
    with FlopCounterMode(display=False, custom_mapping=mapping) as counter, torch.no_grad():
        step(input_ids)
    by_op = counter.get_flop_counts().get("Global", {})
    attention = sum(v for op, v in by_op.items() if op in attention_ops)
    return sum(by_op.values()) - attention, attention


def measure_flops_breakdown(config_or_name, context: int = 0, counter: str = "flop_counter",
                            device: str = "meta") -> MeasuredFlops:
    """Count one new token attending to ``max(context, 1)`` positions on a meta-device model."""
    import torch

    context = check_context(context)
    if counter not in COUNTERS:
        raise ParameterError(f"counter must be one of {COUNTERS}, got {counter!r}")
    config = resolve_config(config_or_name)
    d = model_dims(config)
    model = build_model(config, device)
    step = _OneToken(model, model.config, d, max(context, 1) - 1, device)
    input_ids = torch.zeros(1, 1, dtype=torch.long, device=device)  # [B=1, S=1]
    count = _count_fvcore if counter == "fvcore" else _count_flop_counter
    with torch.no_grad():
        linear, attention = count(step, input_ids)
    return MeasuredFlops(counter=counter, context=context, linear_flops=int(linear), attention_flops=int(attention))


def measure_flops(config_or_name, context: int = 0, counter: str = "flop_counter") -> int:
    """Measured FLOPs of one new token, comparable to ``analytic_flops(...).flops_per_token_at_context``.

    Both counters are reported at 2 FLOPs per MAC (fvcore's 1-per-MAC count is doubled); biases
    and elementwise ops are not counted by either, matching the seed convention. At context 0
    attention is left out (the seed convention); at context N ≥ 1 the token attends N positions.
    """
    return measure_flops_breakdown(config_or_name, context, counter).total
