"""Prompt lookup drafter: n-gram matching, latest occurrence, longest n-gram first."""

import pytest
import torch

from specnb.core.errors import ParameterError
from specnb.models.lookup import PromptLookup


def test_copies_tokens_after_latest_match_of_trailing_ngram():
    drafter = PromptLookup(max_ngram=2, min_ngram=1)
    #          0  1  2  3  4  5  6  7  8  9
    context = [5, 6, 7, 8, 5, 6, 9, 1, 2, 5, 6]
    # trailing bigram (5, 6) occurs at 0 and 4; the latest earlier one (4) continues with 9, 1, 2
    assert drafter.propose(context, 3) == [9, 1, 2]
    assert drafter.propose(torch.tensor(context), 2) == [9, 1]


def test_prefers_longer_ngram_over_later_short_match():
    drafter = PromptLookup(max_ngram=3, min_ngram=1)
    context = [1, 2, 3, 40, 41, 9, 3, 50, 1, 2, 3]
    # trigram (1, 2, 3) matches at 0 -> 40, 41; the unigram 3 matches later at 6 -> 50, but longer wins
    assert drafter.propose(context, 2) == [40, 41]


def test_truncated_continuation_and_no_match():
    drafter = PromptLookup(max_ngram=2, min_ngram=1)
    assert drafter.propose([7, 8, 7], 5) == [8, 7]  # only two tokens follow the match
    assert drafter.propose([1, 2, 3, 4], 3) == []
    assert drafter.propose([1], 3) == []
    assert PromptLookup(max_ngram=3, min_ngram=2).propose([1, 9, 2, 1], 3) == []  # unigram not allowed


def test_bad_ngram_sizes_are_rejected():
    with pytest.raises(ParameterError, match="min_ngram"):
        PromptLookup(max_ngram=1, min_ngram=2)
