"""What the predictor needs to know of each kind of draft, beside the ``Drafter`` seam the loop uses:
how to trace it (how many tokens a step starting after each generated token would have had accepted,
under greedy decoding, and how confident the draft was along that step's chain: ``specnb.predict.traces``),
which forwards its cost model times, and how its cost per step is priced (``specnb.predict.costs``).

A trace returns (runs, proposed, confidence): ``confidence[j]`` the draft's top probability at each
position of the chain a step after generated token j drafts (``specnb.engine.confidence``), from the
draft's own chain as the loop drafts it, so a replay stops where the engine stops; None for prompt
lookup, which has no probability and ignores a threshold.

``draft_traits(draft, vocab_size)`` picks them by the draft object's ``draft_kind``, as
``specnb.engine.drafters.make_drafter`` picks a drafter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from specnb.core.sampling import top_probability
from specnb.core.sequences import first_mismatch
from specnb.models.lookup import MatchIndex, all_matches

FORWARDS, PER_STEP, PER_TOKEN = "forwards", "per_step", "per_token"  # how a draft's cost is priced
Trace = Callable[..., tuple[list[int], list[int] | None, list[list[float]] | None]]
# (context, generated, cap, features) -> (runs, proposed, confidence)
CHAINS_PER_FORWARD = 32  # chains a model draft's trace drafts side by side (bounds its memory)


@dataclass
class DraftTraits:
    """A draft as the predictor sees it."""

    kind: str
    module: torch.nn.Module | None  # what its forwards run (None: no forward, nothing to time)
    forward_tokens: tuple[int, ...]  # the forward widths its cost model times
    pricing: str  # FORWARDS (its forwards), PER_STEP or PER_TOKEN (host time per step or drafted token)
    catch_up: str  # "tokens" or "features": the width of a step's first draft forward
    needs_features: bool  # its trace reads the verifier's hidden states
    trace: Trace
    feature_layers: tuple[int, ...] = ()  # which ones (``specnb.models.features``): () the final ones


def draft_traits(draft, vocab_size: int | None = None) -> DraftTraits:
    """The predictor's view of what ``load_pair`` returns as a draft, by its ``draft_kind``."""
    kind = getattr(draft, "draft_kind", "model")
    if kind == "lookup":
        return DraftTraits(kind=kind, module=None, forward_tokens=(), pricing=PER_STEP, catch_up="tokens",
                           needs_features=False, trace=lambda *args: trace_lookup(draft, *args))
    if kind == "eagle":  # catch-up chunks are 1..γ+1 wide; the cost model fits a line over them
        return DraftTraits(kind=kind, module=draft, forward_tokens=(1, 2, 4), pricing=FORWARDS, catch_up="features",
                           needs_features=True, trace=lambda *args: trace_eagle(draft, *args),
                           feature_layers=draft.config.feature_layers)
    if kind == "medusa":  # no forward: the heads' host time per drafted token
        return DraftTraits(kind=kind, module=draft, forward_tokens=(), pricing=PER_TOKEN, catch_up="tokens",
                           needs_features=True, trace=lambda *args: trace_medusa(draft, *args))
    # a causal LM: one token, or the two-token catch-up after a step that accepted every draft
    return DraftTraits(kind=kind, module=draft, forward_tokens=(1, 2), pricing=FORWARDS, catch_up="tokens",
                       needs_features=False, trace=lambda *args: trace_model(draft, vocab_size, *args))


# ---------------------------------------------------------------------------- traces, one per kind


def runs_from_matches(matches, cap: int) -> list[int]:
    """runs[j] = how many consecutive True start at j (capped): the accepted prefix of a step at j."""
    return run_lengths(np.asarray(matches, dtype=bool)[None, :], cap)[0].tolist()


def run_lengths(matches: np.ndarray, cap: int) -> np.ndarray:
    """``runs_from_matches`` for many sequences at once: matches [N, L] -> runs [N, L]."""
    runs = np.zeros((matches.shape[0], matches.shape[1] + 1), dtype=int)
    for j in range(matches.shape[1] - 1, -1, -1):
        runs[:, j] = np.where(matches[:, j], runs[:, j + 1] + 1, 0)
    return np.minimum(runs[:, :-1], cap)


