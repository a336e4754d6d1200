"""Ragged rows into one rectangular batch: left padding, so every row's newest entry sits in the last
column (which the decoding loops and the head corpus rely on)."""

from __future__ import annotations

import torch


def left_pad(rows: list[torch.Tensor], fill=0) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-row tensors [n_i, ...] left padded with ``fill`` (a scalar, or one value per trailing
    entry) to [B, W, ...], W the longest row; and the mask [B, W] (True = real, None when no row is
    padded)."""
    lengths = [len(row) for row in rows]
    width = max(lengths)
    out = rows[0].new_tensor(fill).expand(len(rows), width, *rows[0].shape[1:]).clone()
    for i, row in enumerate(rows):
        if len(row):
            out[i, width - len(row):] = row
    if min(lengths) == width:
        return out, None
    starts = torch.tensor([width - n for n in lengths], device=out.device)
    return out, torch.arange(width, device=out.device)[None, :] >= starts[:, None]  # [B, W]


def left_pad_ids(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token lists left padded with ``pad``: (ids [B, S], attention mask [B, S], 1 = real), as a
    model's ``attention_mask`` wants it (also when no row is padded)."""
    ids, mask = left_pad([torch.tensor(row, dtype=torch.long) for row in rows], pad)
    return ids, (mask.long() if mask is not None else torch.ones_like(ids))
