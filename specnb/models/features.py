"""The verifier hidden states a feature draft reads, captured by forward hooks during its own forward.

Two kinds, named by a tuple of decoder-layer indices (``feature_layers``):

* ``()``: the output of the verifier's final norm, the tensor its lm_head reads (EAGLE-1/2, Medusa);
* ``(i, j, k)``: the outputs of those decoder layers, concatenated in that order [..., 3d] (EAGLE-3,
  Li et al. 2025, fuses a low, a middle and a high layer: outputs of layers 2, L/2 and L-3 counted
  from the embeddings, i.e. decoder layers 1, L/2 - 1 and L - 3 for L layers).

Hooks cost nothing when no draft asks for features, and leave the verifier's outputs untouched.
"""

from __future__ import annotations

import contextlib

import torch

from specnb.core.errors import IncompatibleModelsError


def eagle3_layers(num_layers: int) -> tuple[int, int, int]:
    """EAGLE-3's low, middle and high decoder layers for a verifier of ``num_layers`` layers."""
    return 1, num_layers // 2 - 1, num_layers - 3


@contextlib.contextmanager
def capture_hidden(model, layers: tuple[int, ...] | None):
    """While active, ``captured["features"]`` holds the last forward's features [B, T, d or k*d]:
    the final norm's output for ``layers == ()``, the named decoder layers' outputs concatenated
    otherwise; nothing is hooked for ``layers is None``."""
    captured: dict = {}
    if layers is None:
        yield captured
        return
    body = getattr(model, "model", model)
    norm, blocks = getattr(body, "norm", None), getattr(body, "layers", None)
    if norm is None or blocks is None:
        raise IncompatibleModelsError(f"feature drafts need a Llama/Qwen-style verifier (.model.norm, .model.layers); "
                                      f"got {type(model).__name__}")
    parts: dict[int, torch.Tensor] = {}

    def keep(key):
        def hook(module, args, output):
            parts[key] = output[0] if isinstance(output, tuple) else output
            if len(parts) == len(modules):  # the forward's last hooked module: one tensor per forward
                captured["features"] = parts[-1] if not layers else torch.cat([parts[i] for i in layers], -1)
                parts.clear()
        return hook

    modules = {-1: norm} if not layers else {i: blocks[i] for i in layers}
    handles = [module.register_forward_hook(keep(key)) for key, module in modules.items()]
    try:
        yield captured
    finally:
        for handle in handles:
            handle.remove()
