"""How close a lossy method's greedy output stays to the fp32 verifier's.

Why: quantization, bf16 or another runtime change the logits a little; under greedy decoding a
near-tie then flips one token, and from there the two continuations drift apart, each conditioned
on its own past. Speculative decoding is lossless by construction; a table that puts a 3x
quantized engine next to it must show what the 3x costs. Per prompt:

- ``first_divergence``: index of the first differing generated token (None: identical);
- ``prefix_share``: tokens identical up to it ÷ the reference's length — the fair measure, since
  what follows a divergence is mostly its consequence.

An output that stops early diverges where it stops; one that runs past the reference does not.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass
class Agreement:
    """One prompt's agreement of an output with the reference (generated ids, prompt excluded)."""

    reference_len: int
    first_divergence: int | None

    @property
    def prefix_share(self) -> float:
        if self.reference_len == 0:
            return 1.0
        return 1.0 if self.first_divergence is None else self.first_divergence / self.reference_len


def compare(reference: list[int], other: list[int]) -> Agreement:
    """Where ``other`` first leaves ``reference``."""
    n = len(reference)
    first = next((i for i in range(n) if i >= len(other) or other[i] != reference[i]), None)
    return Agreement(n, first)


@dataclass(kw_only=True)
class Fidelity:
    """Agreement over a prompt set: how many prompts came out identical, the token-weighted prefix
    share, and where the divergences fell."""

    prompts: int
    identical: int
    prefix_share: float
    first_divergences: list[int]

    @property
    def median_first_divergence(self) -> float | None:
        return statistics.median(self.first_divergences) if self.first_divergences else None


def fidelity(pairs: list[tuple[list[int], list[int]]]) -> Fidelity:
    """``Fidelity`` of (reference, other) output pairs, one per prompt."""
    found = [compare(ref, other) for ref, other in pairs]
    total = sum(a.reference_len for a in found)
    share = sum(a.prefix_share * a.reference_len for a in found) / total if total else 1.0
    diverged = sorted(a.first_divergence for a in found if a.first_divergence is not None)
    return Fidelity(prompts=len(found), identical=len(found) - len(diverged), prefix_share=share,
                    first_divergences=diverged)
