"""Confidence stopping, worked by hand: a row proposes the token where it becomes unsure, then stops;
a finished row never keeps the chain going; threshold 0 never stops."""

import math

import torch

from specnb.decode.confidence import ChainStop


def logits_with_top(probs: list[float]) -> torch.Tensor:
    """Two-token logits [B, 2] whose top probability is ``probs[b]`` for row b."""
    return torch.tensor([[math.log(p), math.log(1 - p)] for p in probs])


def test_a_row_proposes_the_token_it_is_unsure_of_then_stops():
    stop = ChainStop(0.7, [False, False, True], "cpu")  # row 2 has finished: it never holds the chain
    tops = [[0.9, 0.95, 0.99], [0.8, 0.6, 0.99], [0.75, 0.99, 0.99], [0.6, 0.99, 0.99]]  # per position, per row
    done = []
    for position in tops:
        stop.add(logits_with_top(position))
        done.append(stop.done())
    assert stop.counts.tolist()[:2] == [4, 2]  # row 1 proposes its 0.6 token, then stops
    assert done == [False, False, False, True]  # only once row 0 too is unsure


def test_threshold_zero_never_stops():
    stop = ChainStop(0.0, [False], "cpu")
    for _ in range(4):
        stop.add(logits_with_top([0.5]))
        assert not stop.done()
    assert stop.counts.tolist() == [4]
