"""Static draft trees: several candidates per depth, verified in one forward.

A tree is given by its branching per depth, e.g. ``(3, 2, 1)``: three candidates for the first draft
token, two continuations of each, one continuation of each of those (15 nodes, depth 3). The
verifier scores the last token and every node in one forward, each node attending to the cache and
its own ancestors only (``SlotCache.tree_mask``), and greedy acceptance walks down from the root,
at each depth taking the child whose token is the verifier's argmax at its parent. Once a CPU has
paid for the first extra token in a forward, more candidates cost little (notebook 02), which is
what a tree spends. References: Miao et al. 2024 (SpecInfer, token trees); Cai et al. 2024 (Medusa,
static trees); Li et al. 2024 (EAGLE, EAGLE-2).

Node order is breadth first: chunk index 0 is the root (the last emitted token), then the depth-1
nodes, then each depth-1 node's children in turn, and so on.

A dynamic tree (``DynamicTree``, EAGLE-2: Li et al. 2024, "EAGLE-2: Faster Inference of Language
Models with Dynamic Draft Trees") is grown each step from the draft's own confidence: per depth the
``width`` candidates with the highest path probability (product of the draft's probabilities along
the path) are expanded, each proposing its top-``width`` tokens, and the ``nodes`` candidates of
highest path probability over all depths are verified. The step's tree is then a ``TreeShape`` given
by its parents (``TreeShape.from_parents``), depth by depth, so verification and acceptance take the
same path as for a static tree.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import torch

from specnb.core.errors import ParameterError


@dataclass(frozen=True)
class TreeShape:
    """A static tree: ``branching[d]`` children per node at depth d (the root is depth 0). A chain of k
    drafts is the one-wide tree ``(1,) * k``; the empty tree is the root alone (nothing drafted).
    A tree of any shape (a dynamic tree's step) is given by its parents instead (``from_parents``)."""

    branching: tuple[int, ...]
    links: tuple[int, ...] | None = None  # each node's parent chunk index, when not given by branching

    def __post_init__(self):
        if any(int(b) < 1 for b in self.branching):
            raise ParameterError(f"every branching of a tree must be >= 1, got {self.branching}; e.g. tree=(3, 2, 1)")

    @classmethod
    def from_parents(cls, parents) -> TreeShape:
        """A tree from its nodes' parent chunk indices, depth by depth (each parent before its children)."""
        return cls((), tuple(int(p) for p in parents))

    @property
    def depth(self) -> int:
        return len(self.branching) if self.links is None else max(self.depths)

    def cut(self, depth: int) -> TreeShape:
        """The same tree, no deeper than ``depth`` (near the token budget)."""
        if self.links is not None:
            return TreeShape.from_parents(self.links[: sum(d <= depth for d in self.depths[1:])])
        return TreeShape(self.branching[:depth])

    @cached_property
    def parents(self) -> list[int]:
        """Chunk index of each node's parent (node j is chunk index j + 1; the root is 0)."""
        if self.links is not None:
            return list(self.links)
        parents, level = [], [0]
        for width in self.branching:
            nxt = []
            for parent in level:
                for _ in range(width):
                    parents.append(parent)
                    nxt.append(len(parents))  # chunk index of the node just added
            level = nxt
        return parents

    @cached_property
    def children(self) -> list[list[int]]:
        """Chunk indices of each chunk index's children (the root is 0)."""
        children: list[list[int]] = [[] for _ in range(len(self.parents) + 1)]
        for child, parent in enumerate(self.parents, start=1):
            children[parent].append(child)
        return children

    @property
    def chain(self) -> bool:
        """One candidate per depth: the drafts follow each other, a causal chunk needs no tree mask."""
        return all(len(kids) <= 1 for kids in self.children)

    @property
    def size(self) -> int:
        """Nodes, the root excluded."""
        return len(self.parents)

    @cached_property
    def depths(self) -> list[int]:
        """Depth of every chunk index (root 0)."""
        depths = [0]
        for parent in self.parents:
            depths.append(depths[parent] + 1)
        return depths

    @cached_property
    def levels(self) -> list[list[int]]:
        """Chunk indices of the nodes at depth 1, 2, ..."""
        return [[i for i, d in enumerate(self.depths) if d == depth] for depth in range(1, self.depth + 1)]

    def ancestors(self, device=None) -> torch.Tensor:
        """[T, T] bool over chunk indices (T = size + 1): True where j is i itself or an ancestor of i."""
        size = self.size + 1
        mask = torch.eye(size, dtype=torch.bool)
        for child, parent in enumerate(self.parents, start=1):
            mask[child] |= mask[parent]
        return mask.to(device)

    @classmethod
    def of_chain(cls, k: int) -> TreeShape:
        """A chain of ``k`` drafts as a one-wide tree."""
        return cls((1,) * k)

    def label(self) -> str:
        return "x".join(map(str, self.branching)) if self.links is None else f"{self.size} nodes"


@dataclass(frozen=True)
class DynamicTree:
    """EAGLE-2's dynamic tree (module doc): grown to ``depth`` by expanding the ``width`` most probable
    candidates per depth, each proposing its top-``width`` tokens; the ``nodes`` most probable are verified."""

    depth: int
    width: int = 4
    nodes: int = 16

    def __post_init__(self):
        if self.depth < 1 or self.width < 1 or self.nodes < 1:
            raise ParameterError(f"a dynamic tree needs depth, width and nodes >= 1, got {self}")

    def cut(self, depth: int) -> DynamicTree:
        """No deeper than ``depth`` (near the token budget)."""
        return replace(self, depth=min(self.depth, depth))

    def label(self) -> str:
        return f"dynamic{self.depth}w{self.width}n{self.nodes}"
