"""What the decoding loop carries from step to step, and what one step hands over: small named
records instead of positional arguments and offsets into packed lists (gpt-fast's
``speculative_decode`` is the model of how a step should read)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from specnb.engine.trees import TreeShape


class Rows:
    """Per-row output lists, stop conditions (EOS, budget) and statistics."""

    def __init__(self, batch: int, max_new_tokens: int, eos_token_id):
        eos = eos_token_id if isinstance(eos_token_id, (list, tuple, set)) else [eos_token_id]
        self.eos = {int(e) for e in eos if e is not None}
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


@dataclass
class DecodeState:
    """One generation in flight: the verifier's cache, per-row outputs and positions, the sampling
    settings, and each prompt's real tokens (a draft that copies from the context reads them)."""

    verifier: ModelKV  # noqa: F821  (specnb.engine.kvcache; annotation only)
    rows: Rows
    last: torch.Tensor  # [B] newest token per row, not yet in the verifier's cache
    seq_len: torch.Tensor  # [B] tokens per row, prompt and ``last`` included
    contexts: list[list[int]]  # [B] prompt tokens per row, padding removed
    sampling: object | None  # SamplingConfig, or None for greedy
    generator: torch.Generator | None
    vocab: int  # logit width the draft's q must match
    features: torch.Tensor | None = None  # [B, T, d] the verifier's final hidden states for a feature draft:
    #   after prefill every prompt column; after a step the verified positions each row kept, in order

    def text(self, row: int) -> list[int]:
        """Prompt and generated tokens of one row."""
        return self.contexts[row] + self.rows.out[row]


@dataclass
class Proposal:
    """What a draft proposes in one step: up to k tokens per row."""

    tokens: torch.Tensor  # [B, k'] draft ids; positions past a row's n_drafted are padding
    q: torch.Tensor | None  # [B, k', V] draft probabilities (None when greedy)
    n_drafted: torch.Tensor  # [B] real proposals per row (a tree: its depth)
    forwards: int  # draft forwards it took
    tree: TreeShape | None = None  # ``tokens`` are a tree's nodes, breadth first (``specnb.engine.trees``)

    @classmethod
    def empty(cls, batch: int, device) -> Proposal:
        return cls(torch.zeros(batch, 0, dtype=torch.long, device=device), None,
                   torch.zeros(batch, dtype=torch.long, device=device), 0)


@dataclass
class Step:
    """What the accept stage decided, per row: read by the rollback of the verifier and of the draft."""

    accepted: list[int]  # draft tokens accepted by the rule (rows that finished earlier too)
    drafted: list[int]  # draft tokens proposed
    emitted: list[list[int]]  # the accepted drafts, then the correction or bonus token
    kept: list[int]  # accepted drafts whose cache slots stay: ``accepted``, or for rows finished before
    #                  this step the step's best, so that a finished row never forces a hole
    verified: int  # tokens in the verification forward (k' + 1, or a tree's nodes + 1)
    paths: list[list[int]] | None = None  # a tree: the chunk indices each row keeps, root first


def runs_from_matches(matches, cap: int) -> list[int]:
    """runs[j] = how many consecutive True start at j (capped): the accepted prefix of a step at j."""
    return run_lengths(np.asarray(matches, dtype=bool)[None, :], cap)[0].tolist()


def run_lengths(matches: np.ndarray, cap: int) -> np.ndarray:
    """``runs_from_matches`` for many sequences at once: matches [N, L] -> runs [N, L]."""
    runs = np.zeros((matches.shape[0], matches.shape[1] + 1), dtype=int)
    for j in range(matches.shape[1] - 1, -1, -1):
        runs[:, j] = np.where(matches[:, j], runs[:, j + 1] + 1, 0)
    return np.minimum(runs[:, :-1], cap)
