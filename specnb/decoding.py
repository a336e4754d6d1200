"""KV-cached decoding: a verifier-only baseline and lossless speculative decoding, batch >= 1.

References: Leviathan, Kalman, Matias 2023, "Fast Inference from Transformers via Speculative
Decoding"; Chen et al. 2023, "Accelerating LLM Decoding with Speculative Sampling"; gpt-fast
(pytorch-labs) ``speculative_decode`` for the shape of the loop; Spec-Bench for raw records.

Public API::

    encode_prompts(tokenizer, prompts, chat=True) -> (input_ids [B, S], attention_mask [B, S])  # left padded
    generate(verifier, input_ids, attention_mask=None, *, draft=None, gamma=4, max_new_tokens=64,
             sampling=None, eos_token_id=None, timer=None, vocab_size=None) -> GenerationResult

The KV-cache helpers live in ``specnb.kvcache`` and the accept/reject rule in ``specnb.sampling``.
``draft=None`` runs the verifier-only loop (prefill, then one token per forward). ``draft`` may be
a Hugging Face causal LM or a ``PromptLookupDrafter``. ``sampling=None`` is greedy, else a
``SamplingConfig`` (temperature, top-p, seed). ``timer``: None (off), True, or a ``StageTimer``.

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

Drafts shorter than gamma: the lookup drafter may find fewer tokens for some rows; the step
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

from specnb.errors import IncompatibleModelsError, ParameterError
from specnb.kvcache import ModelKV, crop_cache  # noqa: F401  (crop_cache re-exported)
from specnb.lookup import PromptLookupDrafter
from specnb.sampling import SamplingConfig, accept_reject, logits_to_probs, pick_token  # noqa: F401
from specnb.timing import NULL_TIMER, StageTimer, synchronize


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

    @property
    def per_position_acceptance(self) -> list[float]:
        """For position j = 1..gamma: P(draft token j accepted | it was drafted)."""
        rates = []
        for j in range(1, self.gamma + 1):
            pairs = [(n, d) for a, b in zip(self.accepted_per_step, self.drafted_per_step) for n, d in zip(a, b)]
            drafted = sum(d >= j for _, d in pairs)
            rates.append(sum(n >= j for n, _ in pairs) / drafted if drafted else float("nan"))
        return rates

    def records(self) -> list[dict]:
        """Spec-Bench style raw records, one per row (wall time is the batch's)."""
        return [
            {"row": i, "prompt_tokens": self.prompt_lengths[i] if self.prompt_lengths else None,
             "new_tokens": len(toks), "wall_ms": self.wall_ms, "steps": len(self.accepted_per_step[i]),
             "accept_lengths": list(self.accepted_per_step[i]), "drafted": list(self.drafted_per_step[i])}
            for i, toks in enumerate(self.tokens)
        ]


# ----------------------------------------------------------------------------- prompts


def encode_prompts(tokenizer, prompts: list[str], chat: bool = True, device=None):
    """Tokenize prompts, each as a user chat turn when the tokenizer has a template; LEFT padded.

    Returns ``(input_ids [B, S], attention_mask [B, S])``. Left padding keeps every row's last
    real token in the last column, which the decoding loops rely on.
    """
    rows = []
    for prompt in prompts:
        if chat and getattr(tokenizer, "chat_template", None):
            text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                 add_generation_prompt=True, tokenize=False)
            rows.append(tokenizer(text, add_special_tokens=False)["input_ids"])
        else:
            rows.append(tokenizer(prompt)["input_ids"])
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    width = max(len(r) for r in rows)
    input_ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], dtype=torch.long)
    attention_mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], dtype=torch.long)
    return input_ids.to(device or "cpu"), attention_mask.to(device or "cpu")


# ----------------------------------------------------------------------------- bookkeeping


