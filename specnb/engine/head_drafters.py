"""Drafts that read the verifier's own features: EAGLE (a one-layer draft over the verifier's final
hidden states, with its own KV cache) and Medusa (heads on the last hidden state, no draft forward).

Both propose from what the verifier already computed, which is why they are accepted far more often
than a separate small model at a similar cost (Li et al. 2024, EAGLE; Cai et al. 2024, Medusa).
The loop hands them ``state.features``: after prefill the final hidden states of every prompt
column, after each step those of the verified positions every row kept. Both draft chains or static
trees (``specnb.engine.trees``); sampling draws from the head's distribution, which keeps rejection
sampling lossless (q is zero outside a trimmed head, a valid draft distribution).

EAGLE's input at position p is (f_p, x_{p+1}): the verifier's feature there and the token after it;
its output is the predicted feature at p + 1, scored by the verifier's frozen lm_head. Its cache
holds entries computed from *true* features only: what it drafted from its own predictions is
cropped after every step and replaced by the verified features (as EAGLE does).

An EAGLE draft with ``lookup_ngram`` also reads, with each input token, the prompt-lookup match of
the context up to that token (``specnb.models.lookup``): the row's real text for verified tokens,
plus the chain or tree path for drafted ones; the logits at a position use the match fed there.
A ``MatchIndex`` per row keeps that O(n) per token; a draft without it does no such work.
"""

from __future__ import annotations

import torch

from specnb.engine.kvcache import SlotCache
from specnb.engine.sampling import logits_to_probs, sample
from specnb.engine.state import DecodeState, Proposal, Step
from specnb.engine.trees import TreeShape
from specnb.models.lookup import MatchIndex, all_matches


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


def left_pad(rows: list[torch.Tensor], width: int) -> torch.Tensor:
    """Per-row tensors [n_i, ...] left padded with zeros to [B, width, ...]."""
    out = rows[0].new_zeros((len(rows), width, *rows[0].shape[1:]))
    for i, row in enumerate(rows):
        if len(row):
            out[i, width - len(row):] = row
    return out


