"""Distil a family of small drafts from the embedded verifier (SmolLM2-135M-Instruct).

Recipe (Hinton et al. 2015, "Distilling the Knowledge in a Neural Network"; applied to
speculative decoding by Zhou et al. 2024, "DistillSpec"): the verifier answers a set of
template-built instructions (``train_prompts``) greedily, and we keep its top-k next-token
logits at every answer position (``corpus``). Each draft is then trained to minimise KL(teacher || draft) on
those positions. Training on the verifier's *own* answers (on-policy) is what raises acceptance
(Leviathan et al. 2023, Chen et al. 2023): the draft must guess what the verifier would say.

Storage contract (``specnb/data/drafts/<name>/``): ``config.json`` (a plain LlamaConfig dict),
``weights.safetensors`` (fp16, without ``model.embed_tokens.weight`` / ``lm_head.weight``, which
come from the frozen verifier; drafts narrower than the verifier add ``embed_proj.weight``
[d, 576] and use embedding = verifier_embedding @ embed_proj.T), ``meta.json`` (how it was built).

Determinism: ``torch.manual_seed(seed)``, 2 threads and a fixed data order give bitwise-identical
weights for the same torch version, thread count and CPU.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from specnb.core import paths
from specnb.core.errors import ParameterError
from specnb.core.sequences import eos_ids
from specnb.models.cache import cache_dir
from specnb.models.embedded import embedded_verifier_path
from specnb.models.training.corpus import (
    CorpusSource,
    Sample,
    chat_prompts,
    corpus_key,
    corpus_meta,
    generate_corpus,
    text_chunks,
    text_corpus,
)
from specnb.models.training.student import (
    DRAFT_SPECS,
    DraftSpec,
    Student,
    _make_student,
    _student_logits,
    count_params,
    draft_state_dict,
    llama_config,
    save_draft,
)
from specnb.models.training.train_prompts import build_instructions
from specnb.models.trimmed_head import most_frequent_tokens


@dataclass(frozen=True, kw_only=True)
class DistillConfig:
    """Corpus and training settings; ``QUICK`` shrinks them for tests and smoke runs."""

    seed: int = 0
    n_prompts: int = 448
    max_new_tokens: int = 112
    gen_batch: int = 32
    top_k: int = 64
    heldout_frac: float = 0.05
    epochs: int = 2
    batch_seqs: int = 4
    warmup_steps: int = 10
    threads: int = 1
    n_text_seqs: int = 384
    text_len: int = 128
    text_batch: int = 8
    head_tokens: int = 8192


QUICK = DistillConfig(
    n_prompts=24,
    max_new_tokens=24,
    gen_batch=8,
    heldout_frac=0.1,
    epochs=1,
    batch_seqs=4,
    warmup_steps=2,
    n_text_seqs=8,
    text_len=32,
    head_tokens=1024,
)


@dataclass(kw_only=True)
class DraftReport:
    """What one build produced and measured."""

    name: str
    params_non_embedding: int
    params_total: int
    committed_mb: float
    agreement_before: float
    agreement_after: float
    loss_first: float
    loss_last: float
    train_s: float
    folder: str = ""
    extra: dict = field(default_factory=dict)


# ---------------------------------------------------------------- training


def _batch(samples: list[Sample]):
    """Right-pad a batch; return ids, mask, gather positions and teacher top-k for them."""
    import torch

    width = max(len(s.ids) for s in samples)
    ids = torch.zeros(len(samples), width, dtype=torch.long)  # [B, S]
    mask = torch.zeros(len(samples), width, dtype=torch.long)  # [B, S]
    rows, cols = [], []
    for b, s in enumerate(samples):
        ids[b, : len(s.ids)] = s.ids
        mask[b, : len(s.ids)] = 1
        answer = len(s.ids) - s.prompt_len
        rows += [b] * answer
        cols += range(s.prompt_len - 1, s.prompt_len - 1 + answer)  # position t predicts token t+1
    vals = torch.cat([s.top_vals for s in samples]).float()  # [N, k]
    idx = torch.cat([s.top_idx for s in samples]).long()  # [N, k]
    return ids, mask, torch.tensor(rows), torch.tensor(cols), vals, idx


def distill_loss(student_logits, top_vals, top_pos, member=None):
    """KL(teacher || draft) with the teacher restricted to its top-k (renormalised), temperature 1.

    ``top_pos`` [N, k]: columns of ``student_logits`` holding the teacher's top-k tokens; ``member``
    [N, k] (optional): False where that token is outside the draft's vocabulary (a trimmed head),
    so the teacher is renormalised over the tokens the draft can say; rows with none are skipped.
    """
    import torch

    if member is not None:
        keep = member.any(-1)  # [N]
        student_logits, top_vals, top_pos, member = student_logits[keep], top_vals[keep], top_pos[keep], member[keep]
        top_vals = top_vals.masked_fill(~member, float("-inf"))
    logp = torch.log_softmax(student_logits.float(), dim=-1).gather(-1, top_pos)  # [N, k]
    teacher = torch.log_softmax(top_vals, dim=-1)  # [N, k]
    terms = teacher.exp() * (teacher - logp)
    if member is not None:
        terms = terms.masked_fill(~member, 0.0)  # 0 · (-inf) would be nan
    return terms.sum(-1).mean()


def columns_of(vocab, idx):
    """(positions of ``idx`` in the sorted ``vocab`` [U], and whether each is in it at all)."""
    import torch

    pos = torch.searchsorted(vocab, idx).clamp(max=len(vocab) - 1)
    return pos, vocab[pos] == idx


def agreement(student: Student, samples: list[Sample], batch_seqs: int = 8, head=None) -> float:
    """Teacher-forced top-1 agreement: how often the draft's argmax is the verifier's argmax
    (with a trimmed ``head`` [H], the argmax over the head's tokens)."""
    import torch

    hits = total = 0
    with torch.no_grad():
        for i in range(0, len(samples), batch_seqs):
            ids, mask, rows, cols, _, idx = _batch(samples[i : i + batch_seqs])
            logits = _student_logits(student, ids, mask, rows, cols, head)
            guess = logits.argmax(-1) if head is None else head[logits.argmax(-1)]  # [N] token ids
            hits += int((guess == idx[:, 0]).sum())
            total += len(idx)
    return hits / max(total, 1)


def calibrate_scale(student: Student, samples: list[Sample], scales=(0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 1.0),
                    head=None) -> float:
    """Rescale the final norm so the initial logits have the teacher's temperature.

    Why: a verifier layer copied to the bottom of a 1-2 layer draft feeds the final norm a hidden
    state far from what it was trained on, and the logits come out many times too sharp (KL ~16
    nats at init). A short training run cannot walk the norm weights that far, a line search can.
    """
    import torch

    ids, mask, rows, cols, vals, idx = _batch(samples)
    vocab = head if head is not None else torch.unique(torch.cat([ids.flatten(), idx.flatten()]))  # [U]
    norm = student.body.norm.weight
    base = norm.detach().clone()
    losses = {}
    with torch.no_grad():
        for scale in scales:
            norm.copy_(base * scale)
            logits = _student_logits(student, ids, mask, rows, cols, vocab)  # [N, U]
            losses[scale] = float(distill_loss(logits, vals, *columns_of(vocab, idx)))
        best = min(losses, key=losses.get)
        norm.copy_(base * best)
    return best


def train_draft(spec: DraftSpec, verifier, train: list[Sample], heldout: list[Sample], cfg: DistillConfig, head=None):
    """Distil one draft; returns (body, proj, stats) with the loss curve and agreements.

    With ``head`` (sorted token ids [H]) the draft's softmax runs over those tokens only, in
    training as at decoding time (``specnb.models.trimmed_head``); without it, over the batch's own tokens plus
    every teacher top-k candidate (a sampled softmax)."""
    import torch
    from tqdm.auto import tqdm

    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.threads)
    emb = verifier.get_input_embeddings().weight.detach().float()  # [V, D], frozen
    body, proj = _make_student(spec, verifier)
    student = Student(body=body, proj=proj, emb=emb)
    params = list(body.parameters()) + (list(proj.parameters()) if proj is not None else [])
    opt = torch.optim.AdamW(params, lr=spec.lr, weight_decay=0.0)
    before = agreement(student, heldout, head=head)
    scale = calibrate_scale(student, train[: cfg.batch_seqs], head=head)
    gen = torch.Generator().manual_seed(cfg.seed)
    steps = cfg.epochs * math.ceil(len(train) / cfg.batch_seqs)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / cfg.warmup_steps) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))
    )
    losses, bar, start = [], tqdm(total=steps, desc=f"distil {spec.name}", unit="step"), time.time()
    for _ in range(cfg.epochs):
        order = torch.randperm(len(train), generator=gen).tolist()
        for i in range(0, len(order), cfg.batch_seqs):
            ids, mask, rows, cols, vals, idx = _batch([train[j] for j in order[i : i + cfg.batch_seqs]])
            vocab = head if head is not None else torch.unique(torch.cat([ids.flatten(), idx.flatten()]))  # [U]
            logits = _student_logits(student, ids, mask, rows, cols, vocab)  # [N, U]
            loss = distill_loss(logits, vals, *columns_of(vocab, idx))
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            losses.append(loss.item())
            bar.update()
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
    bar.close()
    stats = {
        "losses": losses,
        "agreement_before": before,
        "init_scale": scale,
        "agreement_after": agreement(student, heldout, head=head),
        "train_s": time.time() - start,
    }
    return body, proj, stats


