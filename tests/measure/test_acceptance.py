"""acceptance: traces replay the engine's steps exactly (greedy), profiles derived from them equal
the ones a run records, and i.i.d. traces agree with the closed forms."""

import numpy as np
import pandas as pd
import pytest
from helpers import WORDS, perturbed_copy, synthetic

from specnb.core import theory
from specnb.core.errors import ParameterError
from specnb.core.sequences import runs_from_matches
from specnb.decode.generate import generate
from specnb.decode.inputs import encode_prompts
from specnb.decode.settings import Decoding
from specnb.measure import acceptance, runs
from specnb.measure.acceptance import Fallback, counter_rates
from specnb.models.lookup import PromptLookup
from specnb.predict import traces as tr

pytestmark = pytest.mark.usefixtures("one_thread")

N_NEW = 20


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(4)
    texts = [" ".join(rng.choice(WORDS[:12], size=n)) for n in (8, 13, 10, 6)]  # few words: lookup finds matches
    return pd.DataFrame({"id": ["a", "b", "c", "d"], "category": "x", "prompt": texts})


@pytest.fixture(scope="module")
def drafts(pair):
    return {"noisy": perturbed_copy(pair.verifier, 0.3, 1), "lookup": PromptLookup()}


@pytest.fixture(scope="module")
def traces(pair, drafts, prompts):
    return tr.measure_traces(pair, drafts, prompts, N_NEW, progress=False)


def test_runs_count_consecutive_matches():
    assert runs_from_matches([True, False, True, True, True, False, True], 10) == [1, 0, 3, 2, 1, 0, 1]
    assert runs_from_matches([True, True, True], 2) == [2, 2, 1]


def speculative(pair, draft, texts, gamma):
    ids, mask = encode_prompts(pair.tokenizer, texts)
    return generate(pair.verifier, ids, mask, draft=draft,
                    decoding=Decoding(gamma=gamma, max_new_tokens=N_NEW, eos_token_id=pair.tokenizer.eos_token_id))


@pytest.mark.parametrize("name", ["noisy", "lookup"])
@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_replay_takes_the_engines_steps_at_batch_1(pair, drafts, prompts, traces, name, gamma):
    packed = tr.pack(traces[name], N_NEW)
    got = tr.replay(packed, np.arange(len(prompts))[:, None], gamma, N_NEW)
    for i, text in enumerate(prompts["prompt"]):
        result = speculative(pair, drafts[name], [text], gamma)
        live = got.active[:, i, 0]
        assert got.accepted[live, i, 0].tolist() == result.accepted_per_step[0]
        assert got.drafted[live, i, 0].tolist() == result.drafted_per_step[0]
        assert packed.lengths[i] == len(result.tokens[0])
    assert any(sum(t.runs) for t in traces[name])  # the draft does get tokens accepted


@pytest.mark.parametrize("name", ["noisy", "lookup"])
def test_replay_takes_the_engines_steps_on_a_ragged_batch(pair, drafts, prompts, traces, name):
    packed = tr.pack(traces[name], N_NEW)
    rows = np.array([[0, 1], [2, 3]])
    got = tr.replay(packed, rows, 3, N_NEW)
    for s, (i, j) in enumerate(rows):
        result = speculative(pair, drafts[name], list(prompts["prompt"].iloc[[i, j]]), 3)
        assert got.steps[s] == result.verifier_forwards - 1  # minus the prefill
        for b, prompt in enumerate((i, j)):
            live, length = got.active[:, s, b], packed.lengths[prompt]
            assert len(result.tokens[b]) == length
            assert (tr.emitted_per_step(got.accepted[live, s, b], length)
                    == tr.emitted_per_step(result.accepted_per_step[b], length))
        verify = got.verify_tokens[got.live[:, s], s]
        assert verify.max() <= 4 and verify.min() >= 1


