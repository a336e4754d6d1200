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

Forward-pass microbenchmarks are in ``specnb.measure.forward``; per-position acceptance and the
per-token α in ``specnb.measure.acceptance``; tables derived from the records for the notebooks
(step costs, verdicts, per-draft tables) in ``specnb.measure.analysis``.
"""

from __future__ import annotations

import gc
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from specnb.core.errors import ParameterError
from specnb.decode.drafters import make_drafter
from specnb.decode.generate import generate
from specnb.decode.inputs import encode_prompts
from specnb.decode.settings import Decoding
from specnb.decode.timing import STAGES, StageTimer, stage_columns
from specnb.decode.trees import DynamicTree, TreeShape
from specnb.measure.acceptance import token_alpha
from specnb.measure.prompts import as_prompt_frame, batches_of
from specnb.models.kernels import kernel_label

BASELINE = "verifier-only"  # the candidate every speedup is measured against
STAGE_COLUMNS = stage_columns()
KERNEL_COLUMNS = ["baseline_kernels", "verifier_kernels", "draft_kernels"]  # the path each side ran (``kernel_paths``)


@dataclass(kw_only=True)
class Candidate:
    """One way to generate: verifier-only (``draft=None, gamma=0``), a draft at a γ, or a head draft
    with a static tree (``tree``: branching per depth; ``gamma`` is then its depth). ``gamma`` may be a
    choice made per batch size (``specnb.decode.gamma.GammaChoice``: ``gamma="auto"``);
    ``confidence``: chains stop where the draft is unsure (``specnb.decode.confidence``)."""

    name: str
    draft: Any | None
    draft_name: str | None
    gamma: Any  # int, or a GammaChoice
    tree: tuple[int, ...] | DynamicTree | None = None
    confidence: float = 0.0


def make_candidates(drafts: dict[str, Any], gammas, baseline: bool = True, trees=(), confidences=(0.0,),
                    auto=None) -> list[Candidate]:
    """Verifier-only (first), every draft at every γ and confidence threshold (``"<draft> γ=<gamma>"``,
    ``"<draft> γ=4 conf=0.3"``), and every draft that can draft a tree with each of ``trees``
    (``"<draft> tree=3x2x1"``; a ``DynamicTree`` for drafts that grow one: ``"<draft> tree=dynamic4w4n16"``).
    A γ of ``"auto"`` is the predictor's per batch size: ``auto`` builds it from (draft name,
    confidence) (``specnb.predict.auto_gamma.chooser``)."""
    wants_auto = any(isinstance(g, str) and g == "auto" for g in gammas)
    gammas = [g for g in gammas if not (isinstance(g, str) and g == "auto")]
    if not all(isinstance(g, numbers.Real) and int(g) == g and g >= 1 for g in gammas):
        raise ParameterError(f"gammas must be integers >= 1 or \"auto\", got {gammas}")
    if wants_auto and auto is None:
        raise ParameterError('gamma "auto" needs the predictor: pass auto=specnb.predict.auto_gamma.chooser(verifier)')
    if any(not 0.0 <= c <= 1.0 for c in confidences):
        raise ParameterError(f"confidence thresholds must be between 0 and 1, got {list(confidences)}")
    trees = [t if isinstance(t, DynamicTree) else tuple(int(b) for b in t) for t in trees]
    found = [Candidate(name=BASELINE, draft=None, draft_name=None, gamma=0)] if baseline else []
    for name, draft in drafts.items():
        for c in confidences:
            suffix = f" conf={c:g}" if c else ""
            found += [Candidate(name=f"{name} γ={int(g)}{suffix}", draft=draft, draft_name=name, gamma=int(g),
                                confidence=c) for g in gammas]
            if wants_auto:
                found.append(Candidate(name=f"{name} γ=auto{suffix}", draft=draft, draft_name=name,
                                       gamma=auto(name, c), confidence=c))
        drafter = make_drafter(draft) if trees else None
        for t in trees:
            grows = drafter.trees and (getattr(drafter, "dynamic_trees", False) or not isinstance(t, DynamicTree))
            if grows:
                found.append(Candidate(name=f"{name} tree={tree_shape(t).label()}", draft=draft, draft_name=name,
                                       gamma=tree_shape(t).depth, tree=t))
    return found


def tree_shape(tree) -> TreeShape | DynamicTree:
    """A candidate's tree as the engine sees it (its ``label()``, e.g. ``3x2x1``, and ``depth``)."""
    return tree if isinstance(tree, DynamicTree) else TreeShape(tree)


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
    paths = {cand.name: kernel_paths(pair, cand) for cand in candidates}
    total = repeats * len(encoded) * len(candidates)
    with tqdm(total=total, desc="interleaved runs", unit="run", disable=not progress) as bar:
        for repeat in range(repeats):
            for i, (batch, input_ids, mask) in enumerate(encoded):
                # rotated per batch too: with one repeat the baseline would otherwise run first on every
                # batch, and the very first timed run (after a 4-token warm-up) is often slow, which
                # inflates every speedup paired with it
                for cand in rotated(candidates, repeat + i):
                    result, stages = generate_one(pair, input_ids, mask, cand, max_new_tokens, sampling)
                    records.append({**make_record(repeat, batch, cand, result, stages), **paths[cand.name]})
                    bar.update()
    return pd.DataFrame.from_records(records)


