"""kind: a draft kind is one module and one registration. The tiny kind below (the one CONTRIBUTING.md
shows) is registered here and runs through the loop, lossless against verifier-only, and through the
predictor: calibration times it, traces it and prices it by what its kind says, and the trace replays
the steps the engine took."""

import pytest
import torch
from helpers import check_replay, ragged_prompts, word_pair

from specnb.core.errors import ParameterError
from specnb.core.sequences import runs_of_drafts
from specnb.decode.generate import generate
from specnb.decode.kinds import KINDS, kind_named, kind_of
from specnb.decode.kinds.kind import PER_STEP, DraftKind
from specnb.decode.settings import Decoding
from specnb.decode.state import Proposal
from specnb.decode.trees import TreeShape


class RepeatLast:
    """The draft object: what ``load_pair`` would return for it (it needs no weights)."""

    draft_kind = "repeat"


class RepeatDrafter:
    """Proposes each row's newest token ``k`` times: no forward, no cache."""

    kind, needs_features, feature_layers, trees = "repeat", False, (), False

    def __init__(self, draft, vocab_size=None):
        pass

    def begin(self, state, input_ids, attention_mask) -> int:
        return 0

    def propose(self, state, k: int, tree=None) -> Proposal:
        tokens = state.last[:, None].expand(-1, k).contiguous()  # [B, k]
        q = None if state.sampling is None else torch.nn.functional.one_hot(tokens, state.vocab).float()
        return Proposal(tokens=tokens, tree=TreeShape.of_chain(k), forwards=0, q=q,
                        n_drafted=torch.full((len(tokens),), k, device=tokens.device))

    def commit(self, state, proposal, step) -> None:
        pass


def trace_repeat(draft, vocab_size, context, generated, cap, features=None):
    """The step after generated token j drafts generated[j - 1] ``cap`` times."""
    drafts = [[generated[j - 1]] * cap for j in range(1, len(generated))]
    return runs_of_drafts(drafts, generated), None, None


REPEAT = DraftKind(name="repeat", drafter=RepeatDrafter, load=lambda pair, ref, source, folder: RepeatLast(),
                   weights=lambda ref, verifier: None, flops=lambda verifier_config, ref, verifier=None: None,
                   flops_of=lambda draft, verifier_config: None, module=lambda draft: None,
                   trace=trace_repeat, pricing=PER_STEP, forward_tokens=())


@pytest.fixture
def repeat_kind(monkeypatch):
    monkeypatch.setitem(KINDS, "repeat", REPEAT)  # what ``register(REPEAT)`` does, undone after the test
    return REPEAT


def test_the_built_in_kinds_are_registered_and_an_unknown_one_is_one_line():
    assert sorted(KINDS) == ["eagle", "exit", "lookup", "medusa", "model"]
    assert kind_of(object()).name == "model"  # any causal LM drafts as a model
    with pytest.raises(ParameterError, match="no draft kind 'repeat' is registered"):
        kind_named("repeat")


def test_a_registered_kind_generates_losslessly(repeat_kind):
    pair = word_pair(0)
    ids, mask = ragged_prompts(batch=3, width=10, vocab=63)
    expected = generate(pair.verifier, ids, mask, decoding=Decoding(max_new_tokens=16)).tokens
    result = generate(pair.verifier, ids, mask, draft=RepeatLast(), decoding=Decoding(gamma=3, max_new_tokens=16))
    assert result.tokens == expected
    assert max(n for row in result.drafted_per_step for n in row) == 3


def test_a_registered_kind_is_traced_and_priced_by_the_predictor(repeat_kind):
    import numpy as np

    from specnb.predict.calibrate import CalibrationSettings, calibrate
    from specnb.predict.predictor import Bootstrap, predict

    pair = word_pair(0)
    ids, mask = ragged_prompts(batch=2, width=8, vocab=63)
    check_replay(pair.verifier, RepeatLast(), ids, mask, gamma=3)  # its trace takes the engine's steps
    texts = ["w1 w1 w1 w1 w2 w2 w2", "w4 w4 w4 w5 w5 w5", "w8 w8 w8 w9 w9"]
    drafts = {"repeat": RepeatLast()}
    settings = CalibrationSettings(gamma=3, max_new_tokens=10, repeats=2, progress=False)
    profile, _ = calibrate("tiny", drafts, loaded=(pair, drafts), prompts=texts, settings=settings)
    assert profile.drafts["repeat"].kind == PER_STEP and profile.drafts["repeat"].decode is None
    assert len(profile.traces["repeat"]) == 3
    prediction = predict(profile, "repeat", gammas=range(1, 4), bootstrap=Bootstrap(n_boot=20, sims_per_boot=4))
    assert list(prediction.table["gamma"]) == [1, 2, 3]
    assert np.isfinite(prediction.table["predicted_speedup"]).all()
