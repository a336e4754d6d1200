"""Sampling and the accept/reject rule of speculative decoding.

References: Leviathan, Kalman, Matias 2023 (Algorithm 1); Chen et al. 2023 (modified rejection
sampling). Draft token x ~ q is accepted with probability min(1, p(x)/q(x)); at the first
rejection the next token is drawn from norm(max(p - q, 0)); when every draft token is accepted a
bonus token is drawn from p. The output then follows p exactly. Greedy decoding is the limit
where p and q are one-hot: accept while the draft equals the verifier's argmax.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SamplingConfig:
    """Sampling settings; pass ``sampling=None`` to ``generate`` for greedy decoding."""

    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None


def logits_to_probs(logits: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """Temperature then top-p (nucleus) filtering; logits [..., V] -> probs [..., V] in fp32."""
    probs = torch.softmax(logits.float() / sampling.temperature, dim=-1)
    if sampling.top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        # drop a token when the mass before it already reaches top_p (the first token always stays)
        drop = (sorted_probs.cumsum(-1) - sorted_probs) >= sampling.top_p
        probs = probs.scatter(-1, order, sorted_probs.masked_fill(drop, 0.0))
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample(probs: torch.Tensor, generator=None) -> torch.Tensor:
    """One token per row: probs [B, V] -> ids [B]."""
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def pick_token(logits: torch.Tensor, sampling, generator=None):
    """Greedy argmax or a sample; logits [B, V] -> (ids [B], probs [B, V] or None when greedy)."""
    if sampling is None:
        return logits.argmax(-1), None
    probs = logits_to_probs(logits, sampling)
    return sample(probs, generator), probs


def accept_reject(drafts, q, p_logits, n_drafted, sampling, generator=None):
    """Accepted count per row and the token that follows the accepted prefix.

    drafts [B, k]; q [B, k, V] draft probs (None when greedy); p_logits [B, k+1, V]; n_drafted [B]
    (real proposals per row, positions beyond are padding). Returns (n [B], next_token [B]).
    """
    batch, k = drafts.shape
    valid = torch.arange(k, device=drafts.device)[None, :] < n_drafted[:, None]  # [B, k]
    if sampling is None:
        # greedy: accept while the draft matches the verifier's argmax; the argmax at the first
        # mismatch (or after the last draft: the bonus token) is the next token
        target = p_logits.argmax(-1)  # [B, k+1]
        n = ((drafts == target[:, :k]) & valid).int().cumprod(1).sum(1)  # [B]
        return n, target.gather(1, n[:, None].long()).squeeze(1)
    p = logits_to_probs(p_logits, sampling)  # [B, k+1, V]
    if q is None:  # nothing drafted this step (k == 0)
        q = p.new_zeros(batch, k, p.shape[-1])
    p_d = p[:, :k].gather(-1, drafts[..., None]).squeeze(-1)  # [B, k]
    q_d = q.gather(-1, drafts[..., None]).squeeze(-1)  # [B, k]
    # accept draft j with probability min(1, p/q): r < p/q  <=>  r * q < p
    r = torch.rand(batch, k, device=drafts.device, generator=generator)
    n = ((r * q_d < p_d) & valid).int().cumprod(1).sum(1).long()  # [B]
    vocab = p.shape[-1]
    p_n = p.gather(1, n[:, None, None].expand(-1, 1, vocab)).squeeze(1)  # [B, V]
    q_pad = torch.cat([q, q.new_zeros(batch, 1, vocab)], dim=1)  # [B, k+1, V]
    q_n = q_pad.gather(1, n[:, None, None].expand(-1, 1, vocab)).squeeze(1)
    # rejected at n: sample norm(max(p - q, 0)); all real drafts accepted: bonus token from p
    q_n = q_n * (n < n_drafted)[:, None]
    residual = (p_n - q_n).clamp_min(0)
    mass = residual.sum(-1, keepdim=True)
    residual = torch.where(mass > 0, residual / mass.clamp_min(1e-30), p_n)
    return n, sample(residual, generator)
