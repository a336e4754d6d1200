"""The model cache: folders built once (the converted verifier, assembled drafts, the distillation
corpus) under ``$SPECNB_CACHE`` (default ``~/.cache/specnb``), never seen half-written.

A folder is built in a temporary sibling and renamed into place (``publish_atomically``), with a
manifest of file sizes and SHA-256 digests that ``cache_is_valid`` checks, so a partial or corrupt
cache is rebuilt rather than silently used; ``build_lock`` makes parallel users (notebooks,
``pytest -n``) wait for one build instead of racing it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

_MANIFEST = "specnb-manifest.json"


def cache_dir() -> Path:
    """Where converted models live: ``$SPECNB_CACHE`` or ``~/.cache/specnb``."""
    return Path(os.environ.get("SPECNB_CACHE") or Path.home() / ".cache" / "specnb")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(folder: Path) -> None:
    """Record size and SHA-256 of every file so a later load can tell a damaged cache."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name != _MANIFEST)
    manifest = {p.name: {"bytes": p.stat().st_size, "sha256": file_sha256(p)} for p in files}
    (folder / _MANIFEST).write_text(json.dumps(manifest, indent=1))


def manifest_digest(folder: Path, name: str) -> str | None:
    """The SHA-256 the manifest of ``folder`` records for file ``name`` (None if it records none)."""
    try:
        manifest = json.loads((folder / _MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return (manifest.get(name) or {}).get("sha256") if isinstance(manifest, dict) else None


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
        if full_hash and file_sha256(path) != meta["sha256"]:
            return False
    return bool(manifest)


def publish_atomically(build, target: Path, manifest: bool = True) -> Path:
    """Run ``build(tmp_folder)``, write its manifest (checksums for ``cache_is_valid``), then move it
    to ``target`` in one rename: readers see the old folder or the new one, never a partial one."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        build(tmp)
        if manifest:
            write_manifest(tmp)
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


@contextlib.contextmanager
def build_lock(target: Path):
    """An exclusive lock beside ``target`` while one process builds it: parallel users (notebooks,
    pytest -n) wait for that build instead of racing to replace a folder another is reading."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
