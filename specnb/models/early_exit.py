"""Early-exit drafts: the verifier's own first K layers, its final norm and its lm_head.

Self-speculation needs no training and no extra weights (Zhang et al. 2023 "Draft & Verify";
Elhoushi et al. 2024 "LayerSkip"). Without training the exit layer was never asked to predict
tokens, so acceptance is low for small K and the draft costs K/L of a verifier forward: a useful
lower bound for the draft-size tradeoff. We build a real model of the verifier's class with
``num_hidden_layers=K`` whose modules ARE the verifier's (no copy, no extra memory), so it drafts
like any causal LM (``draft_kind`` "exit") and keeps its own KV cache.
"""

from __future__ import annotations

import copy

from specnb.core.errors import IncompatibleModelsError, ParameterError


def exit_config(config, k: int):
    """The verifier's config cut to its first ``k`` decoder layers."""
    layers = config.num_hidden_layers
    if not isinstance(k, int) or not 1 <= k <= layers:
        raise ParameterError(f"early exit K={k!r} must be an integer in 1..{layers} (the verifier's layer count)")
    cut = copy.deepcopy(config)
    cut.num_hidden_layers = k
    if getattr(cut, "layer_types", None):  # Qwen2 and newer Llama configs: one entry per layer
        cut.layer_types = list(cut.layer_types[:k])
    return cut


def exit_draft(verifier, k: int):
    """A causal LM that shares ``verifier``'s embedding, first ``k`` layers, final norm and lm_head."""
    import torch

    body = getattr(verifier, "model", None)
    if body is None or not hasattr(body, "layers") or not hasattr(verifier, "lm_head"):
        raise IncompatibleModelsError(f"early exit needs a Llama/Qwen2-style model (.model.layers, .lm_head); "
                                      f"got {type(verifier).__name__}")
    config = exit_config(verifier.config, k)
    with torch.device("meta"):  # the skeleton's own tensors are never materialised
        draft = type(verifier)(config)
    draft.model.embed_tokens = body.embed_tokens
    draft.model.layers = torch.nn.ModuleList(body.layers[:k])
    draft.model.norm = body.norm
    draft.model.rotary_emb = body.rotary_emb
    draft.lm_head = verifier.lm_head
    draft.generation_config = copy.deepcopy(verifier.generation_config)
    draft.draft_kind = "exit"
    leftover = [n for n, t in [*draft.named_parameters(), *draft.named_buffers()] if t.is_meta]
    if leftover:
        raise IncompatibleModelsError(f"early exit could not share {leftover[:3]} with {type(verifier).__name__}")
    return draft.eval()
