"""KV caches for the decoding loops: crop to roll back, a slot mask for ragged batches, trees.

transformers 5.x ``DynamicCache.crop`` takes a *negative* count of tokens to drop (a positive
value is the legacy "final length" form and raises), so rollbacks go through ``crop_cache``.
A ``SlotCache`` is a cache plus a 2D mask over its slots: rows of a batch reject different numbers
of draft tokens, and the slots a row rejected but others kept become holes (mask 0) rather than
forcing a rebuild. See ``specnb.decode.generate`` for the batch design.

Trees: a chunk of draft candidates verified in one forward attends to the cache and to its own
ancestors only, through a 4D mask ``[B, 1, T, L + T]`` (transformers uses a 4D mask as given);
afterwards ``select`` moves the slots of the accepted path to the front of the chunk, so the cache
looks as if that path alone had been verified. ``ModelKV`` is a causal LM with its ``SlotCache``.
"""

from __future__ import annotations

import inspect

import torch

from specnb.models.features import capture_hidden


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


class SlotCache:
    """A ``DynamicCache`` and its 2D slot mask (None while the cache has no holes)."""

    def __init__(self, config):
        from transformers import DynamicCache

        self.cache = DynamicCache(config=config)
        self.mask: torch.Tensor | None = None  # [B, L] bool, True = a real token
        self.length = 0

    def append(self, batch: int, width: int, chunk_mask=None, device=None) -> torch.Tensor | None:
        """Account for ``width`` new slots (``chunk_mask`` [B, T]: False = padding); returns the 2D
        mask over every slot a forward should be given, or None while there are no holes."""
        if chunk_mask is not None or self.mask is not None:
            if self.mask is None:
                self.mask = torch.ones(batch, self.length, dtype=torch.bool, device=device)
            new = chunk_mask.bool() if chunk_mask is not None else torch.ones(batch, width, dtype=torch.bool,
                                                                                 device=device)
            self.mask = torch.cat([self.mask, new], dim=1)
        self.length += width
        return self.mask

    def tree_mask(self, batch: int, visible: torch.Tensor, device=None) -> torch.Tensor:
        """The 4D mask of a chunk of tree nodes just appended: every node sees the cache (but its holes)
        before the last W slots, and of those only the ones ``visible`` [T, W] marks (itself and its
        ancestors; W = T for a chunk that is the whole tree). [B, 1, T, L]"""
        width, span = visible.shape
        keys = self.mask if self.mask is not None else torch.ones(batch, self.length, dtype=torch.bool, device=device)
        mask = keys[:, None, None, :].expand(batch, 1, width, self.length).clone()  # [B, 1, T, L]
        mask[..., self.length - span:] &= visible.to(device)[None, None]
        return mask

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

    def select(self, paths: list[list[int]], appended: int) -> None:
        """Row i keeps slots ``paths[i]`` (ascending indices into the last ``appended``): they move to the
        front of that chunk, in order, and the rest is cropped or masked as by ``rollback``. Paths that
        are all prefixes (a chain, or a tree whose rows kept their first slots) need no move."""
        if any(path != list(range(len(path))) for path in paths):
            self.gather(paths, appended)
            appended = max(map(len, paths))
        self.rollback([len(path) for path in paths], appended)

    def gather(self, paths: list[list[int]], appended: int) -> None:
        """Move each row's ``paths`` slots of the last ``appended`` to the front of that chunk; the chunk
        becomes as wide as the longest path (shorter ones repeat their last slot)."""
        width = max(map(len, paths))
        device = self.cache.layers[0].keys.device
        index = torch.tensor([p + p[-1:] * (width - len(p)) for p in paths], device=device)  # [B, m]
        start = self.length - appended
        for layer in self.cache.layers:
            for name in ("keys", "values"):
                full = getattr(layer, name)  # [B, H, L, D]
                heads, dim = full.shape[1], full.shape[3]
                picked = full[:, :, start:].gather(2, index[:, None, :, None].expand(-1, heads, -1, dim))
                setattr(layer, name, torch.cat([full[:, :, :start], picked], dim=2))
        if self.mask is not None:
            self.mask = torch.cat([self.mask[:, :start], self.mask[:, start:].gather(1, index)], dim=1)
        self.length = start + width


class ModelKV(SlotCache):
    """A causal LM with its ``SlotCache``; with ``features``, every forward also keeps the hidden
    states feature drafts such as EAGLE and Medusa read in ``self.features``: ``()`` its final ones,
    a tuple of layer indices those layers' outputs (an EAGLE-3 draft's); None keeps nothing
    (``specnb.models.features.capture_hidden``)."""

    def __init__(self, model, vocab_size: int | None, features: tuple[int, ...] | None = None):
        super().__init__(model.config)
        self.model, self.vocab_size, self.keeps_features = model, vocab_size, features
        self.cache_arg, self.keeps_logits = forward_arguments(model)
        self.features: torch.Tensor | None = None  # [B, T, d] of the last forward, when kept

    def prefill(self, input_ids, attention_mask=None) -> torch.Tensor:
        """Run the prompt ``input_ids`` [B, S] (left padded); returns logits [B, V] of the last column."""
        if attention_mask is None:
            positions = torch.arange(input_ids.shape[1], device=input_ids.device).expand(input_ids.shape[0], -1)
            return self.forward(input_ids, positions)[:, -1]
        # left padding: real tokens are numbered from 0; pad slots get a dummy position and are masked
        positions = (attention_mask.long().cumsum(1) - 1).masked_fill(attention_mask == 0, 1)
        return self.forward(input_ids, positions, chunk_mask=attention_mask.bool())[:, -1]

    def forward(self, ids, positions, chunk_mask=None, keep: int = 1, tree: torch.Tensor | None = None) -> torch.Tensor:
        """Append ``ids`` [B, T] at ``positions`` [B, T]; return logits [B, keep, V] of the last columns.

        ``tree`` [T, T]: the chunk is a tree of candidates (see ``tree_mask``)."""
        batch, width = ids.shape
        mask = self.append(batch, width, chunk_mask, ids.device)
        if tree is not None:
            mask = self.tree_mask(batch, tree, ids.device)
        kwargs = {self.cache_arg: self.cache}
        if self.keeps_logits:
            kwargs["logits_to_keep"] = keep
        with capture_hidden(self.model, self.keeps_features) as captured:
            out = self.model(input_ids=ids, position_ids=positions, attention_mask=mask, use_cache=True, **kwargs)
        self.features = captured.get("features")
        logits = out.logits[:, -keep:]  # [B, keep, V]
        return logits[..., : self.vocab_size] if self.vocab_size else logits

