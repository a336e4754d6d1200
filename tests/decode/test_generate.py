"""The decoding engine is lossless: greedy speculative == greedy verifier-only == HF generate, token
for token; sampled speculative output follows the verifier's exact distribution."""

import pytest
import torch
from helpers import check_confidence_stops, peaked_pair, ragged_prompts, tiny_model
from transformers import DynamicCache

from specnb.core.errors import IncompatibleModelsError, ParameterError
from specnb.core.sampling import SamplingConfig
from specnb.decode.generate import generate
from specnb.decode.inputs import encode_prompts
from specnb.decode.kvcache import crop_cache
from specnb.decode.settings import Decoding
from specnb.decode.timing import STAGES, StageTimer
from specnb.models.lookup import PromptLookup

pytestmark = pytest.mark.usefixtures("one_thread")

@pytest.fixture(scope="module", params=["llama", "qwen2"])
def peaked(request):
    return peaked_pair(request.param)


def test_crop_cache_equals_fresh_cache():
    model = tiny_model()
    ids = torch.randint(0, 200, (2, 10))
    with torch.inference_mode():
        cropped, fresh = DynamicCache(config=model.config), DynamicCache(config=model.config)
        model(input_ids=ids, cache=cropped, use_cache=True)
        crop_cache(cropped, 4)
        model(input_ids=ids[:, :6], cache=fresh, use_cache=True)
        assert cropped.get_seq_length() == fresh.get_seq_length() == 6
        for a, b in zip(cropped.layers, fresh.layers):
            torch.testing.assert_close(a.keys, b.keys)
            torch.testing.assert_close(a.values, b.values)
        nxt = ids[:, 6:7]
        la = model(input_ids=nxt, cache=cropped, use_cache=True).logits
        lb = model(input_ids=nxt, cache=fresh, use_cache=True).logits
        torch.testing.assert_close(la, lb)
        crop_cache(cropped, 0)  # a no-op, not an error
        assert cropped.get_seq_length() == 7


def test_verifier_only_greedy_matches_hf_generate(peaked):
    verifier, _ = peaked
    ids, mask = ragged_prompts()
    ours = generate(verifier, ids, mask, decoding=Decoding(max_new_tokens=16))
    with torch.inference_mode():
        hf = verifier.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=16, min_new_tokens=16,
                               pad_token_id=0, eos_token_id=None)
    assert ours.tokens == hf[:, ids.shape[1]:].tolist()
    assert ours.verifier_forwards == 16 and ours.draft_forwards == 0


def test_batch_equals_one_by_one(peaked):
    verifier, draft = peaked
    ids, mask = ragged_prompts()
    for d in (None, draft):
        batched = generate(verifier, ids, mask, draft=d, decoding=Decoding(gamma=3, max_new_tokens=12))
        single = [generate(verifier, ids[i:i + 1, mask[i].bool()], draft=d,
                           decoding=Decoding(gamma=3, max_new_tokens=12)).tokens[0]
                  for i in range(len(ids))]
        assert batched.tokens == single


def test_speculative_greedy_is_token_identical_for_gamma_1_to_6(peaked):
    verifier, draft = peaked
    ids, mask = ragged_prompts(seed=3)
    accepted = drafted = 0
    for batch in (1, 2, 3, 4):
        b_ids, b_mask = ids[-batch:], mask[-batch:]  # the last rows have the shortest prompts
        expected = generate(verifier, b_ids, b_mask, decoding=Decoding(max_new_tokens=15)).tokens
        for gamma in range(1, 7):
            result = generate(verifier, b_ids, b_mask, draft=draft, decoding=Decoding(gamma=gamma, max_new_tokens=15))
            assert result.tokens == expected, (batch, gamma)
            accepted += sum(map(sum, result.accepted_per_step))
            drafted += sum(map(sum, result.drafted_per_step))
    # both branches (accept and reject) must have been exercised
    assert 0.1 < accepted / drafted < 0.95


