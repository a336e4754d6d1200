"""Token sequences compared as plain lists: what greedy verification and cache reuse both ask."""

from __future__ import annotations


def first_mismatch(a, b) -> int:
    """Where two token sequences first differ: the length of their common prefix (the accepted
    prefix of a greedy step, when ``a`` is the draft and ``b`` what the verifier generates; the part
    of a cache that still holds, when ``a`` is what it holds and ``b`` the sequence now)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def runs_from_matches(matches, cap: int) -> list[int]:
    """runs[j] = how many consecutive True start at j (capped): the accepted prefix of a step at j."""
    import numpy as np

    return run_lengths(np.asarray(matches, dtype=bool)[None, :], cap)[0].tolist()


def run_lengths(matches, cap: int):
    """``runs_from_matches`` for many sequences at once: matches [N, L] (numpy bool) -> runs [N, L]."""
    import numpy as np

    runs = np.zeros((matches.shape[0], matches.shape[1] + 1), dtype=int)
    for j in range(matches.shape[1] - 1, -1, -1):
        runs[:, j] = np.where(matches[:, j], runs[:, j + 1] + 1, 0)
    return np.minimum(runs[:, :-1], cap)


def runs_of_drafts(drafts: list[list[int]], generated: list[int]) -> list[int]:
    """Runs from the drafts of the steps starting after generated token 1, 2, ...: each draft's
    accepted prefix against what the verifier went on to generate (j = 0, the prefill's token, starts
    no step)."""
    return [0] + [first_mismatch(row, generated[j:j + len(row)]) for j, row in enumerate(drafts, start=1)]


def eos_ids(eos) -> set[int]:
    """The end-of-sequence ids a tokenizer or generation config gives, as a set: they give None, one id,
    or a list of them (Qwen's chat models stop at two)."""
    found = eos if isinstance(eos, (list, tuple, set, frozenset)) else [eos]
    return {int(e) for e in found if e is not None}
