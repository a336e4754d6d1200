"""Drafts that read the verifier's features (EAGLE, Medusa) are lossless: greedy output is
token-identical to verifier-only, for chains, static trees and EAGLE's dynamic trees, batch 1 and
ragged batches, at several γ, with and without confidence stopping; and tokens are really accepted
(the accept path, not just the reject path, is taken).

The drafts are built so that they agree with the tiny verifier often but not always: an EAGLE draft
whose decoder layer is the verifier's one layer reading the next token's embedding, and Medusa heads
over a verifier that mostly repeats its last token (identity heads then guess right most of the time).
"""

import pytest
import torch
from helpers import check_confidence_stops, check_replay, ragged_prompts, tiny_model

from specnb.core.errors import ParameterError
from specnb.core.sampling import SamplingConfig
from specnb.decode.generate import generate
from specnb.decode.head_drafters import Candidates, EagleDrafter
from specnb.decode.settings import Decoding
from specnb.decode.trees import DynamicTree
from specnb.models.eagle import EagleConfig, EagleDraft
from specnb.models.lookup import PromptLookup
from specnb.models.medusa import MedusaConfig, MedusaHeads

pytestmark = pytest.mark.usefixtures("one_thread")

TREES = [(2,), (3, 2), (2, 2, 1)]


def eagle_pair():
    """A one-layer verifier and an EAGLE draft that is that layer applied to the next token's embedding
    (fc picks the embedding half), so it predicts the verifier's next feature closely."""
    verifier = tiny_model(layers=1, vocab=200)
    with torch.no_grad():
        verifier.lm_head.weight.mul_(8)
    config = EagleConfig.from_verifier(verifier.config, out_norm=True, input_norm=True)
    draft = EagleDraft(config)
    draft.layer.load_state_dict(verifier.model.layers[0].state_dict(), strict=False)
    d = config.hidden_size
    with torch.no_grad():
        draft.norm.weight.copy_(verifier.model.norm.weight)
        draft.fc.weight.zero_()
        draft.fc.weight[:, d:].copy_(torch.eye(d))
        draft.fc.bias.zero_()
    return verifier, draft.eval().attach(verifier)


def eagle3_pair():
    """``eagle_pair`` read through EAGLE-3's fusion: the draft fuses the outputs of "layers" (0, 0) of
    the one-layer verifier, and its fusion picks the second copy, normed by the verifier's final norm,
    so the fused feature is the verifier's final feature; later steps read the draft's own output."""
    verifier, plain = eagle_pair()
    config = EagleConfig.from_verifier(verifier.config, out_norm=True, input_norm=True, feature_layers=(0, 0))
    draft = EagleDraft(config)
    draft.load_state_dict(plain.state_dict(), strict=False)
    d = config.hidden_size
    with torch.no_grad():
        draft.fuse.weight.zero_()
        draft.fuse.weight[:, d:].copy_(torch.eye(d))
        draft.fuse_norm[1].copy_(verifier.model.norm.weight)
    return verifier, draft.eval().attach(verifier)


def medusa_pair():
    """A verifier that mostly repeats its last token (weak layer, lm_head = its embedding) and identity
    Medusa heads, which propose that same token at every depth."""
    verifier = tiny_model(layers=1, vocab=200, seed=5)
    with torch.no_grad():
        verifier.model.layers[0].self_attn.o_proj.weight.mul_(6)
        verifier.model.layers[0].mlp.down_proj.weight.mul_(6)
        verifier.lm_head.weight.copy_(verifier.model.embed_tokens.weight * 8)
    heads = MedusaHeads(MedusaConfig(hidden_size=64, num_heads=5, vocab_size=200)).eval().attach(verifier)
    return verifier, heads


def test_eagle3_draft_reads_the_layers_it_fuses():
    """The loop hands an EAGLE-3 draft the outputs of its layers [.., k*d]; its fusion of them here is
    the verifier's final feature, so it drafts exactly what the plain draft over that feature drafts."""
    verifier, draft = eagle3_pair()
    _, plain = eagle_pair()
    ids, mask = ragged_prompts(seed=3)
    for gamma in (2, 4):
        fused = generate(verifier, ids, mask, draft=draft, decoding=Decoding(gamma=gamma, max_new_tokens=12))
        final = generate(verifier, ids, mask, draft=plain, decoding=Decoding(gamma=gamma, max_new_tokens=12))
        assert fused.accepted_per_step == final.accepted_per_step


PAIRS = {"eagle": eagle_pair, "eagle3": eagle3_pair, "medusa": medusa_pair}


@pytest.fixture(scope="module", params=list(PAIRS))
def head_pair(request):
    return request.param, *PAIRS[request.param]()


