"""Train the embedded verifier's EAGLE draft and Medusa heads (``smollm2-eagle``, ``smollm2-medusa``).

The corpus is ``head_corpus`` (the verifier's features on its own chats), the losses ``head_losses``.
Both heads read a trimmed vocabulary of the corpus's 8,192 most frequent tokens (Zhao et al. 2025,
"FR-Spec"), borrow the verifier's embedding and lm_head, and are saved by their own ``save()``
(``config.json`` with ``kind`` + fp16 ``weights.safetensors``, ``specnb.models.heads``).

The EAGLE draft is EAGLE-3 in the standard layout (Li et al. 2025; ``specnb.models.eagle3``, what
llama.cpp and vLLM run): it reads the verifier's layers 1, 14 and 26 (low, middle, high of 30; the inputs
of layers 2, 15 and 27 in the engines' count), fused by ``fc``, and is trained for 2 epochs with four unrolls
on its own outputs ("training-time test", ``head_losses.eagle3_loss``), token loss only. It starts from
the verifier's first decoder layer (q/k/v reading half embedding, half feature), fc reading the highest
layer, and the verifier's final norm and lm_head rows as its own norm and lm_head, which it trains.
(specnb's older layout, ``specnb.models.eagle``, with a prompt-lookup input and copy bonus, trains with
``standard=False``.) Medusa trains on the same corpus (its final features).

Determinism: ``torch.manual_seed(seed)``, a seeded order of length-bucketed batches and a fixed thread
count (two: the budget is 20 min on 2 cores) give the same weights for the same torch version and CPU.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from torch import nn

from specnb.core import paths
from specnb.core.errors import ParameterError
from specnb.models.cache import publish_atomically
from specnb.models.eagle import EagleConfig, EagleDraft
from specnb.models.eagle3 import Eagle3Config, Eagle3Draft
from specnb.models.medusa import MedusaConfig, MedusaHeads
from specnb.models.training.head_corpus import (
    HeadCorpus,
    HeadCorpusConfig,
    build_head_corpus,
    corpus_folder,
    embedded_verifier,
)
from specnb.models.training.head_losses import collate, eagle3_loss, eagle_loss, lookup_of, medusa_loss
from specnb.models.trimmed_head import most_frequent_tokens

SPECIAL_IDS = (0, 1, 2)  # SmolLM2's <|endoftext|>, <|im_start|>, <|im_end|>: a head must be able to stop


@dataclass(frozen=True, kw_only=True)
class HeadTrainConfig:
    """Training settings of one head; ``HEADS`` holds the committed ones."""

    kind: str  # "eagle" or "medusa"
    seed: int = 0
    threads: int = 2  # training threads (the budget is 2 cores; the corpus runs one-thread loops side by side)
    head_tokens: int = 8192  # trimmed vocabulary (most frequent corpus tokens); 0 = the full lm_head
    epochs: int = 2
    batch_positions: int = 512  # ~positions per optimiser step (sequences are length-bucketed)
    lr: float = 5e-3
    warmup: int = 20
    clip: float = 0.5
    # EAGLE
    w_reg: float = 1.0
    w_cls: float = 0.1
    noise: float = 0.1  # half-width of the uniform noise on input features (EAGLE-1: U(-0.1, 0.1))
    init_layer: int = 0  # verifier layer the draft's decoder layer starts from
    lookup_ngram: int = 3
    copy_bias: bool = True
    feature_layers: tuple[int, ...] = ()  # EAGLE-3: fuse these verifier layers' outputs (needs them in the corpus)
    ttt_steps: int = 1  # EAGLE-3 training-time test: unrolls of the draft on its own outputs
    ttt_decay: float = 0.8  # weight of unroll s's loss: decay ** s
    standard: bool = False  # EAGLE-3 in the standard layout (``specnb.models.eagle3``; needs feature_layers)
    norm_before_fc: bool = False  # standard layout: RMSNorm over the concatenated layers before fc
    # Medusa
    medusa_heads: int = 4
    medusa_blocks: int = 1


EAGLE3_LAYERS = (1, 14, 26)  # ``specnb.models.features.eagle3_layers(30)``: SmolLM2-135M's low, middle, high
HEADS = {
    # 2 epochs over 672 chats: 3.5x the data of the 8-epoch head on 192 chats at about the same training time
    # (the budget); held-out agreement in benchmarks/README.md ("Building the heads")
    "smollm2-eagle": HeadTrainConfig(kind="eagle", epochs=2, feature_layers=EAGLE3_LAYERS, ttt_steps=4, w_reg=0.0,
                                     w_cls=1.0, noise=0.0),
    # the same corpus and schedule in the standard EAGLE-3 layout the serving engines run (no prompt-lookup input,
    # which cost it 0.16-0.2 of per-token α in specnb's loop: benchmarks/README.md), over 4,096 tokens to fit the
    # 60 MB of committed weights
    "smollm2-eagle3": HeadTrainConfig(kind="eagle", epochs=2, feature_layers=EAGLE3_LAYERS, ttt_steps=4, w_reg=0.0,
                                      w_cls=1.0, noise=0.0, standard=True, lookup_ngram=0, copy_bias=False,
                                      head_tokens=4096),
    "smollm2-medusa": HeadTrainConfig(kind="medusa", epochs=1, batch_positions=1024, lr=2e-3, lookup_ngram=0,
                                      copy_bias=False),
}
CORPUS = HeadCorpusConfig(n_chats=672, batch=84,  # 8 batches: 4 for each of two one-thread loops
                           feature_layers=EAGLE3_LAYERS)
CORPUS_WORKERS = 2  # one-thread corpus loops side by side, one per core (``head_corpus.build_head_corpus``)
QUICK_CORPUS = HeadCorpusConfig(n_chats=8, batch=4, instr_cap=16, steps=32, feature_layers=EAGLE3_LAYERS)


@dataclass(kw_only=True)
class HeadReport:
    """What one head's training did: steps, time, and the mean stats of its first and last 20 steps."""

    name: str
    kind: str
    steps: int
    train_s: float
    first: dict
    last: dict
    weights_mb: float = 0.0
    folder: str = ""


