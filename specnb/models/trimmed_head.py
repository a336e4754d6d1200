"""A draft's output head over its N most frequent tokens (vocabulary-trimmed draft head).

Why: in a small draft the lm_head is most of the cost. SmolLM2-135M's tied head is 49,152 × 576
= 28M multiply-adds per token, 21% of the whole verifier; a one-layer draft with that head can
never cost less than c = 0.24, however small its body. Text concentrates on few tokens, so the
draft scores only the N tokens the verifier emits most often and gives every other token
probability zero (logit -inf). Zhao et al. 2025, "FR-Spec: Accelerating Large-Vocabulary
Language Models via Frequency-Ranked Speculative Sampling", trim drafts the same way.

Speculative decoding stays lossless: the verifier still scores the full vocabulary, a draft that
never proposes a token only loses the chance to have it accepted, and under sampling q(x) = 0
outside the head is a valid draft distribution for the rejection rule.

Files: a draft folder with ``head_tokens.json`` (a sorted list of token ids) is loaded with its
head trimmed to them by specnb; ``config.json`` keeps the full ``vocab_size`` (so tokenizer checks
and other tools see an ordinary checkpoint, which then runs the full head) and adds
``head_tokens`` = N, which ``specnb.core.flops`` uses for the head's FLOPs.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

HEAD_FILE = "head_tokens.json"


class TrimmedHead(torch.nn.Module):
    """hidden [B, T, d] -> logits [B, T, V], computed for ``token_ids`` only, -inf elsewhere."""

    def __init__(self, weight: torch.Tensor, token_ids: torch.Tensor, vocab_size: int):
        super().__init__()
        self.weight = torch.nn.Parameter(weight.detach().clone(), requires_grad=False)  # [N, d]
        self.register_buffer("token_ids", token_ids.long(), persistent=False)  # [N]
        self.vocab_size = vocab_size

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        small = hidden @ self.weight.T  # [B, T, N]
        logits = small.new_full((*small.shape[:-1], self.vocab_size), float("-inf"))  # [B, T, V]
        return logits.index_copy_(-1, self.token_ids, small)


def read_head_tokens(folder) -> list[int] | None:
    """The token ids a draft folder trims its head to, or None (a full head)."""
    path = Path(folder) / HEAD_FILE
    if not path.is_file():
        return None
    ids = json.loads(path.read_text())
    if not isinstance(ids, list) or not ids or ids != sorted(set(ids)) or not all(isinstance(i, int) for i in ids):
        raise ValueError(f"{path} must hold a sorted list of distinct token ids")
    return ids


def trim_head(model, token_ids: list[int]):
    """Replace ``model``'s lm_head by a ``TrimmedHead`` over ``token_ids`` (in place; returns it)."""
    head = model.get_output_embeddings()  # the full [V, d] head (possibly tied to the embedding)
    vocab = head.weight.shape[0]
    if max(token_ids) >= vocab:
        raise ValueError(f"head token id {max(token_ids)} is outside the vocabulary of {vocab}")
    index = torch.tensor(token_ids, device=head.weight.device)  # [N]
    model.lm_head = TrimmedHead(head.weight[index], index, vocab)
    return model


def most_frequent_tokens(counts: torch.Tensor, n: int, always: list[int] = ()) -> list[int]:
    """The ``n`` ids with the largest ``counts`` [V] (ties to the lower id), plus ``always``; sorted."""
    forced = set(always)
    order = [i for i in sorted(range(len(counts)), key=lambda i: (-int(counts[i]), i)) if i not in forced]
    return sorted(forced | set(order[: max(n - len(forced), 0)]))