def runs_of_drafts(drafts: list[list[int]], generated: list[int]) -> list[int]:
    """Runs from the drafts of the steps starting after generated token 1, 2, ...: each draft's
    accepted prefix against what the verifier went on to generate (j = 0, the prefill's token, starts
    no step)."""
    return [0] + [first_mismatch(row, generated[j:j + len(row)]) for j, row in enumerate(drafts, start=1)]


def trace_model(model, vocab_size, context, generated, cap, features=None):
    """Teacher-forced: one forward over prompt + generated text gives the draft's greedy guess
    at every position given the verifier's prefix, which is what a chain step would draft while its
    drafts are accepted. Past a rejection the chain reads its own wrong token, so its confidence there
    comes from drafting the chains themselves (``model_chain_confidence``)."""
    device = next(model.parameters()).device
    ids = torch.tensor([context + generated[:-1]], device=device)  # [1, S + L - 1]
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0, len(context) - 1:]  # [L, V]: guesses for generated[0..L-1]
    if vocab_size:
        logits = logits[:, :vocab_size]
    matches = (logits.argmax(-1).cpu() == torch.tensor(generated)).tolist()
    confidence = model_chain_confidence(model, vocab_size, context, generated, cap)
    return runs_from_matches(matches, len(generated)), None, confidence


@torch.inference_mode()
def model_chain_confidence(model, vocab_size, context, generated, cap) -> list[list[float]]:
    """The draft's top probability along the greedy chain of each step after generated token j
    (j = 1..L-1; j = 0 starts no step), ``min(cap, L)`` positions: the chains drafted as the loop drafts
    them, ``CHAINS_PER_FORWARD`` at a time in a left-padded batch with their own KV cache."""
    from specnb.core.padding import left_pad_ids
    from specnb.engine.kvcache import ModelKV

    device = next(model.parameters()).device
    depth, found = min(cap, len(generated)), [[]]
    starts = list(range(1, len(generated)))
    for first in range(0, len(starts), CHAINS_PER_FORWARD):
        ids, mask = left_pad_ids([context + generated[:j] for j in starts[first:first + CHAINS_PER_FORWARD]], 0)
        ids, mask = ids.to(device), mask.to(device)
        kv = ModelKV(model, vocab_size)
        logits = kv.prefill(ids, mask)  # [C, V]
        position = mask.sum(1, keepdim=True)  # [C, 1] where each chain's next token sits
        tops = []
        for r in range(depth):
            tops.append(top_probability(logits))
            if r + 1 < depth:
                logits = kv.forward(logits.argmax(-1)[:, None], position + r)[:, -1]
        found += torch.stack(tops, 1).tolist()
    return found


def trace_lookup(lookup, context, generated, cap, features=None):
    """What the lookup would propose after every generated token, and how much of it matches what the
    verifier went on to generate."""
    drafts = [lookup.propose(context + generated[:j], cap) for j in range(1, len(generated))]
    return runs_of_drafts(drafts, generated), [0] + [len(d) for d in drafts], None


@torch.inference_mode()
def trace_medusa(heads, context, generated, cap, features=None):
    """Every start at once: the heads on the verifier's feature that produced each emitted token
    propose the next ``K`` tokens; ``features`` as for ``trace_eagle``."""
    k = heads.config.num_heads
    start = len(context) - 1  # the feature that produced generated[0]
    states = heads(features[start:])  # [L, K, d]: row j proposes generated[j + 1 ..]
    logits = [heads.logits(states[:, i]) for i in range(k)]  # K x [L, N]
    drafts = torch.stack([heads.to_tokens(x.argmax(-1)) for x in logits], 1).tolist()  # [L, K]
    confidence = torch.stack([top_probability(x) for x in logits], 1).tolist()  # [L, K]
    steps = len(generated) - 1
    return (runs_of_drafts(drafts[:steps], generated), [0] + [k] * steps, [[]] + confidence[:steps])


