"""Drafts that propose from tokens alone: a causal LM with its own KV cache (distilled drafts, early
exits, hub models) and prompt lookup (no forward at all)."""

from __future__ import annotations

import torch

from specnb.engine.kvcache import ModelKV
from specnb.engine.sampling import pick_token
from specnb.engine.state import Proposal, Step, runs_from_matches


class ModelDrafter:
    """A causal LM drafting autoregressively with its own KV cache.

    Each step it first catches up on the tokens its cache has not seen (1 per row, or 2 after a
    step that accepted every draft: the last draft and the bonus token; more after skipped steps),
    left padded into one chunk, then runs k − 1 more one-token forwards."""

    forward_tokens = (1, 2)  # the shapes it runs: one token, or the two-token catch-up
    needs_features = False
    trees = False
    pricing = "forwards"  # the predictor prices its forwards (specnb.predict.costs)
    catch_up = "tokens"  # a step's first forward feeds 1 token, or 2 after a step that accepted every draft

    def __init__(self, model, vocab_size: int | None = None):
        self.model, self.vocab_size = model, vocab_size
        self.kind = getattr(model, "draft_kind", "model")  # "exit" for an early exit
        self.kv: ModelKV | None = None
        self.pending: list[list[int]] = []  # per row: tokens the draft cache has not seen
        self.fed: tuple[int, int] | None = None  # (catch-up width, k) of this step's forwards

    def begin(self, state, input_ids, attention_mask) -> int:
        self.kv = ModelKV(self.model, self.vocab_size)
        self.kv.prefill(input_ids, attention_mask)
        self.pending = [[t] for t in state.last.tolist()]
        return 1

    def propose(self, state, k: int, tree=None) -> Proposal:
        device = state.seq_len.device
        width = max(map(len, self.pending))
        chunk = torch.tensor([[0] * (width - len(p)) + p for p in self.pending], device=device)  # [B, w]
        chunk_mask = None
        if min(map(len, self.pending)) < width:
            chunk_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in self.pending], device=device)
        positions = (state.seq_len[:, None] - width + torch.arange(width, device=device)).clamp_min(0)  # [B, w]
        logits = self.kv.forward(chunk, positions, chunk_mask)[:, -1]  # [B, V]
        tokens, probs = [], []
        for j in range(k):
            if j:
                logits = self.kv.forward(tokens[-1][:, None], (state.seq_len + j - 1)[:, None])[:, -1]
            tok, prob = pick_token(logits, state.sampling, state.generator)
            tokens.append(tok)
            probs.append(prob)
        self.fed = (width, k)
        q = torch.stack(probs, 1) if state.sampling is not None else None  # [B, k, V]
        return Proposal(torch.stack(tokens, 1), q, torch.full_like(state.seq_len, k), k)

    def commit(self, state, step: Step) -> None:
        if self.fed is None:  # no forward this step (k = 0): one more token to catch up on
            self.pending = [p + e[-1:] for p, e in zip(self.pending, step.emitted)]
            return
        width, k = self.fed
        # the cache saw the catch-up chunk and drafts 1..k-1; a row keeps the ones it accepted
        self.kv.rollback([width + min(n, k - 1) for n in step.kept], width + k - 1)
        # all k accepted: the k-th draft never went through the draft, nor did the bonus token
        self.pending = [e[-2:] if n == k else e[-1:] for n, e in zip(step.accepted, step.emitted)]
        self.fed = None

    def trace(self, context, generated, cap, features=None):
        """Teacher-forced: one forward over prompt + generated text gives the draft's greedy guess
        at every position given the verifier's prefix, which is what a chain step would draft."""
        device = next(self.model.parameters()).device
        ids = torch.tensor([context + generated[:-1]], device=device)  # [1, S + L - 1]
        with torch.inference_mode():
            logits = self.model(input_ids=ids).logits[0, len(context) - 1:]  # [L, V]: guesses for generated[0..L-1]
        if self.vocab_size:
            logits = logits[:, : self.vocab_size]
        matches = (logits.argmax(-1).cpu() == torch.tensor(generated)).tolist()
        return runs_from_matches(matches, len(generated)), None


class LookupDrafter:
    """Prompt lookup (``specnb.models.lookup.PromptLookup``) as a draft: it copies from each row's
    prompt and output, runs no forward, and is deterministic, so its q is one-hot on the proposal
    (zero on padded positions), which keeps rejection sampling lossless."""

    kind = "lookup"
    forward_tokens = ()
    needs_features = False
    trees = False
    pricing = "per_step"  # no forward: the host time to propose, per step
    catch_up = "tokens"

    def __init__(self, lookup, vocab_size: int | None = None):
        self.lookup, self.model = lookup, None  # no module: nothing to time

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
        return Proposal(tokens, q, n_drafted, 0)

    def commit(self, state, step: Step) -> None:
        pass

    def trace(self, context, generated, cap, features=None):
        """What the lookup would propose after every generated token, and how much of it matches
        what the verifier went on to generate (j = 0, the prefill's token, starts no step)."""
        runs, proposed = [0], [0]
        for j in range(1, len(generated)):
            proposal = self.lookup.propose(context + generated[:j], cap)
            future = generated[j : j + len(proposal)]
            agree = next(
                (i for i, (a, b) in enumerate(zip(proposal, future)) if a != b), min(len(proposal), len(future))
            )
            runs.append(agree)
            proposed.append(len(proposal))
        return runs, proposed
