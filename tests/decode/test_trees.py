"""trees: a static tree's shape (parents, depths, levels, ancestors), trees given by parents, cuts."""

import pytest
import torch

from specnb.core.errors import ParameterError
from specnb.decode.trees import DynamicTree, TreeShape


def test_a_branching_lays_its_nodes_out_depth_by_depth():
    tree = TreeShape((2, 1))  # root -> 2 children -> 1 child each
    assert tree.parents == [0, 0, 1, 2] and tree.depths == [0, 1, 1, 2, 2]
    assert tree.levels == [[1, 2], [3, 4]] and tree.size == 4 and tree.depth == 2
    assert tree.children == [[1, 2], [3], [4], [], []] and not tree.chain
    assert tree.label() == "2x1"


def test_ancestors_mark_each_node_its_path_to_the_root():
    mask = TreeShape((2, 1)).ancestors()
    assert mask.shape == (5, 5) and mask.diagonal().all()
    assert mask[3].tolist() == [True, True, False, True, False]  # node 3: root, its parent 1, itself
    assert mask[4].tolist() == [True, False, True, False, True]
    assert not mask[1, 2] and not mask[0, 1]  # siblings and descendants stay hidden


def test_a_chain_is_the_one_wide_tree_and_cuts_keep_the_top():
    chain = TreeShape.of_chain(3)
    assert chain.chain and chain.parents == [0, 1, 2] and chain.cut(2) == TreeShape.of_chain(2)
    assert TreeShape.of_chain(0).size == 0 and TreeShape.of_chain(0).depth == 0
    assert TreeShape((3, 2, 1)).cut(1).size == 3


def test_a_tree_from_parents_has_any_shape_and_cuts_by_depth():
    tree = TreeShape.from_parents([0, 0, 1, 1, 3])  # a dynamic step: uneven widths
    assert tree.depth == 3 and tree.levels == [[1, 2], [3, 4], [5]] and tree.label() == "5 nodes"
    assert tree.cut(2).parents == [0, 0, 1, 1] and tree.cut(1).parents == [0, 0]
    assert torch.equal(tree.ancestors()[5], torch.tensor([True, True, False, True, False, True]))


def test_bad_trees_are_one_line():
    with pytest.raises(ParameterError, match=">= 1"):
        TreeShape((2, 0))
    with pytest.raises(ParameterError, match="depth, width and nodes >= 1"):
        DynamicTree(0)
    assert DynamicTree(4).cut(2).depth == 2 and DynamicTree(2).cut(5).depth == 2