# ---------------------------------------------------------------- files


# ---------------------------------------------------------------- build


def build_family(verifier, source: CorpusSource, cfg: DistillConfig, out: Path, *, names: list[str] | None = None,
                 specs: dict[str, DraftSpec] | None = None) -> list[DraftReport]:
    """Generate (or resume) the corpus of ``source`` once, then distil and save each named draft."""
    import torch

    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.threads)
    specs = specs or DRAFT_SPECS
    names = names or list(specs)
    unknown = [n for n in names if n not in specs]
    if unknown:
        raise ParameterError(f"unknown draft name(s) {unknown}; choose from {sorted(specs)}")
    started = time.time()
    samples = generate_corpus(verifier, source.prompts, cfg, source.cache)
    n_held = max(1, int(len(samples) * cfg.heldout_frac))
    train, heldout = samples[:-n_held], samples[-n_held:]
    extra = text_corpus(verifier, source.text, cfg, source.cache) if source.text else []
    train = train + extra
    corpus_s = time.time() - started
    head = choose_head(verifier, train, cfg.head_tokens)
    reports = []
    for name in names:
        spec = specs[name]
        body, proj, stats = train_draft(spec, verifier, train, heldout, cfg, head)
        config, state = llama_config(spec, verifier.config), draft_state_dict(body, proj)
        if head is not None:
            config["head_tokens"] = len(head)
        non_emb, total = count_params(spec, verifier.config)
        meta = _meta(spec, cfg, stats, corpus_meta(source.note, train, heldout, corpus_s),
                     {"non_embedding": non_emb, "total_assembled": total})
        meta["corpus"]["text_sequences"] = len(extra)
        meta["head"] = head_coverage(head, heldout)
        folder = save_draft(Path(out) / name, config, state, meta, None if head is None else head.tolist())
        reports.append(
            DraftReport(
                name=name,
                params_non_embedding=non_emb,
                params_total=total,
                committed_mb=round((folder / "weights.safetensors").stat().st_size / 1e6, 2),
                agreement_before=stats["agreement_before"],
                agreement_after=stats["agreement_after"],
                loss_first=stats["losses"][0],
                loss_last=stats["losses"][-1],
                train_s=stats["train_s"],
                folder=str(folder),
            )
        )
    return reports


