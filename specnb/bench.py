"""Measurements: interleaved verifier-only vs speculative runs, and their summaries.

Raw records first, summaries after (Spec-Bench, Xia et al. 2024): ``run_interleaved`` keeps one
record per (repeat, batch of prompts, candidate) with tokens, wall time, per-stage times and
acceptance counts, so every number in a notebook can be recomputed from the CSV. ``summarise``
derives tok/s, α, τ and speedup from them.

Why interleaved: on a shared or thermally throttling machine, speed drifts over minutes. Running
every candidate on the same batch back to back, in an order rotated each repeat, makes drift hit
all of them alike; speedup is then a ratio measured on the same prompts in the same minute.

Definitions (as everywhere in specnb): α = accepted ÷ drafted tokens; τ = mean tokens per verifier
step including the bonus token (accepted + 1); speedup = tok/s ÷ verifier-only tok/s on the same
prompts and repeats, with tok/s counting generated tokens only and prefill time included.

Forward-pass microbenchmarks and FLOPs tables are in ``specnb.microbench``; tables derived from
the records for the notebooks (step costs, verdicts, per-draft tables) in ``specnb.analysis``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from specnb.errors import ParameterError
from specnb.microbench import exit_layers, flops_table

BASELINE = "verifier-only"
STAGE_COLUMNS = ("prefill_ms", "draft_ms", "verify_ms", "accept_ms", "rollback_ms", "other_ms")


@dataclass
class Candidate:
    """One way to generate: verifier-only (``draft=None, gamma=0``) or a draft at a gamma."""

    name: str
    draft: Any | None
    draft_name: str | None
    gamma: int


def load_candidates(verifier: str, drafts: list[str], device="auto", dtype="auto") -> tuple[Any, dict[str, Any]]:
    """The verifier (loaded once, as a ``Pair`` without draft) and each named draft for it.

    Drafts may be embedded names, ``exit:K`` / ``smollm2-exit-K`` (sharing the verifier's layers),
    ``prompt-lookup``, hub ids or folders; tokenizers are checked like ``load_pair`` does.
    """
    from specnb.models import load_pair

    pair = load_pair(verifier, None, device=device, dtype=dtype)
    loaded = {}
    for name in dict.fromkeys(drafts):  # keep order, drop duplicates
        loaded[name] = load_draft(pair, name)
    return pair, loaded


def load_draft(pair, name: str):
    """One draft for ``pair.verifier``; may set ``pair.vocab_size`` when logit widths differ."""
    from specnb import models

    if name == models.PROMPT_LOOKUP:
        return models.prompt_lookup_drafter()
    k = exit_layers(name, pair.verifier_name)
    if k is not None:
        return models.exit_draft(pair.verifier, k)
    source = models.locate(models.EMBEDDED_VERIFIER if name in models.EMBEDDED_EXITS else name)
    if source.has_tokenizer:
        models.check_same_tokenizer(pair.tokenizer, models.load_tokenizer(source), pair.verifier_name, name)
    model = models.load_weights(source, pair.device, pair.dtype)
    if name in models.EMBEDDED_EXITS:  # an embedded exit drafting for another verifier of its family
        model = models.exit_draft(model, models.EMBEDDED_EXITS[name])
    vocab = models.shared_vocab_size(pair.verifier.config, model.config, pair.tokenizer, source.has_tokenizer, name)
    if vocab is not None:
        pair.vocab_size = min(vocab, pair.vocab_size or vocab)
    return model


def make_candidates(drafts: dict[str, Any], gammas, baseline: bool = True) -> list[Candidate]:
    """Verifier-only (first) plus every draft at every gamma, named ``"<draft> γ=<gamma>"``."""
    gammas = [int(g) for g in gammas]
    if any(g < 1 for g in gammas):
        raise ParameterError(f"gammas must be integers >= 1, got {gammas}")
    found = [Candidate(BASELINE, None, None, 0)] if baseline else []
    for name, draft in drafts.items():
        found += [Candidate(f"{name} γ={g}", draft, name, g) for g in gammas]
    return found


def as_prompt_frame(prompts) -> pd.DataFrame:
    """A DataFrame with id, category, prompt from such a frame or from a list of strings."""
    if isinstance(prompts, pd.DataFrame):
        missing = {"id", "category", "prompt"} - set(prompts.columns)
        if missing:
            raise ParameterError(f"prompt frame lacks columns {sorted(missing)}; use specnb.prompts.load_prompts()")
        return prompts.reset_index(drop=True)
    texts = [str(p) for p in prompts]
    return pd.DataFrame({"id": [f"p{i:02d}" for i in range(len(texts))], "category": "custom", "prompt": texts})


def batches_of(frame: pd.DataFrame, batch_size: int) -> list[pd.DataFrame]:
    """Consecutive batches; the last one may be smaller."""
    if batch_size < 1:
        raise ParameterError(f"batch_size must be >= 1, got {batch_size}")
    return [frame.iloc[i:i + batch_size] for i in range(0, len(frame), batch_size)]


def rotated(candidates: list[Candidate], shift: int) -> list[Candidate]:
    """Candidate order for one repeat: rotated so no candidate always runs first (warm caches, drift)."""
    shift %= max(len(candidates), 1)
    return candidates[shift:] + candidates[:shift]


def run_interleaved(pair, prompts, candidates: list[Candidate], *, repeats: int = 1, max_new_tokens: int = 64,
                    batch_size: int = 1, progress: bool = True, warmup: bool = True, sampling=None,
                    chat: bool = True) -> pd.DataFrame:
    """Raw records, one per (repeat, batch of prompts, candidate), candidates interleaved per batch.

    ``warmup`` first runs each candidate once on a short generation so one-time costs (allocator
    growth, kernel selection) are not charged to whichever candidate happens to go first.
    """
    from tqdm.auto import tqdm

    from specnb.decoding import encode_prompts

    if repeats < 1 or max_new_tokens < 1:
        raise ParameterError(f"repeats and max_new_tokens must be >= 1, got {repeats} and {max_new_tokens}")
    if not candidates:
        raise ParameterError("no candidates to run; use make_candidates(drafts, gammas)")
    frame = as_prompt_frame(prompts)
    encoded = [(batch, *encode_prompts(pair.tokenizer, list(batch["prompt"]), chat=chat))
                for batch in batches_of(frame, batch_size)]
    if warmup:
        for cand in candidates:
            generate_one(pair, encoded[0][1], encoded[0][2], cand, min(4, max_new_tokens), sampling)
    records = []
    total = repeats * len(encoded) * len(candidates)
    with tqdm(total=total, desc="interleaved runs", unit="run", disable=not progress) as bar:
        for repeat in range(repeats):
            for batch, input_ids, mask in encoded:
                for cand in rotated(candidates, repeat):
                    result, stages = generate_one(pair, input_ids, mask, cand, max_new_tokens, sampling)
                    records.append(make_record(repeat, batch, cand, result, stages))
                    bar.update()
    return pd.DataFrame.from_records(records)


def generate_one(pair, input_ids, mask, cand: Candidate, max_new_tokens: int, sampling):
    """One timed generation; returns the ``GenerationResult`` and the timer's stage times (ms)."""
    from specnb.decoding import generate
    from specnb.timing import StageTimer

    timer = StageTimer(pair.device)
    result = generate(pair.verifier, input_ids.to(pair.device), mask.to(pair.device), draft=cand.draft,
                      gamma=max(cand.gamma, 1), max_new_tokens=max_new_tokens, sampling=sampling,
                      eos_token_id=pair.tokenizer.eos_token_id, timer=timer, vocab_size=pair.vocab_size)
    return result, timer.stages_ms()


def make_record(repeat: int, batch: pd.DataFrame, cand: Candidate, result, stages: dict[str, float]) -> dict:
    """Spec-Bench-style record: totals over the batch's rows, plus per-step and per-position counts."""
    accepted_steps = [n for row in result.accepted_per_step for n in row]  # per row, per verifier step
    drafted_steps = [n for row in result.drafted_per_step for n in row]
    gamma = cand.gamma if cand.draft is not None else 0
    record = {
        "repeat": repeat,
        "prompt_ids": ",".join(map(str, batch["id"])),
        "categories": ",".join(dict.fromkeys(batch["category"])),
        "candidate": cand.name,
        "draft": cand.draft_name or "",
        "gamma": gamma,
        "batch_size": len(batch),
        "new_tokens": sum(len(t) for t in result.tokens),
        "wall_ms": result.wall_ms,
    }
    record.update({f"{stage}_ms": stages.get(stage, 0.0) for stage in
                   ("prefill", "draft", "verify", "accept", "rollback", "other")})
    record.update({
        "drafted": sum(drafted_steps),
        "accepted": sum(accepted_steps),
        "steps": len(accepted_steps),
        "verifier_forwards": result.verifier_forwards,
        "draft_forwards": result.draft_forwards,
        "accept_lengths": accepted_steps,
        "accepted_by_position": [sum(n > i for n in accepted_steps) for i in range(gamma)],
        "drafted_by_position": [sum(n > i for n in drafted_steps) for i in range(gamma)],
    })
    record.update(ragged_costs(result.accepted_per_step, len(batch)))
    return record


def ragged_costs(accepted_per_step: list[list[int]], batch_size: int) -> dict[str, int]:
    """What batching costs when rows accept different numbers of tokens (see ``specnb.decoding``):
    ``ragged_slots`` = cache slots kept but masked because another row accepted more in that step;
    ``idle_row_steps`` = row-steps computed for rows that had already finished (EOS or budget)."""
    steps = max((len(row) for row in accepted_per_step), default=0)
    ragged = idle = 0
    for t in range(steps):
        active = [row[t] for row in accepted_per_step if len(row) > t]  # rows still generating at step t
        ragged += sum(max(active) - n for n in active)
        idle += batch_size - len(active)
    return {"ragged_slots": ragged, "idle_row_steps": idle}


def ratio_tok_s(frame: pd.DataFrame) -> float:
    """Generated tokens per second over a set of records (a ratio of sums, not a mean of ratios)."""
    wall = frame["wall_ms"].sum()
    return float(frame["new_tokens"].sum() / wall * 1e3) if wall > 0 else float("nan")


def summarise(records: pd.DataFrame, baseline: str = BASELINE, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Per candidate and batch size: tok/s, α, τ, speedup with a bootstrap CI over prompts, and
    per-stage ms per generated token.

    Speedup pairs each record with the baseline's on the same (repeat, prompts, batch size); the
    CI resamples prompt batches with replacement (all repeats of a batch move together).
    """
    records = pd.DataFrame(records)
    if baseline not in set(records["candidate"]):
        raise ParameterError(f"baseline {baseline!r} not among the candidates {sorted(set(records['candidate']))}")
    rng = np.random.default_rng(seed)
    rows = []
    for (name, batch_size), group in records.groupby(["candidate", "batch_size"], sort=False):
        base = records[(records["candidate"] == baseline) & (records["batch_size"] == batch_size)]
        rows.append(summarise_one(name, batch_size, group, base, rng, n_boot))
    return pd.DataFrame(rows)


def summarise_one(name, batch_size, group: pd.DataFrame, base: pd.DataFrame, rng, n_boot: int) -> dict:
    keys = ["repeat", "prompt_ids"]
    paired = group.merge(base, on=keys, suffixes=("", "_base"))
    units = paired["prompt_ids"].unique()
    speedup = paired_speedup(paired[["new_tokens", "wall_ms", "new_tokens_base", "wall_ms_base"]].sum().to_numpy())
    lo, hi = bootstrap_speedup(paired, units, rng, n_boot)
    steps, accepted, drafted, tokens = (group[c].sum() for c in ("steps", "accepted", "drafted", "new_tokens"))
    row = {
        "candidate": name,
        "draft": group["draft"].iloc[0],
        "gamma": int(group["gamma"].iloc[0]),
        "batch_size": int(batch_size),
        "records": len(group),
        "prompts": len(units),
        "new_tokens": int(tokens),
        "tok_s": ratio_tok_s(group),
        "alpha": accepted / drafted if drafted else float("nan"),
        "tau": 1.0 if group["gamma"].iloc[0] == 0 else (accepted + steps) / steps if steps else float("nan"),
        "speedup": float(speedup),
        "speedup_lo": lo,
        "speedup_hi": hi,
    }
    row.update({f"{c}_per_token": group[c].sum() / tokens if tokens else float("nan") for c in STAGE_COLUMNS})
    return row


def paired_speedup(totals: np.ndarray) -> np.ndarray:
    """(tokens / wall) ÷ (baseline tokens / baseline wall) from totals [..., 4] in that order."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return (totals[..., 0] / totals[..., 1]) / (totals[..., 2] / totals[..., 3])


def bootstrap_speedup(paired: pd.DataFrame, units, rng, n_boot: int) -> tuple[float, float]:
    """95% percentile interval of the speedup when prompt batches are resampled with replacement."""
    if len(units) < 2 or n_boot < 1:
        return float("nan"), float("nan")
    sums = paired.groupby("prompt_ids")[["new_tokens", "wall_ms", "new_tokens_base", "wall_ms_base"]].sum()
    sums = sums.loc[units].to_numpy()  # [U, 4]
    picks = rng.integers(0, len(units), size=(n_boot, len(units)))  # [n_boot, U]
    ratios = paired_speedup(sums[picks].sum(axis=1))  # totals: [n_boot, 4]
    return float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))


