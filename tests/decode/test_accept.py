"""Sampled speculative decoding follows the verifier's own distribution exactly, for every kind of
draft: a model, prompt lookup, an EAGLE draft (plain, and reading the prompt-lookup match) and Medusa heads.

The reference is built independently of the decoder's sampling code: transformers' own temperature
and top-p logits processors, and an exhaustive enumeration of every continuation. The checked
tokens are the 4th and 5th of a 5-token budget at γ = 3, so they come from a later speculative
step and include bonus tokens (all three drafts accepted); the batch mixes two prompts of different
lengths, so half of its rows are left padded. Each drafter must see both acceptances and
rejections, and a draft's own distribution must lie far outside the tolerance (the test has power).
"""

import math

import pytest
import torch
from helpers import tiny_model
from transformers import TemperatureLogitsWarper, TopPLogitsWarper

from specnb.core.sampling import SamplingConfig
from specnb.decode.generate import generate
from specnb.decode.settings import Decoding
from specnb.models.eagle import EagleConfig, EagleDraft
from specnb.models.lookup import PromptLookup
from specnb.models.medusa import MedusaConfig, MedusaHeads

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB, BUDGET, GAMMA, N = 8, 5, 3, 6000
PROMPTS = [[1, 2, 3, 1, 2], [3, 1, 2]]  # the second is left padded in the batch


