"""Confidence stopping: a chain stops drafting once the draft is unsure of its next token.

A draft with a distribution (a causal LM, an early exit, EAGLE, Medusa) reports its confidence at
each chain position: its top probability at temperature 1 (``specnb.core.sampling.top_probability``).
With a threshold t > 0 a row stops at the first position whose confidence is below t; the token of
that position is still proposed, as Hugging Face's ``ConfidenceCriteria`` (``assistant_confidence_threshold``:
the stopping criterion runs after the token is appended) and llama.cpp's ``--spec-draft-p-min`` (the
token is pushed, then the loop breaks) both do. HF compares the chosen token's probability after its
logits processors; we take the top probability at temperature 1, the same for greedy decoding, and a
quantity the predictor's traces can record once for every sampling setting. t = 0 never stops.

Rows stop at different depths (ragged): the chain keeps drafting while any row still generating is
sure and γ is not reached, and each row's ``Proposal.n_drafted`` is where it stopped; the loop never
accepts a token past a row's count. A row that already finished (EOS, budget) never keeps a chain going.

Stopping is lossless: whether a position is drafted depends only on the draft's own earlier output,
never on the verifier, so rejection sampling still returns the verifier's distribution.
"""

from __future__ import annotations

import torch

from specnb.core.sampling import top_probability


class ChainStop:
    """Where each row of a chain being drafted stops: ``add`` each position's draft logits, ``done``
    once every row still generating is unsure, ``counts`` [B] the tokens each row proposes."""

    def __init__(self, threshold: float, finished: list[bool], device):
        self.threshold = threshold
        self.finished = torch.tensor(finished, dtype=torch.bool, device=device)  # [B]
        self.unsure = torch.zeros_like(self.finished)  # [B] stopped at an earlier position
        self.counts = torch.zeros(len(finished), dtype=torch.long, device=device)  # [B]

    def add(self, logits: torch.Tensor) -> None:
        """The draft's logits [B, V] at the next position: every row not yet stopped proposes its token
        there, and stops after it when unsure."""
        self.counts += (~self.unsure).long()
        if self.threshold > 0:
            self.unsure |= top_probability(logits) < self.threshold

    def done(self) -> bool:
        return self.threshold > 0 and bool((self.unsure | self.finished).all())