@pytest.mark.parametrize("batch", [1, 4])
def test_greedy_chain_and_tree_are_token_identical(head_pair, batch):
    kind, verifier, draft = head_pair
    ids, mask = ragged_prompts(seed=3)
    ids, mask = ids[-batch:], mask[-batch:]
    expected = generate(verifier, ids, mask, decoding=Decoding(max_new_tokens=16)).tokens
    accepted = drafted = 0
    for setting in [{"gamma": g} for g in (1, 2, 3, 5)] + [{"tree": t} for t in TREES]:
        result = generate(verifier, ids, mask, draft=draft, decoding=Decoding(max_new_tokens=16, **setting))
        assert result.tokens == expected, (kind, batch, setting)
        accepted += sum(map(sum, result.accepted_per_step))
        drafted += sum(map(sum, result.drafted_per_step))
    assert 0.2 < accepted / drafted < 0.99, accepted / drafted  # accepts often, rejects sometimes


CONFIDENCE = {"eagle": 0.04, "eagle3": 0.04, "medusa": 0.1}  # stops some chains of each tiny draft, not all


@pytest.mark.parametrize("batch", [1, 4])
def test_confidence_stops_chains_where_the_head_is_unsure_and_stays_lossless(head_pair, batch):
    kind, verifier, draft = head_pair
    ids, mask = ragged_prompts(seed=3)
    result = check_confidence_stops(verifier, draft, ids[-batch:], mask[-batch:], 5, CONFIDENCE[kind])
    if kind.startswith("eagle"):  # the chain stops when every row is unsure: fewer forwards than γ per step
        steps = max(map(len, result.drafted_per_step))
        assert result.draft_forwards < 1 + 5 * steps


def test_static_trees_ignore_a_confidence_threshold(head_pair):
    kind, verifier, draft = head_pair
    ids, mask = ragged_prompts(seed=3)
    plain = generate(verifier, ids, mask, draft=draft, decoding=Decoding(max_new_tokens=10, tree=(2, 2)))
    unsure = generate(verifier, ids, mask, draft=draft,
                      decoding=Decoding(max_new_tokens=10, tree=(2, 2), confidence=0.99))
    assert unsure.tokens == plain.tokens and unsure.drafted_per_step == plain.drafted_per_step


def test_a_tree_accepts_at_least_what_its_first_branch_would(head_pair):
    """A tree whose branching is 1 everywhere is the chain; a wider tree of the same depth takes at
    least as few verifier steps on these prompts (its first branch is that chain)."""
    kind, verifier, draft = head_pair
    ids, mask = ragged_prompts(seed=4)
    chain = generate(verifier, ids, mask, draft=draft, decoding=Decoding(gamma=3, max_new_tokens=16))
    as_tree = generate(verifier, ids, mask, draft=draft, decoding=Decoding(max_new_tokens=16, tree=(1, 1, 1)))
    assert as_tree.accepted_per_step == chain.accepted_per_step
    wide = generate(verifier, ids, mask, draft=draft, decoding=Decoding(max_new_tokens=16, tree=(3, 2, 1)))
    assert wide.verifier_forwards <= chain.verifier_forwards


def test_medusa_needs_no_draft_forward_and_eagle_one_per_depth():
    verifier, heads = medusa_pair()
    ids, mask = ragged_prompts(seed=1)
    assert generate(verifier, ids, mask, draft=heads, decoding=Decoding(gamma=3, max_new_tokens=12)).draft_forwards == 0
    verifier, eagle = eagle_pair()
    r = generate(verifier, ids[:1], mask[:1], draft=eagle, decoding=Decoding(max_new_tokens=12, tree=(2, 2, 1)))
    steps = r.verifier_forwards - 1
    assert r.draft_forwards <= 1 + 3 * steps  # prefill, then a catch-up and one forward per depth but the last


def test_trees_need_a_head_draft_and_greedy_decoding():
    verifier, draft = eagle_pair()
    ids, mask = ragged_prompts()
    with pytest.raises(ParameterError, match="drafts trees"):
        generate(verifier, ids, mask, draft=PromptLookup(), decoding=Decoding(max_new_tokens=4, tree=(2, 1)))
    with pytest.raises(ParameterError, match="greedily"):
        generate(verifier, ids, mask, draft=draft, sampling=SamplingConfig(seed=0),
                 decoding=Decoding(max_new_tokens=4, tree=(2, 1)))
    with pytest.raises(ParameterError, match="branching"):
        generate(verifier, ids, mask, draft=draft, decoding=Decoding(max_new_tokens=4, tree=(2, 0)))


class ShapeSpy(EagleDrafter):
    """An EAGLE drafter that keeps the tree of every step it proposes."""

    def __init__(self, eagle):
        super().__init__(eagle)
        self.shapes = []

    def propose(self, state, k, tree=None):
        proposal = super().propose(state, k, tree)
        self.shapes.append(proposal.tree)
        return proposal


