"""What would change the verdict: the calibrated profile asked about a draft with another (flat)
acceptance, another batch size, or a draft that is faster per forward, without measuring again."""

from __future__ import annotations

import pandas as pd

from specnb.core import theory
from specnb.core.errors import ParameterError
from specnb.measure.acceptance import flat_profile
from specnb.predict.costs import CostModel, DraftCosts, HardwareProfile
from specnb.predict.predictor import Bootstrap, Prediction, Workload, check_known, predict
from specnb.predict.traces import flat_traces


def what_if(
    profile: HardwareProfile,
    draft: str,
    alpha: float | None = None,
    draft_speed: float = 1.0,
    gammas=range(1, 9),
    workload: Workload | None = None,
) -> Prediction:
    """The verdict if acceptance were a flat ``alpha`` (None: as measured), for another ``workload``
    (a batch size, a budget; None: batch 1 at the profile's budget), or with a draft ``draft_speed``
    times faster per forward (t0 and k both divided)."""
    if draft_speed <= 0:
        raise ParameterError(f"draft_speed must be > 0 (2.0 = a draft twice as fast), got {draft_speed}")
    check_known(profile, draft)
    workload = workload or Workload()
    d = profile.drafts[draft]
    scaled = DraftCosts(
        kind=d.kind,
        decode=d.decode and scale(d.decode, draft_speed),
        prefill=d.prefill and scale(d.prefill, draft_speed),
        flops_per_token=d.flops_per_token / draft_speed,
        step_ms=d.step_ms / draft_speed,
        catch_up=d.catch_up,
    )
    changed = HardwareProfile(**{**profile.__dict__, "drafts": {**profile.drafts, draft: scaled}})
    if alpha is not None:
        set_flat_acceptance(changed, draft, alpha, int(workload.max_new_tokens or profile.max_new_tokens))
    return predict(changed, draft, gammas, workload, bootstrap=Bootstrap(n_boot=40, sims_per_boot=8))


def set_flat_acceptance(profile: HardwareProfile, draft: str, alpha: float, n_new: int, gamma: int = 8) -> None:
    """Give ``draft`` i.i.d. acceptance α (synthetic traces) in ``profile``, in place."""
    alpha = float(theory.validate_alpha(alpha))
    profile.traces = {**profile.traces, draft: flat_traces(alpha, n_new)}
    profile.acceptance = {**profile.acceptance, draft: flat_profile(alpha, gamma)}


def scale(model: CostModel, speed: float) -> CostModel:
    """``model`` ``speed`` times faster: the line and the measured points alike (dropping the points
    would switch the draft from measured times to the line, a different prediction even at 1.0)."""
    return CostModel(
        t0_ms=model.t0_ms / speed,
        ms_per_token=model.ms_per_token / speed,
        r2=model.r2,
        n_points=model.n_points,
        measured=[[n, b, ms / speed] for n, b, ms in model.measured],
    )


def verdict_grid(
    profile: HardwareProfile, draft: str, alphas=(None,), batch_sizes=(1,), draft_speeds=(1.0,), gammas=range(1, 9)
) -> pd.DataFrame:
    """What-if verdicts: recommended γ and best predicted speedup over combinations of a flat α
    (None: as measured), batch size and draft speed-up factor."""
    rows = []
    for alpha in alphas:
        for b in batch_sizes:
            for speed in draft_speeds:
                pred = what_if(profile, draft, alpha, speed, gammas, Workload(batch_size=b))
                rows.append(
                    {
                        "alpha": "measured" if alpha is None else f"{alpha:.2f}",
                        "batch_size": b,
                        "draft_speed": speed,
                        "recommended_gamma": pred.recommended_gamma,
                        "best_speedup": pred.predicted_speedup,
                        "break_even_alpha": pred.break_even_alpha,
                    }
                )
    return pd.DataFrame(rows)