def pad_matches(rows: list[list[tuple[int, int]]], width: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row matches [(candidate, length)] left padded with (-1, 0) -> (candidates, lengths) [B, width]."""
    table = torch.tensor([[(-1, 0)] * (width - len(r)) + r for r in rows], dtype=torch.long, device=device)
    return table[..., 0], table[..., 1]


def column(lookup, i):
    """Column ``i`` of a (candidates, lengths) pair [B, T] -> [B] each; None stays None."""
    return None if lookup is None else (lookup[0][:, i], lookup[1][:, i])


class EagleDrafter:
    """An EAGLE draft (``specnb.models.eagle.EagleDraft``) drafting with its own slot cache."""

    kind = "eagle"
    needs_features = True
    trees = True
    pricing = "forwards"  # the predictor prices its draft forwards (specnb.predict.costs)
    catch_up = "features"  # a step's first forward feeds every position verified in the step before

    def __init__(self, eagle, vocab_size: int | None = None):
        self.eagle, self.model = eagle, eagle
        self.forward_tokens = (1, 2, 4)  # catch-up chunks are 1..γ+1 wide; the cost model fits a line over them
        self.slots: SlotCache | None = None
        self.pending: list[tuple[torch.Tensor, torch.Tensor]] = []  # per row: (features [n, d], tokens [n])
        self.fed: tuple[int, int] | None = None  # (catch-up width, slots drafted after it) this step
        self.ngram = eagle.config.lookup_ngram  # 0: the draft reads no prompt-lookup match
        self.index: list[MatchIndex] = []  # per row: every true token fed or pending
        self.pending_matches: list[list[tuple[int, int]]] = []  # per row: the match of each pending token
        self.last_lookup: tuple[torch.Tensor, torch.Tensor] | None = None  # [B] each: the newest fed token's

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
            lookup = pad_matches(prompt, input_ids.shape[1] - 1, input_ids.device)  # [B, S-1] each
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

    def feed_pending(self, state) -> torch.Tensor:
        """Feed every row's pending pairs (left padded into one chunk); returns the predicted feature
        at the position of each row's last emitted token [B, 1, d]."""
        device = state.seq_len.device
        width = max(len(t) for _, t in self.pending)
        feats = left_pad([f for f, _ in self.pending], width)  # [B, w, d]
        ids = left_pad([t for _, t in self.pending], width)  # [B, w]
        real = [len(t) for _, t in self.pending]
        chunk_mask = None
        if min(real) < width:
            chunk_mask = torch.tensor([[0] * (width - n) + [1] * n for n in real], dtype=torch.bool, device=device)
        positions = (state.seq_len[:, None] - 1 - width + torch.arange(width, device=device)).clamp_min(0)  # [B, w]
        keys = self.slots.append(len(real), width, chunk_mask, device)
        lookup = pad_matches(self.pending_matches, width, device) if self.ngram else None  # [B, w] each
        out = self.eagle(feats, ids, cache=self.slots.cache, position_ids=positions, attention_mask=keys,
                         lookup=lookup)
        self.last_lookup = column(lookup, -1)
        self.fed = (width, 0)
        return out[:, -1:]  # [B, 1, d]

    def propose(self, state: DecodeState, k: int, tree: TreeShape | None = None) -> Proposal:
        h = self.feed_pending(state)
        if tree is not None:
            return self.propose_tree(state, h, tree.cut(k))
        head_ids, tokens, probs = self.eagle.head_ids, [], []
        lookup, chains = self.last_lookup, [[] for _ in self.index]  # the match fed with h's token [B] each
        for j in range(k):
            tok, prob = pick_from_head(self.eagle.logits(h[:, -1], lookup), head_ids, state.vocab, state.sampling,
                                       state.generator)
            tokens.append(tok)
            probs.append(prob)
            if j + 1 < k:  # the next position, from the draft's own predicted feature
                if self.ngram:
                    lookup = self.peek(chains, tok.tolist(), tok.device)
                keys = self.slots.append(len(tok), 1, None, tok.device)
                h = self.eagle(h, tok[:, None], cache=self.slots.cache, position_ids=(state.seq_len - 1 + j)[:, None],
                               attention_mask=keys, lookup=None if lookup is None else (lookup[0][:, None],
                                                                                        lookup[1][:, None]))
        self.fed = (self.fed[0], k - 1)
        q = torch.stack(probs, 1) if state.sampling is not None else None  # [B, k, V]
        return Proposal(torch.stack(tokens, 1), q, torch.full_like(state.seq_len, k), k)

    def peek(self, chains: list[list[int]], drafted: list[int], device) -> tuple[torch.Tensor, torch.Tensor]:
        """Extend each row's chain by its drafted token; the match of row text + chain, [B] each."""
        for chain, tok in zip(chains, drafted):
            chain.append(tok)
        table = torch.tensor([ix.peek(c) for ix, c in zip(self.index, chains)], dtype=torch.long, device=device)
        return table[:, 0], table[:, 1]

    def propose_tree(self, state, h_root: torch.Tensor, shape: TreeShape) -> Proposal:
        """Greedy static tree: the top-b tokens of each node's predicted feature, one draft forward per
        depth (each node's slot sees the cache and its ancestors' slots only)."""
        head_ids, batch, device = self.eagle.head_ids, len(h_root), h_root.device
        base = self.slots.length  # slots before the tree's
        tokens = torch.zeros(batch, shape.size, dtype=torch.long, device=device)
        slot_of: dict[int, int] = {}  # chunk index of a node -> its slot (nodes whose children are drafted)
        feats = {0: h_root[:, 0]}  # chunk index -> predicted feature at its position [B, d]
        lookups = {0: self.last_lookup}  # chunk index -> the match fed with its token [B] each (lookup drafts)
        paths = {0: [[] for _ in range(batch)]}  # chunk index -> per row its tokens after the root
        forwards = 1
        for depth, level in enumerate(shape.levels):
            parents = sorted({shape.parents[c - 1] for c in level})
            for parent in parents:
                kids = [c for c in level if shape.parents[c - 1] == parent]
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
            start = self.slots.length
            self.slots.append(batch, len(level), None, device)
            for i, c in enumerate(level):
                slot_of[c] = start + i
            mask = self.slots.mask[:, None, None, :].expand(batch, 1, len(level), self.slots.length).clone() \
                if self.slots.mask is not None else torch.ones(batch, 1, len(level), self.slots.length,
                                                               dtype=torch.bool, device=device)
            mask[..., base:] = False
            for i, c in enumerate(level):  # a node sees its own slot and its ancestors' slots
                node = c
                while node in slot_of:
                    mask[:, 0, i, slot_of[node]] = True
                    node = shape.parents[node - 1]
            positions = (state.seq_len - 1 + depth)[:, None].expand(batch, len(level))  # the parent's position
            out = self.eagle(parent_feats, ids, cache=self.slots.cache, position_ids=positions, attention_mask=mask,
                             lookup=lookup)
            feats.update({c: out[:, i] for i, c in enumerate(level)})
            forwards += 1
        self.fed = (self.fed[0], self.slots.length - base)
        return Proposal(tokens, None, torch.full_like(state.seq_len, shape.depth), forwards, shape)

    def tree_matches(self, shape: TreeShape, level: list[int], ids: torch.Tensor, paths: dict):
        """The match of row text + each node's path (its ancestors, then itself) for a level's nodes
        ``ids`` [B, n]; records the paths in ``paths`` for the next level. (candidates, lengths) [B, n]."""
        rows = ids.tolist()
        for i, c in enumerate(level):
            paths[c] = [path + [row[i]] for path, row in zip(paths[shape.parents[c - 1]], rows)]
        return pad_matches([[ix.peek(paths[c][b]) for c in level] for b, ix in enumerate(self.index)], len(level),
                           ids.device)

    def commit(self, state: DecodeState, step: Step) -> None:
        """Drop what was drafted from predicted features; the verified positions become pending."""
        new = [(state.features[i, : n + 1], torch.tensor(e, device=state.features.device))
               for i, (n, e) in enumerate(zip(step.accepted, step.emitted))]
        matches = [ix.extend(e) for ix, e in zip(self.index, step.emitted)] if self.ngram else []
        if self.fed is None:  # no forward this step: more to catch up on
            self.pending = [(torch.cat([f, nf]), torch.cat([t, nt])) for (f, t), (nf, nt) in zip(self.pending, new)]
            self.pending_matches = [old + m for old, m in zip(self.pending_matches, matches)]
            return
        width, drafted = self.fed
        self.slots.rollback([width] * len(new), width + drafted)
        self.pending, self.pending_matches, self.fed = new, matches, None

    @torch.inference_mode()
    def trace(self, context, generated, cap, features=None):
        """Greedy chains from every start, as the loop drafts them, in ``min(cap, L)`` passes.

        ``features`` [S + L - 1, d]: the verifier's features of prompt + generated but the last token.
        Pass 1 feeds every true pair (f_p, x_{p+1}) causally: its output at p is the first draft of
        the chain whose last emitted token sits at p + 1. Pass r feeds each chain's own previous
        prediction, seeing the true entries before its start and its own earlier entries (a 4D mask
        over one growing cache), exactly the entries the loop's draft cache would hold. A lookup draft
        reads, with a true token, the match of the text up to it; with a drafted one, that of the text
        before the chain plus the chain so far."""
        from transformers import DynamicCache

        full = torch.tensor(context + generated, device=features.device)  # [S + L]
        width, start = len(full) - 1, len(context) - 1  # true pairs; chain j's catch-up entry sits at start + j - 1
        cache = DynamicCache(config=self.eagle.config.llama_config())
        lookup = None
        if self.ngram:
            candidates, lengths = all_matches(context + generated, self.ngram)
            lookup = (torch.tensor(candidates[1:], device=full.device)[None],
                      torch.tensor(lengths[1:], device=full.device)[None])  # [1, W] each
        h = self.eagle(features[None], full[None, 1:], cache=cache, lookup=lookup)[0]  # [W, d]: pass 1, causal
        chains = torch.arange(start, start + len(generated) - 1, device=full.device)  # catch-up entry, j = 1..L-1
        lookup = None if lookup is None else (lookup[0][0, chains], lookup[1][0, chains])  # [C] each
        h, tokens = h[chains], [self.eagle.tokens(h[chains], lookup)]  # [C, d], drafts 1 of each chain
        slot = width
        for r in range(2, min(cap, len(generated)) + 1):
            count = len(chains)
            mask = torch.zeros(1, 1, count, slot + count, dtype=torch.bool, device=full.device)
            mask[0, 0, :, :width] = torch.arange(width, device=full.device)[None, :] <= chains[:, None]
            for past in range(width, slot + count, count):  # this chain's entries of passes 2..r
                mask[0, 0, torch.arange(count), past + torch.arange(count)] = True
            positions = (chains + r - 1)[None]  # pass r feeds position start + j + r - 2
            if self.ngram:
                lookup = self.chain_matches(context + generated, start + 2, torch.stack(tokens, 1))  # [C] each
            h = self.eagle(h[None], tokens[-1][None], cache=cache, position_ids=positions, attention_mask=mask,
                           lookup=None if lookup is None else (lookup[0][None], lookup[1][None]))[0]
            tokens.append(self.eagle.tokens(h, lookup))
            slot += count
        drafts = torch.stack(tokens, 1).tolist()  # [C, R]: chain j's drafts for generated[j], generated[j + 1], ...
        runs = [0]
        for j, row in enumerate(drafts, start=1):
            future = generated[j:j + len(row)]
            runs.append(next((i for i, (a, b) in enumerate(zip(row, future)) if a != b), min(len(row), len(future))))
        return runs, None

    def chain_matches(self, text: list[int], first: int, drafts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """For ``trace``: the match of ``text[:first + c]`` + chain c's drafts so far ``drafts`` [C, r],
        for every chain c, from one index grown along the text. (candidates, lengths) [C] each."""
        index = MatchIndex(self.ngram)
        index.extend(text[:first])
        matches = []
        for c, row in enumerate(drafts.tolist()):
            if c:
                index.append(text[first + c - 1])
            matches.append(index.peek(row))
        table = torch.tensor(matches, dtype=torch.long, device=drafts.device)
        return table[:, 0], table[:, 1]


class MedusaDrafter:
    """Medusa heads (``specnb.models.medusa.MedusaHeads``): head k reads the verifier's feature at the
    newest verified position and proposes the token k + 1 ahead; no draft forward, no cache."""

    kind = "medusa"
    needs_features = True
    trees = True
    forward_tokens = ()
    pricing = "per_token"  # no forward: the heads' host time per drafted token (specnb.predict.costs)
    catch_up = "tokens"

    def __init__(self, heads, vocab_size: int | None = None):
        self.heads, self.model = heads, heads
        self.feature: torch.Tensor | None = None  # [B, d]

    def begin(self, state, input_ids, attention_mask) -> int:
        self.feature = state.features[:, -1]
        return 0

    def propose(self, state: DecodeState, k: int, tree: TreeShape | None = None) -> Proposal:
        k = min(k, self.heads.config.num_heads)
        if tree is not None:
            return self.propose_tree(tree.cut(k))
        states = self.heads(self.feature)[:, :k]  # [B, k, d]
        picks = [pick_from_head(self.heads.logits(states[:, j]), self.heads.head_ids, state.vocab, state.sampling,
                                state.generator) for j in range(k)]
        q = torch.stack([p for _, p in picks], 1) if state.sampling is not None else None
        return Proposal(torch.stack([t for t, _ in picks], 1), q, torch.full_like(state.seq_len, k), 0)

    def propose_tree(self, shape: TreeShape) -> Proposal:
        """Every node at depth d gets the same children: head d + 1's top-b tokens (the heads do not
        see which parent was chosen)."""
        states = self.heads(self.feature)  # [B, K, d]
        tokens = torch.zeros(len(states), shape.size, dtype=torch.long, device=states.device)
        for depth, level in enumerate(shape.levels):
            top = top_from_head(self.heads.logits(states[:, depth]), self.heads.head_ids, shape.branching[depth])
            tokens[:, [c - 1 for c in level]] = top.repeat(1, len(level) // shape.branching[depth])
        return Proposal(tokens, None, torch.full((len(states),), shape.depth, device=states.device), 0, shape)

    def commit(self, state: DecodeState, step: Step) -> None:
        index = torch.tensor(step.accepted, device=state.features.device)  # the newest kept position per row
        self.feature = state.features[torch.arange(len(index)), index]

    @torch.inference_mode()
    def trace(self, context, generated, cap, features=None):
        """Every start at once: the heads on the verifier's feature that produced each emitted token
        propose the next ``K`` tokens; ``features`` as for ``EagleDrafter.trace``."""
        heads = self.heads.config.num_heads
        start = len(context) - 1  # the feature that produced generated[0]
        states = self.heads(features[start:])  # [L, K, d]: row j proposes generated[j + 1 ..]
        drafts = torch.stack([self.heads.to_tokens(self.heads.logits(states[:, k]).argmax(-1)) for k in range(heads)],
                             1).tolist()  # [L, K]
        runs = [0]
        for j in range(1, len(generated)):
            row, future = drafts[j - 1], generated[j:j + heads]
            runs.append(next((i for i, (a, b) in enumerate(zip(row, future)) if a != b), min(len(row), len(future))))
        return runs, [0] + [heads] * (len(generated) - 1)
