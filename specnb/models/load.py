"""Finding and reading models: where a name leads, its tokenizer, config and weights, and the checks
that a draft shares its verifier's tokens.

``locate`` finds where a name leads without loading anything (an embedded name, a folder, the
Hugging Face cache, and the hub only when it is reachable); draft names are resolved by
``specnb.models.registry.resolve_draft``; a verifier and its drafts are loaded, each by its kind, by
``specnb.decode.pairs.load_drafts``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specnb.core.errors import IncompatibleModelsError, ModelNotFoundError
from specnb.core.hub import gated_note, hub_offline, hub_reachable
from specnb.models.embedded import TOKENIZER_FILES, model_path
from specnb.models.heads import head_kind, read_config
from specnb.models.registry import (
    EMBEDDED_VERIFIER,
    embedded_draft_names,
    embedded_names,
)
from specnb.models.trimmed_head import read_head_tokens, trim_head

# ---------------------------------------------------------------- finding a model

@dataclass(kw_only=True)
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
        return ModelSource(name=name, location=str(path), local_only=True, has_tokenizer=head_kind(path) is None)
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
    return ModelSource(name=name, location=str(folder), local_only=True, has_tokenizer=has_tokenizer)


def _hub_model(name: str) -> ModelSource:
    from huggingface_hub import hf_hub_download, try_to_load_from_cache

    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return ModelSource(name=name, location=name, local_only=True, has_tokenizer=True)
    tried = (f"tried: embedded names ({', '.join(embedded_names())}), a local folder of that name, "
             "and the Hugging Face cache")
    fix = "pass a local folder with config.json and tokenizer files, or go online so it can be downloaded"
    if hub_offline():
        raise ModelNotFoundError(f"model {name!r} not found offline (HF_HUB_OFFLINE is set); {tried}; {fix}")
    if not hub_reachable():
        raise ModelNotFoundError(f"model {name!r} not found and the hub is unreachable (no network?); {tried}; {fix}")
    try:
        hf_hub_download(name, "config.json")
    except Exception as err:  # no network, no such repo, gated repo
        if gated_note(name, err):
            raise ModelNotFoundError(gated_note(name, err)) from None
        raise ModelNotFoundError(f"model {name!r} not found; {tried}, then the hub "
                                 f"({type(err).__name__}); {fix}") from None
    return ModelSource(name=name, location=name, local_only=False, has_tokenizer=True)


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

    try:
        model = AutoModelForCausalLM.from_pretrained(source.location, dtype=dtype, local_files_only=source.local_only)
    except (OSError, ValueError) as err:
        raise ModelNotFoundError(f"could not load the weights of {source.name!r}: {err}") from None
    head_tokens = read_head_tokens(source.location) if Path(source.location).is_dir() else None
    if head_tokens is not None:
        trim_head(model, head_tokens)
    return model.to(device).eval()


# ---------------------------------------------------------------- pairs

@dataclass(kw_only=True)
class Pair:
    """A verifier and its draft on one device. ``vocab_size`` is set only when the two models'
    logits have different widths over one tokenizer (padded embeddings): the decoder slices both
    to it. ``draft`` is a causal LM, an early exit, a ``PromptLookup``, or None (verifier only).
    ``kernels``: model name -> ``specnb.models.kernels.KernelChoice.as_dict()``, the linear-layer path
    each loaded model runs on and why (the timings behind an "auto" decision included)."""

    verifier: Any
    draft: Any = None
    tokenizer: Any
    device: Any
    dtype: Any
    vocab_size: int | None = None
    verifier_name: str
    draft_name: str | None = None
    kernels: dict[str, dict] = field(default_factory=dict)


def head_folder(source: ModelSource) -> Path | None:
    """The local folder of a head checkpoint (downloaded from the hub when ``source`` is a hub id whose
    config says head), or None for an ordinary causal LM."""
    folder = Path(source.location)
    if folder.is_dir():
        return folder if head_kind(folder) else None
    from huggingface_hub import hf_hub_download, snapshot_download

    config = read_config(Path(hf_hub_download(source.name, "config.json", local_files_only=source.local_only)).parent)
    if not config or not (isinstance(config.get("kind"), str) or config.get("num_hidden_layers") == 1):
        return None
    folder = Path(snapshot_download(source.name, allow_patterns=["config.json", "*.safetensors", "pytorch_model.bin"],
                                    local_files_only=source.local_only))
    return folder if head_kind(folder) else None


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
