"""Which speculation the predictor would run: the (draft, γ) it rates best at batch 1 over every
draft a hardware profile calibrated (``specnb.predict.predictor.predict``). Notebook 07 measures
this pick next to the alternatives, so the prediction meets a measurement."""

from __future__ import annotations

from specnb.measure.alternatives import DraftChoice
from specnb.predict.predictor import Workload, predict


def predictor_pick(profile, max_new_tokens: int, gammas=range(1, 9)):
    """The (draft, γ) the predictor rates best at batch 1 over every draft a profile calibrated, with
    its ``Prediction`` (whose verdict may still be "don't speculate"); None without a profile."""
    if profile is None:
        return None, None
    drafts = [name for name in profile.drafts if name in profile.traces]
    predictions = [predict(profile, name, gammas, Workload(max_new_tokens=max_new_tokens)) for name in drafts]
    if not predictions:
        return None, None
    top = max(predictions, key=lambda p: p.predicted_speedup)
    return DraftChoice(top.draft, top.best_gamma), top
