"""Medusa heads on a frozen verifier (prototype for specnb's ``smollm2-medusa``).

Reference: Cai, Li, Geng, Peng, Lee, Chen, Dao 2024, "Medusa: Simple LLM Inference Acceleration
Framework with Multiple Decoding Heads" (ICML 2024), Medusa-1 (frozen backbone).

Head k (k = 1..K) reads the verifier's post-final-norm hidden state f_t at position t (the
tensor its lm_head consumes, ``verifier.model(...).last_hidden_state``) and predicts token
x_{t+k+1}; the verifier's own lm_head already gives x_{t+1}. Each head is ``blocks`` residual
blocks ``h + SiLU(W h + b)`` (W, b zero-initialised, so a fresh head is the plain feature)
followed by the verifier's frozen lm_head, optionally trimmed to N frequent tokens
(``head_ids``, as in specnb.heads / FR-Spec). All K proposals come from ONE verifier forward:
the draft costs K*(blocks) d x d matmuls plus K head projections, no draft forward pass.

Decoding contract (greedy chain): after a verification step the verifier has f_j (the feature
of the last accepted position) and x_{j+1} = argmax lm_head(f_j); Medusa proposes
d_{j+1+k} = argmax head_k(f_j) for k = 1..gamma (gamma <= K). A tree uses the top-k of each head.

Storage: ``config.json`` (``MedusaConfig``) + ``weights.safetensors`` (the blocks and, for a
trimmed head, ``head_ids``); the verifier's lm_head is borrowed by ``attach``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from specnb.models.eagle import load_head, save_head  # one folder layout for heads


@dataclass(kw_only=True)
class MedusaConfig:
    hidden_size: int = 576
    num_heads: int = 4  # K: head k predicts x_{t+k+1}
    blocks: int = 1  # residual blocks per head
    vocab_size: int = 49152
    head_tokens: int = 0  # 0: the verifier's full lm_head; N: trimmed to N token ids


class ResBlock(nn.Module):
    """h + SiLU(W h + b), zero-initialised (Medusa)."""

    def __init__(self, d: int):
        super().__init__()
        self.linear = nn.Linear(d, d)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + nn.functional.silu(self.linear(h))


class MedusaHeads(nn.Module):
    """K residual heads on the verifier's last hidden state; head k proposes the token k + 1 ahead."""

    draft_kind = "medusa"  # how ``specnb.decode.drafters.make_drafter`` drafts with it

    def __init__(self, config: MedusaConfig, head_ids: torch.Tensor | None = None):
        super().__init__()
        self.config = config
        self.heads = nn.ModuleList(
            nn.Sequential(*[ResBlock(config.hidden_size) for _ in range(config.blocks)])
            for _ in range(config.num_heads))
        if config.head_tokens:
            if head_ids is None:
                head_ids = torch.arange(config.head_tokens)
            self.register_buffer("head_ids", head_ids.long().clone(), persistent=True)  # [N]
        else:
            self.head_ids = None
        self.head_weight: torch.Tensor | None = None  # [N or V, d], borrowed

    def attach(self, verifier) -> MedusaHeads:
        head = verifier.get_output_embeddings().weight.detach()
        self.head_weight = head if self.head_ids is None else head[self.head_ids].contiguous()
        return self

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """features [..., d] -> head states [..., K, d] (head k at index k-1)."""
        return torch.stack([head(features) for head in self.heads], dim=-2)

    def logits(self, states: torch.Tensor) -> torch.Tensor:
        """[..., d] -> [..., N] (trimmed: column i is token head_ids[i]) or [..., V]."""
        return states @ self.head_weight.T

    def to_tokens(self, index: torch.Tensor) -> torch.Tensor:
        return index if self.head_ids is None else self.head_ids[index]

    @torch.inference_mode()
    def propose(self, features: torch.Tensor, gamma: int | None = None) -> torch.Tensor:
        """features [B, d] of the last accepted position -> drafts [B, gamma] for x_{j+2}..x_{j+1+gamma}."""
        gamma = gamma or self.config.num_heads
        states = torch.stack([self.heads[k](features) for k in range(gamma)], dim=-2)  # [B, gamma, d]
        return self.to_tokens(self.logits(states).argmax(-1))  # [B, gamma]

    def save(self, folder, dtype=torch.float16, meta: dict | None = None) -> None:
        save_head(self, "medusa", folder, dtype, meta)

    @classmethod
    def load(cls, folder, verifier=None, dtype=torch.float32) -> MedusaHeads:
        return load_head(cls, MedusaConfig, folder, verifier, dtype)
