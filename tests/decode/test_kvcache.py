"""kvcache: a slot cache rolled back, masked or gathered gives the logits a fresh cache would."""

import torch
from helpers import tiny_model

from specnb.decode.kvcache import ModelKV, SlotCache
from specnb.decode.trees import TreeShape


def test_rollback_crops_the_common_tail_and_masks_the_rest():
    model = tiny_model(vocab=50)
    kv = ModelKV(model, None)
    kv.prefill(torch.tensor([[5, 6, 7], [8, 9, 10]]))
    kv.forward(torch.tensor([[1, 2, 3], [4, 5, 6]]), torch.tensor([[3, 4, 5], [3, 4, 5]]))
    kv.rollback([2, 1], 3)  # row 0 keeps two new slots, row 1 one
    assert kv.length == 5 and kv.mask[:, 3:].tolist() == [[True, True], [True, False]]


def test_a_rolled_back_cache_predicts_as_a_fresh_one():
    model = tiny_model(vocab=50, peaked=4.0)
    kv = ModelKV(model, None)
    kv.prefill(torch.tensor([[5, 6, 7]]))
    kv.forward(torch.tensor([[1, 2, 3]]), torch.tensor([[3, 4, 5]]))
    kv.rollback([1], 3)  # keep token 1 only
    after = kv.forward(torch.tensor([[9]]), torch.tensor([[4]]))[:, -1]
    fresh = ModelKV(model, None)
    fresh.prefill(torch.tensor([[5, 6, 7, 1]]))
    expected = fresh.forward(torch.tensor([[9]]), torch.tensor([[4]]))[:, -1]
    torch.testing.assert_close(after, expected, atol=1e-5, rtol=1e-5)


def test_select_moves_a_path_to_the_front_and_predicts_as_that_chain():
    model = tiny_model(vocab=50, peaked=4.0)
    kv = ModelKV(model, None)
    kv.prefill(torch.tensor([[5, 6, 7]]))
    tree = TreeShape.from_parents([0, 0, 2]).ancestors()[1:, 1:]  # two siblings, then a child of the second
    kv.forward(torch.tensor([[1, 2, 3]]), torch.tensor([[3, 3, 4]]), tree=tree)
    kv.select([[1, 2]], 3)  # keep sibling 2 and its child 3
    after = kv.forward(torch.tensor([[9]]), torch.tensor([[5]]))[:, -1]
    fresh = ModelKV(model, None)
    fresh.prefill(torch.tensor([[5, 6, 7, 2, 3]]))
    expected = fresh.forward(torch.tensor([[9]]), torch.tensor([[5]]))[:, -1]
    torch.testing.assert_close(after, expected, atol=1e-5, rtol=1e-5)


def test_slot_masks_appear_only_with_holes():
    slots = SlotCache(tiny_model(vocab=20).config)
    assert slots.append(2, 3) is None and slots.length == 3
    mask = slots.append(2, 2, chunk_mask=torch.tensor([[0, 1], [1, 1]]))
    assert mask.tolist() == [[True, True, True, False, True], [True] * 5]
    tree = slots.tree_mask(2, torch.tensor([[True, False], [True, True]]))
    assert tree.shape == (2, 1, 2, 5) and tree[0, 0, 0].tolist() == [True, True, True, False, False]
