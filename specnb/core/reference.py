"""The reference analysis's figures, written once: Qwen2.5-3B-Instruct verified against
Qwen2.5-0.5B-Instruct on an Apple GPU (MPS), greedy, KV-cached.

Reported: verifier-only 14.4 tok/s; 12.3 tok/s at γ = 4 with α ≈ 0.392 and 9.5 tok/s at γ = 7; the
draft, with 1/6.25 of the verifier's FLOPs per token (c = 0.1601), ran only 2.8x faster per token.
Everything else the notebooks say about that run (the implied dispatch share, the replayed
profile in ``specnb.predict.reference_replay``) is derived here or there from these numbers.
"""

from __future__ import annotations

REFERENCE_MPS = {
    "verifier": "Qwen/Qwen2.5-3B-Instruct",
    "draft": "Qwen/Qwen2.5-0.5B-Instruct",
    "large_draft": "Qwen/Qwen2.5-1.5B-Instruct",
    "device": "mps",
    "verifier_tok_s": 14.4,
    "alpha": 0.392,
    "draft_speed_ratio": 2.8,  # the draft's per-token forward was 2.8x faster than the verifier's
    "reported_tok_s": {4: 12.3, 7: 9.5},  # speculative tok/s at γ
    "verifier_flops_per_token": 6_171_394_048,
    "draft_flops_per_token": 987_922_432,
}


def size_ratio() -> float:
    """How many times fewer FLOPs per token the reference's draft has (≈ 6.25)."""
    return REFERENCE_MPS["verifier_flops_per_token"] / REFERENCE_MPS["draft_flops_per_token"]


def dispatch_share(speed_ratio: float | None = None, smaller: float | None = None) -> float:
    """The fixed share t0 ÷ (t0 + k·F) of the verifier's one-token forward implied when a draft with
    ``smaller`` times fewer FLOPs is only ``speed_ratio`` times faster, under t = t0 + k·FLOPs:
    r = (t0 + kF) ÷ (t0 + kF/s)  ⇒  t0 ÷ kF = (1 − r/s) ÷ (r − 1). Defaults: the reference run."""
    r = REFERENCE_MPS["draft_speed_ratio"] if speed_ratio is None else float(speed_ratio)
    s = size_ratio() if smaller is None else float(smaller)
    x = (1.0 - r / s) / (r - 1.0)  # t0 ÷ kF
    return x / (1.0 + x)