@pytest.mark.parametrize("batch", [1, 4])
def test_confidence_stops_a_model_drafts_chain_and_stays_lossless(peaked, batch):
    verifier, draft = peaked
    ids, mask = ragged_prompts(seed=3)
    result = check_confidence_stops(verifier, draft, ids[-batch:], mask[-batch:], 5, 0.05)
    steps = max(map(len, result.drafted_per_step))
    assert result.draft_forwards < 1 + 5 * steps  # one forward per position drafted, not γ


def test_prompt_lookup_has_no_confidence_to_stop_at(peaked):
    verifier, _ = peaked
    ids, mask = ragged_prompts(seed=5)
    ids, mask = torch.cat([ids, ids[:, -6:]], 1), torch.cat([mask, mask[:, -6:]], 1)
    plain = generate(verifier, ids, mask, draft=PromptLookup(), decoding=Decoding(gamma=4, max_new_tokens=12))
    unsure = generate(verifier, ids, mask, draft=PromptLookup(),
                      decoding=Decoding(gamma=4, max_new_tokens=12, confidence=0.99))
    assert unsure.tokens == plain.tokens and unsure.drafted_per_step == plain.drafted_per_step


def test_lookup_drafter_greedy_is_lossless_and_accepts_repeats(peaked):
    verifier, _ = peaked
    ids, mask = ragged_prompts(seed=5)
    ids = torch.cat([ids, ids[:, -6:]], 1)  # repeated text gives the n-gram lookup something to find
    mask = torch.cat([mask, mask[:, -6:]], 1)
    expected = generate(verifier, ids, mask, decoding=Decoding(max_new_tokens=20)).tokens
    result = generate(verifier, ids, mask, draft=PromptLookup(), decoding=Decoding(gamma=4, max_new_tokens=20))
    assert result.tokens == expected
    assert result.draft_forwards == 0
    drafted = sum(map(sum, result.drafted_per_step))
    assert drafted > 0 and 0 < sum(map(sum, result.accepted_per_step)) <= drafted


def test_statistics_are_consistent(peaked):
    verifier, draft = peaked
    ids, mask = ragged_prompts()
    r = generate(verifier, ids, mask, draft=draft, decoding=Decoding(gamma=4, max_new_tokens=20))
    steps = [len(a) for a in r.accepted_per_step]
    assert r.verifier_forwards == 1 + max(steps)
    assert all(n <= d <= 4 for a, b in zip(r.accepted_per_step, r.drafted_per_step) for n, d in zip(a, b))
    flat_n = [n for row in r.accepted_per_step for n in row]
    assert r.mean_tokens_per_step == pytest.approx(sum(flat_n) / len(flat_n) + 1)
    for row, toks in zip(r.records(), r.tokens):
        assert row["new_tokens"] == len(toks) == 20
        # the first token comes from prefill; steps emit accepted + 1 each (the last may be truncated)
        assert 1 + sum(n + 1 for n in row["accept_lengths"]) >= 20
    assert r.tokens_per_s == pytest.approx(80 / (r.wall_ms / 1e3))


@pytest.mark.parametrize("use_draft", [False, True])
def test_eos_and_budget_are_exact(peaked, use_draft):
    verifier, draft = peaked
    ids, mask = ragged_prompts()
    d = draft if use_draft else None
    free = generate(verifier, ids, mask, draft=d, decoding=Decoding(gamma=3, max_new_tokens=18)).tokens
    assert all(len(t) == 18 for t in free)
    eos = free[0][5]  # a token row 0 produces at position 5
    stopped = generate(verifier, ids, mask, draft=d,
                       decoding=Decoding(gamma=3, max_new_tokens=18, eos_token_id=[eos])).tokens
    for full, cut in zip(free, stopped):
        expected = full[: full.index(eos) + 1] if eos in full else full
        assert cut == expected  # nothing after EOS; rows without it run to the budget
    assert len(stopped[0]) <= 6
    for budget in (1, 2, 5):
        got = generate(verifier, ids, mask, draft=d, decoding=Decoding(gamma=4, max_new_tokens=budget)).tokens
        assert got == [t[:budget] for t in free]


def ticking():
    """A host clock that moves 1 ms at each reading: a stage's time counts how often it was entered."""
    readings = iter(range(10**6))
    return lambda: next(readings) / 1e3


