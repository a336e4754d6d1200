"""The reference MPS run (``specnb.core.reference``) replayed through the predictor: a hand-entered
hardware profile, and what the predictor says under each assumption the report leaves open.

The report does not say what verifying γ + 1 tokens costs, nor whether its α is Leviathan's
per-token probability or accepted ÷ drafted; ``reference_comparison`` sweeps both.
"""

from __future__ import annotations

import pandas as pd

from specnb.core import theory
from specnb.core.errors import ParameterError
from specnb.core.reference import REFERENCE_MPS
from specnb.decode.kinds.kind import FORWARDS
from specnb.predict.costs import CostModel, DraftCosts, HardwareProfile
from specnb.predict.predictor import Bootstrap, predict
from specnb.predict.what_if import set_flat_acceptance


def reference_mps_profile(verify_extra_token_fraction: float = 0.0, alpha: float | None = None) -> HardwareProfile:
    """The reference MPS run as a hand-entered profile.

    t_v(1) = 1000 / 14.4 ≈ 69.4 ms; the draft is 2.8x faster per token, t_d(1) ≈ 24.8 ms. The
    reference did not measure t_v(γ+1): ``verify_extra_token_fraction`` is our assumption, each
    extra token adds that fraction of t_v(1) (0 = verification is free, as in a memory-bound
    forward). The same fraction applies to the draft. Acceptance is flat at α (i.i.d.). Prefill and
    per-step overhead are set to zero: the reported tok/s are long-generation rates.
    """
    ref = REFERENCE_MPS
    t_v = 1000.0 / ref["verifier_tok_s"]
    t_d = t_v / ref["draft_speed_ratio"]
    f = float(verify_extra_token_fraction)
    if f < 0:
        raise ParameterError(f"verify_extra_token_fraction must be >= 0, got {f}")
    draft = DraftCosts(kind=FORWARDS, decode=CostModel(t0_ms=t_d * (1 - f), ms_per_token=t_d * f),
                       prefill=CostModel(t0_ms=t_d, ms_per_token=0.0), flops_per_token=ref["draft_flops_per_token"])
    name = ref["draft"]
    profile = HardwareProfile(
        verifier=ref["verifier"], device=ref["device"], machine={"description": "reference run (hand-entered)"},
        verifier_decode=CostModel(t0_ms=t_v * (1 - f), ms_per_token=t_v * f),
        verifier_prefill=CostModel(t0_ms=t_v, ms_per_token=0.0),
        verifier_flops_per_token=ref["verifier_flops_per_token"],
        drafts={name: draft}, acceptance={}, traces={}, overhead_ms={}, max_new_tokens=128, prompt_tokens=0.0,
        notes=[f"hand-entered: t_v(1)={t_v:.1f} ms, t_d(1)={t_d:.1f} ms, each extra verified token "
               f"+{f:.0%} of t_v(1), flat α"])
    set_flat_acceptance(profile, name, ref["alpha"] if alpha is None else alpha, profile.max_new_tokens)
    return profile


def flat_alpha_for_rate(rate: float, gamma: int) -> float:
    """The flat conditional α whose accepted ÷ drafted at this γ equals ``rate``: (τ(α, γ) − 1) / γ = rate.

    Tools report α as accepted ÷ drafted; Leviathan's α is a per-token probability. At γ = 4 a
    reported 0.392 means a per-token α of about 0.66, not 0.392."""
    rate = float(theory.validate_alpha(rate))
    low, high = 0.0, 0.999999
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if (theory.tokens_per_step(mid, gamma) - 1) / gamma < rate else (low, mid)
    return (low + high) / 2


def reference_comparison(fractions=(0.0, 0.05, 0.1, 0.15, 0.2, 0.3), measured_at_gamma: int = 4) -> pd.DataFrame:
    """Predictions for the reference MPS run at its reported γ, under each assumption about the cost
    of verifying γ+1 tokens and two readings of its α = 0.392, next to what it reported.

    Readings: Leviathan's per-token probability, or (what tools print) accepted ÷ drafted measured
    at ``measured_at_gamma``, i.e. a per-token α of ``flat_alpha_for_rate(0.392, γ)``, reused for
    every γ because acceptance per position does not depend on how many positions follow."""
    ref = REFERENCE_MPS
    draft = ref["draft"]
    readings = {"per-token α (Leviathan)": ref["alpha"],
                f"accepted ÷ drafted at γ={measured_at_gamma}": flat_alpha_for_rate(ref["alpha"], measured_at_gamma)}
    rows = []
    for gamma, reported in ref["reported_tok_s"].items():
        flops_tok_s = ref["verifier_tok_s"] * float(theory.expected_speedup(
            ref["alpha"], gamma, ref["draft_flops_per_token"] / ref["verifier_flops_per_token"]))
        for reading, alpha in readings.items():
            for f in fractions:
                pred = predict(reference_mps_profile(f, alpha), draft, [gamma],
                               bootstrap=Bootstrap(n_boot=20, sims_per_boot=8))
                tok_s = float(pred.table["predicted_tok_s"].iloc[0])
                rows.append({"gamma": gamma, "alpha_reading": reading, "flat_alpha": alpha,
                             "verify_extra_token_fraction": f, "predicted_tok_s": tok_s,
                             "reported_tok_s": reported, "verifier_only_tok_s": ref["verifier_tok_s"],
                             "flops_theory_tok_s": flops_tok_s,
                             "error": (tok_s - reported) / reported,
                             "flops_theory_error": (flops_tok_s - reported) / reported})
    return pd.DataFrame(rows)


def best_assumption(comparison: pd.DataFrame) -> tuple[str, float, float]:
    """The (α reading, verification cost fraction f) of ``reference_comparison`` whose predictions miss
    the reported tok/s least, by the worst error over the reported γ: (reading, f, that error)."""
    worst = comparison.groupby(["alpha_reading", "verify_extra_token_fraction"])["error"].apply(lambda e: e.abs().max())
    reading, f = worst.idxmin()
    return reading, float(f), float(worst.min())