def acceptance_profile(records: pd.DataFrame) -> pd.DataFrame:
    """Per draft candidate and position i (1..γ): how often position i was drafted and accepted,
    the unconditional rate and the conditional one P(accept i | positions < i accepted), the
    profile ``theory.tokens_per_step_from_profile`` takes."""
    rows = []
    for name, group in pd.DataFrame(records).groupby("candidate", sort=False):
        gamma = int(group["gamma"].iloc[0])
        if gamma == 0:
            continue
        accepted = np.sum(np.stack(group["accepted_by_position"].map(np.asarray).to_list()), axis=0)
        drafted = np.sum(np.stack(group["drafted_by_position"].map(np.asarray).to_list()), axis=0)
        reached = np.concatenate([[group["steps"].sum()], accepted[:-1]])  # steps that got to position i
        for i in range(gamma):
            rows.append({"candidate": name, "draft": group["draft"].iloc[0], "gamma": gamma, "position": i + 1,
                         "drafted": int(drafted[i]), "accepted": int(accepted[i]),
                         "rate": accepted[i] / drafted[i] if drafted[i] else float("nan"),
                         "conditional_rate": accepted[i] / reached[i] if reached[i] else float("nan")})
    return pd.DataFrame(rows)


def per_prompt(records: pd.DataFrame, baseline: str = BASELINE) -> pd.DataFrame:
    """One row per (candidate, repeat, prompt batch): α and speedup against the baseline's same run,
    for acceptance variance across prompts, categories and runs."""
    records = pd.DataFrame(records)
    keys = ["repeat", "prompt_ids", "batch_size"]
    base = records[records["candidate"] == baseline][keys + ["new_tokens", "wall_ms"]]
    drafts = records[records["candidate"] != baseline].merge(base, on=keys, suffixes=("", "_base"))
    tok_s = drafts["new_tokens"] / drafts["wall_ms"] * 1e3
    base_tok_s = drafts["new_tokens_base"] / drafts["wall_ms_base"] * 1e3
    return pd.DataFrame({
        "candidate": drafts["candidate"], "draft": drafts["draft"], "gamma": drafts["gamma"],
        "repeat": drafts["repeat"], "prompt_ids": drafts["prompt_ids"], "categories": drafts["categories"],
        "alpha": drafts["accepted"] / drafts["drafted"].where(drafts["drafted"] > 0),
        "tok_s": tok_s, "speedup": tok_s / base_tok_s,
        "accepted": drafts["accepted"], "drafted": drafts["drafted"], "new_tokens": drafts["new_tokens"],
        "wall_ms": drafts["wall_ms"], "new_tokens_base": drafts["new_tokens_base"], "wall_ms_base": drafts["wall_ms_base"],
    })


