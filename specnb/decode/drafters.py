"""The Drafter seam: every kind of draft proposes tokens through one small protocol.

The loop (``specnb.decode.generate``) never asks which kind of draft it holds. A drafter lives for
one generation (like Hugging Face's ``CandidateGenerator`` or vLLM's proposers)::

    begin(state, input_ids, attention_mask) -> forwards   prefill whatever it keeps (its own KV cache)
    propose(state, k, tree=None) -> Proposal             up to k tokens per row (fewer where a row's chain
                                                         stops: ``state.confidence``), or a tree
    commit(state, proposal, step)                        roll back to what the verifier accepted

What a step did to the drafter's own cache travels in the ``Proposal`` it returned and comes back to
``commit``. ``needs_features``: the loop keeps the verifier's hidden states for it
(``state.features``): its final ones, or with ``feature_layers`` those layers' outputs concatenated
(an EAGLE-3 draft's; ``specnb.models.features``); ``trees``: it can draft a static tree; an optional
``dynamic_trees``: it can grow EAGLE-2's dynamic tree (``specnb.decode.trees.DynamicTree``).

Drafters: from tokens (``model_drafters``: a causal LM with its own cache, an early exit, prompt
lookup) and from the verifier's features (``head_drafters``: EAGLE, Medusa). Each belongs to a draft
kind (``specnb.decode.kinds``: its loader, trace and pricing beside it); ``make_drafter`` turns what
``load_pair`` returns into a drafter through the object's registered kind; an object that already
implements the protocol is used as it is (its ``begin`` must reset it, since it then serves every
generation).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from specnb.decode.kinds import kind_of
from specnb.decode.state import DecodeState, Proposal, Step
from specnb.decode.trees import TreeShape


@runtime_checkable
class Drafter(Protocol):
    kind: str
    needs_features: bool
    feature_layers: tuple[int, ...]  # read only when needs_features; () is the final norm's output
    trees: bool

    def begin(self, state: DecodeState, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> int: ...

    def propose(self, state: DecodeState, k: int, tree: TreeShape | None = None) -> Proposal: ...

    def commit(self, state: DecodeState, proposal: Proposal, step: Step) -> None: ...


def make_drafter(draft, vocab_size: int | None = None) -> Drafter:
    """A fresh drafter for what ``load_pair`` returns as a draft (or any causal LM), from its registered
    kind (``specnb.decode.kinds.kind_of``); an object that implements ``Drafter`` itself is used as it is."""
    if isinstance(draft, Drafter):
        return draft
    return kind_of(draft).drafter(draft, vocab_size)
