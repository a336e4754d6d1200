"""Drafts that propose from tokens alone: a causal LM with its own KV cache (distilled drafts, early
exits, hub models) and prompt lookup (no forward at all)."""

from __future__ import annotations

import torch

from specnb.core.padding import left_pad
from specnb.core.sampling import pick_token
from specnb.decode.confidence import ChainStop
from specnb.decode.kvcache import ModelKV
from specnb.decode.state import Proposal, Step
from specnb.decode.trees import TreeShape


class ModelDrafter:
    """A causal LM drafting autoregressively with its own KV cache.

    Each step it first catches up on the tokens its cache has not seen (1 per row, or 2 after a
    step that accepted every draft: the last draft and the bonus token; more after skipped steps),
    left padded into one chunk, then runs k − 1 more one-token forwards, fewer when every row stops
    early (``specnb.decode.confidence``)."""

    needs_features = False
    feature_layers = ()
    trees = False

    def __init__(self, model, vocab_size: int | None = None):
        self.model, self.vocab_size = model, vocab_size
        self.kind = getattr(model, "draft_kind", "model")  # "exit" for an early exit
        self.kv: ModelKV | None = None
        self.pending: list[list[int]] = []  # per row: tokens the draft cache has not seen

    def begin(self, state, input_ids, attention_mask) -> int:
        self.kv = ModelKV(self.model, self.vocab_size)
        self.kv.prefill(input_ids, attention_mask)
        self.pending = [[t] for t in state.last.tolist()]
        return 1

    def propose(self, state, k: int, tree=None) -> Proposal:
        device = state.seq_len.device
        chunk, chunk_mask = left_pad([torch.tensor(p, device=device) for p in self.pending])  # [B, w]
        width = chunk.shape[1]
        positions = (state.seq_len[:, None] - width + torch.arange(width, device=device)).clamp_min(0)  # [B, w]
        logits = self.kv.forward(chunk, positions, chunk_mask)[:, -1]  # [B, V]
        tokens, probs, stop = [], [], ChainStop(state.confidence, state.rows.done, device)
        for j in range(k):
            if j:
                logits = self.kv.forward(tokens[-1][:, None], (state.seq_len + j - 1)[:, None])[:, -1]
            tok, prob = pick_token(logits, state.sampling, state.generator)
            tokens.append(tok)
            probs.append(prob)
            stop.add(logits)
            if stop.done():  # every row is unsure: no more forwards this step
                break
        m = len(tokens)  # chain positions drafted (< k when every row stopped early)
        q = torch.stack(probs, 1) if state.sampling is not None else None  # [B, m, V]
        return Proposal(tokens=torch.stack(tokens, 1), tree=TreeShape.of_chain(m), n_drafted=stop.counts,
                        forwards=m, q=q, fed=width, slots=width + m - 1)

    def commit(self, state, proposal: Proposal, step: Step) -> None:
        if not proposal.fed:  # no forward this step (k = 0): one more token to catch up on
            self.pending = [p + e[-1:] for p, e in zip(self.pending, step.emitted)]
            return
        # the cache saw the catch-up chunk and drafts 1..k-1; a row keeps the ones it accepted
        drafts_cached = proposal.slots - proposal.fed
        self.kv.rollback([proposal.fed + min(n, drafts_cached) for n in step.accepted], proposal.slots)
        # all k accepted: the k-th draft never went through the draft, nor did the bonus token
        k = proposal.tree.depth
        self.pending = [e[-2:] if n == k else e[-1:] for n, e in zip(step.accepted, step.emitted)]


class LookupDrafter:
    """Prompt lookup (``specnb.models.lookup.PromptLookup``) as a draft: it copies from each row's
    prompt and output, runs no forward, and is deterministic, so its q is one-hot on the proposal
    (zero on padded positions), which keeps rejection sampling lossless. It has no probability to be
    unsure with, so it ignores a confidence threshold: a match is proposed whole or not at all."""

    kind = "lookup"
    needs_features = False
    feature_layers = ()
    trees = False

    def __init__(self, lookup, vocab_size: int | None = None):
        self.lookup = lookup

    def begin(self, state, input_ids, attention_mask) -> int:
        return 0

    def propose(self, state, k: int, tree=None) -> Proposal:
        device = state.seq_len.device
        proposals = [[] if done else self.lookup.propose(state.text(i), k) for i, done in enumerate(state.rows.done)]
        width = max(map(len, proposals))
        tokens = torch.tensor([p + [0] * (width - len(p)) for p in proposals], dtype=torch.long, device=device)
        n_drafted = torch.tensor([len(p) for p in proposals], device=device)
        q = None
        if state.sampling is not None and width:
            valid = torch.arange(width, device=device)[None, :] < n_drafted[:, None]  # [B, k']
            q = torch.nn.functional.one_hot(tokens, state.vocab).float() * valid[..., None]
        return Proposal(tokens=tokens, tree=TreeShape.of_chain(width), n_drafted=n_drafted, forwards=0, q=q)

    def commit(self, state, proposal: Proposal, step: Step) -> None:
        pass
