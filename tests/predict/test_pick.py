"""pick: the (draft, γ) the predictor rates best at batch 1, with its prediction."""

from helpers import DRAFT, synthetic_profile

from specnb.predict.pick import predictor_pick
from specnb.predict.predictor import Workload, predict


def test_the_pick_is_the_best_rated_draft_at_its_best_gamma():
    profile = synthetic_profile()
    pick, prediction = predictor_pick(profile, 48, gammas=range(1, 5))
    expected = predict(profile, DRAFT, range(1, 5), Workload(max_new_tokens=48))
    assert (pick.draft, pick.gamma) == (DRAFT, expected.best_gamma)
    assert prediction.predicted_speedup == expected.predicted_speedup


def test_no_profile_or_no_traced_draft_picks_nothing():
    assert predictor_pick(None, 48) == (None, None)
    profile = synthetic_profile()
    profile.traces.clear()
    assert predictor_pick(profile, 48) == (None, None)