@pytest.mark.parametrize("use_draft", [True, False])
def test_each_step_enters_each_of_its_stages_once(peaked, use_draft):
    """On a ticking clock every interval between two boundaries is 1 ms: prefill once; per speculative
    step draft, verify, accept and rollback once (verifier-only: verify and accept); and "other"
    between each two stages, before the first and after the last."""
    verifier, draft = peaked
    ids, mask = ragged_prompts()
    timer = StageTimer("cpu", now=ticking())
    r = generate(verifier, ids, mask, draft=draft if use_draft else None,
                 decoding=Decoding(gamma=3, max_new_tokens=16, timer=timer))
    steps = r.verifier_forwards - 1  # the prefill is a verifier forward too
    per_step = ("draft", "verify", "accept", "rollback") if use_draft else ("verify", "accept")
    expected = {"prefill": 1.0, **dict.fromkeys(STAGES[1:], 0.0), **dict.fromkeys(per_step, float(steps))}
    expected["other"] = 1.0 + len(per_step) * steps + 1.0
    assert r.stages_ms == pytest.approx(expected)


def test_stage_times_lie_within_the_wall_time(peaked):
    """On the real clock, only what holds under any load: the timer runs inside the wall-time reading."""
    verifier, draft = peaked
    ids, mask = ragged_prompts()
    r = generate(verifier, ids, mask, draft=draft, decoding=Decoding(gamma=3, max_new_tokens=16, timer=True))
    assert set(r.stages_ms) == set(STAGES)
    assert 0 < sum(r.stages_ms.values()) <= r.wall_ms
    assert r.stages_ms["draft"] > 0 and r.stages_ms["verify"] > 0 and r.stages_ms["rollback"] > 0
    assert generate(verifier, ids, mask, decoding=Decoding(max_new_tokens=4)).stages_ms == {}  # timing off by default


def test_vocab_mismatch_needs_explicit_vocab_size():
    verifier, draft = tiny_model(vocab=200), tiny_model(vocab=216, seed=1)
    ids, mask = ragged_prompts(batch=2)
    with pytest.raises(IncompatibleModelsError, match="vocab_size"):
        generate(verifier, ids, mask, draft=draft)
    expected = generate(verifier, ids, mask, decoding=Decoding(max_new_tokens=8)).tokens
    assert generate(verifier, ids, mask, draft=draft,
                    decoding=Decoding(max_new_tokens=8, vocab_size=200)).tokens == expected
    with pytest.raises(ParameterError):
        generate(verifier, ids, mask, draft=draft, decoding=Decoding(vocab_size=300))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"decoding": Decoding(gamma=0)},
        {"decoding": Decoding(max_new_tokens=0)},
        {"sampling": SamplingConfig(temperature=0)},
        {"sampling": SamplingConfig(top_p=0)},
        {"decoding": Decoding(confidence=-0.1)},
        {"decoding": Decoding(confidence=1.5)},
    ],
)
def test_bad_parameters_are_rejected(kwargs):
    with pytest.raises(ParameterError):
        generate(tiny_model(), torch.tensor([[1, 2, 3]]), **kwargs)


def test_encode_prompts_left_pads_and_applies_chat_template():
    class Tok:
        chat_template = "x"
        pad_token_id, eos_token_id = 0, 2

        def apply_chat_template(self, messages, add_generation_prompt, tokenize):
            assert add_generation_prompt and not tokenize
            return "<u>" + messages[0]["content"]

        def __call__(self, text, add_special_tokens=True):
            return {"input_ids": [ord(c) for c in text] + ([] if not add_special_tokens else [])}

    ids, mask = encode_prompts(Tok(), ["ab", "abcd"])
    assert ids.tolist() == [[0, 0] + [ord(c) for c in "<u>ab"], [ord(c) for c in "<u>abcd"]]
    assert mask.tolist() == [[0, 0] + [1] * 5, [1] * 7]
    ids, _ = encode_prompts(Tok(), ["ab"], chat=False)
    assert ids.tolist() == [[ord("a"), ord("b")]]

