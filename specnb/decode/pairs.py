"""Loading a verifier and its drafts, each draft by its registered kind (``specnb.decode.kinds``).

``load_drafts`` loads a verifier once and any number of drafts for it, checking every tokenizer before
any weights are read: speculative decoding compares token ids (Leviathan et al. 2023; Chen et al.
2023), so a draft from another model family is a one-line error up front, not wrong output later.
Finding a name's files and reading weights is ``specnb.models.load``'s; which draft object a name
becomes is its kind's ``load``.
"""

from __future__ import annotations

from typing import Any

import torch

from specnb.core.devices import resolve_device, resolve_dtype
from specnb.core.errors import ParameterError
from specnb.decode.kinds import kind_named
from specnb.decode.kinds.by_name import check_verifier_name
from specnb.models import load
from specnb.models.heads import check_fits, head_kind
from specnb.models.kernels import apply_kernels, check_kernels
from specnb.models.load import (
    ModelSource,
    Pair,
    check_same_tokenizer,
    head_folder,
    load_config,
    load_tokenizer,
    locate,
)
from specnb.models.registry import DraftRef, resolve_draft


def load_model(name_or_path: str, device="auto", dtype="auto") -> tuple[Any, Any]:
    """(model, tokenizer) for a hub id, a local folder or an embedded name (an embedded early exit
    comes with the embedded verifier's first K layers)."""
    device = resolve_device(device) if isinstance(device, str) else device
    dtype = resolve_dtype(dtype, device)
    ref = resolve_draft(name_or_path)
    if ref.exit_layers is not None and ref.base is not None:
        verifier, tokenizer = load_model(ref.base, device, dtype)
        return kind_named(ref.kind).load(Pair(verifier=verifier, tokenizer=tokenizer, device=device, dtype=dtype,
                                              verifier_name=ref.base), ref, None), tokenizer
    if not kind_named(ref.kind).verifies:
        raise ParameterError(f"{name_or_path!r} is a draft that needs a verifier; use load_pair(verifier, "
                             f"{name_or_path!r})")
    source = locate(name_or_path)
    return load.load_weights(source, device, dtype), load_tokenizer(source)


def load_pair(verifier: str, draft: str | None = None, device="auto", dtype="auto", kernels: str = "auto") -> Pair:
    """Load a verifier and a draft (hub id, folder, embedded name, ``exit:K`` or ``prompt-lookup``),
    checking that they share a tokenizer before any weights are loaded; ``kernels`` as for
    ``load_drafts``."""
    pair, drafts = load_drafts(verifier, [] if draft is None else [draft], device, dtype, kernels)
    if draft is not None:
        pair.draft, pair.draft_name = drafts[draft], draft
    return pair


def load_drafts(verifier: str, drafts: list[str], device="auto", dtype="auto",
                kernels: str = "auto") -> tuple[Pair, dict[str, Any]]:
    """The verifier (loaded once, as a ``Pair`` without draft) and each named draft for it, in order,
    duplicates dropped. Every name is resolved and every tokenizer checked before weights load.
    ``kernels`` (``specnb.models.kernels``): "auto" times PyTorch's default linear kernels against
    oneDNN with prepacked weights for the verifier and each draft separately and keeps the faster,
    per row count ("mixed") if need be (fp32 on the CPU; the default elsewhere); "default" or
    "onednn" names the path for all of them.
    What was chosen, and why, is in ``Pair.kernels``."""
    device = resolve_device(device) if isinstance(device, str) else device
    dtype = resolve_dtype(dtype, device)
    check_kernels(kernels)
    check_verifier_name(verifier)
    v_source = locate(verifier)
    tokenizer = load_tokenizer(v_source)
    refs = [resolve_draft(name, verifier) for name in dict.fromkeys(drafts)]
    sources = {ref.name: draft_source(ref, verifier, tokenizer) for ref in refs}
    folders = {ref.name: draft_head_folder(ref, sources[ref.name]) for ref in refs}
    for ref in refs:  # a head made for another verifier fails here, before any weights load
        if folders[ref.name] is not None:
            check_fits(folders[ref.name], load_config(v_source), ref.name)
    pair = Pair(verifier=load.load_weights(v_source, device, dtype), tokenizer=tokenizer, device=device, dtype=dtype,
                verifier_name=verifier)
    pair.kernels[verifier] = apply_kernels(pair.verifier, kernels, verifier).as_dict()
    loaded = {ref.name: load_draft(pair, ref, sources[ref.name], folders[ref.name]) for ref in refs}
    for ref in refs:
        if not isinstance(loaded[ref.name], torch.nn.Module):
            continue
        if sources[ref.name] is None:  # an early exit runs on the verifier's (already chosen) layers
            pair.kernels[ref.name] = {**pair.kernels[verifier], "model": ref.name, "reason": "shared with the verifier",
                                      "decide_s": 0.0}
        else:
            pair.kernels[ref.name] = apply_kernels(loaded[ref.name], kernels, ref.name).as_dict()
    return pair, loaded


def draft_source(ref: DraftRef, verifier: str, tokenizer) -> ModelSource | None:
    """Where a draft's own files come from (None: it has none, or shares the verifier's), its
    tokenizer checked against the verifier's."""
    name = kind_named(ref.kind).weights(ref, verifier)
    if name is None:
        return None
    source = locate(name)
    if source.has_tokenizer:
        check_same_tokenizer(tokenizer, load_tokenizer(source), verifier, ref.name)
    return source


def draft_head_folder(ref: DraftRef, source: ModelSource | None):
    """The folder of the head a draft is (None: not a head). A hub id or folder resolves to "model" until
    its files say head, so a causal LM's source is looked at too."""
    kind = kind_named(ref.kind)
    if source is None or not (kind.reads_features or kind.verifies):
        return None
    return head_folder(source)


def load_draft(pair: Pair, ref: DraftRef, source: ModelSource | None, folder=None):
    """One draft for ``pair.verifier``, by its kind (the kind its head's files name, when it is a head);
    may set ``pair.vocab_size`` when logit widths differ."""
    kind = kind_named(head_kind(folder) if folder is not None else ref.kind)
    return kind.load(pair, ref, source, folder)
