"""An EAGLE draft that reads the prompt-lookup match (``lookup_ngram``, ``copy_bias``) drafts losslessly
in the loop, and the loop feeds it the match the training signal defines.

The draft is random-init with a large copy bonus, so wherever the context has a match it proposes the
match's token: on prompts that repeat, and on the tiny verifier's own output (which loops), those
proposals are accepted often enough that the accept path is taken. ``MatchIndex``, which the loop
uses to avoid rescanning the context per token, must agree with ``next_match`` everywhere.
"""

import random

import pytest
import torch
from helpers import check_replay, tiny_model

from specnb.decode.generate import generate
from specnb.decode.settings import Decoding
from specnb.decode.trees import DynamicTree
from specnb.models.eagle import EagleConfig, EagleDraft
from specnb.models.lookup import MatchIndex, next_match

pytestmark = pytest.mark.usefixtures("one_thread")

SETTINGS = [{"gamma": g} for g in (1, 2, 3, 5)] + [{"tree": t} for t in ((2, 2), (3, 2, 1))] + [
    {"tree": "dynamic", "gamma": 3}, {"tree": DynamicTree(4, 3, 8)}]


def lookup_pair(copy_bonus: float = 30.0):
    """A peaked one-layer verifier and a random-init lookup EAGLE draft whose copy bonus dominates."""
    verifier = tiny_model(layers=1, vocab=200)
    with torch.no_grad():
        verifier.lm_head.weight.mul_(8)
    torch.manual_seed(11)
    draft = EagleDraft(EagleConfig.from_verifier(verifier.config, lookup_ngram=3, copy_bias=True))
    with torch.no_grad():
        draft.copy_gate.bias.fill_(copy_bonus)
    return verifier, draft.eval().attach(verifier)


def repetitive_prompts(batch: int = 4, seed: int = 0):
    """Left-padded prompts that repeat a short random unit (units of 4, 5, ... tokens; lengths 16, 14, ...)."""
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(batch):
        unit = torch.randint(3, 200, (4 + i,), generator=gen).tolist()
        rows.append((unit * 4)[: 16 - 2 * i])
    width = max(map(len, rows))
    ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return ids, mask


@pytest.fixture(scope="module")
def lookup_models():
    return lookup_pair()


def test_match_index_agrees_with_next_match():
    """append: the match of the context so far; peek: of the context plus speculative tokens."""
    for trial in range(100):
        rnd = random.Random(trial)
        vocab, ngram = rnd.choice([2, 3, 5, 20]), rnd.choice([1, 2, 3, 4])
        seq = [rnd.randrange(vocab) for _ in range(rnd.randrange(0, 30))]
        index = MatchIndex(ngram)
        for i, tok in enumerate(seq):
            assert index.append(tok) == next_match(seq[:i + 1], ngram)
            extra = [rnd.randrange(vocab) for _ in range(rnd.randrange(0, 6))]
            assert index.peek(extra) == next_match(seq[:i + 1] + extra, ngram), (seq[:i + 1], extra)
        assert MatchIndex(ngram).peek([1, 2, 1]) == next_match([1, 2, 1], ngram)


@pytest.mark.parametrize("batch", [1, 4])
def test_greedy_chain_and_tree_are_token_identical(lookup_models, batch):
    verifier, draft = lookup_models
    ids, mask = repetitive_prompts()
    ids, mask = ids[-batch:], mask[-batch:]
    expected = generate(verifier, ids, mask, decoding=Decoding(max_new_tokens=20)).tokens
    for setting in SETTINGS:
        result = generate(verifier, ids, mask, draft=draft, decoding=Decoding(max_new_tokens=20, **setting))
        assert result.tokens == expected, (batch, setting)
        assert sum(map(sum, result.accepted_per_step)) > 0, (batch, setting)  # the accept path is taken