class Rows:
    """Per-row output lists, stop conditions (EOS, budget) and statistics."""

    def __init__(self, batch: int, max_new_tokens: int, eos_token_id):
        eos = eos_token_id if isinstance(eos_token_id, (list, tuple, set)) else [eos_token_id]
        self.eos = {int(e) for e in eos if e is not None}
        self.max_new = max_new_tokens
        self.out: list[list[int]] = [[] for _ in range(batch)]
        self.done = [False] * batch
        self.accepted: list[list[int]] = [[] for _ in range(batch)]
        self.drafted: list[list[int]] = [[] for _ in range(batch)]

    def active(self) -> list[int]:
        return [i for i, d in enumerate(self.done) if not d]

    def max_remaining(self) -> int:
        return max((self.max_new - len(self.out[i]) for i in self.active()), default=0)

    def emit(self, row: int, tokens: list[int]) -> None:
        """Append tokens to a row, stopping after EOS or at the budget (never more, nothing after EOS)."""
        out = self.out[row]
        for tok in tokens:
            out.append(tok)
            if tok in self.eos or len(out) >= self.max_new:
                self.done[row] = True
                return


# ----------------------------------------------------------------------------- loops


def prefill(kv: ModelKV, input_ids, attention_mask) -> torch.Tensor:
    """Run the prompt through a model; returns logits of the last column [B, V]."""
    if attention_mask is None:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).expand(input_ids.shape[0], -1)
        return kv.forward(input_ids, positions)[:, -1]
    # left padding: real tokens are numbered from 0; pad slots get a dummy position and are masked
    positions = (attention_mask.long().cumsum(1) - 1).masked_fill(attention_mask == 0, 1)
    return kv.forward(input_ids, positions, chunk_mask=attention_mask.bool())[:, -1]


def decode_verifier_only(vkv: ModelKV, rows: Rows, last, seq_len, sampling, generator, timer) -> int:
    """One token per verifier forward until every row stops; returns the number of forwards."""
    eos = torch.tensor(sorted(rows.eos) or [-1], device=last.device)
    done = torch.tensor(rows.done, device=last.device)  # [B]
    steps, produced = 0, []
    for _ in range(rows.max_new - 1):
        if bool(done.all()):
            break
        with timer.stage("verify"):
            logits = vkv.forward(last[:, None], (seq_len - 1)[:, None])[:, -1]  # [B, V]
        with timer.stage("accept"):
            last, _ = pick_token(logits, sampling, generator)  # [B]
            produced.append(torch.where(done, -1, last))
            done = done | torch.isin(last, eos)
            seq_len = seq_len + 1
        steps += 1
    if produced:
        for i, row in enumerate(torch.stack(produced, 1).tolist()):  # [B, steps]; -1 marks a finished row
            if not rows.done[i]:
                rows.emit(i, [t for t in row if t >= 0])
    return steps


def draft_tokens(draft, dkv, vocab, rows: Rows, contexts, pending, seq_len, k, sampling, generator):
    """Propose up to k tokens per row. Returns (drafts [B, k'], q [B, k', V] or None, n_drafted [B], forwards).

    A lookup drafter is deterministic: its q is one-hot on the proposal (zero on padded positions).
    """
    device = seq_len.device
    if isinstance(draft, PromptLookupDrafter):
        proposals = [draft.propose(contexts[i] + rows.out[i], k) if not rows.done[i] else []
                     for i in range(len(rows.done))]
        width = max(map(len, proposals))
        drafts = torch.tensor([p + [0] * (width - len(p)) for p in proposals], dtype=torch.long, device=device)
        n_drafted = torch.tensor([len(p) for p in proposals], device=device)
        q = None
        if sampling is not None and width:
            valid = torch.arange(width, device=device)[None, :] < n_drafted[:, None]  # [B, k']
            q = torch.nn.functional.one_hot(drafts, vocab).float() * valid[..., None]
        return drafts, q, n_drafted, 0
    # the draft first catches up on its pending tokens (1 or 2 per row, left padded), then runs k-1 more
    width = max(map(len, pending))
    chunk = torch.tensor([[0] * (width - len(p)) + p for p in pending], device=device)  # [B, w]
    chunk_mask = None
    if min(map(len, pending)) < width:
        chunk_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in pending], device=device)
    positions = (seq_len[:, None] - width + torch.arange(width, device=device)).clamp_min(0)  # [B, w]
    logits = dkv.forward(chunk, positions, chunk_mask)[:, -1]  # [B, V]
    tokens, probs = [], []
    for j in range(k):
        if j:
            logits = dkv.forward(tokens[-1][:, None], (seq_len + j - 1)[:, None])[:, -1]
        tok, prob = pick_token(logits, sampling, generator)
        tokens.append(tok)
        probs.append(prob)
    q = torch.stack(probs, 1) if sampling is not None else None
    return torch.stack(tokens, 1), q, torch.full_like(seq_len, k), k