def run_batch_sizes(pair, prompts, candidates: list[Candidate], batch_sizes, **settings) -> pd.DataFrame:
    """``run_interleaved`` at each batch size in turn, keeping full batches only (a last, smaller
    batch would be another batch size)."""
    return pd.concat([run_interleaved(pair, prompts, candidates, batch_size=b, **settings).query(f"batch_size == {b}")
                      for b in batch_sizes], ignore_index=True)


def kernel_paths(pair, cand: Candidate) -> dict[str, str]:
    """The CPU kernel path each side of a run ran (``specnb.models.kernels.kernel_label``), read off the
    models as they run, so every table can say whether the baseline had the kernels the speculative
    side had: the verifier's for every candidate, verifier-only included; the draft's ("" without)."""
    return {"verifier_kernels": kernel_label(pair.verifier), "draft_kernels": kernel_label(cand.draft)}


def generate_one(pair, input_ids, mask, cand: Candidate, max_new_tokens: int, sampling):
    """One timed generation; returns the ``GenerationResult`` and the timer's stage times (ms).

    The garbage collector is paused for the duration, as ``timeit`` does: a collection triggered by
    the allocations of whatever ran before would otherwise land on one candidate's clock."""
    timer = StageTimer(pair.device)
    collecting = gc.isenabled()
    gc.disable()
    try:
        gamma = max(cand.gamma, 1) if isinstance(cand.gamma, int) else cand.gamma
        result = generate(pair.verifier, input_ids.to(pair.device), mask.to(pair.device), draft=cand.draft,
                          sampling=sampling,
                          decoding=Decoding(gamma=gamma, max_new_tokens=max_new_tokens,
                                            eos_token_id=pair.tokenizer.eos_token_id, tree=cand.tree,
                                            confidence=cand.confidence, vocab_size=pair.vocab_size, timer=timer))
    finally:
        if collecting:
            gc.enable()
    return result, timer.stages_ms()