def test_the_copy_bonus_is_what_gets_tokens_accepted(lookup_models):
    """The same draft without its bonus proposes its random guesses, which the verifier rejects."""
    verifier, draft = lookup_models
    ids, mask = repetitive_prompts()
    with_bonus = generate(verifier, ids, mask, draft=draft,
                          decoding=Decoding(gamma=2, max_new_tokens=20)).acceptance_rate
    _, plain = lookup_pair(copy_bonus=-30.0)
    without = generate(verifier, ids, mask, draft=plain, decoding=Decoding(gamma=2, max_new_tokens=20)).acceptance_rate
    assert with_bonus > 0.1 and without < with_bonus / 3, (with_bonus, without)


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_replayed_traces_take_the_engines_steps(lookup_models, gamma):
    """The predictor's view of a lookup draft (its trace, replayed) is the engine's, step for step:
    the trace feeds every chain the same matches as the loop."""
    verifier, draft = lookup_models
    ids, mask = repetitive_prompts(seed=6)
    assert sum(check_replay(verifier, draft, ids, mask, gamma)) > 0


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_the_loop_feeds_the_match_of_the_context_up_to_each_token(gamma):
    """Batch 1, chains: every token fed at position p (true or drafted) comes with ``next_match`` of the
    first token plus the latest token fed at each position 0..p (what the draft's cache holds then),
    and the logits of a position use the match fed there."""
    verifier, draft = lookup_pair()
    fed: dict[int, int] = {}  # position -> latest token fed there
    last: list = []  # the match fed in the newest column
    forward, logits = draft.forward, draft.logits

    def spy_forward(features, input_ids, cache=None, position_ids=None, attention_mask=None, lookup=None):
        for p, x, c, n in zip(position_ids[0].tolist(), input_ids[0].tolist(), *(t[0].tolist() for t in lookup)):
            fed[p] = x
            context = [first] + [fed[q] for q in range(p + 1)]
            assert (c, n) == next_match(context, 3), (p, context)
            last[:] = [(c, n)]
        return forward(features, input_ids, cache=cache, position_ids=position_ids, attention_mask=attention_mask,
                       lookup=lookup)

    def spy_logits(features, lookup=None):
        assert [(int(lookup[0][0]), int(lookup[1][0]))] == last
        return logits(features, lookup)

    draft.forward, draft.logits = spy_forward, spy_logits
    ids, mask = repetitive_prompts(seed=2)
    for row in range(len(ids)):
        context = ids[row, mask[row].bool()].tolist()
        fed.clear()
        first = context[0]
        result = generate(verifier, torch.tensor([context]), draft=draft,
                          decoding=Decoding(gamma=gamma, max_new_tokens=16))
        assert result.tokens == generate(verifier, torch.tensor([context]), decoding=Decoding(max_new_tokens=16)).tokens


def test_a_one_wide_tree_drafts_the_chain(lookup_models):
    """A tree of branching 1 reads the same matches as the chain, so it takes the same steps."""
    verifier, draft = lookup_models
    ids, mask = repetitive_prompts(seed=4)
    chain = generate(verifier, ids, mask, draft=draft, decoding=Decoding(gamma=3, max_new_tokens=16))
    as_tree = generate(verifier, ids, mask, draft=draft, decoding=Decoding(max_new_tokens=16, tree=(1, 1, 1)))
    assert as_tree.accepted_per_step == chain.accepted_per_step


def test_trace_feeds_each_chain_the_match_of_its_own_context():
    """Pass 1 feeds the true text; pass r feeds chain c (last emitted token at prompt + c) its previous
    draft, with the match of the text up to that token plus the chain's drafts so far."""
    from specnb.predict.drafts import draft_traits
    from specnb.predict.traces import verifier_features

    verifier, draft = lookup_pair()
    calls = []  # per forward: (input ids [T], (candidates [T], lengths [T]))
    forward = draft.forward

    def spy_forward(features, input_ids, lookup=None, **kw):
        calls.append((input_ids[0].tolist(), list(zip(*(t[0].tolist() for t in lookup)))))
        return forward(features, input_ids, lookup=lookup, **kw)

    draft.forward = spy_forward
    ids, mask = repetitive_prompts(seed=6)
    context = ids[0, mask[0].bool()].tolist()
    generated = generate(verifier, torch.tensor([context]), decoding=Decoding(max_new_tokens=14)).tokens[0]
    draft_traits(draft).trace(context, generated, 4, verifier_features(verifier, context + generated[:-1]))
    text = context + generated
    assert calls[0][1] == [next_match(text[:p + 2], 3) for p in range(len(text) - 1)]
    assert len(calls) == 4
    for r in range(1, len(calls)):
        for c, got in enumerate(calls[r][1]):
            drafts = [calls[i][0][c] for i in range(1, r + 1)]
            assert got == next_match(text[:len(context) + c + 1] + drafts, 3), (r, c)
