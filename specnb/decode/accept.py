"""The accept/reject rule of speculative decoding: rejection sampling for a chain, the greedy walk
down a tree, and the first mismatch between two token lists.

References: Leviathan, Kalman, Matias 2023 (Algorithm 1); Chen et al. 2023 (modified rejection
sampling). Draft token x ~ q is accepted with probability min(1, p(x)/q(x)); at the first
rejection the next token is drawn from norm(max(p - q, 0)); when every draft token is accepted a
bonus token is drawn from p. The output then follows p exactly. Greedy decoding is the limit
where p and q are one-hot: accept while the draft equals the verifier's argmax.
"""

from __future__ import annotations

import torch

from specnb.core.sampling import logits_to_probs, sample
from specnb.decode.trees import TreeShape


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


def accept_tree(tokens: torch.Tensor, p_logits: torch.Tensor, shape: TreeShape,
                n_drafted: list[int] | None = None) -> tuple[list[int], list[int], list[list[int]]]:
    """Greedy acceptance of a tree (a chain is a one-wide tree): from the root down, the child whose
    token is the verifier's argmax at its parent. tokens [B, N] (node tokens, breadth first);
    p_logits [B, N + 1, V]; ``n_drafted`` [B]: nodes deeper than this are a row's padding, never
    accepted. Returns per row (accepted count, the token after the accepted path, the path's chunk
    indices starting with the root)."""
    target = p_logits.argmax(-1).tolist()  # [B, N+1]
    depth_cap = n_drafted if n_drafted is not None else [shape.depth] * len(target)
    accepted, nxt, paths = [], [], []
    for row, want, cap in zip(tokens.tolist(), target, depth_cap):
        path = [0]
        while len(path) <= cap:
            found = next((c for c in shape.children[path[-1]] if row[c - 1] == want[path[-1]]), None)
            if found is None:
                break
            path.append(found)
        accepted.append(len(path) - 1)
        nxt.append(want[path[-1]])
        paths.append(path)
    return accepted, nxt, paths