# ----------------------------------------------------------------------------- heads


def head_token_ids(seqs: list, n: int, vocab: int) -> torch.Tensor | None:
    """Sorted ids [n] of the corpus's most frequent tokens plus ``SPECIAL_IDS``; None for a full head."""
    if not n:
        return None
    counts = torch.zeros(vocab, dtype=torch.long)
    for s in seqs:
        counts += torch.bincount(s.ids.long(), minlength=vocab)
    return torch.tensor(most_frequent_tokens(counts, min(n, vocab), [i for i in SPECIAL_IDS if i < vocab]))


def new_eagle(verifier, head_ids, cfg: HeadTrainConfig):
    config = EagleConfig.from_verifier(verifier.config, head_tokens=0 if head_ids is None else len(head_ids),
                                       lookup_ngram=cfg.lookup_ngram, copy_bias=cfg.copy_bias,
                                       feature_layers=cfg.feature_layers)
    torch.manual_seed(cfg.seed)
    draft = EagleDraft(config, head_ids=head_ids).init_from_verifier(verifier, cfg.init_layer)
    d = config.hidden_size
    with torch.no_grad():  # next input = half this feature, half the next token's embedding
        draft.fc.weight[:, :d].copy_(torch.eye(d) * 0.5)
        draft.fc.weight[:, d:2 * d].copy_(torch.eye(d) * 0.5)
    return draft.attach(verifier)


