"""Loading models: a verifier and its drafts, from hub ids, local folders or embedded names.

``locate`` finds where a name leads without loading anything (an embedded name, a folder, the
Hugging Face cache, and the hub only when it is reachable); draft names are resolved by
``specnb.models.registry.resolve_draft``. ``load_drafts`` loads a verifier once and any number of
drafts for it, checking every tokenizer before any weights are read: speculative decoding compares
token ids (Leviathan et al. 2023; Chen et al. 2023), so a draft from another model family is a
one-line error up front, not wrong output later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from specnb.core.devices import resolve_device, resolve_dtype
from specnb.core.errors import IncompatibleModelsError, ModelNotFoundError, ParameterError
from specnb.core.hub import hub_offline, hub_reachable
from specnb.models.early_exit import exit_draft
from specnb.models.embedded import TOKENIZER_FILES, model_path
from specnb.models.heads import check_fits, head_kind, load_head, read_config
from specnb.models.kernels import apply_kernels, check_kernels
from specnb.models.lookup import PromptLookup
from specnb.models.registry import (
    EMBEDDED_VERIFIER,
    HEAD_KINDS,
    DraftRef,
    check_verifier_name,
    embedded_draft_names,
    embedded_names,
    resolve_draft,
    shares_verifier,
)

# ---------------------------------------------------------------- finding a model

@dataclass
class ModelSource:
    """Where a model name leads: what from_pretrained gets, and whether the hub may be asked."""

    name: str
    location: str
    local_only: bool
    has_tokenizer: bool


def locate(name: str) -> ModelSource:
    """Resolve an embedded name, a local folder, or a hub id (local cache first, hub only when online)."""
    if name in (EMBEDDED_VERIFIER, *embedded_draft_names()):
        path = model_path(name)  # a head's folder has no tokenizer: it reads the verifier's features
        return ModelSource(name, str(path), True, head_kind(path) is None)
    folder = Path(name).expanduser()
    if folder.is_dir():
        return _local_folder(name, folder)
    if name.startswith(("/", ".", "~")) or folder.exists():
        raise ModelNotFoundError(f"{name!r} is not a folder; pass a folder with config.json and tokenizer files")
    if name.startswith("smollm2-"):  # our naming scheme, never a hub id: do not ask the hub
        raise ModelNotFoundError(f"unknown embedded model {name!r}; known: {', '.join(embedded_names())}")
    return _hub_model(name)


def _local_folder(name: str, folder: Path) -> ModelSource:
    if not (folder / "config.json").is_file():
        raise ModelNotFoundError(f"folder {name!r} has no config.json; pass the folder that "
                                 "model.save_pretrained() wrote")
    has_tokenizer = any((folder / f).is_file() for f in TOKENIZER_FILES)
    return ModelSource(name, str(folder), True, has_tokenizer)


def _hub_model(name: str) -> ModelSource:
    from huggingface_hub import hf_hub_download, try_to_load_from_cache

    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return ModelSource(name, name, True, True)
    tried = (f"tried: embedded names ({', '.join(embedded_names())}), a local folder of that name, "
             "and the Hugging Face cache")
    fix = "pass a local folder with config.json and tokenizer files, or go online so it can be downloaded"
    if hub_offline():
        raise ModelNotFoundError(f"model {name!r} not found offline (HF_HUB_OFFLINE is set); {tried}; {fix}")
    if not hub_reachable():
        raise ModelNotFoundError(f"model {name!r} not found and the hub is unreachable (no network?); {tried}; {fix}")
    try:
        hf_hub_download(name, "config.json")
    except Exception as err:  # no network, no such repo, gated repo: all end the same way for the user
        raise ModelNotFoundError(f"model {name!r} not found; {tried}, then the hub "
                                 f"({type(err).__name__}); {fix}") from None
    return ModelSource(name, name, False, True)


# ---------------------------------------------------------------- loading

def load_tokenizer(source: ModelSource):
    from transformers import AutoTokenizer

    if not source.has_tokenizer:
        raise ModelNotFoundError(f"folder {source.name!r} has no tokenizer ({' / '.join(TOKENIZER_FILES)}); "
                                 "save the tokenizer it was trained with there: tokenizer.save_pretrained(folder)")
    try:
        return AutoTokenizer.from_pretrained(source.location, local_files_only=source.local_only)
    except (OSError, ValueError) as err:
        raise ModelNotFoundError(f"could not load the tokenizer of {source.name!r}: {err}") from None


def load_config(source: ModelSource):
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(source.location, local_files_only=source.local_only)


def load_weights(source: ModelSource, device, dtype):
    """The causal LM of ``source`` on ``device`` in ``dtype``, in eval mode (a committed draft with a
    ``head_tokens.json`` gets its trimmed head, ``specnb.models.trimmed_head``)."""
    from transformers import AutoModelForCausalLM

    from specnb.models.trimmed_head import read_head_tokens, trim_head

    try:
        model = AutoModelForCausalLM.from_pretrained(source.location, dtype=dtype, local_files_only=source.local_only)
    except (OSError, ValueError) as err:
        raise ModelNotFoundError(f"could not load the weights of {source.name!r}: {err}") from None
    head_tokens = read_head_tokens(source.location) if Path(source.location).is_dir() else None
    if head_tokens is not None:
        trim_head(model, head_tokens)
    return model.to(device).eval()


def load_model(name_or_path: str, device="auto", dtype="auto") -> tuple[Any, Any]:
    """(model, tokenizer) for a hub id, a local folder or an embedded name (an embedded early exit
    comes with the embedded verifier's first K layers)."""
    device = resolve_device(device) if isinstance(device, str) else device
    dtype = resolve_dtype(dtype, device)
    ref = resolve_draft(name_or_path)
    if ref.kind == "exit" and ref.base is not None:
        verifier, tokenizer = load_model(ref.base, device, dtype)
        return exit_draft(verifier, ref.exit_layers), tokenizer
    if ref.kind != "model":
        raise ParameterError(f"{name_or_path!r} is a draft that needs a verifier; use load_pair(verifier, "
                             f"{name_or_path!r})")
    source = locate(name_or_path)
    return load_weights(source, device, dtype), load_tokenizer(source)


# ---------------------------------------------------------------- pairs

@dataclass
class Pair:
    """A verifier and its draft on one device. ``vocab_size`` is set only when the two models'
    logits have different widths over one tokenizer (padded embeddings): the decoder slices both
    to it. ``draft`` is a causal LM, an early exit, a ``PromptLookup``, or None (verifier only).
    ``kernels``: model name -> ``specnb.models.kernels.KernelChoice.as_dict()``, the linear-layer path
    each loaded model runs on and why (the timings behind an "auto" decision included)."""

    verifier: Any
    draft: Any
    tokenizer: Any
    device: Any
    dtype: Any
    vocab_size: int | None
    verifier_name: str
    draft_name: str | None
    kernels: dict[str, dict] = field(default_factory=dict)


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
    for ref in refs:  # a head made for another verifier fails here, before any weights load
        folder = head_folder(sources[ref.name]) if sources[ref.name] is not None else None
        if folder is not None:
            check_fits(folder, load_config(v_source), ref.name)
    pair = Pair(load_weights(v_source, device, dtype), None, tokenizer, device, dtype, None, verifier, None)
    pair.kernels[verifier] = apply_kernels(pair.verifier, kernels, verifier).as_dict()
    loaded = {ref.name: load_draft(pair, ref, sources[ref.name]) for ref in refs}
    for ref in refs:
        if shares_verifier(ref, verifier):  # an early exit runs on the verifier's (already chosen) layers
            pair.kernels[ref.name] = {**pair.kernels[verifier], "model": ref.name, "reason": "shared with the verifier",
                                      "decide_s": 0.0}
        elif isinstance(loaded[ref.name], torch.nn.Module):
            pair.kernels[ref.name] = apply_kernels(loaded[ref.name], kernels, ref.name).as_dict()
    return pair, loaded


def head_folder(source: ModelSource) -> Path | None:
    """The local folder of a head checkpoint (downloaded from the hub when ``source`` is a hub id whose
    config says head), or None for an ordinary causal LM."""
    folder = Path(source.location)
    if folder.is_dir():
        return folder if head_kind(folder) else None
    from huggingface_hub import hf_hub_download, snapshot_download

    config = read_config(Path(hf_hub_download(source.name, "config.json", local_files_only=source.local_only)).parent)
    if not config or not (config.get("kind") in HEAD_KINDS or config.get("num_hidden_layers") == 1):
        return None
    folder = Path(snapshot_download(source.name, allow_patterns=["config.json", "*.safetensors", "pytorch_model.bin"],
                                    local_files_only=source.local_only))
    return folder if head_kind(folder) else None


def draft_source(ref: DraftRef, verifier: str, tokenizer) -> ModelSource | None:
    """Where a draft's own weights come from (None: it has none, or shares the verifier's), its
    tokenizer checked against the verifier's."""
    if ref.kind == "lookup" or shares_verifier(ref, verifier):
        return None
    source = locate(ref.base if ref.kind == "exit" else ref.name)
    if source.has_tokenizer:
        check_same_tokenizer(tokenizer, load_tokenizer(source), verifier, ref.name)
    return source


def load_draft(pair: Pair, ref: DraftRef, source: ModelSource | None):
    """One draft for ``pair.verifier``; may set ``pair.vocab_size`` when logit widths differ."""
    if ref.kind == "lookup":
        return PromptLookup()
    folder = head_folder(source) if ref.kind in ("model", *HEAD_KINDS) and source is not None else None
    if folder is not None:  # an EAGLE or Medusa head: it borrows the verifier's embedding and lm_head
        return load_head(folder, pair.verifier, pair.dtype)
    if source is None:  # an early exit of the verifier itself shares its tensors
        return exit_draft(pair.verifier, ref.exit_layers)
    model = load_weights(source, pair.device, pair.dtype)
    if ref.kind == "exit":  # e.g. an embedded exit drafting for another verifier of its family
        model = exit_draft(model, ref.exit_layers)
    vocab = shared_vocab_size(pair.verifier.config, model.config, pair.tokenizer, source.has_tokenizer, ref.name)
    if vocab is not None:
        pair.vocab_size = min(vocab, pair.vocab_size or vocab)
    return model


def check_same_tokenizer(verifier_tok, draft_tok, verifier: str, draft: str) -> None:
    """Speculation compares token ids, so both tokenizers must map every string to the same id."""
    v_vocab, d_vocab = verifier_tok.get_vocab(), draft_tok.get_vocab()
    if v_vocab == d_vocab:
        return
    differ = sorted(set(v_vocab.items()) ^ set(d_vocab.items()), key=lambda kv: kv[1])[:3]
    raise IncompatibleModelsError(
        f"draft {draft!r} and verifier {verifier!r} have different tokenizers ({len(d_vocab)} vs "
        f"{len(v_vocab)} tokens; e.g. {differ}); pick a draft from the verifier's model family")


def shared_vocab_size(v_config, d_config, tokenizer, tokenizer_checked: bool, draft: str) -> int | None:
    """None when both logit widths agree; else the tokenizer length to slice them to (e.g.
    Qwen2.5-7B pads its embedding to 152064 rows, 0.5B to 151936, over one 151665-token vocab)."""
    if v_config.vocab_size == d_config.vocab_size:
        return None
    n = len(tokenizer)
    if not tokenizer_checked or n > min(v_config.vocab_size, d_config.vocab_size):
        raise IncompatibleModelsError(
            f"draft {draft!r} has vocab_size {d_config.vocab_size}, the verifier {v_config.vocab_size}, "
            f"and its tokenizer ({n} tokens) cannot be checked against the verifier's; "
            "save the draft's tokenizer in its folder or pick a draft of the verifier's family")
    return n