def default_draft(verifier: str) -> str:
    """The draft a notebook uses when none is named: for the embedded verifier, the distilled draft
    with the best Leviathan speedup predicted from its recorded held-out agreement (as α) and its
    FLOPs c; the early exit ``smollm2-exit-4`` when no distilled draft is committed."""
    import json

    from specnb.models import DRAFTS_DIR, EMBEDDED_VERIFIER, embedded_draft_names
    from specnb.theory import optimal_gamma

    if verifier != EMBEDDED_VERIFIER:
        raise ParameterError(f"no default draft for verifier {verifier!r}; pass one, e.g. -p draft Qwen/Qwen2.5-0.5B-Instruct")
    names = embedded_draft_names()
    if not names:
        return "smollm2-exit-4"
    table = flops_table(verifier, names, context=0).set_index("model")

    def predicted(name: str) -> float:
        try:
            meta = json.loads((DRAFTS_DIR / name / "meta.json").read_text())
            alpha = float(meta["heldout_top1_agreement"]["after"])
        except (OSError, ValueError, KeyError, TypeError):
            return 0.0
        return float(optimal_gamma(min(alpha, 0.99), table.loc[name, "c_flops"])[1])

    return max(names, key=predicted)


DRAFT_KINDS = ("distilled", "exits", "lookup")