def reference_probs(logits: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """transformers' temperature then top-p processors, then softmax: logits [..., V] -> probs."""
    flat = logits.reshape(-1, logits.shape[-1]).float()
    if sampling.temperature != 1.0:
        flat = TemperatureLogitsWarper(sampling.temperature)(None, flat)
    if sampling.top_p < 1.0:
        flat = TopPLogitsWarper(sampling.top_p)(None, flat)
    return torch.softmax(flat, -1).reshape(logits.shape)


def tail_pair_distribution(model, prompt: list[int], sampling: SamplingConfig) -> torch.Tensor:
    """P(t4, t5) under ``model`` sampled with ``sampling``, by enumerating every t1..t5: [V * V]."""
    grid = torch.cartesian_prod(*[torch.arange(VOCAB)] * BUDGET)  # [V^5, 5]
    seqs = torch.cat([torch.tensor(prompt).expand(len(grid), -1), grid], 1)
    with torch.inference_mode():
        logits = model(input_ids=seqs).logits[:, len(prompt) - 1:-1]  # [V^5, 5, V]: predictions of t1..t5
    probs = reference_probs(logits, sampling).gather(-1, grid[..., None]).squeeze(-1)  # [V^5, 5]
    joint = probs.prod(-1)  # [V^5]
    return torch.zeros(VOCAB * VOCAB).index_add_(0, grid[:, 3] * VOCAB + grid[:, 4], joint)


def total_variation(counts: torch.Tensor, probs: torch.Tensor) -> float:
    return 0.5 * (counts / counts.sum() - probs).abs().sum().item()


def expected_tv(probs: torch.Tensor, n: int) -> float:
    """Mean TV distance of an n-draw empirical distribution from its source (normal approximation)."""
    return 0.5 * sum(math.sqrt(2 * p * (1 - p) / (math.pi * n)) for p in probs.tolist())


def models():
    verifier = tiny_model(vocab=VOCAB, hidden=32, layers=1, seed=2)
    draft = tiny_model(vocab=VOCAB, hidden=32, layers=1, seed=3)
    with torch.no_grad():
        verifier.lm_head.weight.mul_(4)  # moderately peaked, so drafts are both accepted and rejected
        draft.lm_head.weight.mul_(4)
    return verifier, draft


def make_draft(kind: str, verifier, draft):
    torch.manual_seed(7)
    if kind == "model":
        return draft
    if kind == "lookup":
        return PromptLookup(max_ngram=2)
    if kind == "eagle":
        return EagleDraft(EagleConfig.from_verifier(verifier.config)).eval().attach(verifier)
    if kind == "eagle3":  # reads the verifier's layer outputs, fused (one layer, read twice)
        return EagleDraft(EagleConfig.from_verifier(verifier.config, feature_layers=(0, 0))).eval().attach(verifier)
    if kind == "eagle-lookup":  # reads the prompt-lookup match; its copy bonus moves q towards the match
        eagle = EagleDraft(EagleConfig.from_verifier(verifier.config, lookup_ngram=2, copy_bias=True))
        with torch.no_grad():
            eagle.copy_gate.bias.fill_(1.0)
        return eagle.eval().attach(verifier)
    heads = MedusaHeads(MedusaConfig(hidden_size=32, num_heads=GAMMA, vocab_size=VOCAB))
    with torch.no_grad():
        for p in heads.parameters():
            p.normal_(0, 0.3)  # not the zero init: heads that guess something else than the verifier
    return heads.eval().attach(verifier)


@pytest.mark.parametrize("kind", ["model", "lookup", "eagle", "medusa"])
@pytest.mark.parametrize("sampling", [SamplingConfig(0.7, 1.0, seed=0), SamplingConfig(1.0, 0.8, seed=1),
                                      SamplingConfig(1.3, 0.9, seed=2)], ids=["temperature", "top_p", "both"])
def test_sampled_speculative_output_follows_verifier_distribution(kind, sampling):
    check_follows_verifier(kind, sampling)


def test_sampled_lookup_eagle_follows_verifier_distribution():
    """An EAGLE draft reading the prompt-lookup match: its q includes the copy bonus (one setting is
    enough; the plain EAGLE draft covers the sampling settings)."""
    check_follows_verifier("eagle-lookup", SamplingConfig(1.3, 0.9, seed=2))


@pytest.mark.parametrize("kind", ["model", "eagle", "medusa"])
def test_sampled_output_with_confidence_stopping_follows_verifier_distribution(kind):
    """Chains that stop where the draft is unsure, rows of one step at different depths, stay lossless."""
    result = check_follows_verifier(kind, SamplingConfig(1.0, 0.9, seed=3), confidence=CONFIDENCE[kind])
    assert min(row[0] for row in result.drafted_per_step) < GAMMA  # the first step (k = γ) stopped early
    steps = [{row[t] for row in result.drafted_per_step if len(row) > t} for t in range(BUDGET)]
    assert any(len(depths) > 1 for depths in steps), steps  # rows of one step stopped at different depths


CONFIDENCE = {"model": 0.19, "eagle": 0.18, "medusa": 0.2}  # between the tiny drafts' top probabilities


def check_follows_verifier(kind: str, sampling: SamplingConfig, confidence: float = 0.0):
    verifier, draft = models()
    width = max(map(len, PROMPTS))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in PROMPTS]).repeat_interleave(N, 0)  # [2N, S]
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in PROMPTS]).repeat_interleave(N, 0)
    result = generate(verifier, ids, mask, draft=make_draft(kind, verifier, draft), sampling=sampling,
                      decoding=Decoding(gamma=GAMMA, max_new_tokens=BUDGET, confidence=confidence))
    assert 0.05 < result.acceptance_rate < 0.95, result.acceptance_rate  # both branches are exercised
    for i, prompt in enumerate(PROMPTS):
        rows = result.tokens[i * N:(i + 1) * N]
        assert {len(t) for t in rows} == {BUDGET}
        counts = torch.bincount(torch.tensor([t[3] * VOCAB + t[4] for t in rows]), minlength=VOCAB * VOCAB).float()
        target = tail_pair_distribution(verifier, prompt, sampling)
        threshold = 2 * expected_tv(target, N)
        assert total_variation(counts, target) < threshold, (kind, prompt)
        if kind == "model":  # power: the draft's own distribution is far outside the tolerance
            assert 0.5 * (tail_pair_distribution(draft, prompt, sampling) - target).abs().sum() > 2 * threshold
    return result


def test_reference_processors_agree_with_an_explicit_top_p():
    """The reference itself, on a hand-worked case: probs (0.5, 0.3, 0.15, 0.05) at top-p 0.8 keep the
    first two (0.5 + 0.3 reaches 0.8) and renormalise."""
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    probs = reference_probs(logits, SamplingConfig(1.0, 0.8))
    torch.testing.assert_close(probs, torch.tensor([[0.625, 0.375, 0.0, 0.0]]))


def test_sampled_eagle3_follows_verifier_distribution():
    """An EAGLE-3 draft (fused layer outputs in, its own output fed back) keeps sampling lossless."""
    check_follows_verifier("eagle3", SamplingConfig(1.0, 0.8, seed=1))
