"""An EAGLE head (Li et al. 2024; EAGLE-3 when it fuses several verifier layers, in the standard layout
of ``specnb.models.eagle3`` or specnb's older one): one decoder layer on the verifier's features,
drafting with its own slot cache (``specnb.decode.head_drafters.EagleDrafter``,
static and dynamic trees). Its catch-up chunks are 1..γ+1 wide, so its cost model fits a line over
forwards of 1, 2 and 4 tokens."""

from __future__ import annotations

from dataclasses import asdict

import torch

from specnb.core.sampling import top_probability
from specnb.core.sequences import runs_of_drafts
from specnb.decode.head_drafters import EagleDrafter
from specnb.decode.kinds.kind import FEATURES, DraftKind, register
from specnb.models.eagle import EagleDraft
from specnb.models.heads import eagle_flops, load_head, read_config
from specnb.models.lookup import MatchIndex, all_matches
from specnb.models.registry import draft_folder


def head_config(ref) -> dict:
    """A head's config.json by its draft name ({} when its files are not here yet: a hub id)."""
    folder = draft_folder(ref.name)
    return (read_config(folder) or {}) if folder.is_dir() else {}


@torch.inference_mode()
def trace_eagle(eagle, vocab_size, context, generated, cap, features=None):
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


def config_of(draft) -> dict:
    """The head's config as its config.json says it (the standard EAGLE-3 layout's, or specnb's own)."""
    return draft.config.to_json() if hasattr(draft.config, "to_json") else asdict(draft.config)


KIND = register(DraftKind(
    name="eagle", drafter=EagleDrafter,
    load=lambda pair, ref, source, folder: load_head(folder, pair.verifier, EagleDraft, pair.dtype),
    weights=lambda ref, verifier: ref.name,
    flops=lambda verifier_config, ref, verifier=None: eagle_flops(head_config(ref), verifier_config),
    flops_of=lambda draft, verifier_config: eagle_flops(config_of(draft), verifier_config),
    trace=trace_eagle, forward_tokens=(1, 2, 4), catch_up=FEATURES, reads_features=True,
    feature_layers=lambda draft: draft.config.feature_layers))
