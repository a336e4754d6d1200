"""Token sequences compared as plain lists: what greedy verification and cache reuse both ask."""

from __future__ import annotations


def first_mismatch(a, b) -> int:
    """Where two token sequences first differ: the length of their common prefix (the accepted
    prefix of a greedy step, when ``a`` is the draft and ``b`` what the verifier generates; the part
    of a cache that still holds, when ``a`` is what it holds and ``b`` the sequence now)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
