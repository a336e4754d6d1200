"""Measurements: interleaved verifier-only vs speculative runs, and forward-pass microbenchmarks.

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

Dispatch overhead: a forward costs a fixed launch/framework time plus a compute or bandwidth term,
t = t0 + k·FLOPs; ``fit_dispatch`` fits it across models. A large t0 is why a draft with 6x fewer
FLOPs can be only ~2.8x faster per token, and why the wall-clock cost ratio c differs from the
FLOPs c used by Leviathan et al. 2023 ("Fast Inference from Transformers via Speculative Decoding").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from specnb.errors import ParameterError

BASELINE = "verifier-only"
STAGE_COLUMNS = ("prefill_ms", "draft_ms", "verify_ms", "accept_ms", "rollback_ms", "other_ms")


@dataclass
class Candidate:
    """One way to generate: verifier-only (``draft=None, gamma=0``) or a draft at a gamma."""

    name: str
    draft: Any | None
    draft_name: str | None
    gamma: int


# ---------------------------------------------------------------- loading what to compare

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


def exit_layers(name: str, verifier: str) -> int | None:
    """K for ``exit:K``, or for an embedded exit of the embedded verifier itself; else None."""
    from specnb.models import EMBEDDED_EXITS, EMBEDDED_VERIFIER

    if name in EMBEDDED_EXITS and verifier == EMBEDDED_VERIFIER:
        return EMBEDDED_EXITS[name]
    if not name.startswith("exit:"):
        return None
    try:
        return int(name.split(":", 1)[1])
    except ValueError:
        raise ParameterError(f"early-exit draft {name!r} must look like exit:K with an integer K, e.g. exit:4") from None


def make_candidates(drafts: dict[str, Any], gammas, baseline: bool = True) -> list[Candidate]:
    """Verifier-only (first) plus every draft at every gamma, named ``"<draft> γ=<gamma>"``."""
    gammas = [int(g) for g in gammas]
    if any(g < 1 for g in gammas):
        raise ParameterError(f"gammas must be integers >= 1, got {gammas}")
    found = [Candidate(BASELINE, None, None, 0)] if baseline else []
    for name, draft in drafts.items():
        found += [Candidate(f"{name} γ={g}", draft, name, g) for g in gammas]
    return found


# ---------------------------------------------------------------- interleaved runs

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


# ---------------------------------------------------------------- summaries

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


# ---------------------------------------------------------------- FLOPs of a pair

def draft_config(verifier_config, name: str):
    """Config of a draft for FLOPs counting; early exits are the verifier cut to K layers; None for
    prompt lookup (no model, no FLOPs)."""
    from specnb.flops import resolve_config
    from specnb.models import EMBEDDED_EXITS, PROMPT_LOOKUP, exit_config

    if name == PROMPT_LOOKUP:
        return None
    if name in EMBEDDED_EXITS:
        return exit_config(verifier_config, EMBEDDED_EXITS[name])
    if name.startswith("exit:"):
        return exit_config(verifier_config, exit_layers(name, ""))
    return resolve_config(name)


def flops_table(verifier: str, drafts: list[str], context: int = 128) -> pd.DataFrame:
    """FLOPs per token (seed convention, and with attention over ``context`` cached tokens),
    parameters and the FLOPs cost ratio c of each draft against ``verifier``; from configs only."""
    from specnb.flops import analytic_flops, resolve_config

    v_config = resolve_config(verifier)
    v = analytic_flops(v_config, context)
    rows = [{"model": verifier, "role": "verifier", "layers": v.layers, "hidden_size": v.hidden_size,
             "params": v.params, "flops_per_token": v.flops_per_token, "flops_at_context": v.flops_per_token_at_context}]
    for name in drafts:
        config = draft_config(v_config, name)
        d = analytic_flops(config, context) if config is not None else None
        rows.append({"model": name, "role": "draft", "layers": d.layers if d else 0,
                     "hidden_size": d.hidden_size if d else 0, "params": d.params if d else 0,
                     "flops_per_token": d.flops_per_token if d else 0,
                     "flops_at_context": d.flops_per_token_at_context if d else 0})
    frame = pd.DataFrame(rows)
    frame["c_flops"] = frame["flops_per_token"] / v.flops_per_token
    frame["c_flops_at_context"] = frame["flops_at_context"] / v.flops_per_token_at_context
    frame.attrs["context"] = context
    return frame


# ---------------------------------------------------------------- forward microbenchmarks

def measure_forward_grid(model, n_tokens=(1, 2, 4, 8), batch_sizes=(1,), context_len: int = 128, repeats: int = 5,
                         name: str | None = None, device=None) -> pd.DataFrame:
    """Median ms of one forward for every (tokens per forward, batch size), on a ``context_len`` cache."""
    from specnb.timing import measure_forward_ms

    rows = []
    for b in batch_sizes:
        for n in n_tokens:
            t = measure_forward_ms(model, n_tokens=int(n), batch_size=int(b), context_len=context_len,
                                   repeats=repeats, device=device)
            rows.append({"model": name or type(model).__name__, "n_tokens": t.n_tokens, "batch_size": t.batch_size,
                         "context_len": t.context_len, "median_ms": t.median_ms,
                         "min_ms": min(t.samples_ms), "max_ms": max(t.samples_ms), "samples_ms": t.samples_ms})
    return pd.DataFrame(rows)


@dataclass
class DispatchFit:
    """t_forward = t0 + k·FLOPs across models: fixed dispatch cost plus a compute/bandwidth term."""

    t0_ms: float
    ms_per_gflop: float
    r2: float
    n_points: int

    def predict_ms(self, flops) -> np.ndarray:
        return self.t0_ms + self.ms_per_gflop * np.asarray(flops, dtype=float) / 1e9


def forward_flops(grid: pd.DataFrame, flops_per_token) -> np.ndarray:
    """FLOPs of each grid row's forward: per-token FLOPs of its model × tokens × batch size."""
    if isinstance(flops_per_token, dict):
        missing = set(grid["model"]) - set(flops_per_token)
        if missing:
            raise ParameterError(f"no FLOPs/token given for models {sorted(missing)}")
        per_token = grid["model"].map(flops_per_token).to_numpy(dtype=float)
    else:
        per_token = np.full(len(grid), float(flops_per_token))
    return per_token * grid["n_tokens"].to_numpy() * grid["batch_size"].to_numpy()


