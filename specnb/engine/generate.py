"""KV-cached decoding: a verifier-only baseline and lossless speculative decoding, batch >= 1.

References: Leviathan, Kalman, Matias 2023, "Fast Inference from Transformers via Speculative
Decoding"; Chen et al. 2023, "Accelerating LLM Decoding with Speculative Sampling"; gpt-fast
(pytorch-labs) ``speculative_decode`` for the shape of the loop; Spec-Bench for raw records.

Public API::

    generate(verifier, input_ids, attention_mask=None, *, draft=None, gamma=4, max_new_tokens=64,
             sampling=None, eos_token_id=None, timer=None, vocab_size=None) -> GenerationResult

Prompts are tokenised (left padded) by ``specnb.engine.inputs.encode_prompts``; the KV caches live
in ``specnb.engine.kvcache``, the accept/reject rule in ``specnb.engine.sampling``, the drafts behind
the ``Drafter`` seam in ``specnb.engine.drafters``. ``draft=None`` runs the verifier-only loop
(prefill, then one token per forward); ``draft`` is whatever ``load_pair`` returns (a causal LM, an
early exit, prompt lookup) or a ``Drafter``. ``sampling=None`` is greedy, else a ``SamplingConfig``
(temperature, top-p, seed). ``timer``: None (off), True, or a ``StageTimer``.

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

Drafts shorter than gamma: prompt lookup may find fewer tokens for some rows; the step
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
from specnb.engine.drafters import Drafter, make_drafter
from specnb.engine.kvcache import ModelKV
from specnb.engine.sampling import SamplingConfig, accept_reject, pick_token
from specnb.engine.state import DecodeState, Proposal, Rows, Step
from specnb.engine.timing import NULL_TIMER, StageTimer, synchronize
from specnb.engine.trees import TreeShape, accept_tree


@dataclass
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


# ----------------------------------------------------------------------------- loops


def decode_verifier_only(state: DecodeState, timer) -> int:
    """One token per verifier forward until every row stops; returns the number of forwards."""
    rows, last, seq_len = state.rows, state.last, state.seq_len
    eos = torch.tensor(sorted(rows.eos) or [-1], device=last.device)
    done = torch.tensor(rows.done, device=last.device)  # [B]
    steps, produced = 0, []
    for _ in range(rows.max_new - 1):
        if bool(done.all()):
            break
        with timer.stage("verify"):
            logits = state.verifier.forward(last[:, None], (seq_len - 1)[:, None])[:, -1]  # [B, V]
        with timer.stage("accept"):
            last, _ = pick_token(logits, state.sampling, state.generator)  # [B]
            produced.append(torch.where(done, -1, last))
            done = done | torch.isin(last, eos)
            seq_len = seq_len + 1
        steps += 1
    if produced:
        for i, row in enumerate(torch.stack(produced, 1).tolist()):  # [B, steps]; -1 marks a finished row
            if not rows.done[i]:
                rows.emit(i, [t for t in row if t >= 0])
    return steps


def verify(state: DecodeState, proposal: Proposal, features: bool) -> torch.Tensor:
    """The verifier scores the last token and every draft (a chain, or a tree's nodes) in one forward:
    logits [B, k'+1, V]; with ``features`` its hidden states of those columns are kept too."""
    chunk = torch.cat([state.last[:, None], proposal.tokens], 1)  # [B, k'+1]
    tree = proposal.tree
    depth = torch.tensor(tree.depths if tree is not None else range(chunk.shape[1]), device=chunk.device)
    positions = state.seq_len[:, None] - 1 + depth  # [B, k'+1]
    return state.verifier.forward(chunk, positions, keep=chunk.shape[1], features=features,
                                  tree=None if tree is None else tree.ancestors(chunk.device))


def accept(state: DecodeState, proposal: Proposal, p_logits: torch.Tensor) -> Step:
    """Accept a prefix per row (a path, for a tree); the next token is a correction or the bonus
    token. Emits the tokens of rows still generating and records their counts."""
    paths = None
    if proposal.tree is None:
        n, last = accept_reject(proposal.tokens, proposal.q, p_logits, proposal.n_drafted, state.sampling,
                                state.generator)  # [B], [B]
        emitted = torch.cat([proposal.tokens, last[:, None]], 1).scatter(1, n[:, None].long(), last[:, None])
        accepted = n.tolist()
        emitted = [row[: a + 1] for row, a in zip(emitted.tolist(), accepted)]  # [B] lists
    else:
        accepted, nxt, paths = accept_tree(proposal.tokens, p_logits, proposal.tree)
        nodes = proposal.tokens.tolist()
        emitted = [[nodes[i][c - 1] for c in path[1:]] + [t] for i, (path, t) in enumerate(zip(paths, nxt))]
        n, last = (torch.tensor(v, device=p_logits.device) for v in (accepted, nxt))
    drafted, rows = proposal.n_drafted.tolist(), state.rows
    live = rows.active()
    best = max(accepted[i] for i in live)
    kept = [best] * len(accepted)  # rows that finished earlier keep the best row's slots: no holes
    for i in live:
        kept[i] = accepted[i]
        rows.accepted[i].append(accepted[i])
        rows.drafted[i].append(drafted[i])
        rows.emit(i, emitted[i])
    if paths is not None:  # a finished row keeps any best + 1 slots, as in a chain
        paths = [path if i in live else list(range(best + 1)) for i, path in enumerate(paths)]
    state.seq_len = state.seq_len + n + 1
    state.last = last
    return Step(accepted, drafted, emitted, kept, proposal.tokens.shape[1] + 1, paths)


def keep_verified(state: DecodeState, step: Step) -> None:
    """Roll the verifier's cache back to what each row kept (a tree: its path moves to the front), and
    hand a feature draft the hidden states of the kept positions, in order."""
    if step.paths is None:
        state.verifier.rollback([n + 1 for n in step.kept], step.verified)
    else:
        state.verifier.select(step.paths, step.verified)
    features = state.verifier.features
    if features is not None and step.paths is not None:
        width = max(map(len, step.paths))
        index = torch.tensor([p + p[-1:] * (width - len(p)) for p in step.paths], device=features.device)
        features = features.gather(1, index[..., None].expand(-1, -1, features.shape[-1]))  # [B, m, d]
    state.features = features


def decode_speculative(state: DecodeState, drafter: Drafter, gamma: int, timer,
                       tree: TreeShape | None = None) -> tuple[int, int]:
    """Draft, verify, accept/reject, roll back, until every row stops; returns the numbers of
    verifier and draft forwards."""
    batch, steps, forwards = len(state.rows.done), 0, 0
    while state.rows.active():
        k = min(gamma, state.rows.max_remaining() - 1)  # no wasted drafts near the budget
        # 1. the draft proposes up to k tokens per row (or a tree of depth k)
        with timer.stage("draft"):
            proposal = drafter.propose(state, k, tree) if k > 0 else Proposal.empty(batch, state.last.device)
            forwards += proposal.forwards
        # 2. the verifier scores the last token and every draft in one forward
        with timer.stage("verify"):
            p_logits = verify(state, proposal, drafter.needs_features)  # [B, k'+1, V]
        # 3. accept a prefix per row; the next token is a correction or the bonus token
        with timer.stage("accept"):
            step = accept(state, proposal, p_logits)
        # 4. both caches keep only what was accepted
        with timer.stage("rollback"):
            keep_verified(state, step)
            drafter.commit(state, step)
        steps += 1
    return steps, forwards


# ----------------------------------------------------------------------------- entry point


def check_settings(gamma: int, max_new_tokens: int, sampling: SamplingConfig | None) -> None:
    """Range checks that need no model (the CLI runs them before loading anything)."""
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


def check_tree(tree: TreeShape | None, drafter, sampling) -> None:
    if tree is None:
        return
    if drafter is None or not drafter.trees:
        kind = "no draft" if drafter is None else f"a {drafter.kind} draft"
        raise ParameterError(f"tree={tree.branching} needs a draft that drafts trees (eagle, medusa), got {kind}; "
                             "drop tree= to draft a chain")
    if sampling is not None:
        raise ParameterError("trees are verified greedily; use sampling=None, or drop tree= to sample with a chain")


def resolve_timer(timer, device):
    if timer is None or timer is False:
        return NULL_TIMER
    return StageTimer(device) if timer is True else timer


def real_tokens(input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> list[list[int]]:
    """Each row's prompt without its left padding."""
    mask = attention_mask if attention_mask is not None else torch.ones_like(input_ids)
    return [[t for t, m in zip(ids, ms) if m] for ids, ms in zip(input_ids.tolist(), mask.tolist())]


def generate(verifier, input_ids, attention_mask=None, *, draft=None, gamma: int = 4, max_new_tokens: int = 64,
             sampling: SamplingConfig | None = None, eos_token_id=None, timer=None,
             vocab_size: int | None = None, tree=None) -> GenerationResult:
    """Generate up to ``max_new_tokens`` per row; speculative when ``draft`` is given (see module doc).

    ``tree``: a static tree's branching per depth, e.g. ``(3, 2, 1)``, for drafts that can draft one
    (EAGLE, Medusa); its depth replaces ``gamma``. Trees are verified greedily (``sampling=None``)."""
    tree = TreeShape(tuple(int(b) for b in tree)) if tree is not None else None
    gamma = tree.depth if tree is not None else gamma
    check_settings(gamma, max_new_tokens, sampling)
    vocab_size = check_vocab(verifier, draft, vocab_size)
    device = next(verifier.parameters()).device
    input_ids = input_ids.to(device)
    if attention_mask is not None:
        attention_mask = attention_mask.to(device)
        attention_mask = None if bool(attention_mask.all()) else attention_mask
    generator = None
    if sampling is not None and sampling.seed is not None:
        generator = torch.Generator(device=device).manual_seed(sampling.seed)
    timer = resolve_timer(timer, device)
    drafter = make_drafter(draft, vocab_size) if draft is not None else None
    check_tree(tree, drafter, sampling)
    rows = Rows(input_ids.shape[0], max_new_tokens, eos_token_id)
    with torch.inference_mode():
        synchronize(device)
        t0 = time.perf_counter()
        timer.start()
        with timer.stage("prefill"):
            vkv = ModelKV(verifier, vocab_size)
            features = drafter is not None and drafter.needs_features
            last, _ = pick_token(vkv.prefill(input_ids, attention_mask, features), sampling, generator)  # [B]
            lengths = attention_mask.sum(1) if attention_mask is not None else torch.full_like(last, input_ids.shape[1])
            state = DecodeState(vkv, rows, last, lengths + 1, real_tokens(input_ids, attention_mask), sampling,
                                generator, vocab_size or verifier.config.vocab_size, vkv.features)
            d_forwards = drafter.begin(state, input_ids, attention_mask) if drafter is not None else 0
            for i, tok in enumerate(last.tolist()):
                rows.emit(i, [tok])
        synchronize(device)
        prefill_ms = (time.perf_counter() - t0) * 1e3
        if drafter is None:
            v_forwards = decode_verifier_only(state, timer)
        else:
            v_forwards, forwards = decode_speculative(state, drafter, gamma, timer, tree)
            d_forwards += forwards
        timer.stop()
        synchronize(device)
        wall_ms = (time.perf_counter() - t0) * 1e3
    return GenerationResult(
        tokens=rows.out, accepted_per_step=rows.accepted, drafted_per_step=rows.drafted,
        draft_forwards=d_forwards, verifier_forwards=v_forwards + 1,
        stages_ms=timer.stages_ms(), wall_ms=wall_ms, prefill_ms=prefill_ms,
        gamma=gamma if draft is not None else 0, prompt_lengths=lengths.tolist())
