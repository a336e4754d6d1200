"""Turning logits into tokens: temperature, nucleus (top-p) filtering, a draw per row, greedy argmax.

No weights here: the decoding loop (``specnb.decode``) and the head corpus's chat sampler
(``specnb.models.training.head_corpus``) both draw through these functions. The accept/reject rule
of speculative decoding, which compares two such distributions, is ``specnb.decode.accept``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SamplingConfig:
    """Sampling settings; pass ``sampling=None`` to ``generate`` for greedy decoding."""

    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None


def nucleus(sorted_probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zero the tail of probabilities sorted in descending order [..., N]: a token is dropped when
    the mass before it already reaches ``top_p`` (the first token always stays). Not renormalised."""
    return sorted_probs.masked_fill((sorted_probs.cumsum(-1) - sorted_probs) >= top_p, 0.0)


def logits_to_probs(logits: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """Temperature then top-p (nucleus) filtering; logits [..., V] -> probs [..., V] in fp32."""
    probs = torch.softmax(logits.float() / sampling.temperature, dim=-1)
    if sampling.top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        probs = probs.scatter(-1, order, nucleus(sorted_probs, sampling.top_p))
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample(probs: torch.Tensor, generator=None) -> torch.Tensor:
    """One token per row: probs [B, V] -> ids [B]."""
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def pick_token(logits: torch.Tensor, sampling: SamplingConfig | None, generator=None):
    """Greedy argmax or a sample; logits [B, V] -> (ids [B], probs [B, V] or None when greedy)."""
    if sampling is None:
        return logits.argmax(-1), None
    probs = logits_to_probs(logits, sampling)
    return sample(probs, generator), probs


def top_probability(logits: torch.Tensor) -> torch.Tensor:
    """A draft's confidence: its top probability at temperature 1 over the columns it scores (a trimmed
    head's own vocabulary), whatever the sampling settings; logits [..., V] -> [...] in fp32."""
    return torch.softmax(logits.float(), dim=-1).amax(-1)