def fit_dispatch(grid: pd.DataFrame, flops_per_token) -> DispatchFit:
    """Least-squares fit of median forward ms on forward GFLOPs (``flops_per_token``: a number, or
    a dict from the grid's ``model`` names to FLOPs/token)."""
    x = forward_flops(grid, flops_per_token) / 1e9
    y = grid["median_ms"].to_numpy(dtype=float)
    if len(np.unique(x)) < 2:
        raise ParameterError("fit_dispatch needs forwards of at least two different sizes (tokens or models)")
    design = np.stack([np.ones_like(x), x], axis=1)  # [N, 2]
    (t0, k), *_ = np.linalg.lstsq(design, y, rcond=None)
    residual = y - design @ np.array([t0, k])
    total = np.sum((y - y.mean()) ** 2)
    r2 = 1.0 - np.sum(residual ** 2) / total if total > 0 else 1.0
    return DispatchFit(float(t0), float(k), float(r2), len(y))


def wall_clock_c(grid: pd.DataFrame, draft: str, verifier: str, n_tokens: int = 1, batch_size: int = 1) -> float:
    """c by wall clock: the draft's ÷ the verifier's median time of one ``n_tokens`` forward."""
    def median(model):
        rows = grid[(grid["model"] == model) & (grid["n_tokens"] == n_tokens) & (grid["batch_size"] == batch_size)]
        if rows.empty:
            raise ParameterError(f"no timing for {model!r} at n_tokens={n_tokens}, batch_size={batch_size}")
        return float(rows["median_ms"].median())

    return median(draft) / median(verifier)


# ---------------------------------------------------------------- choosing and costing drafts

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


