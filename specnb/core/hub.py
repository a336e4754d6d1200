"""Is the Hugging Face hub usable right now? Asked before any download, so a machine without
network gets a one-line error in seconds instead of the hub client's retries (about 25 s).

Used by ``specnb.core.configs`` (configs) and ``specnb.models`` (weights).
"""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse

PROBE_TIMEOUT_S = 3.0
_TRUE = {"1", "ON", "YES", "TRUE"}


def hub_offline() -> bool:
    """HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE set, read now (huggingface_hub reads its flag only
    once, at import, so a flag set later in a notebook would otherwise be missed)."""
    flags = (os.environ.get("HF_HUB_OFFLINE", ""), os.environ.get("TRANSFORMERS_OFFLINE", ""))
    if any(flag.strip().upper() in _TRUE for flag in flags):
        return True
    try:
        from huggingface_hub import constants
    except ImportError:
        return False
    return bool(constants.HF_HUB_OFFLINE)


def hub_reachable(timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """One quick TCP connect to the hub (``HF_ENDPOINT`` if set)."""
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=timeout_s).close()
        return True
    except OSError:
        return False


def gated_note(name: str, err: BaseException) -> str:
    """One line for a model the hub refuses because it is gated (its licence not accepted, or no login
    here), else "": the hub client's own words for it are a long paragraph or just ``GatedRepoError``."""
    text = f"{type(err).__name__} {err}"
    if "GatedRepo" not in text and "gated repo" not in text.lower():
        return ""
    return (f"model {name!r} is gated on the Hugging Face hub: accept its licence on its page, then log in "
            "(`hf auth login`) or set HF_TOKEN")