@pytest.mark.parametrize("batch", [1, 4])
def test_a_dynamic_tree_is_token_identical_within_its_budget(batch):
    verifier, draft = eagle_pair()
    ids, mask = ragged_prompts(seed=3)
    ids, mask = ids[-batch:], mask[-batch:]
    expected = generate(verifier, ids, mask, decoding=Decoding(max_new_tokens=16)).tokens
    for tree in ("dynamic", DynamicTree(3, 3, 6), DynamicTree(2, 1, 1)):
        spy = ShapeSpy(draft)
        result = generate(verifier, ids, mask, draft=spy, decoding=Decoding(gamma=4, max_new_tokens=16, tree=tree))
        assert result.tokens == expected, tree
        plan = tree if isinstance(tree, DynamicTree) else DynamicTree(4)
        assert all(s.size <= plan.nodes and s.depth <= plan.depth for s in spy.shapes)
        steps = result.verifier_forwards - 1
        assert result.draft_forwards <= 1 + plan.depth * steps  # a catch-up, then one forward per depth but the last
        if plan.width > 1:
            assert any(not s.chain for s in spy.shapes) and result.mean_tokens_per_step > 1.5


def test_a_dynamic_tree_keeps_the_most_probable_paths_worked_by_hand():
    """Root probabilities (0.6, 0.3, 0.1) at width 2 give candidates a (0.6) and b (0.3); a's children
    score 0.6 x (0.5, 0.4) = 0.30, 0.24 and b's 0.3 x (0.9, 0.05) = 0.27, 0.015. The 4 best: a, b,
    a's first child and b's first child, verified as a tree with parents (root, root, a, b)."""
    class Head:
        head_ids = None

        def logits(self, feature, lookup=None):
            return feature.log()  # a "feature" here is the probability row itself

    grown = Candidates(weight=torch.ones(1))
    head = Head()
    grown.add_children(-1, head, torch.tensor([[0.6, 0.3, 0.1]]), None, 2)
    grown.add_children(0, head, torch.tensor([[0.5, 0.4, 0.1]]), None, 2)
    grown.add_children(1, head, torch.tensor([[0.9, 0.05, 0.05]]), None, 2)
    keep = grown.best(range(len(grown)), 4)
    assert keep == [0, 1, 2, 4]
    tokens, shape = grown.tree(keep)
    assert tokens.tolist() == [[0, 1, 0, 0]] and shape.parents == [0, 0, 1, 2] and shape.depth == 2
    assert shape.children[1] == [3] and shape.cut(1).parents == [0, 0]


def test_only_eagle_grows_a_dynamic_tree():
    verifier, heads = medusa_pair()
    ids, mask = ragged_prompts()
    with pytest.raises(ParameterError, match="dynamic"):
        generate(verifier, ids, mask, draft=heads, decoding=Decoding(max_new_tokens=4, tree="dynamic"))
    with pytest.raises(ParameterError, match="dynamic"):
        generate(verifier, ids, mask, draft=heads, decoding=Decoding(max_new_tokens=4, tree="bushy"))


def test_tree_shape_worked_by_hand():
    from specnb.decode.accept import accept_tree
    from specnb.decode.trees import TreeShape

    shape = TreeShape((2, 2))
    assert shape.parents == [0, 0, 1, 1, 2, 2] and shape.depths == [0, 1, 1, 2, 2, 2, 2]
    assert shape.levels == [[1, 2], [3, 4, 5, 6]] and shape.size == 6 and shape.cut(1).size == 2
    ancestors = shape.ancestors()
    assert ancestors[5].nonzero().flatten().tolist() == [0, 2, 5] and ancestors[0].sum() == 1
    # node tokens 10, 11 | 20, 21 (children of 10), 30, 31 (children of 11); the verifier wants 11 then 31 then 7
    tokens = torch.tensor([[10, 11, 20, 21, 30, 31]])
    logits = torch.full((1, 7, 40), -1.0)
    for column, want in ((0, 11), (2, 31), (6, 7), (1, 0)):
        logits[0, column, want] = 1.0
    assert accept_tree(tokens, logits, shape) == ([2], [7], [[0, 2, 6]])


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_replayed_traces_take_the_engines_steps(head_pair, gamma):
    """The predictor's view of a head draft (its trace, replayed) is the engine's, step for step."""
    kind, verifier, draft = head_pair
    ids, mask = ragged_prompts(seed=6)
    assert min(check_replay(verifier, draft, ids, mask, gamma)) > 0, kind


@pytest.mark.parametrize("gamma", [3, 5])
def test_replayed_traces_stop_where_the_engine_stops(head_pair, gamma):
    """With a confidence threshold the trace's recorded confidences stop the replayed chains at the
    depths the engine's chains stop at, token for token."""
    kind, verifier, draft = head_pair
    ids, mask = ragged_prompts(seed=6)
    assert min(check_replay(verifier, draft, ids, mask, gamma, CONFIDENCE[kind])) > 0, kind
