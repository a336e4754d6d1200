"""A causal LM with weights of its own (a distilled draft, a hub model, a checkpoint folder): it drafts
autoregressively with its own KV cache (``specnb.decode.model_drafters.ModelDrafter``), is priced by its
forwards (one token, or the two-token catch-up after a step that accepted every draft) and traced
teacher-forced. A hub id or folder that turns out to hold a head loads as that head's kind
(``specnb.decode.pairs``)."""

from __future__ import annotations

import torch

from specnb.core.configs import resolve_config
from specnb.core.padding import left_pad_ids
from specnb.core.sampling import top_probability
from specnb.core.sequences import runs_from_matches
from specnb.decode.kinds.kind import DraftKind, register
from specnb.decode.kvcache import ModelKV
from specnb.decode.model_drafters import ModelDrafter
from specnb.models import load

CHAINS_PER_FORWARD = 32  # chains a model draft's trace drafts side by side (bounds its memory)


def load_model_draft(pair, ref, source, folder=None):
    """The causal LM of ``source``; may set ``pair.vocab_size`` when its logits are wider or narrower."""
    return fit_vocab(pair, load.load_weights(source, pair.device, pair.dtype), source, ref.name)


def fit_vocab(pair, model, source, name: str):
    """``model``, after narrowing ``pair.vocab_size`` to the width both logits share (when they differ)."""
    vocab = load.shared_vocab_size(pair.verifier.config, model.config, pair.tokenizer, source.has_tokenizer, name)
    if vocab is not None:
        pair.vocab_size = min(vocab, pair.vocab_size or vocab)
    return model


def model_flops(verifier_config, ref, verifier=None):
    return resolve_config(ref.name)


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


KIND = register(DraftKind(
    name="model", drafter=ModelDrafter, load=load_model_draft, weights=lambda ref, verifier: ref.name,
    flops=model_flops, trace=trace_model, verifies=True))
