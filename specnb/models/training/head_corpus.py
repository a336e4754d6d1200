"""The corpus EAGLE and Medusa heads learn from: the verifier's own features on its own chats.

Magpie chats (Xu et al. 2024, "Magpie: Alignment Data Synthesis from Scratch by Prompting Aligned
LLMs with Nothing"): the verifier's chat template is fed up to the start of a user turn (after the
template's default system prompt, exactly what ``apply_chat_template`` produces for a plain user
message) and the verifier *samples* the user's instruction (temperature, top-p) until the turn ends;
then the assistant header is forced and the verifier answers *greedily*, the way it decodes at
evaluation time. A share of the rows is steered towards a task family by a short opener written
into the user turn (``SEEDS``: generic task verbs per family, never text of the evaluation prompts);
the rest is pure Magpie. One batched KV-cached loop per batch (left padding, rows in different
phases) produces the text, and the features of every position come for free from it.

Per sequence (``FeatureSeq``): the token ids, the verifier's post-final-norm hidden state (the input
of its lm_head) at every position it was fed, with ``feature_layers`` also those decoder layers'
outputs (what an EAGLE-3 draft reads, taken by hooks during the same forwards), and where the loss
starts. The verifier's next-token
distribution at position t is ``lm_head(feats[t])``: training recomputes it on the head's trimmed
vocabulary, so no logits are stored.

Cached batch by batch (``chat-<k>.pt``) under ``cache_dir()/head-corpus/<HeadCorpusConfig.key()>``:
an interrupted build resumes at the first missing batch and loses nothing already written.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from specnb.core.padding import left_pad_ids
from specnb.core.sampling import nucleus, sample
from specnb.models.cache import cache_dir
from specnb.models.embedded import embedded_verifier_path
from specnb.models.features import capture_hidden
from specnb.models.training.corpus import _atomic_save

# Task-family openers written into the user turn; the verifier samples the rest of the message.
SEEDS: dict[str, list[str]] = {
    "code": [
        "Write a Python function that", "Write a Python program to", "Write a JavaScript function that",
        "Write a SQL query to", "Write a bash script that", "How do I", "Can you explain this Python code?\n\n",
        "Find the bug in the following code:\n\n", "Write a Python class for", "Implement a function in Python",
        "What is the difference between", "Write a regular expression that", "Convert this code to Python:\n\n",
        "Write a unit test for", "Write a C function that", "Refactor this function:\n\n",
    ],
    "writing": [
        "Write a short story about", "Write a poem about", "Write a blog post about", "Write an email to",
        "Write a product description for", "Write a paragraph describing", "Write a letter to",
        "Write a speech about", "Write a short essay on", "Write a haiku about", "Write a tweet about",
        "Write a cover letter for", "Write a dialogue between", "Write the first paragraph of",
    ],
    "qa": [
        "What is", "Why do", "How does", "Who was", "When did", "What are the main", "Explain",
        "What causes", "How many", "Where is", "What is the difference between", "Can you tell me why",
        "What happens when", "Which",
    ],
    "summarisation": [
        "Summarize the following text:\n\n", "Summarize this article in one paragraph:\n\n",
        "Give me a short summary of this passage:\n\n", "Summarise the key points of the text below.\n\n",
        "Please write a brief summary of the following:\n\n", "TL;DR:\n\n",
        "Condense this paragraph into two sentences:\n\n", "What is the main idea of this text?\n\n",
    ],
    "extraction": [
        "Extract all the dates from this text:\n\n", "List the names of the people mentioned in the text below.\n\n",
        "Find all the email addresses in this text:\n\n", "Extract the key facts from the following paragraph:\n\n",
        "From the text below, extract the names of all cities:\n\n", "List all the numbers in this passage:\n\n",
        "Extract the product names and prices from this text:\n\n",
        "Identify the organisations mentioned in the following text:\n\n",
        "Pull out the phone numbers from this message:\n\n", "Return the keywords of this text as a list:\n\n",
    ],
    "math": [
        "What is", "Calculate", "Solve for x:", "If a", "A train travels", "How many", "Find the value of",
        "What is the area of", "Simplify", "A store sells", "What is the sum of", "Convert",
        "What percentage of", "Sarah has",
    ],
    "translation": [
        "Translate to French:", "Translate this sentence into Spanish:", "Translate the following into German:",
        "How do you say this in French?", "Translate into Italian:", "Translate this text to French:\n\n",
        "Please translate into Spanish:\n\n", "Translate from English to French:",
        "What is the French translation of", "Translate to Portuguese:",
    ],
    "conversation": [
        "Hi!", "Hello,", "Hey, can you", "I'm feeling", "What's your favorite", "Can you help me",
        "Tell me a fun fact", "Good morning!", "Do you like", "I need some advice", "Thanks!",
        "What do you think about", "Can we talk about", "I just",
    ],
}
SAMPLE_TOP = 256  # the instruction is sampled among the verifier's 256 most likely tokens


@dataclass(frozen=True, kw_only=True)
class HeadCorpusConfig:
    """Generation settings; ``key()`` names the cache folder (``n_chats`` only says how many batches)."""

    seed: int = 0
    n_chats: int = 288  # Magpie conversations (a multiple of ``batch`` keeps every batch full)
    magpie_share: float = 0.25  # rows with no opener (pure Magpie)
    batch: int = 32
    instr_cap: int = 80  # max sampled instruction tokens
    steps: int = 192  # decode steps per batch (instruction + header + answer)
    temperature: float = 0.7
    top_p: float = 0.95
    doc_len: int = 256  # settings of the docs windows the key has always covered (no docs are built)
    doc_batch: int = 8
    feature_layers: tuple[int, ...] = ()  # also keep these decoder layers' outputs (an EAGLE-3 draft's input)
    draws: str = "asking-rows"  # only rows still writing the user's turn draw each step (corpora before: every row)

    @property
    def batches(self) -> int:
        """How many batches the ``n_chats`` conversations take (the last may be short)."""
        return -(-self.n_chats // self.batch)

    def key(self) -> str:
        gen = {k: v for k, v in asdict(self).items() if k != "n_chats" and not (k == "feature_layers" and not v)}
        return hashlib.sha256(json.dumps(gen, sort_keys=True).encode()).hexdigest()[:12]


@dataclass(kw_only=True)
class FeatureSeq:
    """One conversation: ids [L] int32, feats [L', d] fp16 (L' = L, or L - 1 when the last token, a
    stop, was never fed), ``fused`` [L', k*d] fp16 (the ``feature_layers`` outputs, or None),
    ``loss_from`` (first position after the shared system prompt), ``answer_from`` (first assistant
    token), ``kind`` (task family or "magpie")."""

    ids: torch.Tensor
    feats: torch.Tensor
    loss_from: int
    answer_from: int
    kind: str
    truncated: bool = False
    fused: torch.Tensor | None = None  # [L', k*d] fp16: the ``feature_layers`` outputs, when the corpus keeps them


@dataclass(frozen=True, kw_only=True)
class HeadCorpus:
    """A built corpus: its conversations and the settings that built them (each head's meta.json
    records them)."""

    seqs: list[FeatureSeq]
    cfg: HeadCorpusConfig


# ----------------------------------------------------------------------------- the chat template


def template_parts(tokenizer) -> tuple[str, str]:
    """(text up to the user's message, text after it): the system prompt and user header, then
    ``<|im_end|>\\n<|im_start|>assistant\\n`` for SmolLM2."""
    marker = "\x00MARK\x00"
    text = tokenizer.apply_chat_template([{"role": "user", "content": marker}], tokenize=False,
                                         add_generation_prompt=True)
    at = text.index(marker)
    return text[:at], text[at + len(marker):]


def sample_top_p(logits: torch.Tensor, temperature: float, top_p: float, gen: torch.Generator) -> torch.Tensor:
    """logits [B, V] -> sampled ids [B]: nucleus sampling within the ``SAMPLE_TOP`` most likely tokens
    (a 256-wide draw per step, the draws the cached corpus was made with)."""
    _, order = logits.topk(SAMPLE_TOP, dim=-1)  # [B, 256], sorted
    probs = nucleus(torch.softmax(logits / temperature, dim=-1).gather(-1, order), top_p)  # [B, 256]
    return order.gather(-1, sample(probs, gen)[:, None])[:, 0]


def plan_openers(cfg: HeadCorpusConfig) -> list[tuple[str, str]]:
    """(kind, opener) per conversation, deterministic in ``cfg.seed``; a longer plan extends a shorter one."""
    rng = random.Random(cfg.seed)
    families = list(SEEDS)
    plan = []
    for i in range(cfg.n_chats):
        if rng.random() < cfg.magpie_share:
            plan.append(("magpie", ""))
        else:
            family = families[i % len(families)]
            plan.append((family, rng.choice(SEEDS[family])))
    return plan


# ----------------------------------------------------------------------------- one batch


@dataclass(kw_only=True)
class ChatRow:
    """Where one row of a batch is: 0 instruction (sampled), 1 header (forced), 2 answer (greedy), 3 done."""

    ids: list[int]
    phase: int = 0
    n_instr: int = 0
    queue: list[int] | None = None
    answer_from: int = 0
    truncated: bool = False


def next_token(row: ChatRow, sampled: int | None, greedy: int, header: list[int], stops: set[int], cfg) -> int | None:
    """The token this row feeds next (appended to ``row.ids``), None once done; advances the phase."""
    if row.phase == 3:
        return None
    if row.phase == 0:
        tok = sampled
        row.n_instr += 1
        if tok not in stops and row.n_instr >= cfg.instr_cap:
            tok, row.truncated = header[0], True
        if tok in stops:  # the user turn ends: force the assistant header
            tok, row.queue, row.phase = header[0], list(header[1:]), 1
    elif row.phase == 1:
        tok = row.queue.pop(0)
        if not row.queue:
            row.phase, row.answer_from = 2, len(row.ids) + 1
    else:
        tok = greedy
    row.ids.append(tok)
    if row.phase == 2 and tok in stops:
        row.phase = 3  # the stop token is kept as a target, never fed
    return tok


@torch.inference_mode()
def chat_batch(verifier, tokenizer, plan: list[tuple[str, str]], cfg: HeadCorpusConfig,
               gen: torch.Generator) -> list[FeatureSeq]:
    """One batch of Magpie conversations: sample the user turn, force the header, answer greedily."""
    from transformers import DynamicCache

    prefix, suffix = template_parts(tokenizer)
    loss_from = len(tokenizer(prefix, add_special_tokens=False)["input_ids"])
    header = tokenizer(suffix, add_special_tokens=False)["input_ids"]
    stops = {header[0], tokenizer.eos_token_id}
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else header[0]
    rows = [ChatRow(ids=tokenizer(prefix + opener, add_special_tokens=False)["input_ids"]) for _, opener in plan]
    lengths = [len(r.ids) for r in rows]
    width = max(lengths)
    ids, mask = left_pad_ids([r.ids for r in rows], pad)  # [B, P] each
    cache = DynamicCache(config=verifier.config)
    layers = cfg.feature_layers or None
    with capture_hidden(verifier, layers) as captured:
        h = verifier.model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp_min(0),
                           cache=cache, use_cache=True).last_hidden_state  # [B, P, d]
    feats = [[h[b, width - n:].half()] for b, n in enumerate(lengths)]
    fused = [[captured["features"][b, width - n:].half()] for b, n in enumerate(lengths)] if layers else None
    n_feats, nxt, last = list(lengths), torch.tensor(lengths), h[:, -1]  # nxt [B]: next position; last [B, d]
    for _ in range(cfg.steps):
        logits = verifier.lm_head(last)  # [B, V]
        greedy = logits.argmax(-1).tolist()
        asking = [b for b, r in enumerate(rows) if r.phase == 0]  # rows still writing the user's turn draw
        drawn = sample_top_p(logits[asking], cfg.temperature, cfg.top_p, gen).tolist() if asking else []
        sampled = dict(zip(asking, drawn))
        feed = [next_token(r, sampled.get(b), g, header, stops, cfg) for b, (r, g) in enumerate(zip(rows, greedy))]
        if all(r.phase == 3 for r in rows):
            break
        feed = [pad if tok is None else tok for tok in feed]
        mask = torch.cat([mask, torch.ones(len(rows), 1, dtype=mask.dtype)], 1)
        with capture_hidden(verifier, layers) as captured:
            out = verifier.model(input_ids=torch.tensor(feed)[:, None], attention_mask=mask,
                                 position_ids=nxt[:, None], cache=cache, use_cache=True)
        last = out.last_hidden_state[:, 0]  # [B, d]
        nxt = nxt + 1
        for b, row in enumerate(rows):
            if n_feats[b] < len(row.ids):  # this row's token was real: keep its feature
                feats[b].append(last[b:b + 1].half())
                if layers:
                    fused[b].append(captured["features"][b, :1].half())
                n_feats[b] += 1
    return [FeatureSeq(ids=torch.tensor(r.ids, dtype=torch.int32), feats=torch.cat(f), loss_from=loss_from,
                       answer_from=r.answer_from or len(r.ids),
                       kind=kind, truncated=r.truncated, fused=torch.cat(fused[b]) if layers else None)
            for b, (r, f, (kind, _)) in enumerate(zip(rows, feats, plan))]


# ----------------------------------------------------------------------------- the corpus


def shard_path(folder: Path, k: int) -> Path:
    return folder / f"chat-{k:04d}.pt"


@dataclass(frozen=True, kw_only=True)
class CorpusJob:
    """What every batch of the corpus is built from: the verifier that talks (with its tokenizer), the
    conversations' openers (``plan_openers``) and the settings."""

    verifier: Any
    tokenizer: Any
    plan: list[tuple[str, str]]
    cfg: HeadCorpusConfig


def build_batch(job: CorpusJob, k: int, folder: Path | None) -> list[FeatureSeq]:
    """Batch ``k`` of ``job.plan`` (its own seeded generator), kept in ``folder`` when given."""
    cfg = job.cfg
    gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + k)
    new = chat_batch(job.verifier, job.tokenizer, job.plan[k * cfg.batch:(k + 1) * cfg.batch], cfg, gen)
    if folder is not None:
        _atomic_save([asdict(s) for s in new], shard_path(folder, k))
    return new


def build_missing(job: CorpusJob, folder: Path, ks, after=None) -> None:
    """Build and keep each batch of ``ks`` that ``folder`` does not hold yet; ``after()`` follows each."""
    for k in ks:
        if not shard_path(folder, k).is_file():
            build_batch(job, k, folder)
        if after is not None:
            after()


def build_share(source: str, tokenizer_source: str, cfg: HeadCorpusConfig, folder: Path, worker: int,
                workers: int) -> None:
    """A helper process's part of the corpus: the missing batches k with k % workers == worker, on one thread."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    verifier = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).eval().requires_grad_(False)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_source)
    job = CorpusJob(verifier=verifier, tokenizer=tokenizer, plan=plan_openers(cfg), cfg=cfg)
    build_missing(job, folder, range(worker, cfg.batches, workers))


def start_helpers(verifier, tokenizer, cfg: HeadCorpusConfig, folder: Path, workers: int) -> list:
    """``workers - 1`` helper processes for ``build_share`` (none when the verifier was not loaded from a folder
    a helper can load it from: then this process builds every batch)."""
    import multiprocessing

    source = getattr(verifier.config, "_name_or_path", "")
    if workers < 2 or not source or not Path(source, "config.json").is_file():
        return []
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no forked OpenMP pool
    helpers = [context.Process(target=build_share, args=(source, tokenizer.name_or_path, cfg, folder, w, workers),
                               daemon=True) for w in range(1, workers)]
    for helper in helpers:
        helper.start()
    return helpers


def build_head_corpus(verifier, tokenizer, cfg: HeadCorpusConfig, folder: Path | None,
                      progress: bool = True, workers: int = 1) -> list[FeatureSeq]:
    """All conversations of ``cfg``; with ``folder``, each finished batch is kept there so a rerun
    resumes (batch k draws from its own generator, so batches can be built in any order).

    ``workers`` > 1 (with ``folder``): that many one-thread loops side by side, this process and
    ``workers - 1`` helpers, each building every ``workers``-th batch. A decode step at batch 96 is
    GEMMs of 96 rows, which two threads speed up far less than twofold, so two one-thread loops
    build two batches faster than one two-thread loop builds them one after the other (measured in
    benchmarks/README.md, *Building the heads*). A batch a helper failed to build is built here; the
    corpus is the same either way."""
    from tqdm.auto import tqdm

    job, count = CorpusJob(verifier=verifier, tokenizer=tokenizer, plan=plan_openers(cfg), cfg=cfg), cfg.batches
    if folder is None:
        return [s for k in tqdm(range(count), desc="head corpus", unit="batch", disable=not progress)
                for s in build_batch(job, k, None)]
    folder.mkdir(parents=True, exist_ok=True)
    helpers = start_helpers(verifier, tokenizer, cfg, folder, workers)
    threads = torch.get_num_threads()
    try:
        with tqdm(total=count, desc="head corpus", unit="batch", disable=not progress) as bar:
            def tick():  # the bar counts the shards on disk, the helpers' included
                bar.update(sum(shard_path(folder, k).is_file() for k in range(count)) - bar.n)
            if helpers:
                torch.set_num_threads(1)
            build_missing(job, folder, range(0, count, len(helpers) + 1), tick)
            while any(h.is_alive() for h in helpers):
                for h in helpers:
                    h.join(timeout=2)
                tick()
            build_missing(job, folder, range(count), tick)  # what a helper left undone
    finally:
        torch.set_num_threads(threads)
        for h in helpers:
            if h.is_alive():
                h.terminate()
    return [FeatureSeq(**s) for k in range(count) for s in torch.load(shard_path(folder, k))]


def corpus_folder(cfg: HeadCorpusConfig) -> Path:
    return cache_dir() / "head-corpus" / cfg.key()


def embedded_verifier(threads: int = 1):
    """(the embedded verifier in fp32, frozen, its tokenizer), on ``threads`` CPU threads."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(threads)
    path = embedded_verifier_path()
    verifier = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    verifier.requires_grad_(False)
    return verifier, AutoTokenizer.from_pretrained(path)
