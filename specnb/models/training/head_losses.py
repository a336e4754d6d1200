"""What an EAGLE draft and Medusa heads are trained to do, on batches of ``head_corpus`` sequences.

The teacher is the frozen verifier itself: its next-token distribution at position t is its lm_head
(trimmed to the head's vocabulary) applied to the stored feature f_t, so nothing but features is kept.

* EAGLE (Li et al. 2024): input (f_t + U(-noise, noise), x_{t+1}) at position t predicts f^_{t+1};
  loss ``w_reg * SmoothL1(f^_{t+1}, f_{t+1}) + w_cls * CE(softmax(head(f_{t+1})), log_softmax(head(f^_{t+1})))``.
  The uniform noise makes the draft robust to its own imprecise features at decoding time.
* EAGLE-3 (Li et al. 2025): the input is the verifier's fused low/mid/high layers, and the draft is
  unrolled on its own outputs during training ("training-time test", ``eagle3_loss``).
* Medusa (Cai et al. 2024): head k on f_t, ``CE(softmax(head(f_{t+k})), log_softmax(head_k(f_t)))``:
  the verifier's own distribution for x_{t+k+1}, summed over heads.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from specnb.models.lookup import all_matches


@dataclass(kw_only=True)
class HeadBatch:
    """Right-padded tensors for B sequences of at most T positions."""

    feats: torch.Tensor  # [B, T, d] fp32
    fused: torch.Tensor | None  # [B, T, k*d] fp32: the verifier's layer outputs an EAGLE-3 draft reads
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
    fused = torch.zeros(batch, width, seqs[0].fused.shape[1]) if getattr(seqs[0], "fused", None) is not None else None
    ids = torch.zeros(batch, width + 1, dtype=torch.long)
    weight = torch.zeros(batch, width)
    cand = torch.full((batch, width + 1), -1, dtype=torch.long) if lookups else None
    length = torch.zeros(batch, width + 1, dtype=torch.long) if lookups else None
    for b, s in enumerate(seqs):
        n, m = len(s.feats), min(len(s.ids), width + 1)
        feats[b, :n] = s.feats.float()
        if fused is not None:
            fused[b, :n] = s.fused.float()
        ids[b, :m] = s.ids[:m].long()
        t = torch.arange(n)
        weight[b, :n] = (t + 1 >= s.loss_from).float()  # position t predicts x_{t+1} onwards
        if lookups:
            cand[b, :m], length[b, :m] = (x[:m] for x in lookups[b])
    return HeadBatch(feats=feats, fused=fused, ids=ids, weight=weight, lookup=(cand, length) if lookups else None)


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


def ttt_mask(chains: int, depth: int, device=None) -> torch.Tensor:
    """Boolean mask [1, 1, C, (depth+1)*C] of unroll ``depth`` >= 1 over one cache holding every
    earlier unroll's C entries: chain a sees the true entries at positions <= a and its own entries
    of unrolls 1..depth, exactly what the draft cache holds while it drafts token depth+1 of a chain."""
    a = torch.arange(chains, device=device)
    mask = torch.zeros(chains, (depth + 1) * chains, dtype=torch.bool, device=device)
    mask[:, :chains] = a[None, :] <= a[:, None]
    for r in range(1, depth + 1):
        mask[a, r * chains + a] = True
    return mask[None, None]


def ttt_unroll(draft, first: torch.Tensor, ids: torch.Tensor, steps: int, lookup=None):
    """Yield (s, h [B, C, d]) for unrolls s = 0..steps-1 of the draft over chains a = 0..C-1.

    ``first`` [B, C, k*d or d]: the true input feature at each position a; ``ids`` [B, >= C+steps]:
    the tokens (x_0, x_1, ...); ``lookup``: their prompt-lookup matches, same shape. Unroll 0 is the
    causal pass over (F_a, x_{a+1}); unroll s feeds each chain its own unroll s-1 output with the true
    token x_{a+s+1} at position a+s, over one cache holding every earlier unroll (``ttt_mask``).
    """
    from transformers import DynamicCache

    rows, chains = first.shape[:2]
    anchors = torch.arange(chains, device=first.device)
    cache = DynamicCache(config=draft.config.llama_config())
    h = first
    for s in range(steps):
        tokens = ids[:, anchors + s + 1]  # x_{a+s+1}: [B, C]
        matched = None if lookup is None else tuple(x[:, anchors + s + 1] for x in lookup)
        h = draft(h, tokens, cache=cache, position_ids=(anchors + s)[None].expand(rows, -1),
                  attention_mask=ttt_mask(chains, s, first.device) if s else None, lookup=matched)  # [B, C, d]
        yield s, h, matched


def eagle3_loss(draft, batch: HeadBatch, cfg, gen: torch.Generator) -> tuple[torch.Tensor, dict]:
    """Training-time test (EAGLE-3, Li et al. 2025): ``cfg.ttt_steps`` unrolls (``ttt_unroll``), so the
    draft trains on the inputs it gets at decoding steps 2, 3, ...: its own output, and a cache of true
    entries before the chain plus its own. Unroll s at chain a is scored like the draft token it makes:
    soft CE against the verifier's distribution at a+s+1, weighted ``ttt_decay**s`` (EAGLE-3's 0.8),
    plus ``w_reg`` smooth-L1 to the verifier's feature there (0: EAGLE-3 drops the regression).
    """
    width = batch.feats.shape[1]
    chains = width - 1  # anchors a = 0..T-2 (input x_{a+1} exists, f_{a+1} is a target)
    anchors = torch.arange(chains)
    with torch.no_grad():
        teacher = batch.feats @ draft.teacher_weight.T  # [B, T, N]: the verifier's logits for x_{p+1}
    first = (batch.fused if draft.config.feature_layers else batch.feats)[:, :chains]  # [B, C, k*d or d]
    ids = nn.functional.pad(batch.ids, (0, cfg.ttt_steps))  # room for the last unrolls' (masked) tokens
    lookup = None if batch.lookup is None else tuple(nn.functional.pad(x, (0, cfg.ttt_steps), value=v)
                                                      for x, v in zip(batch.lookup, (-1, 0)))
    total, stats = 0.0, {}
    for s, h, matched in ttt_unroll(draft, first, ids, cfg.ttt_steps, lookup):
        target = (anchors + s + 1).clamp(max=width - 1)  # [C]: the position whose next token unroll s predicts
        w = batch.weight[:, (anchors + s).clamp(max=width - 1)] * (batch.weight[:, target] > 0)  # [B, C]
        w = w * (anchors + s + 1 < width)
        logits = draft.logits(h, matched)  # [B, C, N]
        loss = masked_mean(soft_ce(teacher[:, target], logits), w)
        if cfg.w_reg:
            reg = masked_mean(nn.functional.smooth_l1_loss(h, batch.feats[:, target], reduction="none").mean(-1), w)
            loss = loss + cfg.w_reg * reg
        total = total + cfg.ttt_decay ** s * loss
        stats[f"ce{s}"] = loss.item()
        stats[f"acc{s}"] = agreement(logits, teacher[:, target].argmax(-1), w).item()
    return total, stats


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
