"""gamma="auto": the predictor's best γ for the batch size at hand, chosen through the engine's
GammaChoice seam and recorded with its reason; a profile cached for this machine, or the fallback."""

import pytest
from helpers import WORDS, perturbed_copy, ragged_prompts, tiny_model, word_pair

from specnb.core.errors import ParameterError
from specnb.decode.generate import generate
from specnb.decode.settings import Decoding
from specnb.measure import runs
from specnb.predict import auto_gamma, costs, predictor, reference_replay

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def profile():
    return reference_replay.reference_mps_profile(0.0)


N_NEW = 24  # a short budget keeps each prediction quick


def draft_of(profile) -> str:
    return next(iter(profile.drafts))


def test_auto_is_the_predictors_best_gamma_for_the_batch_size(profile):
    choice = auto_gamma.AutoGamma(profile=profile, draft=draft_of(profile), max_new_tokens=N_NEW)
    for batch in (1, 4):
        gamma, reason = choice.choose(batch)
        workload = predictor.Workload(batch_size=batch, max_new_tokens=N_NEW)
        best = predictor.predict(profile, draft_of(profile), auto_gamma.GAMMAS, workload,
                                 bootstrap=predictor.Bootstrap(n_boot=100)).best_gamma
        assert gamma == best and reason.startswith(f"auto: γ={best} ") and f"batch {batch}" in reason


def test_generate_records_the_gamma_chosen_and_why(profile):
    verifier = tiny_model(vocab=200, peaked=8.0)
    draft = perturbed_copy(verifier, 0.01, 2)
    ids, mask = ragged_prompts(batch=2, seed=4)
    choice = auto_gamma.AutoGamma(profile=profile, draft=draft_of(profile), max_new_tokens=N_NEW)
    gamma, reason = choice.choose(2)
    result = generate(verifier, ids, mask, draft=draft, decoding=Decoding(gamma=choice, max_new_tokens=12))
    assert result.gamma == gamma and result.gamma_reason == reason
    assert max(n for row in result.drafted_per_step for n in row) == gamma
    assert result.tokens == generate(verifier, ids, mask, decoding=Decoding(max_new_tokens=12)).tokens
    with pytest.raises(ParameterError, match="auto_gamma"):
        generate(verifier, ids, mask, draft=draft, decoding=Decoding(gamma="auto", max_new_tokens=4))


def test_without_a_profile_auto_falls_back_or_uses_the_one_cached_for_this_machine(tmp_path, monkeypatch, profile):
    monkeypatch.setenv("SPECNB_CACHE", str(tmp_path))
    offline = auto_gamma.ProfileSource(device="cpu", calibrate=False)
    fallback = auto_gamma.auto_gamma("tiny", "tiny-draft", source=offline)
    gamma, reason = fallback.choose(1)
    assert gamma == auto_gamma.FALLBACK_GAMMA and "no profile" in reason
    costs.save_profile(profile, auto_gamma.profile_path(profile.verifier, "cpu"))
    cached = auto_gamma.auto_gamma(profile.verifier, draft_of(profile), max_new_tokens=N_NEW, source=offline)
    assert cached.profile is not None
    assert cached.choose(1) == auto_gamma.AutoGamma(profile=profile, draft=draft_of(profile),
                                                    max_new_tokens=N_NEW).choose(1)


def test_run_records_say_auto_chose_which_gamma(profile):
    pair = word_pair()
    noisy = perturbed_copy(pair.verifier, 0.3, 1)
    with pytest.raises(ParameterError, match="auto"):
        runs.make_candidates({"noisy": noisy}, ["auto"])
    candidates = runs.make_candidates({"noisy": noisy}, [2, "auto"], confidences=(0.0, 0.5),
                                      auto=lambda name, c: auto_gamma.AutoGamma(
                                          profile=profile, draft=draft_of(profile), confidence=c, max_new_tokens=N_NEW))
    assert [c.name for c in candidates] == ["verifier-only", "noisy γ=2", "noisy γ=auto", "noisy γ=2 conf=0.5",
                                            "noisy γ=auto conf=0.5"]
    prompts = [" ".join(WORDS[:8]), " ".join(WORDS[5:11])]
    records = runs.run_interleaved(pair, prompts, candidates, max_new_tokens=8, batch_size=2, progress=False)
    auto = records[records["candidate"] == "noisy γ=auto"].iloc[0]
    assert auto["gamma"] == candidates[2].gamma.choose(2)[0] and auto["gamma_reason"].startswith("auto: γ=")
    summary = runs.summarise(records).set_index("candidate")
    assert summary.loc["noisy γ=auto conf=0.5", "confidence"] == 0.5
    assert summary.loc["noisy γ=2", "gamma_reason"] == ""
    drafted = summary.loc[[c.name for c in candidates[1:]], "drafted_per_step"]
    assert drafted.between(0.5, 3).all()


def test_a_cached_profile_priced_on_other_kernels_or_an_older_format_is_not_used(tmp_path, monkeypatch, profile):
    """The predictor prices what generate runs: a profile whose verifier was timed on MKL does not choose γ
    for a verifier that now runs oneDNN (it is calibrated afresh), nor does a profile of an older format."""
    import copy
    import json

    from specnb.models.kernels import KernelChoice

    monkeypatch.setenv("SPECNB_CACHE", str(tmp_path))
    on = {"onednn": KernelChoice(model="v", path="onednn", asked="auto", reason="timed", min_rows=1,
                                 spans=((1, 64),)).as_dict(),
          "default": KernelChoice(model="v", path="default", asked="auto", reason="timed").as_dict()}
    priced = copy.deepcopy(profile)
    priced.machine = {**priced.machine, "kernels": {priced.verifier: {**on["default"], "model": priced.verifier}}}
    path = costs.save_profile(priced, auto_gamma.profile_path(priced.verifier, "cpu"))
    runs_on = {kind: {priced.verifier: {**choice, "model": priced.verifier}} for kind, choice in on.items()}
    assert costs.path_mismatches(priced, runs_on["onednn"]) == [f"{priced.verifier}: priced default, runs onednn"]
    assert costs.path_mismatches(priced, runs_on["default"]) == []
    assert auto_gamma.cached_profile(priced.verifier, "cpu", runs_on["default"]) is not None
    assert auto_gamma.cached_profile(priced.verifier, "cpu", runs_on["onednn"]) is None
    offline = auto_gamma.ProfileSource(device="cpu", kernels=runs_on["onednn"], calibrate=False)
    chosen = auto_gamma.auto_gamma(priced.verifier, draft_of(priced), source=offline)
    assert chosen.profile is None and "no profile" in chosen.choose(1)[1]
    path.write_text(json.dumps({**json.loads(path.read_text()), "format": "specnb-hardware-profile/3"}))
    assert auto_gamma.cached_profile(priced.verifier, "cpu") is None
