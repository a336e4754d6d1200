"""Prompt lookup decoding: a training-free draft that copies tokens from the context.

When the output repeats the prompt (summaries, code edits, extraction), the tokens that follow an
earlier occurrence of the trailing n-gram are a good guess for what comes next, at no model cost.

References: Saxena 2023, "Prompt Lookup Decoding" (github.com/apoorvumang/prompt-lookup-decoding);
transformers' ``prompt_lookup_num_tokens`` (``PromptLookupCandidateGenerator``). One difference:
HF takes the *first* match left to right; we take the *latest* earlier occurrence, whose
continuation is more likely to reflect the most recent text.

The engine drafts with it through ``specnb.decode.drafters.LookupDrafter``, as a draft whose
distribution is one-hot on its proposal (q = 1 on the proposed token), which keeps rejection
sampling lossless.
"""

from __future__ import annotations

import torch

from specnb.core.errors import ParameterError


class PromptLookup:
    """Proposes up to ``gamma`` tokens by matching the trailing n-gram (longest first) in the context."""

    draft_kind = "lookup"  # how ``specnb.decode.drafters.make_drafter`` drafts with it

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        if not 1 <= min_ngram <= max_ngram:
            raise ParameterError(f"need 1 <= min_ngram <= max_ngram, got min_ngram={min_ngram}, "
                                 f"max_ngram={max_ngram}; e.g. PromptLookup(max_ngram=3, min_ngram=1)")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram

    def __repr__(self) -> str:
        return f"PromptLookup(max_ngram={self.max_ngram}, min_ngram={self.min_ngram})"

    def propose(self, tokens, gamma: int) -> list[int]:
        """Up to ``gamma`` tokens following the latest earlier match of the trailing n-gram; [] if none.

        ``tokens`` is the whole context (prompt + generated), a list of ints or a 1D tensor.
        Fewer than ``gamma`` tokens come back when the match sits near the end of the context.
        """
        if isinstance(tokens, torch.Tensor):
            tokens = tokens.tolist()
        length = len(tokens)
        for n in range(min(self.max_ngram, length - 1), self.min_ngram - 1, -1):
            ngram = tokens[length - n:]
            # latest start strictly before the trailing n-gram itself, scanning right to left
            for start in range(length - n - 1, -1, -1):
                if tokens[start:start + n] == ngram:
                    return tokens[start + n:start + n + gamma]
        return []


def next_match(tokens: list[int], max_ngram: int = 3) -> tuple[int, int]:
    """The token ``PromptLookup(max_ngram).propose(tokens, 1)`` would propose and the matched n-gram's
    length: (token, n), or (-1, 0) when the trailing n-grams never occurred before.

    An EAGLE draft with ``lookup_ngram`` reads this signal as an input at every position it drafts.
    """
    length = len(tokens)
    for n in range(min(max_ngram, length - 1), 0, -1):
        ngram = tokens[length - n:]
        for start in range(length - n - 1, -1, -1):
            if tokens[start:start + n] == ngram:
                return tokens[start + n], n
    return -1, 0


def all_matches(ids: list[int], max_ngram: int = 3) -> tuple[list[int], list[int]]:
    """``next_match(ids[:p + 1])`` for every position p in one pass (dicts of the latest occurrence of
    each n-gram): the candidates [L] (-1: none) and match lengths [L], for training on whole sequences."""
    candidates, lengths = [-1] * len(ids), [0] * len(ids)
    latest: list[dict] = [{} for _ in range(max_ngram + 1)]  # n -> n-gram -> position after its latest occurrence
    for p in range(len(ids)):
        for n in range(1, max_ngram + 1):  # n-grams ending at p - 1, whose continuation ids[p] is known
            if p - n >= 0:
                latest[n][tuple(ids[p - n:p])] = p
        for n in range(max_ngram, 0, -1):
            q = latest[n].get(tuple(ids[p - n + 1:p + 1])) if p - n + 1 >= 0 else None
            if q is not None:
                candidates[p], lengths[p] = ids[q], n
                break
    return candidates, lengths


class MatchIndex:
    """``next_match`` of a growing context in O(max_ngram) per token, for drafting with it.

    Keeps, like ``all_matches``, the position after the latest occurrence of every n-gram whose
    continuation is known, so a draft that reads the match at every token never rescans its context.
    ``peek`` answers for the context plus a few speculative tokens (a draft's chain or tree path)
    without adding them: only the n-grams that end among those tokens are compared by hand.
    """

    def __init__(self, max_ngram: int = 3):
        self.max_ngram = max_ngram
        self.tokens: list[int] = []
        self.latest: list[dict] = [{} for _ in range(max_ngram + 1)]  # n -> n-gram -> position after it

    def append(self, token: int) -> tuple[int, int]:
        """Add a token; returns ``next_match`` of the context that now ends with it."""
        tokens, p = self.tokens, len(self.tokens)
        for n in range(1, min(self.max_ngram, p) + 1):  # the n-grams ending at p - 1 now have a continuation
            self.latest[n][tuple(tokens[p - n:p])] = p
        tokens.append(token)
        return self.peek(())

    def extend(self, tokens) -> list[tuple[int, int]]:
        """``append`` each token: the match after each one."""
        return [self.append(t) for t in tokens]

    def peek(self, extra) -> tuple[int, int]:
        """``next_match(self.tokens + extra)``, leaving the index as it is."""
        length = len(self.tokens)
        start = max(0, length - self.max_ngram)  # the tail holds every n-gram that ends among ``extra``
        tail = self.tokens[start:] + list(extra)
        for n in range(min(self.max_ngram, length + len(extra) - 1), 0, -1):
            ngram = tail[len(tail) - n:]
            # not indexed yet: occurrences ending at length - 1 .. the last but one token, latest first
            for end in range(len(tail) - 2, max(length - 1 - start, n - 1) - 1, -1):
                if tail[end - n + 1:end + 1] == ngram:
                    return tail[end + 1], n
            after = self.latest[n].get(tuple(ngram))
            if after is not None:
                return self.tokens[after], n
        return -1, 0
