"""Prompt lookup (Saxena 2023): no model; it proposes the continuation of the longest earlier match of
the text's last n-gram (``specnb.models.lookup.PromptLookup``). Nothing to time: its cost is the host
time it takes per step, and it has no probability, so a confidence threshold never stops it."""

from __future__ import annotations

from specnb.core.sequences import runs_of_drafts
from specnb.decode.kinds.kind import PER_STEP, DraftKind, register
from specnb.decode.model_drafters import LookupDrafter
from specnb.models.lookup import PromptLookup


def trace_lookup(lookup, vocab_size, context, generated, cap, features=None):
    """What the lookup would propose after every generated token, and how much of it matches what the
    verifier went on to generate."""
    drafts = [lookup.propose(context + generated[:j], cap) for j in range(1, len(generated))]
    return runs_of_drafts(drafts, generated), [0] + [len(d) for d in drafts], None


KIND = register(DraftKind(
    name="lookup", drafter=LookupDrafter, load=lambda pair, ref, source, folder=None: PromptLookup(),
    weights=lambda ref, verifier: None, flops=lambda verifier_config, ref, verifier=None: None,
    trace=trace_lookup, pricing=PER_STEP, forward_tokens=(), flops_of=lambda draft, verifier_config: None,
    module=lambda draft: None))