def new_eagle3(verifier, head_ids, cfg: HeadTrainConfig):
    """A standard-layout EAGLE-3 head (``specnb.models.eagle3``) that starts from the verifier: its
    decoder layer ``cfg.init_layer``, final norm and lm_head rows, fc reading the highest fused layer."""
    vocab = verifier.config.vocab_size
    config = Eagle3Config.from_verifier(verifier.config, draft_vocab_size=vocab if head_ids is None else len(head_ids),
                                        aux_layer_ids=tuple(i + 1 for i in cfg.feature_layers),
                                        norm_before_fc=cfg.norm_before_fc)
    torch.manual_seed(cfg.seed)
    draft = Eagle3Draft(config)
    if head_ids is not None:
        draft.set_vocabulary(head_ids)
    return draft.init_from_verifier(verifier, cfg.init_layer)


def new_medusa(verifier, head_ids, cfg: HeadTrainConfig):
    config = MedusaConfig(hidden_size=verifier.config.hidden_size, num_heads=cfg.medusa_heads,
                          blocks=cfg.medusa_blocks, vocab_size=verifier.config.vocab_size,
                          head_tokens=0 if head_ids is None else len(head_ids))
    torch.manual_seed(cfg.seed)
    return MedusaHeads(config, head_ids=head_ids).attach(verifier)


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """How a head of one kind is built and trained."""

    new: Callable  # (verifier, head_ids, cfg) -> the untrained head, attached to the verifier
    loss: Callable  # (cfg) -> the loss function its batches are scored by
    reads_lookup: bool  # its inputs include each token's prompt-lookup match


# A table by kind because a config names the kind it trains (its config.json says it too); the loaded
# heads are the draft kinds' (``specnb.decode.kinds``), which training, a layer below, cannot import.
RECIPES = {"eagle": Recipe(new=lambda verifier, head_ids, cfg: (new_eagle3 if cfg.standard else new_eagle)(
                               verifier, head_ids, cfg),
                           loss=lambda cfg: eagle3_loss if cfg.feature_layers else eagle_loss, reads_lookup=True),
           "medusa": Recipe(new=new_medusa, loss=lambda cfg: medusa_loss, reads_lookup=False)}


# ----------------------------------------------------------------------------- the loop


def make_batches(seqs: list, batch_positions: int, seed: int, epoch: int) -> list[list[int]]:
    """Length-bucketed batches of sequence indices (padding stays small), in a seeded order per epoch."""
    order = sorted(range(len(seqs)), key=lambda i: (len(seqs[i].feats), i))
    batches, current, width = [], [], 0
    for i in order:
        n = len(seqs[i].feats)
        if current and max(width, n) * (len(current) + 1) > batch_positions:
            batches.append(current)
            current, width = [], 0
        current.append(i)
        width = max(width, n)
    if current:
        batches.append(current)
    gen = torch.Generator().manual_seed(seed * 7919 + epoch)
    return [batches[i] for i in torch.randperm(len(batches), generator=gen).tolist()]


