"""What the decoding loop carries from step to step, and what one step hands over: small named
records instead of positional arguments and offsets into packed lists (gpt-fast's
``speculative_decode`` is the model of how a step should read)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specnb.core.sequences import eos_ids
from specnb.decode.trees import TreeShape


class Rows:
    """Per-row output lists, stop conditions (EOS, budget) and statistics."""

    def __init__(self, batch: int, max_new_tokens: int, eos_token_id):
        self.eos = eos_ids(eos_token_id)
        self.max_new = max_new_tokens
        self.out: list[list[int]] = [[] for _ in range(batch)]
        self.done = [False] * batch
        self.accepted: list[list[int]] = [[] for _ in range(batch)]
        self.drafted: list[list[int]] = [[] for _ in range(batch)]

    def active(self) -> list[int]:
        return [i for i, d in enumerate(self.done) if not d]

    def max_remaining(self) -> int:
        return max((self.max_new - len(self.out[i]) for i in self.active()), default=0)

    def emit(self, row: int, tokens: list[int]) -> None:
        """Append tokens to a row, stopping after EOS or at the budget (never more, nothing after EOS)."""
        out = self.out[row]
        for tok in tokens:
            out.append(tok)
            if tok in self.eos or len(out) >= self.max_new:
                self.done[row] = True
                return

    def emit_all(self, tokens: list[list[int]]) -> None:
        """Each row still generating gets its tokens; finished rows get none."""
        for i in self.active():
            self.emit(i, tokens[i])


@dataclass(kw_only=True)
class DecodeState:
    """One generation in flight: the verifier's cache, per-row outputs and positions, the sampling
    settings, and each prompt's real tokens (a draft that copies from the context reads them)."""

    verifier: ModelKV  # noqa: F821  (specnb.decode.kvcache; annotation only)
    rows: Rows
    last: torch.Tensor  # [B] newest token per row, not yet in the verifier's cache
    seq_len: torch.Tensor  # [B] tokens per row, prompt and ``last`` included
    contexts: list[list[int]]  # [B] prompt tokens per row, padding removed
    sampling: object | None  # SamplingConfig, or None for greedy
    generator: torch.Generator | None
    vocab: int  # logit width the draft's q must match
    features: torch.Tensor | None = None  # [B, T, d] the verifier's final hidden states for a feature draft:
    #   after prefill every prompt column; after a step the verified positions each row kept, in order
    confidence: float = 0.0  # a chain stops where the draft's top probability falls below (``engine.confidence``)

    def text(self, row: int) -> list[int]:
        """Prompt and generated tokens of one row."""
        return self.contexts[row] + self.rows.out[row]


@dataclass(kw_only=True)
class Proposal:
    """What a draft proposes in one step, and what its cache did to propose it (read back by its
    ``commit``): per-step state travels here, not in the drafter."""

    tokens: torch.Tensor  # [B, N] draft ids: a tree's nodes, breadth first; past a row's n_drafted, padding
    tree: TreeShape  # the nodes' shape; a chain of k drafts is the one-wide tree of depth k
    n_drafted: torch.Tensor  # [B] real proposals per row: the depth it reaches
    forwards: int  # draft forwards it took
    q: torch.Tensor | None = None  # [B, k, V] draft probabilities of a chain (None when greedy)
    fed: int = 0  # tokens per row its cache caught up on (left padded); 0: it ran no forward
    slots: int = 0  # slots its cache appended in all, the catch-up included

    @classmethod
    def empty(cls, batch: int, device) -> Proposal:
        return cls(tokens=torch.zeros(batch, 0, dtype=torch.long, device=device), tree=TreeShape.of_chain(0),
                   n_drafted=torch.zeros(batch, dtype=torch.long, device=device), forwards=0)


@dataclass(kw_only=True)
class Step:
    """What the accept stage decided, per row: read by the rollback of the verifier and of the draft.
    A row that finished before this step takes the best row's count and a prefix path, so that it
    never forces a hole in the caches."""

    accepted: list[int]  # draft tokens accepted by the rule
    drafted: list[int]  # draft tokens proposed
    emitted: list[list[int]]  # the accepted drafts, then the correction or bonus token
    paths: list[list[int]]  # chunk indices whose cache slots stay, root first (a chain: a prefix)
    verified: int  # tokens in the verification forward (the root and every node)
