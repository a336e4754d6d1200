"""Drafts that read the verifier's own features: EAGLE (a one-layer draft over the verifier's final
hidden states, with its own KV cache) and Medusa (heads on the last hidden state, no draft forward).

Both propose from what the verifier already computed, which is why they are accepted far more often
than a separate small model at a similar cost (Li et al. 2024, EAGLE; Cai et al. 2024, Medusa).
The loop hands them ``state.features``: after prefill the final hidden states of every prompt
column, after each step those of the verified positions every row kept. Both draft chains or static
trees (``specnb.decode.trees``), and EAGLE also EAGLE-2's dynamic trees; a chain stops early where
the head is unsure, given a confidence threshold (``specnb.decode.confidence``; trees ignore it);
sampling draws from the head's distribution, which keeps rejection sampling lossless (q is zero
outside a trimmed head, a valid draft distribution).

EAGLE's input at position p is (f_p, x_{p+1}): the verifier's feature there and the token after it;
its output is the predicted feature at p + 1, scored by the verifier's frozen lm_head. Its cache
holds entries computed from *true* features only: what it drafted from its own predictions is
cropped after every step and replaced by the verified features (as EAGLE does). An EAGLE-3 draft
(``feature_layers``) reads instead the outputs of a low, a middle and a high verifier layer, fused
into one feature by its own ``fuse`` layer; its later steps read its own output, as before.

An EAGLE draft with ``lookup_ngram`` also reads, with each input token, the prompt-lookup match of
the context up to that token (``specnb.models.lookup``): the row's real text for verified tokens,
plus the chain or tree path for drafted ones; the logits at a position use the match fed there.
A ``MatchIndex`` per row keeps that O(n) per token; a draft without it does no such work.
"""

from __future__ import annotations

import torch

from specnb.core.padding import left_pad
from specnb.core.sampling import logits_to_probs, sample
from specnb.decode.confidence import ChainStop
from specnb.decode.kvcache import SlotCache
from specnb.decode.state import DecodeState, Proposal, Step
from specnb.decode.trees import DynamicTree, TreeShape
from specnb.models.lookup import MatchIndex


def pick_from_head(small: torch.Tensor, head_ids: torch.Tensor | None, vocab: int, sampling, generator):
    """A token per row from a head's logits ``small`` [B, N] (column i is token ``head_ids[i]``; a full
    head when None): (ids [B], q [B, V] or None when greedy)."""
    if sampling is None:
        index = small.argmax(-1)
        return (index if head_ids is None else head_ids[index]), None
    full = small if head_ids is None else small.new_full((small.shape[0], vocab), float("-inf")).index_copy_(
        1, head_ids, small)  # [B, V]
    probs = logits_to_probs(full, sampling)
    return sample(probs, generator), probs


def top_from_head(small: torch.Tensor, head_ids: torch.Tensor | None, k: int) -> torch.Tensor:
    """The ``k`` highest-scoring tokens per row of head logits [B, N] -> ids [B, k]."""
    index = small.topk(k, dim=-1).indices
    return index if head_ids is None else head_ids[index]