def wall_clock_costs(records: pd.DataFrame, baseline: str = BASELINE) -> pd.DataFrame:
    """Per draft candidate, what drafting and verifying really cost in the runs: draft ms per
    drafted token, verify ms per verification step, and c by wall clock = draft ms per drafted
    token ÷ the baseline's verify ms per (one-token) step. Works for prompt lookup too."""
    records = pd.DataFrame(records)
    base = records[records["candidate"] == baseline]
    base_steps = (base["verifier_forwards"] - 1).sum()  # the prefill forward is timed as prefill
    verifier_step_ms = base["verify_ms"].sum() / base_steps if base_steps else float("nan")
    rows = []
    for name, group in records[records["candidate"] != baseline].groupby("candidate", sort=False):
        drafted, steps = group["drafted"].sum(), group["steps"].sum()
        draft_ms = group["draft_ms"].sum() / drafted if drafted else float("nan")
        rows.append({"candidate": name, "draft": group["draft"].iloc[0], "gamma": int(group["gamma"].iloc[0]),
                     "draft_ms_per_drafted_token": draft_ms,
                     "verify_ms_per_step": group["verify_ms"].sum() / steps if steps else float("nan"),
                     "baseline_verify_ms_per_step": verifier_step_ms, "c_wall": draft_ms / verifier_step_ms})
    return pd.DataFrame(rows)


def best_per_draft(summary: pd.DataFrame) -> pd.DataFrame:
    """Each draft's row at its best measured γ (highest speedup), per batch size."""
    drafts = summary[summary["gamma"] > 0]
    best = drafts.loc[drafts.groupby(["draft", "batch_size"], sort=False)["speedup"].idxmax()]
    return best.reset_index(drop=True)


def simulate_runs(rows: pd.DataFrame, run_size: int, n_runs: int = 1000, seed: int = 0) -> pd.DataFrame:
    """What short benchmark runs of ``run_size`` prompts would report: draw that many measured
    per-prompt records (``per_prompt`` plus accepted/drafted/tokens/wall columns) without
    replacement, per candidate, and compute each run's α and speedup as ratios of sums."""
    rng = np.random.default_rng(seed)
    out = []
    for name, group in rows.groupby("candidate", sort=False):
        values = group[["accepted", "drafted", "new_tokens", "wall_ms", "new_tokens_base", "wall_ms_base"]].to_numpy()
        size = min(run_size, len(values))
        for run in range(n_runs):
            totals = values[rng.choice(len(values), size=size, replace=False)].sum(axis=0)
            out.append({"candidate": name, "draft": group["draft"].iloc[0], "run": run, "prompts": size,
                        "alpha": totals[0] / totals[1] if totals[1] else float("nan"),
                        "speedup": float(paired_speedup(totals[2:]))})
    return pd.DataFrame(out)


# ---------------------------------------------------------------- notebooks 01, 02 and 06

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


def smaller_vs_faster(fit: DispatchFit, verifier_flops: float,
                      factors=(1, 1.5, 2, 3, 4, 6, 8, 12, 16, 32)) -> pd.DataFrame:
    """Why s-times fewer FLOPs is not s-times faster: under the fitted t = t0 + k·FLOPs a forward of
    verifier_flops / s costs (t0 + kF) / (t0 + kF/s) times less, which tends to 1 + kF/t0, not s."""
    factors = np.asarray(factors, dtype=float)
    if np.any(factors <= 0):
        raise ParameterError(f"FLOPs reduction factors must be positive, got {factors.tolist()}")
    verifier_ms = float(fit.predict_ms(verifier_flops))
    return pd.DataFrame({"flops_smaller": factors,
                         "times_faster": verifier_ms / fit.predict_ms(verifier_flops / factors)})


# ---------------------------------------------------------------- gamma sweep (notebook 03)