def lr_at(step: int, total: int, cfg: HeadTrainConfig) -> float:
    """Linear warmup, then cosine decay to zero."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    return cfg.lr * 0.5 * (1 + math.cos(math.pi * min(1.0, (step - cfg.warmup) / max(1, total - cfg.warmup))))


def mean_stats(history: list[dict]) -> dict:
    return {k: round(sum(h[k] for h in history) / len(history), 4) for k in history[0]} if history else {}


def train_head(model: nn.Module, seqs: list, cfg: HeadTrainConfig, name: str = "", progress: bool = True) -> HeadReport:
    """Train ``model`` (from ``new_eagle`` / ``new_medusa``) in place; returns its report."""
    from tqdm.auto import tqdm

    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.threads)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
    plan = [b for epoch in range(cfg.epochs) for b in make_batches(seqs, cfg.batch_positions, cfg.seed, epoch)]
    recipe = RECIPES[cfg.kind]
    lookups = [lookup_of(s.ids, cfg.lookup_ngram) for s in seqs] if recipe.reads_lookup and cfg.lookup_ngram else None
    loss_fn = recipe.loss(cfg)
    model.train()
    history, start = [], time.perf_counter()
    for step, idx in enumerate(tqdm(plan, desc=f"train {name or cfg.kind}", unit="step", disable=not progress)):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, len(plan), cfg)
        batch = collate([seqs[i] for i in idx], [lookups[i] for i in idx] if lookups else None)
        loss, stats = loss_fn(model, batch, cfg, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(params, cfg.clip)
        opt.step()
        history.append({"loss": loss.item(), **stats})
    model.eval()
    return HeadReport(name=name, kind=cfg.kind, steps=len(history), train_s=round(time.perf_counter() - start, 1),
                      first=mean_stats(history[:20]), last=mean_stats(history[-20:]))


# ----------------------------------------------------------------------------- building


def save_head(model, folder: Path, report: HeadReport, meta: dict) -> HeadReport:
    """Write the head atomically (a failed save leaves the previous one) and note its size."""
    publish_atomically(lambda tmp: model.save(tmp, meta=meta), folder, manifest=False)
    folder.chmod(0o755)  # the temporary folder was private; the package's data is readable by all
    for path in folder.iterdir():
        path.chmod(0o644)
    weights = next(p for p in (folder / "weights.safetensors", folder / "model.safetensors") if p.is_file())
    report.weights_mb = round(weights.stat().st_size / 1e6, 2)
    report.folder = str(folder)
    return report


def train_heads(verifier, corpus: HeadCorpus, names: list[str], out: Path,
                configs: dict[str, HeadTrainConfig] | None = None, progress: bool = True) -> list[HeadReport]:
    """Train and save each named head on ``corpus`` into ``out/<name>``."""
    seqs = corpus.seqs
    configs = configs or HEADS
    unknown = [n for n in names if n not in configs]
    if unknown:
        raise ParameterError(f"unknown head name(s) {unknown}; choose from {sorted(configs)}")
    reports = []
    for name in names:
        cfg = configs[name]
        head_ids = head_token_ids(seqs, cfg.head_tokens, verifier.config.vocab_size)
        model = RECIPES[cfg.kind].new(verifier, head_ids, cfg)
        report = train_head(model, seqs, cfg, name, progress)
        meta = {"train": asdict(cfg), "corpus": {**asdict(corpus.cfg), "key": corpus.cfg.key(), "sequences": len(seqs),
                                                  "positions": sum(len(s.feats) for s in seqs)},
                "steps": report.steps, "first": report.first, "last": report.last, "torch_version": torch.__version__}
        reports.append(save_head(model, Path(out) / name, report, meta))
    return reports


def build_heads(seed: int = 0, only: list[str] | None = None, quick: bool = False, out: Path | None = None,
                log=print) -> dict:
    """The ``specnb build-heads`` entry: the corpus (built if missing, resumable), then each head.

    Returns the reports and the seconds of each stage (corpus, then one per head)."""
    names = only or list(HEADS)
    unknown = [n for n in names if n not in HEADS]
    if unknown:
        raise ParameterError(f"unknown head name(s) {unknown}; choose from {sorted(HEADS)}")
    corpus = replace(QUICK_CORPUS if quick else CORPUS, seed=seed)
    configs = {n: replace(c, seed=seed, epochs=1 if quick else c.epochs, head_tokens=1024 if quick else c.head_tokens)
               for n, c in HEADS.items()}
    start = time.perf_counter()
    verifier, tokenizer = embedded_verifier(configs[names[0]].threads)
    seqs = build_head_corpus(verifier, tokenizer, corpus, corpus_folder(corpus), workers=CORPUS_WORKERS)
    built = HeadCorpus(seqs=seqs, cfg=corpus)
    stages = {"corpus_s": round(time.perf_counter() - start, 1)}
    log(f"corpus: {len(seqs)} sequences, {sum(len(s.feats) for s in seqs)} positions, {stages['corpus_s']}s")
    reports = []
    for name in names:
        reports += train_heads(verifier, built, [name], Path(out) if out else paths.DRAFTS_DIR, configs)
        stages[f"{name}_s"] = reports[-1].train_s
        log(f"{name}: {reports[-1].steps} steps, {reports[-1].train_s}s")
    return {"reports": reports, "stages": stages}