def decode_speculative(vkv, dkv, draft, rows: Rows, contexts, last, seq_len, gamma, sampling, generator, timer):
    """Draft, verify, accept/reject, roll back; returns (verifier forwards, draft forwards).

    ``dkv`` is the draft's ModelKV (None for a lookup drafter); ``contexts`` the prompts' real tokens.
    """
    batch = last.shape[0]
    vocab = vkv.vocab_size or vkv.model.config.vocab_size
    pending = [[t] for t in last.tolist()]  # tokens the draft cache has not seen, per row
    v_forwards = d_forwards = 0
    while rows.active():
        k = min(gamma, rows.max_remaining() - 1)
        # 1. draft proposes up to k tokens per row
        with timer.stage("draft"):
            if k > 0:
                drafts, q, n_drafted, forwards = draft_tokens(draft, dkv, vocab, rows, contexts, pending,
                                                              seq_len, k, sampling, generator)
            else:
                drafts = torch.zeros(batch, 0, dtype=torch.long, device=last.device)
                q, n_drafted, forwards = None, torch.zeros_like(seq_len), 0
            d_forwards += forwards
        width = drafts.shape[1]
        # 2. verifier scores the last token and all drafts in one forward
        with timer.stage("verify"):
            chunk = torch.cat([last[:, None], drafts], 1)  # [B, k'+1]
            positions = seq_len[:, None] - 1 + torch.arange(width + 1, device=last.device)
            p_logits = vkv.forward(chunk, positions, keep=width + 1)  # [B, k'+1, V]
        v_forwards += 1
        # 3. accept a prefix per row; the next token is a correction or the bonus token
        with timer.stage("accept"):
            n, last = accept_reject(drafts, q, p_logits, n_drafted, sampling, generator)
            seq_len = seq_len + n + 1
            emitted = torch.cat([drafts, last[:, None]], 1).scatter(1, n[:, None].long(), last[:, None])
            host = torch.cat([n[:, None].long(), n_drafted[:, None].long(), emitted], 1).tolist()
            active = rows.active()
            was_active = [not done for done in rows.done]
            for i in active:
                n_i, k_i = host[i][0], host[i][1]
                rows.accepted[i].append(n_i)
                rows.drafted[i].append(k_i)
                rows.emit(i, host[i][2:3 + n_i])
        # 4. roll both caches back to the accepted prefix (rows that are done never force holes)
        with timer.stage("rollback"):
            best = max(host[i][0] for i in active)
            keep_n = [row[0] if live else best for row, live in zip(host, was_active)]
            vkv.rollback([n_i + 1 for n_i in keep_n], width + 1)
            if forwards:
                w = max(map(len, pending))
                dkv.rollback([w + min(n_i, k - 1) for n_i in keep_n], w + k - 1)
                pending = [[row[2 + k - 1], row[2 + k]] if row[0] == k else [row[2 + row[0]]] for row in host]
            elif dkv is not None:  # the draft skipped this step: it has more to catch up on
                pending = [p + [row[2 + row[0]]] for p, row in zip(pending, host)]
    return v_forwards, d_forwards


# ----------------------------------------------------------------------------- entry point