def pad_matches(rows: list[list[tuple[int, int]]], device) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row matches [(candidate, length)] left padded with (-1, 0) -> (candidates, lengths) [B, W]."""
    table, _ = left_pad([torch.tensor(r, dtype=torch.long, device=device).reshape(-1, 2) for r in rows], (-1, 0))
    return table[..., 0], table[..., 1]


def column(lookup, i):
    """Column ``i`` of a (candidates, lengths) pair [B, T] -> [B] each; None stays None."""
    return None if lookup is None else (lookup[0][:, i], lookup[1][:, i])


class Candidates:
    """The nodes a dynamic tree grows (``EagleDrafter.draft_dynamic``): per candidate its parent
    (-1: the root), depth, token [B] and path probability [B]; ``weight`` [B] averages rows."""

    def __init__(self, weight: torch.Tensor):
        self.weight = weight
        self.parents: list[int] = []
        self.depths: list[int] = []
        self.tokens: list[torch.Tensor] = []
        self.scores: list[torch.Tensor] = []

    def __len__(self) -> int:
        return len(self.parents)

    def add_children(self, parent: int, eagle, feature: torch.Tensor, lookup, width: int) -> list[int]:
        """The ``width`` most probable next tokens at ``parent``'s predicted feature [B, d]; their indices."""
        probs = torch.softmax(eagle.logits(feature, lookup).float(), -1)  # [B, N]
        top = probs.topk(width, dim=-1)
        ids = top.indices if eagle.head_ids is None else eagle.head_ids[top.indices]  # [B, w]
        score = self.scores[parent] if parent >= 0 else torch.ones_like(self.weight)
        depth = self.depths[parent] + 1 if parent >= 0 else 1
        first = len(self)
        for i in range(width):
            self.parents.append(parent)
            self.depths.append(depth)
            self.tokens.append(ids[:, i])
            self.scores.append(score * top.values[:, i])
        return list(range(first, len(self)))

    def best(self, candidates, n: int) -> list[int]:
        """The ``n`` candidates of highest mean path probability (ties: the earlier, so shallower and a
        parent before its children: a path's probability never grows along it)."""
        mean = {c: float(self.scores[c] @ self.weight) for c in candidates}
        return sorted(sorted(candidates, key=lambda c: -mean[c])[:n])

    def ancestors(self, c: int) -> list[int]:
        found = []
        while self.parents[c] >= 0:
            c = self.parents[c]
            found.append(c)
        return found

    def tree(self, keep: list[int]):
        """(tokens [B, N], shape) of the candidates ``keep`` and their ancestors, depth by depth."""
        keep = sorted(set(keep).union(*(self.ancestors(c) for c in keep)), key=lambda c: (self.depths[c], c))
        chunk = {c: i + 1 for i, c in enumerate(keep)}  # chunk index of each kept candidate (0: the root)
        shape = TreeShape.from_parents([chunk.get(self.parents[c], 0) for c in keep])
        return torch.stack([self.tokens[c] for c in keep], 1), shape


