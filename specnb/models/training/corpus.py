"""The distillation corpus: what the verifier says, kept as top-k logits, for ``specnb.models.training.distill``.

Two sources. The verifier's own greedy answers to chat-templated instructions (``generate_corpus``:
on-policy, what raises acceptance) and teacher-forced Python-docs text (``text_corpus``: off-policy,
one forward per batch, cheap general wording). Both are cached batch by batch under a key of the
verifier and the generation settings, so an interrupted build resumes where it stopped. ``cfg`` is a
``distill.DistillConfig``; only its generation fields are read here (max_new_tokens, gen_batch,
top_k, text_batch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from specnb.core.sequences import eos_ids


@dataclass(kw_only=True)
class Sample:
    """One verifier answer: ids [P+R] and teacher top-k logits for the R answer tokens."""

    ids: torch.Tensor  # [P + R] int64
    prompt_len: int
    top_vals: torch.Tensor  # [R, k] fp16
    top_idx: torch.Tensor  # [R, k] int32


@dataclass(frozen=True, kw_only=True)
class CorpusSource:
    """What a family is distilled from: ``prompts`` the verifier answers (on-policy; the held-out split
    comes from these), ``text`` chunks scored teacher-forced and added to the training split only,
    the ``cache`` folder that keeps the corpus between runs, and the ``note`` meta.json describes it by."""

    prompts: list[list[int]]
    text: list[list[int]] | None = None
    cache: Path | None = None
    note: str = ""


def corpus_meta(note: str, train: list[Sample], heldout: list[Sample], seconds: float) -> dict:
    """How a draft's meta.json describes its corpus: where it came from, its splits and their sizes."""
    return {
        "description": note or "verifier greedy answers to template-built instructions",
        "train_sequences": len(train),
        "heldout_sequences": len(heldout),
        "train_answer_tokens": sum(len(s.top_idx) for s in train),
        "heldout_answer_tokens": sum(len(s.top_idx) for s in heldout),
        "generation_s": round(seconds, 1),
    }


def _atomic_save(obj, path: Path) -> None:
    import torch

    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def generate_batch(verifier, prompts: list[list[int]], cfg) -> list[Sample]:
    """Greedy answers for a batch of prompts, keeping the top-k logits the answer came from."""
    import torch

    from specnb.core.padding import left_pad_ids  # deferred: loads torch

    pad = verifier.config.pad_token_id if verifier.config.pad_token_id is not None else 0
    stops = eos_ids(verifier.generation_config.eos_token_id)
    ids, mask = left_pad_ids(prompts, pad)  # [B, P] each: left padded, so every answer starts at the same column
    width = ids.shape[1]
    with torch.no_grad():
        out = verifier.generate(input_ids=ids, attention_mask=mask, max_new_tokens=cfg.max_new_tokens,
                                do_sample=False, output_logits=True, return_dict_in_generate=True,
                                pad_token_id=pad)
    logits = torch.stack(out.logits, dim=1).float()  # [B, R, V]
    vals, idx = logits.topk(cfg.top_k, dim=-1)  # [B, R, k]
    answers = out.sequences[:, width:]  # [B, R]
    samples = []
    for b, prompt in enumerate(prompts):
        length = answers.shape[1]
        for t, tok in enumerate(answers[b].tolist()):
            if tok in stops:
                length = t + 1  # keep the eos: predicting the stop is part of the job
                break
        full = torch.tensor(prompt + answers[b, :length].tolist())
        samples.append(Sample(ids=full, prompt_len=len(prompt), top_vals=vals[b, :length].half(),
                              top_idx=idx[b, :length].int()))
    return samples


def corpus_key(verifier, cfg) -> str:
    """Cache folder key: verifier fingerprint and generation settings (not training settings)."""
    blob = json.dumps([verifier.config.num_hidden_layers, verifier.config.vocab_size, str(verifier.dtype),
                       float(verifier.model.norm.weight.detach().double().sum()), cfg.max_new_tokens,
                       cfg.gen_batch, cfg.top_k], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _shard_name(batch: list[list[int]]) -> str:
    """One file per batch, named by its prompts: a resumed or shortened build reuses finished batches."""
    return hashlib.sha256(json.dumps(batch).encode()).hexdigest()[:16] + ".pt"


def generate_corpus(verifier, prompts: list[list[int]], cfg,
                    cache: Path | None = None) -> list[Sample]:
    """Answer all prompts in batches; with ``cache``, each finished batch is kept so a rerun resumes."""
    import torch
    from tqdm.auto import tqdm

    samples: list[Sample] = []
    batches = [prompts[i:i + cfg.gen_batch] for i in range(0, len(prompts), cfg.gen_batch)]
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
    for batch in tqdm(batches, desc="verifier answers", unit="batch"):
        shard = cache / _shard_name(batch) if cache is not None else None
        if shard is not None and shard.is_file():
            samples += [Sample(**s) for s in torch.load(shard)]
            continue
        new = generate_batch(verifier, batch, cfg)
        if shard is not None:
            _atomic_save([asdict(s) for s in new], shard)
        samples += new
    return samples


def teacher_forced_batch(verifier, chunks: list[list[int]], cfg) -> list[Sample]:
    """Top-k teacher logits on existing text: one forward per batch, far cheaper than generating.

    Off-policy (the text is not the verifier's), so it complements rather than replaces the
    verifier's answers: it teaches the draft general English and Python wording cheaply.
    """
    import torch

    with torch.no_grad():
        logits = verifier(torch.tensor(chunks)).logits[:, :-1].float()  # [B, L-1, V]
    vals, idx = logits.topk(cfg.top_k, dim=-1)  # [B, L-1, k]
    return [Sample(ids=torch.tensor(c), prompt_len=1, top_vals=v.half(), top_idx=i.int()) for c, v, i in zip(chunks,
                                                                                                             vals, idx)]


def text_chunks(tokenizer, n: int, length: int) -> list[list[int]]:
    """``n`` windows of ``length`` tokens from the Python docs shipped with every Python
    (``pydoc_data.topics``), topics in sorted order: the same text on every machine."""
    from pydoc_data.topics import topics

    chunks: list[list[int]] = []
    for name in sorted(topics):
        ids = tokenizer(topics[name])["input_ids"]
        chunks += [ids[i:i + length] for i in range(0, len(ids) - length + 1, length)]
        if len(chunks) >= n:
            return chunks[:n]
    return chunks


def text_corpus(verifier, chunks: list[list[int]], cfg, cache: Path | None = None) -> list[Sample]:
    """Teacher-forced samples for ``chunks``, batch by batch, resumable like ``generate_corpus``."""
    import torch
    from tqdm.auto import tqdm

    samples: list[Sample] = []
    for i in tqdm(range(0, len(chunks), cfg.text_batch), desc="verifier on docs text", unit="batch"):
        batch = chunks[i:i + cfg.text_batch]
        shard = cache / ("text-" + _shard_name(batch)) if cache is not None else None
        if shard is not None and shard.is_file():
            samples += [Sample(**s) for s in torch.load(shard)]
            continue
        new = teacher_forced_batch(verifier, batch, cfg)
        if shard is not None:
            cache.mkdir(parents=True, exist_ok=True)
            _atomic_save([asdict(s) for s in new], shard)
        samples += new
    return samples


def chat_prompts(tokenizer, instructions: list[str]) -> list[list[int]]:
    """Instructions wrapped in the verifier's chat template, as token id lists."""
    out = []
    for text in instructions:
        enc = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
        ids = enc["input_ids"] if hasattr(enc, "keys") else enc
        out.append(list(ids))
    return out