@torch.inference_mode()
def trace_eagle(eagle, context, generated, cap, features=None):
    """Greedy chains from every start, as the loop drafts them, in ``min(cap, L)`` passes.

    ``features`` [S + L - 1, d] (EAGLE-3: [S + L - 1, k*d]): the verifier's features of prompt +
    generated but the last token.
    Pass 1 feeds every true pair (f_p, x_{p+1}) causally: its output at p is the first draft of
    the chain whose last emitted token sits at p + 1. Pass r feeds each chain's own previous
    prediction, seeing the true entries before its start and its own earlier entries (a 4D mask
    over one growing cache), exactly the entries the loop's draft cache would hold. A lookup draft
    reads, with a true token, the match of the text up to it; with a drafted one, that of the text
    before the chain plus the chain so far."""
    from transformers import DynamicCache

    ngram = eagle.config.lookup_ngram
    full = torch.tensor(context + generated, device=features.device)  # [S + L]
    width, start = len(full) - 1, len(context) - 1  # true pairs; chain j's catch-up entry sits at start + j - 1
    cache = DynamicCache(config=eagle.config.llama_config())
    lookup = None
    if ngram:
        candidates, lengths = all_matches(context + generated, ngram)
        lookup = (torch.tensor(candidates[1:], device=full.device)[None],
                  torch.tensor(lengths[1:], device=full.device)[None])  # [1, W] each
    h = eagle(features[None], full[None, 1:], cache=cache, lookup=lookup)[0]  # [W, d]: pass 1, causal
    chains = torch.arange(start, start + len(generated) - 1, device=full.device)  # catch-up entry, j = 1..L-1
    lookup = None if lookup is None else (lookup[0][0, chains], lookup[1][0, chains])  # [C] each
    h = h[chains]  # [C, d]
    tokens, tops = draft_step(eagle, h, lookup)  # drafts 1 of each chain, and the head's confidence
    tokens, tops = [tokens], [tops]
    slot = width
    for r in range(2, min(cap, len(generated)) + 1):
        count = len(chains)
        mask = torch.zeros(1, 1, count, slot + count, dtype=torch.bool, device=full.device)
        mask[0, 0, :, :width] = torch.arange(width, device=full.device)[None, :] <= chains[:, None]
        for past in range(width, slot + count, count):  # this chain's entries of passes 2..r
            mask[0, 0, torch.arange(count), past + torch.arange(count)] = True
        positions = (chains + r - 1)[None]  # pass r feeds position start + j + r - 2
        if ngram:
            lookup = chain_matches(ngram, context + generated, start + 2, torch.stack(tokens, 1))  # [C] each
        h = eagle(h[None], tokens[-1][None], cache=cache, position_ids=positions, attention_mask=mask,
                  lookup=None if lookup is None else (lookup[0][None], lookup[1][None]))[0]
        token, top = draft_step(eagle, h, lookup)
        tokens.append(token)
        tops.append(top)
        slot += count
    drafts = torch.stack(tokens, 1).tolist()  # [C, R]: chain j's drafts for generated[j], generated[j + 1], ...
    return runs_of_drafts(drafts, generated), None, [[]] + torch.stack(tops, 1).tolist()


def draft_step(eagle, h: torch.Tensor, lookup) -> tuple[torch.Tensor, torch.Tensor]:
    """The head's greedy tokens (full vocabulary ids) and top probability at features ``h`` [C, d]."""
    logits = eagle.logits(h, lookup)  # [C, N]
    index = logits.argmax(-1)
    return (index if eagle.head_ids is None else eagle.head_ids[index]), top_probability(logits)


def chain_matches(ngram: int, text: list[int], first: int, drafts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For ``trace_eagle``: the match of ``text[:first + c]`` + chain c's drafts so far ``drafts`` [C, r],
    for every chain c, from one index grown along the text. (candidates, lengths) [C] each."""
    index = MatchIndex(ngram)
    index.extend(text[:first])
    matches = []
    for c, row in enumerate(drafts.tolist()):
        if c:
            index.append(text[first + c - 1])
        matches.append(index.peek(row))
    table = torch.tensor(matches, dtype=torch.long, device=drafts.device)
    return table[:, 0], table[:, 1]