def token_alpha_by_candidate(records: pd.DataFrame) -> pd.DataFrame:
    """Per speculative candidate and batch size: accepted ÷ draft positions *reached* (drafted with
    every earlier position accepted), the per-token α of Leviathan et al.'s formula. The summary's
    α = accepted ÷ drafted is lower and falls with γ even at a constant per-token α, because
    positions after a rejection are drafted but never get a chance."""
    from specnb.predict import counts_from_positions

    records = pd.DataFrame(records)
    rows = []
    for (name, batch_size), group in records[records["gamma"] > 0].groupby(["candidate", "batch_size"], sort=False):
        reached = sum(sum(counts_from_positions(a, d)[0])
                      for a, d in zip(group["accepted_by_position"], group["drafted_by_position"]))
        accepted = int(group["accepted"].sum())
        rows.append({"candidate": name, "batch_size": int(batch_size), "accepted": accepted, "reached": int(reached),
                     "alpha_token": accepted / reached if reached else float("nan")})
    return pd.DataFrame(rows, columns=["candidate", "batch_size", "accepted", "reached", "alpha_token"])


def leviathan_predictions(summary: pd.DataFrame, flops_c: dict[str, float], wall: pd.DataFrame,
                          alpha: str = "alpha") -> pd.DataFrame:
    """Speedup Leviathan et al.'s formula predicts for every measured (draft, γ) from its measured α
    (the summary column ``alpha``; pass ``"alpha_token"`` after merging ``token_alpha_by_candidate``),
    once with the FLOPs c (``flops_c``: draft name -> c) and once with the wall-clock c of
    ``wall_clock_costs`` (tidy: candidate, draft, gamma, batch_size, alpha, c, kind, source, speedup).

    Both readings assume verifying γ + 1 tokens costs one one-token forward and that bookkeeping is
    free; the gap between them and the measured speedup is what those assumptions miss.
    """
    from specnb.theory import expected_speedup

    wall_c = pd.DataFrame(wall).set_index("candidate")["c_wall"].to_dict() if len(wall) else {}
    columns = ["candidate", "draft", "gamma", "batch_size", "alpha", "c", "kind", "source", "speedup"]
    rows = []
    for r in summary[summary["gamma"] > 0].rename(columns={alpha: "alpha_used"}).itertuples():
        if not np.isfinite(r.alpha_used):
            continue  # nothing was drafted (a lookup that never matched): α is undefined
        a = min(float(r.alpha_used), 0.999)  # the formula diverges at α = 1
        for kind, c in (("FLOPs c", flops_c.get(r.draft)), ("wall-clock c", wall_c.get(r.candidate))):
            if c is None or not np.isfinite(c) or c < 0:
                continue
            rows.append({"candidate": r.candidate, "draft": r.draft, "gamma": int(r.gamma),
                         "batch_size": int(r.batch_size), "alpha": float(r.alpha_used), "c": float(c), "kind": kind,
                         "source": f"{r.draft} (Leviathan, {kind})",
                         "speedup": float(expected_speedup(a, int(r.gamma), float(c)))})
    return pd.DataFrame(rows, columns=columns)