def check_parameters(gamma: int, max_new_tokens: int, sampling: SamplingConfig | None) -> None:
    """Range checks that need no model (the CLI runs them before loading anything)."""
    if gamma < 1:
        raise ParameterError(f"gamma must be >= 1 (draft tokens per step), got {gamma}")
    if max_new_tokens < 1:
        raise ParameterError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if sampling is not None and (sampling.temperature <= 0 or not 0 < sampling.top_p <= 1):
        raise ParameterError(f"need temperature > 0 and 0 < top_p <= 1, got {sampling}; "
                             "use sampling=None for greedy decoding")


def check_inputs(verifier, draft, gamma, max_new_tokens, sampling, vocab_size) -> int | None:
    """Validate arguments before any work; returns the vocabulary size both models are sliced to."""
    check_parameters(gamma, max_new_tokens, sampling)
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


def resolve_timer(timer, device):
    if timer is None or timer is False:
        return NULL_TIMER
    return StageTimer(device) if timer is True else timer


def generate(verifier, input_ids, attention_mask=None, *, draft=None, gamma: int = 4, max_new_tokens: int = 64,
             sampling: SamplingConfig | None = None, eos_token_id=None, timer=None,
             vocab_size: int | None = None) -> GenerationResult:
    """Generate up to ``max_new_tokens`` per row; speculative when ``draft`` is given (see module doc)."""
    vocab_size = check_inputs(verifier, draft, gamma, max_new_tokens, sampling, vocab_size)
    device = next(verifier.parameters()).device
    input_ids = input_ids.to(device)
    if attention_mask is not None:
        attention_mask = attention_mask.to(device)
        attention_mask = None if bool(attention_mask.all()) else attention_mask
    generator = None
    if sampling is not None and sampling.seed is not None:
        generator = torch.Generator(device=device).manual_seed(sampling.seed)
    timer = resolve_timer(timer, device)
    is_model = draft is not None and not isinstance(draft, PromptLookupDrafter)
    batch = input_ids.shape[0]
    rows = Rows(batch, max_new_tokens, eos_token_id)
    with torch.inference_mode():
        synchronize(device)
        t0 = time.perf_counter()
        timer.start()
        with timer.stage("prefill"):
            vkv = ModelKV(verifier, vocab_size)
            last, _ = pick_token(prefill(vkv, input_ids, attention_mask), sampling, generator)  # [B]
            dkv = ModelKV(draft, vocab_size) if is_model else None
            if is_model:
                prefill(dkv, input_ids, attention_mask)
            lengths = attention_mask.sum(1) if attention_mask is not None else torch.full_like(last, input_ids.shape[1])
            seq_len = lengths + 1  # committed tokens per row, incl. the first generated one
            for i, tok in enumerate(last.tolist()):
                rows.emit(i, [tok])
        synchronize(device)
        prefill_ms = (time.perf_counter() - t0) * 1e3
        if draft is None:
            v_forwards, d_forwards = decode_verifier_only(vkv, rows, last, seq_len, sampling, generator, timer), 0
        else:
            contexts = None
            if not is_model:
                mask = attention_mask if attention_mask is not None else torch.ones_like(input_ids)
                contexts = [[t for t, m in zip(ids, ms) if m] for ids, ms in zip(input_ids.tolist(), mask.tolist())]
            v_forwards, d_forwards = decode_speculative(vkv, dkv, draft, rows, contexts, last, seq_len, gamma,
                                                        sampling, generator, timer)
        timer.stop()
        synchronize(device)
        wall_ms = (time.perf_counter() - t0) * 1e3
    return GenerationResult(
        tokens=rows.out, accepted_per_step=rows.accepted, drafted_per_step=rows.drafted,
        draft_forwards=d_forwards + int(is_model), verifier_forwards=v_forwards + 1,
        stages_ms=timer.stages_ms(), wall_ms=wall_ms, prefill_ms=prefill_ms,
        gamma=gamma if draft is not None else 0, prompt_lengths=lengths.tolist())