def choose_head(verifier, train: list[Sample], n: int):
    """Sorted ids [H] of the ``n`` tokens the verifier predicts most often on the training split
    (its top-1 at every trained position) plus its EOS ids; None for a full head (``n`` = 0)."""
    import torch

    if not n:
        return None
    vocab = verifier.config.vocab_size
    counts = torch.bincount(torch.cat([s.top_idx[:, 0].long() for s in train]), minlength=vocab)  # [V]
    eos = verifier.generation_config.eos_token_id
    return torch.tensor(most_frequent_tokens(counts, min(n, vocab), sorted(eos_ids(eos))))


def head_coverage(head, heldout: list[Sample]) -> dict:
    """How often the verifier's next token on held-out answers is in the head: the ceiling on
    acceptance that trimming imposes."""
    import torch

    if head is None:
        return {"tokens": None, "heldout_coverage": 1.0}
    targets = torch.cat([s.top_idx[:, 0].long() for s in heldout])
    return {"tokens": len(head), "heldout_coverage": float(torch.isin(targets, head).float().mean())}


def _meta(spec, cfg, stats, corpus: dict, params: dict) -> dict:
    import torch

    losses = stats["losses"]
    tenth = max(1, len(losses) // 10)
    return {
        "spec": asdict(spec),
        "settings": asdict(cfg),
        "seed": cfg.seed,
        "steps": len(losses),
        "corpus": corpus,
        "loss": {
            "first": losses[0],
            "last": losses[-1],
            "first_tenth_mean": sum(losses[:tenth]) / tenth,
            "last_tenth_mean": sum(losses[-tenth:]) / tenth,
            "every_10th": [round(x, 4) for x in losses[::10]],
        },
        "heldout_top1_agreement": {"before": stats["agreement_before"], "after": stats["agreement_after"]},
        "final_norm_init_scale": stats["init_scale"],
        "params": params,
        "train_s": round(stats["train_s"], 1),
        "torch_version": torch.__version__,
        "threads": cfg.threads,
    }


def build_drafts(
    seed: int = 0, only: list[str] | None = None, quick: bool = False, out: Path | None = None
) -> list[DraftReport]:
    """The ``specnb build-drafts`` entry: embedded verifier, chat-wrapped instructions, the family."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = replace(QUICK if quick else DistillConfig(), seed=seed)
    torch.set_num_threads(cfg.threads)
    path = embedded_verifier_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    verifier = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    prompts = chat_prompts(tokenizer, build_instructions(cfg.n_prompts, seed))
    text = text_chunks(tokenizer, cfg.n_text_seqs, cfg.text_len)
    cache = cache_dir() / "distill-corpus" / corpus_key(verifier, cfg)
    note = (
        f"SmolLM2-135M-Instruct greedy answers (max {cfg.max_new_tokens} new tokens) to {cfg.n_prompts} "
        f"template-built chat instructions (specnb.models.training.train_prompts, seed {seed}), plus its "
        "teacher-forced logits on "
        f"{len(text)} windows of {cfg.text_len} tokens of Python's pydoc_data.topics; top-{cfg.top_k} logits"
    )
    source = CorpusSource(prompts=prompts, text=text, cache=cache, note=note)
    return build_family(verifier, source, cfg, Path(out) if out else paths.DRAFTS_DIR, names=only)