def step_costs(records: pd.DataFrame, baseline: str = BASELINE) -> pd.DataFrame:
    """One decoding step's economics per speculative candidate and batch size (prefill excluded).

    A step = one verifier forward. Columns: ms drafting, verifying and on bookkeeping (accept +
    rollback + other) per step; ``tokens_per_step`` it yields (all rows, after the prefill's first
    token); ``baseline_ms_per_token`` of verifier-only decoding at the same batch size; the step's
    parts in units of that time (``draft_cost``, ``verify_cost``, ``overhead_cost``, summing to
    ``break_even_tokens``: what a step must yield to tie) and ``decode_speedup``. A γ wins decoding
    exactly when ``tokens_per_step > break_even_tokens``: the reason a γ wins or loses, in numbers.
    """
    records = pd.DataFrame(records)
    if baseline not in set(records["candidate"]):
        raise ParameterError(f"baseline {baseline!r} not among the candidates {sorted(set(records['candidate']))}")

    def totals(group: pd.DataFrame) -> dict:
        return {"steps": int((group["verifier_forwards"] - 1).sum()),  # the prefill forward is not a step
                "tokens": float((group["new_tokens"] - group["batch_size"]).clip(lower=0).sum()),
                "draft": group["draft_ms"].sum(), "verify": group["verify_ms"].sum(),
                "overhead": group[["accept_ms", "rollback_ms", "other_ms"]].sum().sum()}

    rows = []
    for (name, batch_size), group in records.groupby(["candidate", "batch_size"], sort=False):
        if name == baseline:
            continue
        base = totals(records[(records["candidate"] == baseline) & (records["batch_size"] == batch_size)])
        t = totals(group)
        base_ms = (base["verify"] + base["overhead"]) / base["tokens"] if base["tokens"] else float("nan")
        per_step = {k: t[k] / t["steps"] if t["steps"] else float("nan") for k in ("draft", "verify", "overhead")}
        step_ms = sum(per_step.values())
        tokens_per_step = t["tokens"] / t["steps"] if t["steps"] else float("nan")
        rows.append({"candidate": name, "draft": group["draft"].iloc[0], "gamma": int(group["gamma"].iloc[0]),
                     "batch_size": int(batch_size), "steps": t["steps"], "tokens_per_step": tokens_per_step,
                     "draft_ms_per_step": per_step["draft"], "verify_ms_per_step": per_step["verify"],
                     "overhead_ms_per_step": per_step["overhead"], "step_ms": step_ms,
                     "baseline_ms_per_token": base_ms,
                     "draft_cost": per_step["draft"] / base_ms, "verify_cost": per_step["verify"] / base_ms,
                     "overhead_cost": per_step["overhead"] / base_ms, "break_even_tokens": step_ms / base_ms,
                     "decode_speedup": tokens_per_step * base_ms / step_ms if step_ms else float("nan")})
    return pd.DataFrame(rows)