def test_profile_from_traces_equals_the_recorded_profile(pair, drafts, prompts, traces):
    """Accepted counts are equal for generations that ran to the budget; where the verifier stopped
    at EOS the engine may also count drafts accepted past the EOS (they emit nothing), which a trace
    cannot see. (Recorded ``reached`` is approximate where the last steps draft fewer, see
    ``counts_from_positions``; the replay counts it exactly, so only position 1 is compared.)"""
    records = runs.run_interleaved(pair, prompts, runs.make_candidates(drafts, [4], baseline=False),
                                    max_new_tokens=N_NEW, progress=False, warmup=False)
    for name in drafts:
        recorded = {p["prompt_id"]: p for p in acceptance.profile_from_records(records, name).per_prompt}
        replayed = tr.profile_from_traces(traces[name], 4, N_NEW)
        assert [p["prompt_id"] for p in replayed.per_prompt] == list(prompts["id"])
        for trace, mine in zip(traces[name], replayed.per_prompt):
            theirs = recorded[trace.prompt_id]
            assert mine["reached"][0] == theirs["reached"][0]  # the same steps
            if trace.hit_budget:
                assert mine["accepted"] == theirs["accepted"]
            else:
                assert all(a <= b for a, b in zip(mine["accepted"], theirs["accepted"]))
    assert any(t.hit_budget for t in traces["noisy"]) and not all(t.hit_budget for t in traces["noisy"])


def test_flat_traces_give_the_closed_form_tokens_per_step():
    alpha, gamma, n_new = 0.7, 4, 2001
    packed = tr.pack(tr.flat_traces(alpha, n_new, n_traces=16, seed=3), n_new)
    got = tr.replay(packed, np.arange(16)[:, None], gamma, n_new)
    tau = (n_new - 1) / got.steps.mean()
    assert tau == pytest.approx(float(theory.tokens_per_step(alpha, gamma)), rel=0.02)


def test_flat_packed_is_monotone_in_alpha():
    flat = tr.flat_packed([0.2, 0.5, 0.9], n_new=40, n_traces=8)
    lengths = flat.runs.reshape(3, 8, -1)
    assert (lengths[0] <= lengths[1]).all() and (lengths[1] <= lengths[2]).all() and lengths[2].sum() > lengths[0].sum()


def test_pack_truncates_extends_and_keeps_eos():
    eos = tr.AcceptanceTrace(prompt_id="eos", runs=[0, 1, 0, 2], proposed=[9, 9, 9, 9], cap=9, hit_budget=False)
    cut = tr.AcceptanceTrace(prompt_id="cut", runs=[0, 3, 2, 1], proposed=[9, 9, 9, 9], cap=9, hit_budget=True)
    packed = tr.pack([eos, cut], 7)
    assert packed.lengths.tolist() == [4, 7] and packed.extended
    assert packed.runs[1, :7].tolist() == [0, 3, 2, 1, 3, 2, 1]  # steps after the first token repeat
    assert tr.pack([eos, cut], 3).runs[:, :3].tolist() == [[0, 1, 0], [0, 3, 2]]
    with pytest.raises(ParameterError, match="no acceptance traces"):
        tr.pack([], 5)


def test_acceptance_profile_conditional_rates():
    rec = synthetic("d γ=3", [4], [10.0], accepted=5, drafted=9, steps=3, gamma=3)[0]
    rec.update(draft="d", accept_lengths=[3, 2, 0], accepted_by_position=[2, 2, 1], drafted_by_position=[3, 3, 3])
    prof = acceptance.profile_from_records(pd.DataFrame([rec]), "d").to_frame()
    assert prof["rate"].tolist() == pytest.approx([2 / 3, 2 / 3, 1 / 3])
    assert prof["conditional_rate"].tolist() == pytest.approx([2 / 3, 1.0, 0.5])


def test_acceptance_from_verify_counts_then_gauges_never_invented():
    # τ from verification steps: 12 tokens out of 5 steps; no draft counts, so no α
    rates = counter_rates(0, 0, 0, fallback=Fallback(verify_steps=5, verified_tokens=12))
    assert rates.tau == pytest.approx(2.4) and np.isnan(rates.alpha) and rates.source == "verify counts"
    # SGLang versions that count drafts
    rates = counter_rates(0, 6, 4, fallback=Fallback(verify_steps=2, verified_tokens=6))
    assert rates.alpha == pytest.approx(4 / 6) and rates.tau == 3.0
    rates = counter_rates(0, 0, 0, fallback=Fallback(gauges=(0.6, 2.8)))
    assert (rates.alpha, rates.tau, rates.source) == (0.6, 2.8, "gauges")
    rates = counter_rates(10, 40, 18, [8, 5], Fallback(verify_steps=99, verified_tokens=1, gauges=(0.1, 1.1)))
    assert rates.tau == pytest.approx(2.8) and rates.source == "counters"  # counters win
    assert counter_rates(0, 0, 0).source == "" and np.isnan(counter_rates(0, 0, 0).tau)
