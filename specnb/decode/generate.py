"""KV-cached decoding: a verifier-only baseline and lossless speculative decoding, batch >= 1.

References: Leviathan, Kalman, Matias 2023, "Fast Inference from Transformers via Speculative
Decoding"; Chen et al. 2023, "Accelerating LLM Decoding with Speculative Sampling"; gpt-fast
(pytorch-labs) ``speculative_decode`` for the shape of the loop; Spec-Bench for raw records.

Public API::

    generate(verifier, input_ids, attention_mask=None, *, draft=None, decoding=None,
             sampling=None) -> GenerationResult

    decoding = Decoding(gamma=None, max_new_tokens=64, eos_token_id=None, tree=None, confidence=0.0,
                        vocab_size=None, timer=None)  # specnb.decode.settings; None: Decoding()

Prompts are tokenised (left padded) by ``specnb.decode.inputs.encode_prompts``; the KV caches live
in ``specnb.decode.kvcache``, the accept/reject rule in ``specnb.decode.accept``, the drafts behind
the ``Drafter`` seam in ``specnb.decode.drafters``. ``draft=None`` runs the verifier-only loop
(prefill, then one token per forward); ``draft`` is whatever ``load_pair`` returns (a causal LM, an
early exit, prompt lookup) or a ``Drafter``. ``sampling=None`` is greedy, else a ``SamplingConfig``
(temperature, top-p, seed). The other settings travel in ``decoding``: ``timer``: None (off), True,
or a ``StageTimer``. ``tree``: a static tree's branching per depth (EAGLE, Medusa), or ``"dynamic"``
(EAGLE-2's, grown from the draft's confidence each step), verified greedily. ``confidence``: a chain
stops where the draft's top probability falls below it (``specnb.decode.confidence``; 0: never).
``gamma``: an int, or a choice made per batch size (``GammaChoice``: the predictor's ``gamma="auto"``).

A step drafts, verifies, accepts and rolls back (``speculative_step``). A chain of k drafts is the
one-wide tree of depth k (``specnb.decode.trees``), so acceptance and the caches' bookkeeping take
one path for both: the accepted path's slots move to the front of the verified chunk, which for a
chain (a prefix) moves nothing.

Batch design (ragged acceptance). All rows share one rectangular KV cache per model; each row
keeps its own token positions (``seq_len``) and a 2D slot mask. After a verification step row i
keeps ``n_i + 1`` of the ``gamma + 1`` new slots. We crop the suffix that *every* row rejects
(``gamma - max n_i`` slots) and mask the remaining rejected slots of the other rows: they become
holes that no later query attends to. The draft's pending tokens (1 or 2 per row) are left-padded
into one chunk; the pad slots are holes too. Cost: no recomputation at all, but the cache grows by
``max n_i + 1`` slots per step for every row, so a row that accepts less than the best row carries
masked slots (memory, and attention over them) until generation ends; the mask is also rebuilt per
forward by transformers once any hole exists. With batch 1 there are never holes and no mask is
passed. Rows that finish (EOS or budget) keep being computed with the batch (as in HF
``generate``) but receive no tokens and add no statistics.

Drafts shorter than gamma: prompt lookup may find fewer tokens for some rows, a draft with a
confidence threshold stops rows where it is unsure; the step
verifies ``max_i k_i`` positions, the padded positions of shorter rows are never accepted and not
counted as drafted, and a row that accepts all of its ``k_i`` gets the bonus token at ``k_i``.
Near the budget the step shrinks gamma to ``remaining - 1`` (as HF does) so no work is wasted.

Counting: ``verifier_forwards`` and ``draft_forwards`` include the prefill forward of each model.
``accepted_per_step`` counts raw accepted draft tokens per verification step, before truncation
at EOS or at ``max_new_tokens``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from specnb.core.errors import IncompatibleModelsError, ParameterError
from specnb.core.sampling import SamplingConfig, pick_token
from specnb.decode.accept import accept_reject, accept_tree
from specnb.decode.drafters import Drafter, make_drafter
from specnb.decode.gamma import as_tree, choose_gamma, settle_gamma
from specnb.decode.kvcache import ModelKV
from specnb.decode.settings import Decoding
from specnb.decode.state import DecodeState, Proposal, Rows, Step
from specnb.decode.timing import NULL_TIMER, StageTimer, synchronize
from specnb.decode.trees import DynamicTree, TreeShape


@dataclass(kw_only=True)
class GenerationResult:
    """One batch: generated tokens per row plus the raw per-step records every summary derives from."""

    tokens: list[list[int]]  # per row: generated ids, no prompt, no padding, EOS included if produced
    accepted_per_step: list[list[int]]  # per row: accepted draft tokens at each verification step
    drafted_per_step: list[list[int]]  # per row: draft tokens proposed at each verification step
    draft_forwards: int
    verifier_forwards: int
    stages_ms: dict[str, float]
    wall_ms: float
    prefill_ms: float
    gamma: int
    prompt_lengths: list[int] = field(default_factory=list)
    gamma_reason: str = ""  # why this γ, when a ``GammaChoice`` chose it ("" for a γ given as a number)

    @property
    def new_tokens(self) -> int:
        return sum(len(t) for t in self.tokens)

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / (self.wall_ms / 1e3) if self.wall_ms > 0 else float("nan")

    @property
    def acceptance_rate(self) -> float:
        """alpha = accepted / drafted over all rows and steps (vLLM: draft acceptance rate)."""
        drafted = sum(map(sum, self.drafted_per_step))
        return sum(map(sum, self.accepted_per_step)) / drafted if drafted else float("nan")

    @property
    def mean_tokens_per_step(self) -> float:
        """tau = mean(accepted + 1) per verification step (vLLM: mean acceptance length)."""
        steps = [n + 1 for row in self.accepted_per_step for n in row]
        return sum(steps) / len(steps) if steps else float("nan")

    def records(self) -> list[dict]:
        """Spec-Bench style raw records, one per row (wall time is the batch's)."""
        return [
            {"row": i, "prompt_tokens": self.prompt_lengths[i] if self.prompt_lengths else None,
             "new_tokens": len(toks), "wall_ms": self.wall_ms, "steps": len(self.accepted_per_step[i]),
             "accept_lengths": list(self.accepted_per_step[i]), "drafted": list(self.drafted_per_step[i])}
            for i, toks in enumerate(self.tokens)
        ]


# ----------------------------------------------------------------------------- one step


def prefill(verifier: ModelKV, input_ids, attention_mask, rows: Rows, sampling, generator) -> DecodeState:
    """The verifier reads the prompts ``input_ids`` [B, S] (left padded) and picks each row's first token."""
    logits = verifier.prefill(input_ids, attention_mask)  # [B, V]
    last, _ = pick_token(logits, sampling, generator)  # [B]
    lengths = attention_mask.sum(1) if attention_mask is not None else torch.full_like(last, input_ids.shape[1])
    rows.emit_all([[tok] for tok in last.tolist()])
    return DecodeState(verifier=verifier, rows=rows, last=last, seq_len=lengths + 1,
                       contexts=real_tokens(input_ids, attention_mask), sampling=sampling, generator=generator,
                       vocab=logits.shape[-1], features=verifier.features)


def decode_one_token(state: DecodeState, timer) -> None:
    """Verifier-only: one forward, one token per row."""
    with timer.stage("verify"):
        logits = state.verifier.forward(state.last[:, None], (state.seq_len - 1)[:, None])[:, -1]  # [B, V]
    with timer.stage("accept"):
        state.last, _ = pick_token(logits, state.sampling, state.generator)  # [B]
        state.seq_len = state.seq_len + 1
        state.rows.emit_all([[tok] for tok in state.last.tolist()])


def verify(state: DecodeState, proposal: Proposal) -> torch.Tensor:
    """The verifier scores the last token and every node of the proposal in one forward: logits
    [B, N+1, V] (each node attends to its ancestors only, unless the tree is a chain)."""
    chunk = torch.cat([state.last[:, None], proposal.tokens], 1)  # [B, N+1]
    tree = proposal.tree
    positions = state.seq_len[:, None] - 1 + torch.tensor(tree.depths, device=chunk.device)  # [B, N+1]
    return state.verifier.forward(chunk, positions, keep=chunk.shape[1],
                                  tree=None if tree.chain else tree.ancestors(chunk.device))


def accepted_paths(state: DecodeState, proposal: Proposal, p_logits: torch.Tensor):
    """Per row: (accepted drafts, the token after them, the accepted path's chunk indices, root first)."""
    if state.sampling is None:  # greedy: walk down while the draft is the verifier's argmax
        return accept_tree(proposal.tokens, p_logits, proposal.tree, proposal.n_drafted.tolist())
    # rejection sampling (chains only: trees are verified greedily)
    n, last = accept_reject(proposal.tokens, proposal.q, p_logits, proposal.n_drafted, state.sampling,
                            state.generator)  # [B], [B]
    return n.tolist(), last.tolist(), [list(range(a + 1)) for a in n.tolist()]


def emit_accepted(state: DecodeState, proposal: Proposal, p_logits: torch.Tensor) -> Step:
    """Accept a path per row (a chain: a prefix); the next token is a correction or the bonus token.
    Emits the tokens of rows still generating and records their counts."""
    accepted, nxt, paths = accepted_paths(state, proposal, p_logits)
    rows, drafted = state.rows, proposal.n_drafted.tolist()
    live = rows.active()
    best = max(accepted[i] for i in live)
    for i, done in enumerate(rows.done):  # a finished row keeps the best row's slots: no holes
        if done:
            accepted[i], paths[i] = best, list(range(best + 1))
    nodes = proposal.tokens.tolist()  # [B, N]
    emitted = [[nodes[i][c - 1] for c in path[1:]] + [t] for i, (path, t) in enumerate(zip(paths, nxt))]
    for i in live:
        rows.accepted[i].append(accepted[i])
        rows.drafted[i].append(drafted[i])
    rows.emit_all(emitted)
    state.last = torch.tensor(nxt, device=p_logits.device)  # [B]
    state.seq_len = state.seq_len + state.last.new_tensor(accepted) + 1
    return Step(accepted=accepted, drafted=drafted, emitted=emitted, paths=paths,
                verified=proposal.tokens.shape[1] + 1)


def keep_verified(state: DecodeState, step: Step) -> None:
    """Roll the verifier's cache back to each row's path (moved to the front of the chunk), and hand a
    feature draft the hidden states of the kept positions, in order."""
    state.verifier.select(step.paths, step.verified)
    features = state.verifier.features  # [B, N+1, d] (EAGLE-3: [B, N+1, k*d]) or None
    if features is not None:
        width = max(map(len, step.paths))
        index = torch.tensor([p + p[-1:] * (width - len(p)) for p in step.paths], device=features.device)
        features = features.gather(1, index[..., None].expand(-1, -1, features.shape[-1]))  # [B, m, d]
    state.features = features


def speculative_step(state: DecodeState, drafter: Drafter, k: int, tree: TreeShape | None, timer) -> Proposal:
    """Draft, verify, accept/reject, roll back; returns what the draft proposed."""
    # 1. the draft proposes up to k tokens per row (or a tree of depth k)
    with timer.stage("draft"):
        proposal = drafter.propose(state, k, tree) if k > 0 else Proposal.empty(len(state.rows.done), state.last.device)
    # 2. the verifier scores the last token and every draft in one forward
    with timer.stage("verify"):
        p_logits = verify(state, proposal)  # [B, N+1, V]
    # 3. accept a path per row; the next token is a correction or the bonus token
    with timer.stage("accept"):
        step = emit_accepted(state, proposal, p_logits)
    # 4. both caches keep only what was accepted
    with timer.stage("rollback"):
        keep_verified(state, step)
        drafter.commit(state, proposal, step)
    return proposal


def decode_speculative(state: DecodeState, drafter: Drafter, gamma: int, tree: TreeShape | None,
                       timer) -> tuple[int, int]:
    """Speculative steps until every row stops; returns the numbers of verifier and draft forwards."""
    steps, forwards = 0, 0
    while state.rows.active():
        k = min(gamma, state.rows.max_remaining() - 1)  # no wasted drafts near the budget
        forwards += speculative_step(state, drafter, k, tree, timer).forwards
        steps += 1
    return steps, forwards


def decode_verifier_only(state: DecodeState, timer) -> int:
    """One token per verifier forward until every row stops; returns the number of forwards."""
    steps = 0
    while state.rows.active():
        decode_one_token(state, timer)
        steps += 1
    return steps


# ----------------------------------------------------------------------------- entry point


def check_settings(gamma: int, max_new_tokens: int, sampling: SamplingConfig | None, confidence: float = 0.0) -> None:
    """Range checks that need no model (the CLI runs them before loading anything)."""
    if not 0.0 <= confidence <= 1.0:
        raise ParameterError(f"confidence must be between 0 (never stop a chain early) and 1, got {confidence}")
    if gamma < 1:
        raise ParameterError(f"gamma must be >= 1 (draft tokens per step), got {gamma}")
    if max_new_tokens < 1:
        raise ParameterError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if sampling is not None and (sampling.temperature <= 0 or not 0 < sampling.top_p <= 1):
        raise ParameterError(f"need temperature > 0 and 0 < top_p <= 1, got {sampling}; "
                             "use sampling=None for greedy decoding")


def check_vocab(verifier, draft, vocab_size: int | None) -> int | None:
    """The vocabulary size both models are sliced to (None: their logits already agree)."""
    v_vocab = verifier.config.vocab_size
    d_vocab = getattr(getattr(draft, "config", None), "vocab_size", None)
    if vocab_size is None:
        if d_vocab is not None and d_vocab != v_vocab:
            raise IncompatibleModelsError(
                f"draft vocab_size {d_vocab} != verifier vocab_size {v_vocab}; pass vocab_size=N to slice "
                "both to their shared tokenizer's size (only when the tokenizers are identical)")
        return None
    if vocab_size < 1 or vocab_size > min(v_vocab, d_vocab or v_vocab):
        raise ParameterError(f"vocab_size={vocab_size} must be between 1 and both models' vocab_size "
                             f"(verifier {v_vocab}, draft {d_vocab})")
    return vocab_size


def check_tree(tree: TreeShape | DynamicTree | None, drafter, sampling) -> None:
    if tree is None:
        return
    kind = "no draft" if drafter is None else f"a {drafter.kind} draft"
    if isinstance(tree, DynamicTree) and not getattr(drafter, "dynamic_trees", False):
        raise ParameterError(f"a dynamic tree needs a draft that grows one (eagle), got {kind}; "
                             "use a static tree such as tree=(3, 2) or drop tree= to draft a chain")
    if drafter is None or not drafter.trees:
        raise ParameterError(f"tree={tree.label()} needs a draft that drafts trees (eagle, medusa), got {kind}; "
                             "drop tree= to draft a chain")
    if sampling is not None:
        raise ParameterError("trees are verified greedily; use sampling=None, or drop tree= to sample with a chain")


def seeded_generator(sampling: SamplingConfig | None, device) -> torch.Generator | None:
    """The random generator of a seeded sampling run (None: greedy, or torch's global generator)."""
    if sampling is None or sampling.seed is None:
        return None
    return torch.Generator(device=device).manual_seed(sampling.seed)


def resolve_timer(timer, device):
    if timer is None or timer is False:
        return NULL_TIMER
    return StageTimer(device) if timer is True else timer


def on_device(input_ids, attention_mask, device):
    """The prompts on the verifier's device; a mask with no padding is dropped (no holes, no mask)."""
    input_ids = input_ids.to(device)
    if attention_mask is not None:
        attention_mask = attention_mask.to(device)
        attention_mask = None if bool(attention_mask.all()) else attention_mask
    return input_ids, attention_mask


def real_tokens(input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> list[list[int]]:
    """Each row's prompt without its left padding."""
    mask = attention_mask if attention_mask is not None else torch.ones_like(input_ids)
    return [[t for t, m in zip(ids, ms) if m] for ids, ms in zip(input_ids.tolist(), mask.tolist())]


def generate(verifier, input_ids, attention_mask=None, *, draft=None, decoding: Decoding | None = None,
             sampling: SamplingConfig | None = None) -> GenerationResult:
    """Generate up to ``decoding.max_new_tokens`` per row; speculative when ``draft`` is given (see module
    doc). ``decoding``: a ``Decoding`` (None: its defaults); its fields, as this function reads them:

    ``tree``: a static tree's branching per depth, e.g. ``(3, 2, 1)``, for drafts that can draft one
    (EAGLE, Medusa); its depth replaces ``gamma``. ``tree="dynamic"`` (EAGLE): EAGLE-2's dynamic tree,
    ``gamma`` deep, grown by the draft's path probability (``specnb.decode.trees.DynamicTree`` sets its
    width and node budget). Trees are verified greedily (``sampling=None``).
    ``confidence``: chains stop at the first position whose draft top probability is below it, that
    position's token included (as HF's ``assistant_confidence_threshold``); prompt lookup and trees
    (static or dynamic) ignore it. ``gamma``: a number, a ``GammaChoice`` (``specnb.auto_gamma``) that picks it
    for this batch size, or None for the default (``settle_gamma``); the result records the γ used and why."""
    decoding = decoding if decoding is not None else Decoding()
    max_new_tokens, confidence = decoding.max_new_tokens, decoding.confidence
    gamma = settle_gamma(decoding.gamma, decoding.tree)
    tree = as_tree(decoding.tree, gamma)
    if tree is not None:
        gamma, gamma_reason = tree.depth, ""
    elif draft is not None:
        gamma, gamma_reason = choose_gamma(gamma, input_ids.shape[0])
    else:  # verifier-only: nothing to choose (a number is still range-checked)
        gamma, gamma_reason = (gamma if isinstance(gamma, int) else 1), ""
    check_settings(gamma, max_new_tokens, sampling, confidence)
    vocab_size = check_vocab(verifier, draft, decoding.vocab_size)
    drafter = make_drafter(draft, vocab_size) if draft is not None else None
    check_tree(tree, drafter, sampling)
    device = next(verifier.parameters()).device
    input_ids, attention_mask = on_device(input_ids, attention_mask, device)
    generator = seeded_generator(sampling, device)
    timer = resolve_timer(decoding.timer, device)
    rows = Rows(input_ids.shape[0], max_new_tokens, decoding.eos_token_id)
    with torch.inference_mode():
        synchronize(device)
        t0 = time.perf_counter()
        timer.start()
        with timer.stage("prefill"):
            wanted = drafter.feature_layers if drafter is not None and drafter.needs_features else None
            kv = ModelKV(verifier, vocab_size, features=wanted)
            state = prefill(kv, input_ids, attention_mask, rows, sampling, generator)
            state.confidence = confidence
            d_forwards = drafter.begin(state, input_ids, attention_mask) if drafter is not None else 0
        synchronize(device)
        prefill_ms = (time.perf_counter() - t0) * 1e3
        if drafter is None:
            v_forwards = decode_verifier_only(state, timer)
        else:
            v_forwards, forwards = decode_speculative(state, drafter, gamma, tree, timer)
            d_forwards += forwards
        timer.stop()
        synchronize(device)
        wall_ms = (time.perf_counter() - t0) * 1e3
    return GenerationResult(
        tokens=rows.out, accepted_per_step=rows.accepted, drafted_per_step=rows.drafted,
        draft_forwards=d_forwards, verifier_forwards=v_forwards + 1,
        stages_ms=timer.stages_ms(), wall_ms=wall_ms, prefill_ms=prefill_ms,
        gamma=gamma if draft is not None else 0, prompt_lengths=[len(c) for c in state.contexts],
        gamma_reason=gamma_reason if draft is not None else "")
