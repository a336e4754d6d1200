"""A draft as the predictor sees it: its kind's trace bound to the loaded draft, the module its cost
model times, and how its cost per step is priced (``specnb.decode.kinds.DraftKind``, where each kind
says these beside its drafter; ``specnb.predict.traces`` replays the traces, ``specnb.predict.costs``
prices them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from specnb.decode.kinds import kind_of


@dataclass(kw_only=True)
class DraftTraits:
    """A loaded draft as the predictor sees it."""

    kind: str
    module: torch.nn.Module | None  # what its forwards run (None: no forward, nothing to time)
    forward_tokens: tuple[int, ...]  # the forward widths its cost model times
    pricing: str  # FORWARDS (its forwards), PER_STEP or PER_TOKEN (host time per step or drafted token)
    catch_up: str  # TOKENS or FEATURES: the width of a step's first draft forward
    needs_features: bool  # its trace reads the verifier's hidden states
    trace: Callable  # (context, generated, cap, features) -> (runs, proposed, confidence)
    feature_layers: tuple[int, ...] = ()  # which ones (``specnb.models.features``): () the final ones


def draft_traits(draft, vocab_size: int | None = None) -> DraftTraits:
    """The predictor's view of what ``load_pair`` returns as a draft, from its registered kind."""
    kind = kind_of(draft)
    return DraftTraits(kind=kind.name, module=kind.module(draft), forward_tokens=kind.forward_tokens,
                       pricing=kind.pricing, catch_up=kind.catch_up, needs_features=kind.reads_features,
                       trace=lambda *args: kind.trace(draft, vocab_size, *args),
                       feature_layers=kind.feature_layers(draft))