def notebook_drafts(verifier: str, draft: str | None = None, drafts=None, kinds=DRAFT_KINDS) -> list[str]:
    """The drafts a notebook compares: ``[draft]`` when one is named (``-p draft X`` is what every
    notebook accepts), else ``drafts``, else for the embedded verifier its embedded drafts of
    ``kinds`` (distilled ones cheapest first, early exits, prompt lookup). Another verifier has no embedded drafts:
    it gets ``default_draft``'s one-line error asking for one, not drafts built for a different model."""
    from specnb import models

    if draft is not None:
        return [draft]
    if drafts is not None:
        return [drafts] if isinstance(drafts, str) else list(drafts)
    if verifier != models.EMBEDDED_VERIFIER:
        return [default_draft(verifier)]
    unknown = set(kinds) - set(DRAFT_KINDS)
    if unknown:
        raise ParameterError(f"unknown draft kinds {sorted(unknown)}; known: {', '.join(DRAFT_KINDS)}")
    distilled = models.embedded_draft_names()
    if distilled:  # cheapest first, so a smoke run's drafts[:1] is the fastest to load and run
        c = flops_table(verifier, distilled, context=0).set_index("model")["c_flops"]
        distilled = sorted(distilled, key=lambda name: c[name])
    found = {"distilled": distilled, "exits": list(models.EMBEDDED_EXITS), "lookup": [models.PROMPT_LOOKUP]}
    return [name for kind in kinds for name in found[kind]]


def sweep_drafts(verifier: str, draft: str | None = None, drafts=None) -> list[str]:
    """Notebook 03's drafts: as ``notebook_drafts``, but by default for the embedded verifier prompt
    lookup (no forward: the draft that can win on a CPU) next to ``default_draft`` (a distilled
    model, which shows the speculation tax), swept side by side on the same prompts."""
    from specnb import models

    if draft is None and drafts is None and verifier == models.EMBEDDED_VERIFIER:
        return [models.PROMPT_LOOKUP, default_draft(verifier)]
    return notebook_drafts(verifier, draft, drafts)
