"""What a draft kind is, and the one table of kinds.

A kind says everything the package needs of one sort of draft, beside its drafter: how its files are
found and loaded, how its FLOPs are counted, how the predictor traces it (how many tokens a step
starting after each generated token would have had accepted, under greedy decoding) and how its cost
per step is priced. Each built-in kind is one module of this folder that ends with ``register(KIND)``;
``specnb.decode.kinds`` imports them. The loop, the loaders, the predictor, the CLI and the notebooks
ask the registered kind (``kind_of``), never its name.

A trace returns (runs, proposed, confidence): ``runs[j]`` the accepted prefix of a step starting after
generated token j (j = 0, the prefill's token, starts no step), ``proposed[j]`` how many tokens that step
drafts (None: always ``cap``), ``confidence[j]`` the draft's top probability at each position of that
step's chain (``specnb.decode.confidence``), from the draft's own chain as the loop drafts it, so a
replay stops where the engine stops; None for a draft with no probability (prompt lookup).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specnb.core.errors import ParameterError
from specnb.core.flops import analytic_flops

FORWARDS, PER_STEP, PER_TOKEN = "forwards", "per_step", "per_token"  # how a draft's cost is priced
TOKENS, FEATURES = "tokens", "features"  # the width of a step's first draft forward (``DraftKind.catch_up``)

Trace = Callable[..., tuple[list[int], list[int] | None, list[list[float]] | None]]
# (draft, vocab_size, context, generated, cap, features) -> (runs, proposed, confidence)


def analytic_flops_of(draft, verifier_config):
    """FLOPs of a loaded draft with a transformers config of its own (``specnb.core.flops``)."""
    return analytic_flops(draft.config)


@dataclass(frozen=True, kw_only=True)
class DraftKind:
    """One kind of draft. The callables take what ``specnb.models.registry.resolve_draft`` returns
    (``ref``) and what ``specnb.models.load.locate`` found (``source``)."""

    name: str  # what ``DraftRef.kind`` and a draft object's ``draft_kind`` say
    drafter: Callable[..., Any]  # (draft, vocab_size) -> a ``specnb.decode.drafters.Drafter``
    load: Callable[..., Any]  # (pair, ref, source, folder) -> the draft object; folder: its head's files
    weights: Callable[..., str | None]  # (ref, verifier) -> the name its own files are located by, None: none
    flops: Callable[..., Any]  # (verifier_config, ref, verifier) -> config or FlopsReport its FLOPs come from
    trace: Trace
    pricing: str = FORWARDS  # FORWARDS (its forwards), PER_STEP or PER_TOKEN (host time per step or token)
    forward_tokens: tuple[int, ...] = (1, 2)  # the forward widths its cost model times
    catch_up: str = TOKENS  # TOKENS or FEATURES: the width of a step's first draft forward
    reads_features: bool = False  # it drafts from the verifier's hidden states (a head)
    verifies: bool = False  # a name of this kind can be a verifier
    flops_of: Callable[..., Any] = analytic_flops_of  # (loaded draft, verifier_config) -> FlopsReport
    module: Callable[[Any], Any] = lambda draft: draft  # what its forwards run (None: nothing to time)
    feature_layers: Callable[[Any], tuple[int, ...]] = lambda draft: ()  # verifier layers its trace reads


KINDS: dict[str, DraftKind] = {}


def register(kind: DraftKind) -> DraftKind:
    """Add ``kind`` to the table (a kind registered again replaces the old one: tests swap kinds in)."""
    KINDS[kind.name] = kind
    return kind


def kind_named(name: str) -> DraftKind:
    """The registered kind of that name (``DraftRef.kind``, a draft object's ``draft_kind``)."""
    if name not in KINDS:
        raise ParameterError(f"no draft kind {name!r} is registered; known: {', '.join(KINDS)}")
    return KINDS[name]


def kind_of(draft) -> DraftKind:
    """The kind of what ``load_pair`` returns as a draft. An object without ``draft_kind`` is taken
    for a plain causal LM ("model"): any Hugging Face model drafts as one."""
    return kind_named(getattr(draft, "draft_kind", "model"))