def make_record(repeat: int, batch: pd.DataFrame, cand: Candidate, result, stages: dict[str, float]) -> dict:
    """Spec-Bench-style record: totals over the batch's rows, plus per-step and per-position counts.
    ``gamma`` is the γ the run used (for ``gamma="auto"``, the one chosen; ``gamma_reason`` says why)."""
    accepted_steps = [n for row in result.accepted_per_step for n in row]  # per row, per verifier step
    drafted_steps = [n for row in result.drafted_per_step for n in row]
    gamma = result.gamma if cand.draft is not None else 0
    record = {
        "repeat": repeat,
        "prompt_ids": ",".join(map(str, batch["id"])),
        "categories": ",".join(dict.fromkeys(batch["category"])),
        "candidate": cand.name,
        "draft": cand.draft_name or "",
        "gamma": gamma,
        "tree": tree_shape(cand.tree).label() if cand.tree else "",
        "confidence": cand.confidence,
        "gamma_reason": result.gamma_reason,
        "batch_size": len(batch),
        "new_tokens": sum(len(t) for t in result.tokens),
        "wall_ms": result.wall_ms,
    }
    record.update({column: stages.get(stage, 0.0) for stage, column in zip(STAGES, STAGE_COLUMNS)})
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
    """What batching costs when rows accept different numbers of tokens (see ``specnb.decode.generate``):
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
    """Per candidate and batch size: tok/s, α (accepted ÷ drafted), the per-token α (``alpha_token``,
    accepted ÷ positions reached), τ, drafted tokens per step, speedup with a bootstrap CI over
    prompts, and per-stage ms per generated token; a ``gamma="auto"`` candidate also says which γ it
    chose and why (``gamma_reason``).

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
        "tree": group["tree"].iloc[0] if "tree" in group else "",
        "batch_size": int(batch_size),
        "records": len(group),
        "prompts": len(units),
        "new_tokens": int(tokens),
        "tok_s": ratio_tok_s(group),
        "alpha": accepted / drafted if drafted else float("nan"),
        "alpha_token": token_alpha(group),
        "tau": 1.0 if group["gamma"].iloc[0] == 0 else (accepted + steps) / steps if steps else float("nan"),
        "drafted_per_step": drafted / steps if steps else float("nan"),
        "confidence": float(group["confidence"].iloc[0]) if "confidence" in group else 0.0,
        "gamma_reason": group["gamma_reason"].iloc[0] if "gamma_reason" in group else "",
        "speedup": float(speedup),
        "speedup_lo": lo,
        "speedup_hi": hi,
        "verifier_kernels": group["verifier_kernels"].iloc[0] if "verifier_kernels" in group else "",
        "draft_kernels": group["draft_kernels"].iloc[0] if "draft_kernels" in group else "",
        "baseline_kernels": base["verifier_kernels"].iloc[0] if "verifier_kernels" in base and len(base) else "",
    }
    row.update({f"{c}_per_token": group[c].sum() / tokens if tokens else float("nan") for c in STAGE_COLUMNS})
    return row


def paired_speedup(totals: np.ndarray) -> np.ndarray:
    """(tokens / wall) ÷ (baseline tokens / baseline wall) from totals [..., 4] in that order."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return (totals[..., 0] / totals[..., 1]) / (totals[..., 2] / totals[..., 3])


def bootstrap_speedup(paired: pd.DataFrame, units, rng, n_boot: int,
                      columns=("new_tokens", "wall_ms", "new_tokens_base", "wall_ms_base"),
                      unit: str = "prompt_ids") -> tuple[float, float]:
    """95% percentile interval of the speedup when prompt batches are resampled with replacement.
    ``unit`` and ``columns`` (the four totals in ``paired_speedup``'s order, time in any one unit)
    name another table's: a serving sweep's requests are timed in seconds, per prompt and round."""
    if len(units) < 2 or n_boot < 1:
        return float("nan"), float("nan")
    sums = paired.groupby(unit)[list(columns)].sum()
    sums = sums.loc[units].to_numpy()  # [U, 4]
    picks = rng.integers(0, len(units), size=(n_boot, len(units)))  # [n_boot, U]
    ratios = paired_speedup(sums[picks].sum(axis=1))  # totals: [n_boot, 4]
    return float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))


def per_prompt(records: pd.DataFrame, baseline: str = BASELINE) -> pd.DataFrame:
    """One row per (candidate, repeat, prompt batch): α and speedup against the baseline's same run,
    for acceptance variance across prompts, categories and runs."""
    records = pd.DataFrame(records)
    keys = ["repeat", "prompt_ids", "batch_size"]
    base = records[records["candidate"] == baseline][keys + ["new_tokens", "wall_ms"]]
    drafts = records[records["candidate"] != baseline].merge(base, on=keys, suffixes=("", "_base"))
    tok_s = drafts["new_tokens"] / drafts["wall_ms"] * 1e3
    base_tok_s = drafts["new_tokens_base"] / drafts["wall_ms_base"] * 1e3
    return pd.DataFrame(
        {
            "candidate": drafts["candidate"],
            "draft": drafts["draft"],
            "gamma": drafts["gamma"],
            "repeat": drafts["repeat"],
            "prompt_ids": drafts["prompt_ids"],
            "categories": drafts["categories"],
            "alpha": drafts["accepted"] / drafts["drafted"].where(drafts["drafted"] > 0),
            "tok_s": tok_s,
            "speedup": tok_s / base_tok_s,
            "accepted": drafts["accepted"],
            "drafted": drafts["drafted"],
            "new_tokens": drafts["new_tokens"],
            "wall_ms": drafts["wall_ms"],
            "new_tokens_base": drafts["new_tokens_base"],
            "wall_ms_base": drafts["wall_ms_base"],
        }
    )
