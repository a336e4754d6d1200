"""Traces with confidence: a threshold becomes the depth where each chain stops, the replay stops
there and stops drafting once every row of a batch has stopped; a model draft's trace replays the
engine's steps with a threshold, token for token."""

import numpy as np
import pytest
from helpers import check_replay, peaked_pair, ragged_prompts

from specnb.predict.traces import AcceptanceTrace, pack, replay

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_threshold_stops_chains_at_the_first_unsure_position_included():
    trace = AcceptanceTrace(prompt_id="p", runs=[0, 3, 0, 1, 0], proposed=None, cap=None, hit_budget=False,
                            confidence=[[], [0.9, 0.8, 0.2, 0.9], [0.1], [0.95, 0.4], [0.99]])
    assert trace.stops(0.5, 99) == [99, 3, 1, 2, 99]
    assert trace.stops(0.0, 99) == [99] * 5


def test_replay_drafts_up_to_each_rows_stop_and_ends_the_chain_when_all_stopped():
    """Two rows at γ = 4. Step 1: row a stops at 3, row b at 1, so the chain is 3 long (k = 3); a
    accepts 3 (all it drafted), b accepts 0. Without a threshold both draft 4."""
    a = AcceptanceTrace(prompt_id="a", runs=[0, 4, 0, 0, 0, 0, 0, 0, 0], proposed=None, cap=None, hit_budget=True,
                        confidence=[[]] + [[0.9, 0.9, 0.1, 0.9]] * 8)
    b = AcceptanceTrace(prompt_id="b", runs=[0, 0, 0, 0, 0, 0, 0, 0, 0], proposed=None, cap=None, hit_budget=True,
                        confidence=[[]] + [[0.1, 0.9, 0.9, 0.9]] * 8)
    rows = np.array([[0, 1]])
    got = replay(pack([a, b], 9, 0.5), rows, 4, 9)
    assert got.k[0].tolist() == [3] and got.drafted[0, 0].tolist() == [3, 1]
    assert got.accepted[0, 0].tolist() == [3, 0]
    plain = replay(pack([a, b], 9), rows, 4, 9)
    assert plain.k[0].tolist() == [4] and plain.drafted[0, 0].tolist() == [4, 4]
    assert plain.accepted[0, 0].tolist() == [4, 0]


@pytest.mark.parametrize("gamma", [2, 5])
def test_a_model_drafts_trace_replays_the_engine_with_a_threshold(gamma):
    verifier, draft = peaked_pair("llama")
    ids, mask = ragged_prompts(seed=6)
    assert sum(check_replay(verifier, draft, ids, mask, gamma, 0.05)) > 0


def test_a_lookup_trace_has_no_confidence_and_never_stops():
    trace = AcceptanceTrace(prompt_id="p", runs=[0, 1, 2], proposed=[0, 3, 3], cap=16, hit_budget=True)
    assert pack([trace], 3, 0.9).stops.tolist() == [[3, 3, 3, 3]]


def test_confidence_survives_the_profile_json(tmp_path):
    from specnb.predict import costs, reference_replay

    profile = reference_replay.reference_mps_profile(0.0)
    draft = next(iter(profile.drafts))
    profile.traces[draft] = [AcceptanceTrace(prompt_id="p", runs=[0, 2, 1], proposed=None, cap=None, hit_budget=True,
                                             confidence=[[], [0.9, 0.25], [0.5]])]
    loaded = costs.load_profile(costs.save_profile(profile, tmp_path / "profile.json"))
    assert loaded.traces[draft][0].confidence == [[], [0.9, 0.25], [0.5]]
