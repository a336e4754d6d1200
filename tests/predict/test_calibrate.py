"""calibrate: what a run's records say a draft's proposing and a step's bookkeeping cost, and the FLOPs
each kind counts (the end-to-end calibration is in test_predictor)."""

import pandas as pd
import pytest
from helpers import tiny_model

from specnb.predict import calibrate


def records():
    """Two speculative runs of draft d (10 steps each) and one verifier-only run of 9 + 1 forwards."""
    frame = pd.DataFrame({"candidate": ["verifier-only", "d γ=4", "d γ=4"], "draft": ["", "d", "d"],
                          "steps": [0, 10, 10], "drafted": [0, 30, 20], "draft_ms": [0.0, 50.0, 30.0],
                          "verifier_forwards": [10, 10, 10]})
    for i, column in enumerate(calibrate.OVERHEAD):
        frame[column] = [2.0, 1.0, 3.0] if i == 0 else 0.0
    return frame


def test_proposing_is_priced_per_step_or_per_drafted_token():
    frame = records()
    assert calibrate.proposing_ms(frame, "d", calibrate.PER_STEP) == pytest.approx(80.0 / 20)
    assert calibrate.proposing_ms(frame, "d", calibrate.PER_TOKEN) == pytest.approx(80.0 / 50)


def test_bookkeeping_is_per_step_and_per_verifier_only_token():
    frame = records()
    assert calibrate.per_step_overhead(frame, "d") == pytest.approx(4.0 / 20)
    assert calibrate.baseline_overhead(frame) == pytest.approx(2.0 / 9)


def test_draft_flops_follow_the_kind():
    from specnb.core.flops import analytic_flops

    verifier = tiny_model(vocab=50)
    draft = tiny_model(vocab=50, layers=1)
    assert calibrate.draft_flops(draft, verifier) == analytic_flops(draft.config).flops_per_token
    assert calibrate.flops_per_token(verifier) > calibrate.draft_flops(draft, verifier)
