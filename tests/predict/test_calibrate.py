"""calibrate: what a run's records say a draft's proposing and a step's bookkeeping cost, and the FLOPs
each kind counts (the end-to-end calibration is in test_predictor)."""

import pandas as pd
import pytest
import torch
from helpers import tiny_model

from specnb.predict import calibrate, costs


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


@pytest.mark.usefixtures("one_thread")
def test_calibrate_and_validate_end_to_end_on_tiny_models(tmp_path):
    """Calibration on tiny random models, with every kind of draft: the replayed traces take the steps
    the engine took, the profile survives JSON, and validation sets a prediction beside every measured
    grid point."""
    from helpers import perturbed_copy, tiny_tokenizer, word_model

    from specnb.models.eagle import EagleConfig, EagleDraft
    from specnb.models.load import Pair
    from specnb.models.lookup import PromptLookup
    from specnb.models.medusa import MedusaConfig, MedusaHeads
    from specnb.predict.calibrate import CalibrationSettings, calibrate, replay_check
    from specnb.predict.validate import validate, validation_summary

    pair = Pair(verifier=word_model(0), tokenizer=tiny_tokenizer(), device=torch.device("cpu"), dtype=torch.float32,
                verifier_name="tiny")
    torch.manual_seed(0)
    eagle = EagleDraft(EagleConfig.from_verifier(pair.verifier.config)).eval().attach(pair.verifier)
    medusa = MedusaHeads(MedusaConfig(hidden_size=64, num_heads=4, vocab_size=63)).eval().attach(pair.verifier)
    drafts = {"noisy": perturbed_copy(pair.verifier, 0.3, 1), "lookup": PromptLookup(), "eagle": eagle,
              "medusa": medusa}
    texts = ["w1 w2 w3 w1 w2 w3 w1", "w4 w5 w6 w7 w4 w5", "w8 w9 w8 w9 w8", "w2 w4 w6 w8 w2 w4"]
    profile, records = calibrate(
        "tiny",
        drafts,
        loaded=(pair, drafts),
        prompts=texts[:3],
        settings=CalibrationSettings(gamma=4, max_new_tokens=12, batch_sizes=(1, 2), repeats=2, progress=False),
    )
    assert set(profile.traces) == set(drafts) and all(len(t) == 3 for t in profile.traces.values())
    decode = pd.DataFrame(profile.grid).query("kind == 'decode'")
    widest = {"tiny": 5, "noisy": 2, "eagle": 4}  # γ+1; a model draft 1..2; EAGLE's catch-up 1, 2, 4
    assert decode.groupby("model")["n_tokens"].max().to_dict() == widest
    assert {name: cost.kind for name, cost in profile.drafts.items()} == {
        "noisy": "forwards", "lookup": "per_step", "eagle": "forwards", "medusa": "per_token"}
    assert profile.drafts["medusa"].step_ms > 0 and profile.drafts["eagle"].catch_up == "features"
    check = replay_check(profile, records)
    assert len(check) == 4 * 2 and check["identical"].all()  # 4 drafts x the 2 overhead prompts
    loaded = costs.load_profile(costs.save_profile(profile, tmp_path / "p.json"))
    assert loaded.traces == profile.traces
    _, table = validate(profile, (pair, drafts), texts[3:] * 2, gammas=(1, 3), batch_sizes=(1, 2), max_new_tokens=12,
                        progress=False)
    assert len(table) == 4 * 2 * 2 and table["predicted_speedup"].gt(0).all()
    booted = table.dropna(subset=["bootstrap_lo"])  # batch 2 has one prompt batch: nothing to resample
    assert len(booted) == 8 and table["measured_lo"].notna().all()  # the pooled interval covers it
    assert (booted["measured_lo"] <= booted["bootstrap_lo"]).all()
    assert (booted["measured_hi"] >= booted["bootstrap_hi"]).all()
    assert (table["units"] == 2).all() and table["units_needed"].ge(2).all()  # 2 prompts at batch 1, 1 batch x 2 at 2
    assert validation_summary(table)["grid_points"] == 16