class EagleDrafter:
    """An EAGLE draft (``specnb.models.eagle.EagleDraft``) drafting with its own slot cache."""

    kind = "eagle"
    needs_features = True
    trees = True
    dynamic_trees = True  # grows EAGLE-2's dynamic trees (``specnb.decode.trees.DynamicTree``)

    def __init__(self, eagle, vocab_size: int | None = None):
        self.eagle = eagle
        self.feature_layers = eagle.config.feature_layers  # (): final features; EAGLE-3: the layers it fuses
        self.slots: SlotCache | None = None
        self.pending: list[tuple[torch.Tensor, torch.Tensor]] = []  # per row: (features [n, d], tokens [n])
        self.ngram = eagle.config.lookup_ngram  # 0: the draft reads no prompt-lookup match
        self.index: list[MatchIndex] = []  # per row: every true token fed or pending
        self.pending_matches: list[list[tuple[int, int]]] = []  # per row: the match of each pending token

    def begin(self, state, input_ids, attention_mask) -> int:
        """Feed the prompt pairs (f_p, x_{p+1}) but the last; that one (f_{S-1}, the first generated
        token) stays pending, so every step starts by catching up."""
        self.slots = SlotCache(self.eagle.config.llama_config())
        feats = state.features  # [B, S, d]
        mask = attention_mask.bool() if attention_mask is not None else torch.ones_like(input_ids, dtype=torch.bool)
        lookup = None
        if self.ngram:
            self.index = [MatchIndex(self.ngram) for _ in state.contexts]
            prompt = [ix.extend(ctx)[1:] for ix, ctx in zip(self.index, state.contexts)]  # pairs' tokens x_1..
            width = input_ids.shape[1] - 1
            lookup = pad_matches([[(-1, 0)] * (width - len(p)) + p for p in prompt], input_ids.device)  # [B, S-1]
            self.pending_matches = [[ix.append(t)] for ix, t in zip(self.index, state.last.tolist())]
        if input_ids.shape[1] > 1:
            chunk_mask = mask[:, :-1]  # [B, S-1]
            positions = (chunk_mask.long().cumsum(1) - 1).clamp_min(0)
            keys = self.slots.append(input_ids.shape[0], input_ids.shape[1] - 1,
                                     None if bool(chunk_mask.all()) else chunk_mask, input_ids.device)
            self.eagle(feats[:, :-1], input_ids[:, 1:], cache=self.slots.cache, position_ids=positions,
                       attention_mask=keys, lookup=lookup)
        self.pending = [(feats[i, -1:], state.last[i:i + 1]) for i in range(len(feats))]
        return 1

    def feed_pending(self, state):
        """Feed every row's pending pairs (left padded into one chunk). Returns the predicted feature at
        the position of each row's last emitted token [B, 1, d], the match fed with that token ([B]
        each, None without lookup) and the chunk's width."""
        device = state.seq_len.device
        feats, chunk_mask = left_pad([f for f, _ in self.pending])  # [B, w, d], [B, w]
        ids, _ = left_pad([t for _, t in self.pending])  # [B, w]
        width = ids.shape[1]
        positions = (state.seq_len[:, None] - 1 - width + torch.arange(width, device=device)).clamp_min(0)  # [B, w]
        keys = self.slots.append(len(ids), width, chunk_mask, device)
        lookup = pad_matches(self.pending_matches, device) if self.ngram else None  # [B, w] each
        out = self.eagle(feats, ids, cache=self.slots.cache, position_ids=positions, attention_mask=keys,
                         lookup=lookup)
        return out[:, -1:], column(lookup, -1), width

    def propose(self, state: DecodeState, k: int, tree: TreeShape | DynamicTree | None = None) -> Proposal:
        base = self.slots.length  # slots before this step's
        h, lookup, fed = self.feed_pending(state)
        if tree is not None:  # static or dynamic: every row drafts the whole tree
            grow = self.draft_dynamic if isinstance(tree, DynamicTree) else self.draft_tree
            tokens, shape, forwards = grow(state, h, lookup, tree.cut(k))
            q, n_drafted = None, torch.full_like(state.seq_len, shape.depth)
        else:
            tokens, q, n_drafted = self.draft_chain(state, h, lookup, k)
            shape = TreeShape.of_chain(tokens.shape[1])
            forwards = shape.depth
        return Proposal(tokens=tokens, tree=shape, n_drafted=n_drafted, forwards=forwards, q=q, fed=fed,
                        slots=self.slots.length - base)

    def draft_chain(self, state, h: torch.Tensor, lookup, k: int):
        """Up to k drafts, each from the draft's own predicted feature, fewer when every row is unsure
        (``specnb.decode.confidence``): (tokens [B, m], q [B, m, V] or None, n_drafted [B])."""
        head_ids, tokens, probs = self.eagle.head_ids, [], []
        stop = ChainStop(state.confidence, state.rows.done, h.device)
        chains = [[] for _ in self.index]  # per row: its drafts so far (lookup drafts)
        for j in range(k):
            small = self.eagle.logits(h[:, -1], lookup)  # [B, N]
            tok, prob = pick_from_head(small, head_ids, state.vocab, state.sampling, state.generator)
            tokens.append(tok)
            probs.append(prob)
            stop.add(small)
            if j + 1 == k or stop.done():
                break
            # the next position, from the draft's own predicted feature
            if self.ngram:
                lookup = self.peek(chains, tok.tolist(), tok.device)
            keys = self.slots.append(len(tok), 1, None, tok.device)
            h = self.eagle(h, tok[:, None], cache=self.slots.cache, position_ids=(state.seq_len - 1 + j)[:, None],
                           attention_mask=keys, lookup=None if lookup is None else (lookup[0][:, None],
                                                                                    lookup[1][:, None]))
        q = torch.stack(probs, 1) if state.sampling is not None else None  # [B, m, V]
        return torch.stack(tokens, 1), q, stop.counts

    def peek(self, chains: list[list[int]], drafted: list[int], device) -> tuple[torch.Tensor, torch.Tensor]:
        """Extend each row's chain by its drafted token; the match of row text + chain, [B] each."""
        for chain, tok in zip(chains, drafted):
            chain.append(tok)
        table = torch.tensor([ix.peek(c) for ix, c in zip(self.index, chains)], dtype=torch.long, device=device)
        return table[:, 0], table[:, 1]

    def draft_tree(self, state, h_root: torch.Tensor, root_lookup, shape: TreeShape):
        """Greedy static tree: the top-b tokens of each node's predicted feature, one draft forward per
        depth (each node's slot sees the cache and its ancestors' slots only). The tree's nodes follow
        the cache in breadth-first order, so chunk index c sits at slot ``base + c - 1``.
        Returns (tokens [B, N], shape, forwards)."""
        head_ids, batch, device = self.eagle.head_ids, len(h_root), h_root.device
        ancestors = shape.ancestors(device)  # [N+1, N+1]
        tokens = torch.zeros(batch, shape.size, dtype=torch.long, device=device)
        feats = {0: h_root[:, 0]}  # chunk index -> predicted feature at its position [B, d]
        lookups = {0: root_lookup}  # chunk index -> the match fed with its token [B] each (lookup drafts)
        paths = {0: [[] for _ in range(batch)]}  # chunk index -> per row its tokens after the root
        forwards = 1
        for depth, level in enumerate(shape.levels):
            for parent in sorted({shape.parents[c - 1] for c in level}):
                kids = shape.children[parent]
                tokens[:, [c - 1 for c in kids]] = top_from_head(self.eagle.logits(feats[parent], lookups.get(parent)),
                                                                 head_ids, len(kids))
            if depth + 1 == shape.depth:
                break
            # one slot per node of this level: input (parent's predicted feature, the node's token)
            parent_feats = torch.stack([feats[shape.parents[c - 1]] for c in level], 1)  # [B, n, d]
            ids = tokens[:, [c - 1 for c in level]]  # [B, n]
            lookup = None
            if self.ngram:
                lookup = self.tree_matches(shape, level, ids, paths)  # [B, n] each
                lookups.update({c: column(lookup, i) for i, c in enumerate(level)})
            self.slots.append(batch, len(level), None, device)
            visible = ancestors[level][:, 1: level[-1] + 1]  # [n, nodes so far]: itself and its ancestors
            mask = self.slots.tree_mask(batch, visible, device)
            positions = (state.seq_len - 1 + depth)[:, None].expand(batch, len(level))  # the parent's position
            out = self.eagle(parent_feats, ids, cache=self.slots.cache, position_ids=positions, attention_mask=mask,
                             lookup=lookup)
            feats.update({c: out[:, i] for i, c in enumerate(level)})
            forwards += 1
        return tokens, shape, forwards

    def draft_dynamic(self, state, h_root: torch.Tensor, root_lookup, plan: DynamicTree):
        """EAGLE-2's dynamic tree (``specnb.decode.trees``): grow by path probability, one draft forward
        per depth for the ``width`` candidates expanded there, then keep the ``nodes`` most probable.
        The rows of a batch share the tree's shape, chosen by the mean path probability over the rows
        still generating (batch 1: EAGLE-2's own choice); each row has its own tokens.
        Returns (tokens [B, N], shape, forwards)."""
        batch, device = len(h_root), h_root.device
        live = torch.tensor([not done for done in state.rows.done], dtype=torch.float, device=device)
        grown = Candidates(weight=live / live.sum().clamp_min(1))
        feats, paths = {}, {-1: [[] for _ in range(batch)]}  # per expanded candidate (-1: the root)
        grown.add_children(-1, self.eagle, h_root[:, 0], root_lookup, plan.width)
        frontier, slotted, forwards = list(range(len(grown))), [], 1
        for depth in range(1, plan.depth):
            expand = grown.best(frontier, plan.width)
            ids = torch.stack([grown.tokens[c] for c in expand], 1)  # [B, n]
            parent_feats = torch.stack([feats.get(grown.parents[c], h_root[:, 0]) for c in expand], 1)  # [B, n, d]
            lookup = None
            if self.ngram:
                for c in expand:
                    paths[c] = [p + [t] for p, t in zip(paths[grown.parents[c]], grown.tokens[c].tolist())]
                lookup = pad_matches([[ix.peek(paths[c][b]) for c in expand] for b, ix in enumerate(self.index)],
                                     device)  # [B, n] each
            visible = torch.zeros(len(expand), len(slotted) + len(expand), dtype=torch.bool)  # itself and ancestors
            for i, c in enumerate(expand):
                visible[i, [slotted.index(a) for a in grown.ancestors(c)] + [len(slotted) + i]] = True
            self.slots.append(batch, len(expand), None, device)
            mask = self.slots.tree_mask(batch, visible, device)
            positions = (state.seq_len - 2 + depth)[:, None].expand(batch, len(expand))  # the parent's position
            out = self.eagle(parent_feats, ids, cache=self.slots.cache, position_ids=positions, attention_mask=mask,
                             lookup=lookup)
            forwards += 1
            slotted += expand
            frontier = []
            for i, c in enumerate(expand):
                feats[c] = out[:, i]
                frontier += grown.add_children(c, self.eagle, out[:, i], column(lookup, i), plan.width)
        tokens, shape = grown.tree(grown.best(range(len(grown)), plan.nodes))
        return tokens, shape, forwards

    def tree_matches(self, shape: TreeShape, level: list[int], ids: torch.Tensor, paths: dict):
        """The match of row text + each node's path (its ancestors, then itself) for a level's nodes
        ``ids`` [B, n]; records the paths in ``paths`` for the next level. (candidates, lengths) [B, n]."""
        rows = ids.tolist()
        for i, c in enumerate(level):
            paths[c] = [path + [row[i]] for path, row in zip(paths[shape.parents[c - 1]], rows)]
        return pad_matches([[ix.peek(paths[c][b]) for c in level] for b, ix in enumerate(self.index)], ids.device)

    def commit(self, state: DecodeState, proposal: Proposal, step: Step) -> None:
        """Drop what was drafted from predicted features; the verified positions become pending."""
        new = [(state.features[i, : n + 1], torch.tensor(e, device=state.features.device))
               for i, (n, e) in enumerate(zip(step.accepted, step.emitted))]
        matches = [ix.extend(e) for ix, e in zip(self.index, step.emitted)] if self.ngram else []
        if not proposal.fed:  # no forward this step: more to catch up on
            self.pending = [(torch.cat([f, nf]), torch.cat([t, nt])) for (f, t), (nf, nt) in zip(self.pending, new)]
            self.pending_matches = [old + m for old, m in zip(self.pending_matches, matches)]
            return
        self.slots.rollback([proposal.fed] * len(new), proposal.slots)
        self.pending, self.pending_matches = new, matches


