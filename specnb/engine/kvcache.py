"""KV caches for the decoding loops: crop to roll back, and a slot mask for ragged batches.

transformers 5.x ``DynamicCache.crop`` takes a *negative* count of tokens to drop (a positive
value is the legacy "final length" form and raises), so rollbacks go through ``crop_cache``.
A ``ModelKV`` pairs a model with its cache and a 2D mask over cache slots: rows of a batch
reject different numbers of draft tokens, and the slots a row rejected but others kept become
holes (mask 0) rather than forcing a rebuild. See ``specnb.engine.generate`` for the batch design.
"""

from __future__ import annotations

import inspect

import torch


def crop_cache(cache, n_drop: int) -> None:
    """Drop the last ``n_drop`` slots of every layer (transformers 5.x ``crop`` takes a negative count)."""
    if n_drop > 0:
        cache.crop(-n_drop)


def forward_arguments(model) -> tuple[str, bool]:
    """(name of the cache argument, whether ``logits_to_keep`` is accepted) of ``model.forward``:
    transformers >= 5.x names the cache ``cache``, earlier 5.x ``past_key_values``; remote-code
    models may not take ``logits_to_keep``."""
    params = inspect.signature(model.forward).parameters
    return ("cache" if "cache" in params else "past_key_values"), "logits_to_keep" in params


class ModelKV:
    """A model with its DynamicCache and the 2D slot mask (None while the cache has no holes)."""

    def __init__(self, model, vocab_size: int | None):
        from transformers import DynamicCache

        self.model, self.vocab_size = model, vocab_size
        self.cache = DynamicCache(config=model.config)
        self.cache_arg, self.keeps_logits = forward_arguments(model)
        self.mask: torch.Tensor | None = None  # [B, L] bool, True = a real token
        self.length = 0

    def prefill(self, input_ids, attention_mask=None) -> torch.Tensor:
        """Run the prompt ``input_ids`` [B, S] (left padded); returns logits [B, V] of the last column."""
        if attention_mask is None:
            positions = torch.arange(input_ids.shape[1], device=input_ids.device).expand(input_ids.shape[0], -1)
            return self.forward(input_ids, positions)[:, -1]
        # left padding: real tokens are numbered from 0; pad slots get a dummy position and are masked
        positions = (attention_mask.long().cumsum(1) - 1).masked_fill(attention_mask == 0, 1)
        return self.forward(input_ids, positions, chunk_mask=attention_mask.bool())[:, -1]

    def forward(self, ids, positions, chunk_mask=None, keep: int = 1) -> torch.Tensor:
        """Append ``ids`` [B, T] at ``positions`` [B, T]; return logits [B, keep, V] of the last columns."""
        batch, width = ids.shape
        if chunk_mask is not None or self.mask is not None:
            if self.mask is None:
                self.mask = torch.ones(batch, self.length, dtype=torch.bool, device=ids.device)
            new = chunk_mask if chunk_mask is not None else torch.ones_like(ids, dtype=torch.bool)
            self.mask = torch.cat([self.mask, new.bool()], dim=1)
        kwargs = {self.cache_arg: self.cache}
        if self.keeps_logits:
            kwargs["logits_to_keep"] = keep
        out = self.model(input_ids=ids, position_ids=positions, attention_mask=self.mask, use_cache=True, **kwargs)
        self.length += width
        logits = out.logits[:, -keep:]  # [B, keep, V]
        return logits[..., : self.vocab_size] if self.vocab_size else logits

    def rollback(self, keep: list[int], appended: int) -> None:
        """Of the last ``appended`` slots row i keeps the first ``keep[i]``: crop the common tail, mask the rest."""
        top = max(keep)
        crop_cache(self.cache, appended - top)
        self.length -= appended - top
        if self.mask is not None:
            self.mask = self.mask[:, : self.length]
        if min(keep) == top:
            return
        device = self.cache.layers[0].keys.device
        if self.mask is None:
            self.mask = torch.ones(len(keep), self.length, dtype=torch.bool, device=device)
        tail = torch.tensor([top - k for k in keep], device=device)  # [B] rejected slots per row
        cols = torch.arange(self.length, device=device)  # [L]
        self.mask = self.mask & (cols[None, :] < (self.length - tail)[:, None])
