"""What an EAGLE draft and Medusa heads are trained to do, on batches of ``head_corpus`` sequences.

The teacher is the frozen verifier itself: its next-token distribution at position t is its lm_head
(trimmed to the head's vocabulary) applied to the stored feature f_t, so nothing but features is kept.

* EAGLE (Li et al. 2024): input (f_t + U(-noise, noise), x_{t+1}) at position t predicts f^_{t+1};
  loss ``w_reg * SmoothL1(f^_{t+1}, f_{t+1}) + w_cls * CE(softmax(head(f_{t+1})), log_softmax(head(f^_{t+1})))``.
  The uniform noise makes the draft robust to its own imprecise features at decoding time.
* Medusa (Cai et al. 2024): head k on f_t, ``CE(softmax(head(f_{t+k})), log_softmax(head_k(f_t)))``:
  the verifier's own distribution for x_{t+k+1}, summed over heads.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from specnb.models.lookup import all_matches


@dataclass
class HeadBatch:
    """Right-padded tensors for B sequences of at most T positions."""

    feats: torch.Tensor  # [B, T, d] fp32
    ids: torch.Tensor  # [B, T+1] int64
    weight: torch.Tensor  # [B, T]: 1 where position t's targets count, 0 in the system prompt and padding
    lookup: tuple[torch.Tensor, torch.Tensor] | None  # prompt-lookup (candidates, lengths) [B, T+1] per token


def lookup_of(ids: torch.Tensor, max_ngram: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The prompt-lookup match of every token of a sequence: (candidates [L] (-1: none), lengths [L])."""
    candidates, lengths = all_matches(ids.tolist(), max_ngram)
    return torch.tensor(candidates), torch.tensor(lengths)


def collate(seqs: list, lookups: list | None) -> HeadBatch:
    """One batch from ``FeatureSeq``s (and their ``lookup_of``, when the draft reads it)."""
    width = max(len(s.feats) for s in seqs)
    batch, d = len(seqs), seqs[0].feats.shape[1]
    feats = torch.zeros(batch, width, d)
    ids = torch.zeros(batch, width + 1, dtype=torch.long)
    weight = torch.zeros(batch, width)
    cand = torch.full((batch, width + 1), -1, dtype=torch.long) if lookups else None
    length = torch.zeros(batch, width + 1, dtype=torch.long) if lookups else None
    for b, s in enumerate(seqs):
        n, m = len(s.feats), min(len(s.ids), width + 1)
        feats[b, :n] = s.feats.float()
        ids[b, :m] = s.ids[:m].long()
        t = torch.arange(n)
        weight[b, :n] = (t + 1 >= s.loss_from).float()  # position t predicts x_{t+1} onwards
        if lookups:
            cand[b, :m], length[b, :m] = (x[:m] for x in lookups[b])
    return HeadBatch(feats, ids, weight, (cand, length) if lookups else None)


def soft_ce(target_logits: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of softmax(target) against log_softmax(logits), per position [...]."""
    return -(torch.softmax(target_logits, -1) * torch.log_softmax(logits, -1)).sum(-1)


def masked_mean(values: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return (values * weight).sum() / weight.sum().clamp_min(1.0)


def agreement(logits: torch.Tensor, target: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Share of weighted positions where the head's argmax is the verifier's."""
    return masked_mean((logits.argmax(-1) == target).float(), (weight > 0).float())


def eagle_loss(draft, batch: HeadBatch, cfg, gen: torch.Generator) -> tuple[torch.Tensor, dict]:
    """Feature regression + soft CE against the verifier, for every position t -> t+1 of the batch."""
    rows, width, _ = batch.feats.shape
    inp_f, target = batch.feats[:, :-1], batch.feats[:, 1:]  # f_t, f_{t+1}: [B, T-1, d]
    inp_x = batch.ids[:, 1:width]  # x_{t+1}: [B, T-1]
    lookup = tuple(x[:, 1:width] for x in batch.lookup) if batch.lookup is not None else None  # match of x_{t+1}
    w = batch.weight[:, :-1] * (batch.weight[:, 1:] > 0)  # [B, T-1]: both ends real
    with torch.no_grad():
        target_logits = target @ draft.head_weight.T  # [B, T-1, N]: the verifier's own logits
    noise = (torch.rand(inp_f.shape, generator=gen) * 2 - 1) * cfg.noise if cfg.noise else 0.0
    embeds = nn.functional.embedding(inp_x, draft.embed_weight)  # [B, T-1, d]
    positions = torch.arange(width - 1)[None].expand(rows, -1)  # [B, T-1]
    pred = draft(inp_f + noise, inp_x, position_ids=positions, embeds=embeds, lookup=lookup)  # [B, T-1, d]
    reg = masked_mean(nn.functional.smooth_l1_loss(pred, target, reduction="none").mean(-1), w)
    logits = draft.logits(pred, lookup)  # [B, T-1, N]
    cls = masked_mean(soft_ce(target_logits, logits), w)
    stats = {"reg": reg.item(), "cls": cls.item(), "acc": agreement(logits, target_logits.argmax(-1), w).item()}
    return cfg.w_reg * reg + cfg.w_cls * cls, stats


def medusa_loss(heads, batch: HeadBatch, cfg, gen: torch.Generator) -> tuple[torch.Tensor, dict]:
    """Soft CE of head k at position t against the verifier's distribution at t+k, summed over k."""
    width = batch.feats.shape[1]
    with torch.no_grad():
        teacher = batch.feats @ heads.head_weight.T  # [B, T, N]: the verifier's distribution for x_{t+1}
    all_logits = heads.logits(heads(batch.feats[:, :width - 1]))  # [B, T-1, K, N]
    total, stats = 0.0, {}
    for k in range(1, heads.config.num_heads + 1):
        if width - k <= 0:
            continue
        w = batch.weight[:, :width - k] * (batch.weight[:, k:] > 0)  # [B, T-k]
        logits = all_logits[:, :width - k, k - 1]  # [B, T-k, N]
        ce = masked_mean(soft_ce(teacher[:, k:], logits), w)
        total = total + ce
        stats[f"ce{k}"], stats[f"acc{k}"] = ce.item(), agreement(logits, teacher[:, k:].argmax(-1), w).item()
    return total, stats