class MedusaDrafter:
    """Medusa heads (``specnb.models.medusa.MedusaHeads``): head k reads the verifier's feature at the
    newest verified position and proposes the token k + 1 ahead; no draft forward, no cache."""

    kind = "medusa"
    needs_features = True
    feature_layers = ()
    trees = True

    def __init__(self, heads, vocab_size: int | None = None):
        self.heads = heads
        self.feature: torch.Tensor | None = None  # [B, d]

    def begin(self, state, input_ids, attention_mask) -> int:
        self.feature = state.features[:, -1]
        return 0

    def propose(self, state: DecodeState, k: int, tree: TreeShape | None = None) -> Proposal:
        k = min(k, self.heads.config.num_heads)
        if tree is not None:
            return self.propose_tree(tree.cut(k))
        states = self.heads(self.feature)[:, :k]  # [B, k, d]
        stop, picks = ChainStop(state.confidence, state.rows.done, states.device), []
        for j in range(k):  # head j's token; the chain ends once every row is unsure
            small = self.heads.logits(states[:, j])  # [B, N]
            picks.append(pick_from_head(small, self.heads.head_ids, state.vocab, state.sampling, state.generator))
            stop.add(small)
            if stop.done():
                break
        q = torch.stack([p for _, p in picks], 1) if state.sampling is not None else None  # [B, m, V]
        return Proposal(tokens=torch.stack([t for t, _ in picks], 1), tree=TreeShape.of_chain(len(picks)),
                        n_drafted=stop.counts, forwards=0, q=q)

    def propose_tree(self, shape: TreeShape) -> Proposal:
        """Every node at depth d gets the same children: head d + 1's top-b tokens (the heads do not
        see which parent was chosen)."""
        states = self.heads(self.feature)  # [B, K, d]
        tokens = torch.zeros(len(states), shape.size, dtype=torch.long, device=states.device)
        for depth, level in enumerate(shape.levels):
            top = top_from_head(self.heads.logits(states[:, depth]), self.heads.head_ids, shape.branching[depth])
            tokens[:, [c - 1 for c in level]] = top.repeat(1, len(level) // shape.branching[depth])
        return Proposal(tokens=tokens, tree=shape, n_drafted=torch.full((len(states),), shape.depth,
                                                                      device=states.device), forwards=0)

    def commit(self, state: DecodeState, proposal: Proposal, step: Step) -> None:
        index = torch.tensor(step.accepted, device=state.features.device)  # the newest kept position per row
        self.feature = state.features[torch.arange(len(index)), index]