def gamma_verdicts(summary: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per speculative candidate: ``verdict`` (wins / loses by the 95% CI of the measured speedup,
    ``inconclusive`` when it spans 1x; the point estimate decides when there is no CI) and a
    one-line ``reason`` from ``step_costs``: what a step costs in verifier-only tokens and what it yields."""
    merged = summary[summary["gamma"] > 0].merge(
        steps.drop(columns=["draft", "gamma"]), on=["candidate", "batch_size"], how="left")

    def verdict(r) -> str:
        if np.isfinite(r.speedup_lo) and np.isfinite(r.speedup_hi):
            return "wins" if r.speedup_lo > 1 else "loses" if r.speedup_hi < 1 else "inconclusive"
        return "wins" if r.speedup > 1 else "loses"

    def alpha_text(r) -> str:
        token = getattr(r, "alpha_token", float("nan"))
        return f"α = {r.alpha:.2f}" + (f", per token {token:.2f}" if np.isfinite(token) else "")

    def reason(r) -> str:
        ci = f" [{r.speedup_lo:.2f}, {r.speedup_hi:.2f}]" if np.isfinite(r.speedup_lo) else " (no CI: one prompt batch)"
        yields = "yields" if r.tokens_per_step > r.break_even_tokens else "yields only"
        return (f"{r.candidate}, batch {r.batch_size}: {r.speedup:.2f}x{ci}, {r.verdict}. A step costs the time of "
                f"{r.break_even_tokens:.2f} verifier-only tokens ({r.draft_ms_per_step:.0f} ms drafting {r.gamma} "
                f"token{'s' if r.gamma > 1 else ''}, {r.verify_ms_per_step:.0f} ms verifying {r.gamma + 1}, "
                f"{r.overhead_ms_per_step:.0f} ms bookkeeping) and {yields} {r.tokens_per_step:.2f} tokens ({alpha_text(r)}).")

    merged["verdict"] = [verdict(r) for r in merged.itertuples()]
    merged["reason"] = [reason(r) for r in merged.itertuples()]
    return merged


# ---------------------------------------------------------------- batch size (notebook 05)

def forward_scaling(grid: pd.DataFrame) -> pd.DataFrame:
    """Each forward of one model's grid against its one-token, batch-1 forward: ``tokens`` in the
    forward (n_tokens × batch_size), ``ms_per_token`` and ``times_one_token`` (how many one-token
    forwards' time it costs). While memory- or dispatch-bound, tokens ride along almost free."""
    one = grid[(grid["n_tokens"] == 1) & (grid["batch_size"] == 1)]["median_ms"]
    if one.empty:
        raise ParameterError("forward_scaling needs a forward of 1 token at batch size 1 in the grid")
    tokens = grid["n_tokens"] * grid["batch_size"]
    return grid.assign(tokens=tokens, ms_per_token=grid["median_ms"] / tokens,
                       times_one_token=grid["median_ms"] / float(one.median())).sort_values(["tokens", "batch_size"])


def batch_knee(grid: pd.DataFrame, ratio: float = 2.0) -> float:
    """Fewest tokens in one forward that cost at least ``ratio`` one-token forwards: below it the
    verifier is memory/dispatch-bound (verifying γ + 1 tokens per row costs about one forward),
    from there on compute grows with the tokens. NaN when no measured forward got that slow."""
    scaled = forward_scaling(grid)
    slow = scaled[scaled["times_one_token"] >= ratio]
    return float(slow["tokens"].min()) if len(slow) else float("nan")


def ragged_summary(records: pd.DataFrame) -> pd.DataFrame:
    """What batching cost per candidate and batch size (``ragged_costs`` summed over records).

    ``masked_slot_share`` = cache slots kept but masked ÷ slots appended for live rows (accepted +
    1 per row-step, plus the masked ones); ``idle_row_share`` = row-steps computed for rows that had
    finished ÷ all row-steps (batch size × verifier forwards after prefill). Verifier-only records
    carry no per-step counts; their live row-steps are their tokens after the first.
    """
    records = pd.DataFrame(records)
    rows = []
    for (name, batch_size), g in records.groupby(["candidate", "batch_size"], sort=False):
        row_steps = int(((g["verifier_forwards"] - 1) * g["batch_size"]).sum())
        speculative = int(g["gamma"].iloc[0]) > 0
        live = int(g["steps"].sum()) if speculative else int((g["new_tokens"] - g["batch_size"]).clip(lower=0).sum())
        idle = int(g["idle_row_steps"].sum()) if speculative else row_steps - live
        ragged = int(g["ragged_slots"].sum())
        slots = ragged + int(g["accepted"].sum()) + live
        rows.append({"candidate": name, "draft": g["draft"].iloc[0], "gamma": int(g["gamma"].iloc[0]),
                     "batch_size": int(batch_size), "ragged_slots": ragged, "idle_row_steps": idle,
                     "row_steps": row_steps, "new_tokens": int(g["new_tokens"].sum()),
                     "masked_slot_share": ragged / slots if slots else 0.0,
                     "idle_row_share": idle / row_steps if row_steps else 0.0,
                     "ragged_slots_per_token": ragged / g["new_tokens"].sum() if g["new_tokens"].sum() else 0.0})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- draft-size tradeoff (notebook 04, benchmarks/drafts.py)

VERDICTS = ("wins", "inconclusive", "loses")  # the words of ``gamma_verdicts``


def per_token_alpha(records: pd.DataFrame) -> pd.DataFrame:
    """Per draft, pooled over its γs (batch size as given): accepted ÷ positions reached, the i.i.d.
    α of Leviathan et al. that break-even curves are drawn in (``token_alpha_by_candidate`` per
    candidate; accepted ÷ drafted is lower: at γ = 4 an α of 0.66 shows as 0.39)."""
    records = pd.DataFrame(records)
    drafts = records[records["gamma"] > 0][["candidate", "draft"]].drop_duplicates("candidate")
    sums = token_alpha_by_candidate(records).merge(drafts, on="candidate").groupby("draft", sort=False)[
        ["accepted", "reached"]].sum()
    sums["alpha_token"] = sums["accepted"] / sums["reached"].where(sums["reached"] > 0)
    return sums.reset_index()


def draft_wall_c(records: pd.DataFrame, baseline: str = BASELINE) -> pd.DataFrame:
    """Per draft, pooled over its γs: draft ms per drafted token, and c by wall clock = that ÷ the
    baseline's verify ms per one-token step (as ``wall_clock_costs``, which is per candidate)."""
    costs = wall_clock_costs(records, baseline)
    records = pd.DataFrame(records)
    drafts = records[records["candidate"] != baseline].groupby("draft", sort=False)[["draft_ms", "drafted"]].sum()
    drafts["draft_ms_per_drafted_token"] = drafts["draft_ms"] / drafts["drafted"].where(drafts["drafted"] > 0)
    verifier_step_ms = float(costs["baseline_verify_ms_per_step"].iloc[0]) if len(costs) else float("nan")
    drafts["verifier_step_ms"] = verifier_step_ms
    drafts["c_wall"] = drafts["draft_ms_per_drafted_token"] / verifier_step_ms
    return drafts[["draft_ms_per_drafted_token", "verifier_step_ms", "c_wall"]].reset_index()


def prompt_alpha_spread(rows: pd.DataFrame) -> pd.DataFrame:
    """Per candidate: α (accepted ÷ drafted) of each prompt batch, repeats pooled, summarised as
    mean, standard deviation, min and max across prompts (``rows`` from ``per_prompt``)."""
    per = rows.groupby(["candidate", "prompt_ids"], sort=False)[["accepted", "drafted"]].sum()
    per["alpha"] = per["accepted"] / per["drafted"].where(per["drafted"] > 0)
    spread = per.groupby("candidate", sort=False)["alpha"].agg(["mean", "std", "min", "max", "count"])
    return spread.rename(columns=lambda c: f"alpha_prompt_{c}" if c != "count" else "n_prompts").reset_index()


def speedup_verdict(speedup: float, lo: float, hi: float) -> str:
    """"wins" / "loses" (pays the speculation tax) when the 95% CI of the speedup excludes 1x (the
    point estimate when there is no CI, e.g. one prompt), else "inconclusive"."""
    if np.isfinite(lo) and np.isfinite(hi):
        return VERDICTS[0] if lo > 1 else VERDICTS[2] if hi < 1 else VERDICTS[1]
    return VERDICTS[0] if speedup > 1 else VERDICTS[2] if speedup < 1 else VERDICTS[1]


def draft_table(records: pd.DataFrame, flops: pd.DataFrame, summary: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per draft (batch size 1): size (params, FLOPs/token, c by FLOPs from ``flops_table``),
    cost here (c by wall clock, pooled over γs), acceptance (α = accepted ÷ drafted at the best γ,
    its spread across prompts, and the per-token α), the best measured γ with its speedup and 95%
    CI, the break-even c at that (α per token, γ) and a verdict. Sorted by FLOPs/token, largest first."""
    from specnb.theory import tokens_per_step

    records = pd.DataFrame(records)
    records = records[records["batch_size"] == records["batch_size"].min()]
    summary = summarise(records) if summary is None else summary[summary["batch_size"] == records["batch_size"].min()]
    best = best_per_draft(summary)[["draft", "candidate", "gamma", "alpha", "tau", "tok_s", "speedup", "speedup_lo",
                                    "speedup_hi"]].rename(columns={"gamma": "best_gamma"})
    spread = prompt_alpha_spread(per_prompt(records))
    sizes = flops.set_index("model")[["params", "flops_per_token", "c_flops"]]
    table = (best.merge(spread, on="candidate", how="left")
             .merge(per_token_alpha(records)[["draft", "alpha_token"]], on="draft", how="left")
             .merge(draft_wall_c(records), on="draft", how="left")
             .merge(sizes, left_on="draft", right_index=True, how="left"))
    alpha = table["alpha_token"].clip(upper=0.999).fillna(0.0).to_numpy()
    gamma = table["best_gamma"].to_numpy()
    table["break_even_c"] = (tokens_per_step(alpha, gamma) - 1.0) / gamma
    table["verdict"] = [speedup_verdict(s, lo, hi) for s, lo, hi in
                        table[["speedup", "speedup_lo", "speedup_hi"]].itertuples(index=False)]
    columns = ["draft", "params", "flops_per_token", "c_flops", "c_wall", "draft_ms_per_drafted_token",
               "verifier_step_ms", "alpha", "alpha_prompt_mean", "alpha_prompt_std", "alpha_prompt_min",
               "alpha_prompt_max", "n_prompts", "alpha_token", "best_gamma", "tau", "tok_s", "speedup", "speedup_lo",
               "speedup_hi", "break_even_c", "verdict", "candidate"]
    return table[columns].sort_values("flops_per_token", ascending=False, kind="stable").reset_index(drop=True)


def c_alpha_points(table: pd.DataFrame) -> pd.DataFrame:
    """Tidy points for ``plots.c_alpha_chart``: each draft at (per-token α, c) once with c by FLOPs
    and once by wall clock (column ``c_kind``)."""
    base = table.assign(alpha=table["alpha_token"], best_speedup=table["speedup"])
    keep = ["draft", "alpha", "best_speedup", "best_gamma", "verdict"]
    return pd.concat([base[keep].assign(c=table["c_flops"], c_kind="FLOPs"),
                      base[keep].assign(c=table["c_wall"], c_kind="wall clock")], ignore_index=True)


def profile_speedups(records: pd.DataFrame, table: pd.DataFrame, max_gamma: int | None = None) -> pd.DataFrame:
    """Leviathan speedup per γ from each draft's measured per-position acceptance (at its largest
    γ) and its c by FLOPs and by wall clock: τ(a_1..a_γ) ÷ (γc + 1). Shows where the best γ would
    lie; like Leviathan it prices verifying γ + 1 tokens as one forward, so it is an upper bound.
    Past the measured γ the last position's rate is repeated (``extrapolated``)."""
    from specnb.predict import profile_from_records
    from specnb.theory import tokens_per_step_from_profile

    rows = []
    for r in table.itertuples():
        rates = profile_from_records(records, r.draft).conditional()
        for gamma in range(1, (max_gamma or len(rates)) + 1):
            a = np.concatenate([rates, np.full(max(gamma - len(rates), 0), rates[-1])])[:gamma]
            tau = float(tokens_per_step_from_profile(a))
            for kind, c in (("FLOPs", r.c_flops), ("wall clock", r.c_wall)):
                rows.append({"draft": r.draft, "gamma": gamma, "c_kind": kind, "c": c, "tau": tau,
                             "speedup": tau / (gamma * c + 1.0), "extrapolated": gamma > len(rates)})
    return pd.DataFrame(rows)


def explain_draft(row) -> str:
    """Why a draft (a ``draft_table`` row) won or paid the speculation tax, in Leviathan's terms:
    its wall-clock c against the break-even c at its best γ, and against its per-token α (the
    break-even c at γ = 1, the highest of all γ); says so when the measurement disagrees."""
    c, alpha, be, gamma = row["c_wall"], row["alpha_token"], row["break_even_c"], int(row["best_gamma"])
    if not (np.isfinite(c) and np.isfinite(alpha)):
        return "it drafted no tokens here, so c and α are unknown"
    disagree = (f", yet it measured {row['speedup']:.2f}x: measurement and formula disagree, a sign of noise (few "
                "prompts or tokens, a busy machine)")
    if c >= alpha:
        return (f"its wall-clock c {c:.3f} is at or above its per-token α {alpha:.3f}, the break-even c at γ = 1, "
                "so by the formula no γ can pay" + (disagree if row["speedup"] > 1 else ""))
    if c >= be:
        return (f"its wall-clock c {c:.3f} is above the break-even c {be:.3f} at γ = {gamma} (per-token α {alpha:.3f})"
                + (disagree if row["speedup"] > 1 else ""))
    if row["speedup"] < 1:
        return (f"its wall-clock c {c:.3f} is below the break-even c {be:.3f} at γ = {gamma}, yet it lost: verifying "
                "γ + 1 tokens costs more than one and the loop has overheads, which the formula leaves out")
    return f"its wall-clock c {c:.3f} is below the break-even c {be:.3f} at γ = {gamma} (per-token α {alpha:.3f})"
