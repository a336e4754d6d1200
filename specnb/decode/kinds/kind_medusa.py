"""Medusa heads (Cai et al. 2024): head k reads the verifier's feature at the newest verified position
and proposes the token k + 1 ahead (``specnb.decode.head_drafters.MedusaDrafter``). No draft forward:
its cost is the heads' host time per drafted token."""

from __future__ import annotations

from dataclasses import asdict

import torch

from specnb.core.sampling import top_probability
from specnb.core.sequences import runs_of_drafts
from specnb.decode.head_drafters import MedusaDrafter
from specnb.decode.kinds.kind import PER_TOKEN, DraftKind, register
from specnb.decode.kinds.kind_eagle import head_config
from specnb.models.heads import load_head, medusa_flops
from specnb.models.medusa import MedusaHeads


@torch.inference_mode()
def trace_medusa(heads, vocab_size, context, generated, cap, features=None):
    """Every start at once: the heads on the verifier's feature that produced each emitted token
    propose the next ``K`` tokens; ``features`` as for ``specnb.decode.kinds.kind_eagle.trace_eagle``."""
    k = heads.config.num_heads
    start = len(context) - 1  # the feature that produced generated[0]
    states = heads(features[start:])  # [L, K, d]: row j proposes generated[j + 1 ..]
    logits = [heads.logits(states[:, i]) for i in range(k)]  # K x [L, N]
    drafts = torch.stack([heads.to_tokens(x.argmax(-1)) for x in logits], 1).tolist()  # [L, K]
    confidence = torch.stack([top_probability(x) for x in logits], 1).tolist()  # [L, K]
    steps = len(generated) - 1
    return (runs_of_drafts(drafts[:steps], generated), [0] + [k] * steps, [[]] + confidence[:steps])


KIND = register(DraftKind(
    name="medusa", drafter=MedusaDrafter,
    load=lambda pair, ref, source, folder: load_head(folder, pair.verifier, MedusaHeads, pair.dtype),
    weights=lambda ref, verifier: ref.name,
    flops=lambda verifier_config, ref, verifier=None: medusa_flops(head_config(ref), verifier_config),
    flops_of=lambda draft, verifier_config: medusa_flops(asdict(draft.config), verifier_config),
    trace=trace_medusa, pricing=PER_TOKEN, forward_tokens=(), reads_features=True))
