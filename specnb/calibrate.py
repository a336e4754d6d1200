"""Measuring what ``specnb.predict`` needs, and checking its predictions against measurement.

Calibration (``calibrate``) measures, on the target device: each model's forward time over tokens
per forward (1..γ+1) and batch sizes (the dispatch-overhead microbenchmarks of
``microbench.measure_forward_grids``, every model's shapes interleaved, each forward asking for the
logits the decoding loop asks for), prompt-length prefill forwards, the
acceptance traces of every draft on the user's prompts (``acceptance.measure_traces``: one greedy
verifier-only generation per prompt plus a teacher-forced draft forward), and one short speculative
run per draft at the longest γ on the first prompts, which gives the per-step bookkeeping time from
the stage timers and checks that replaying the traces reproduces the steps the engine took
(``replay_check``). The result is a ``HardwareProfile`` that ``predict`` reuses, saved as JSON.

Validation (``validate``) then runs a grid of (draft × γ × batch size) on *other* prompts,
interleaved with verifier-only as ``bench.run_interleaved`` does, and sets the measured speedup next
to the prediction and next to the Leviathan formula fed with FLOPs-c (what people use today).

Reference for the measurement protocol: Spec-Bench (Xia et al. 2024).
"""

from __future__ import annotations

import os
import platform
import time
from typing import Any

import numpy as np
import pandas as pd

from specnb import bench, microbench
from specnb.microbench import GridShapes
from specnb.acceptance import emitted_per_step, measure_traces, pack, profile_from_traces, replay
from specnb.errors import ParameterError
from specnb.hardware import LOOKUP, CostModel, DraftCosts, HardwareProfile, fit_cost_model
from specnb.predict import clears_break_even, predict

BASELINE = bench.BASELINE
STAGE_OVERHEAD = ("accept_ms", "rollback_ms", "other_ms")
OVERHEAD_PROMPTS = 2  # prompts of the short speculative run that times per-step bookkeeping


def split_prompts(spec: str = "all", n_calibration: int = 3, n_validation: int = 4) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Disjoint calibration and validation prompts with the same mix of categories: within each
    category the prompts alternate between the two pools, each pool is taken round-robin over the
    categories, and when validation needs fewer prompts than there are categories both pools keep
    only the categories validation covers. Why: acceptance differs far more between categories
    than within one (prompt lookup copies from summaries and extractions, not from translations),
    so calibrating on one mix and validating on another measures the mixes, not the predictor."""
    from specnb.prompts import select_prompts

    if n_calibration < 1 or n_validation < 0:
        raise ParameterError(f"need >= 1 calibration prompt and >= 0 validation prompts, got {n_calibration}, {n_validation}")
    frame = select_prompts(spec)
    categories = list(dict.fromkeys(frame["category"]))
    if 0 < n_validation < len(categories):
        frame = frame[frame["category"].isin(categories[:n_validation])]
    rank = frame.groupby("category", sort=False).cumcount()  # 0, 1, 2, ... within each category
    frame = frame.assign(_pool=rank % 2, _rank=rank // 2).sort_values("_rank", kind="stable")
    pools = [frame[frame["_pool"] == k].drop(columns=["_pool", "_rank"]).reset_index(drop=True) for k in (0, 1)]
    if len(pools[0]) < n_calibration or len(pools[1]) < n_validation:
        raise ParameterError(f"prompts {spec!r} give {len(pools[0])} calibration and {len(pools[1])} validation prompts "
                             f"(alternating within categories); need {n_calibration} + {n_validation}")
    return pools[0].iloc[:n_calibration], pools[1].iloc[:n_validation]


def prompt_tokens(tokenizer, prompts: pd.DataFrame, batch_size: int = 1) -> float:
    """Mean prefill width: the longest (chat-templated) prompt of each batch, averaged over batches."""
    from specnb.decoding import encode_prompts

    widths = [encode_prompts(tokenizer, list(b["prompt"]))[0].shape[1] for b in bench.batches_of(prompts, batch_size)]
    return float(np.mean(widths))


def describe_machine(device) -> dict[str, Any]:
    """Enough to tell two machines apart: platform, CPU, threads, GPU, torch version."""
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "gpu": gpu,
            "device": str(device), "torch": torch.__version__}


# ---------------------------------------------------------------------------- calibration


def measure_costs(shapes: list[GridShapes], batch_sizes, context_len: int, prefill_len: int, repeats: int,
                  device) -> pd.DataFrame:
    """Decode grid (each model's tokens per forward) and prefill grid (half and full prompt length,
    last logits only, as ``decoding.prefill`` asks), every model's shapes interleaved."""
    decode = microbench.measure_forward_grids(shapes, batch_sizes, context_len, repeats, device).assign(kind="decode")
    lengths = tuple(sorted({max(2, prefill_len // 2), max(3, prefill_len)}))
    prefill = microbench.measure_forward_grids([GridShapes(s.name, s.model, lengths, 1) for s in shapes], batch_sizes,
                                               1, max(2, repeats // 3), device).assign(kind="prefill")
    return pd.concat([decode, prefill], ignore_index=True).drop(columns="samples_ms")


def fit_costs(grid: pd.DataFrame, name: str) -> tuple[CostModel, CostModel]:
    """(decode, prefill) cost models of one model's rows of a ``measure_costs`` grid."""
    rows = grid[grid["model"] == name]
    return fit_cost_model(rows[rows["kind"] == "decode"]), fit_cost_model(rows[rows["kind"] == "prefill"])


def draft_shapes(models: dict) -> list[GridShapes]:
    """The forwards a model draft runs: 1 token, or 2 when it catches up; only the last logits
    (the loop's ``keep``). A lookup drafter runs none."""
    from specnb.lookup import PromptLookupDrafter

    return [GridShapes(name, m, (1, 2), 1) for name, m in models.items() if not isinstance(m, PromptLookupDrafter)]


def draft_cost(model, name: str, grid: pd.DataFrame) -> DraftCosts:
    """A model draft's fitted costs from the grid; a lookup drafter has no forward at all (its
    proposing time per step comes from ``time_steps``)."""
    from specnb.lookup import PromptLookupDrafter

    if isinstance(model, PromptLookupDrafter):
        return DraftCosts(LOOKUP, None, None, 0.0)
    return DraftCosts("model", *fit_costs(grid, name), flops_per_token(model))


def per_step_overhead(records: pd.DataFrame, draft: str, lookup: bool) -> float:
    """Host bookkeeping per speculative step (accept, rollback, other; + proposing, for lookup)."""
    rows = records[records["draft"] == draft]
    columns = list(STAGE_OVERHEAD) + (["draft_ms"] if lookup else [])
    return float(rows[columns].to_numpy().sum() / max(rows["steps"].sum(), 1))


def baseline_overhead(records: pd.DataFrame) -> float:
    """Host time per generated token of verifier-only beyond its forwards."""
    rows = records[records["candidate"] == BASELINE]
    return float(rows[list(STAGE_OVERHEAD)].to_numpy().sum() / max((rows["verifier_forwards"] - 1).sum(), 1))


def time_steps(pair, models: dict, costs: dict[str, DraftCosts], prompts: pd.DataFrame, gamma: int,
               max_new_tokens: int, baseline: bool, progress: bool) -> tuple[pd.DataFrame, dict[str, float]]:
    """A short interleaved speculative run at ``gamma``: its records and the host time per step of
    each draft (per generated token for verifier-only, with ``baseline``). A lookup drafter's
    proposing time per step is set on its ``costs`` entry."""
    records = bench.run_interleaved(pair, prompts, bench.make_candidates(models, [gamma], baseline=baseline),
                                    max_new_tokens=max_new_tokens, progress=progress)
    overhead = {BASELINE: baseline_overhead(records)} if baseline else {}
    for name in models:
        overhead[name] = per_step_overhead(records, name, False)
        if costs[name].kind == LOOKUP:  # proposing is host work in the "draft" stage
            costs[name].step_ms = per_step_overhead(records, name, True) - overhead[name]
    return records, overhead


def flops_per_token(model) -> float:
    from specnb.flops import analytic_flops

    return float(analytic_flops(model.config).flops_per_token)


def calibrate(verifier: str = "smollm2-135m", drafts=("smollm2-exit-4",), *, device="auto", prompts=None,
              gamma: int = 8, max_new_tokens: int = 48, batch_sizes=(1,), repeats: int = 15,
              overhead_prompts: int = OVERHEAD_PROMPTS, loaded=None, progress: bool = True) -> tuple[HardwareProfile, pd.DataFrame]:
    """Measure a ``HardwareProfile`` for a verifier and its drafts; returns it and the raw records
    of the short speculative run (per-step overhead; ``replay_check`` compares it with the traces).

    ``loaded`` = (pair, {name: draft}) from ``bench.load_candidates`` reuses models already in
    memory; ``prompts`` is a frame/list, or None for 3 prompts of the shipped set; acceptance
    traces are measured on all of them, the speculative run on the first ``overhead_prompts``."""
    if gamma < 1 or max_new_tokens < 2 or overhead_prompts < 1:
        raise ParameterError(f"calibration needs gamma >= 1, max_new_tokens >= 2 and overhead_prompts >= 1, "
                             f"got {gamma}, {max_new_tokens}, {overhead_prompts}")
    pair, models = loaded or bench.load_candidates(verifier, list(drafts), device=device)
    frame = split_prompts("all", 3, 0)[0] if prompts is None else bench.as_prompt_frame(prompts)
    width = prompt_tokens(pair.tokenizer, frame)
    context = int(width + max_new_tokens // 2)
    shapes = [GridShapes(pair.verifier_name, pair.verifier, tuple(range(1, gamma + 2)))] + draft_shapes(models)
    grid = measure_costs(shapes, batch_sizes, context, int(width), repeats, pair.device)
    v_decode, v_prefill = fit_costs(grid, pair.verifier_name)
    costs = {name: draft_cost(draft, name, grid) for name, draft in models.items()}
    traces = measure_traces(pair, models, frame, max_new_tokens, progress=progress)
    records, overhead = time_steps(pair, models, costs, frame.iloc[:overhead_prompts], gamma, max_new_tokens,
                                   baseline=True, progress=progress)
    from specnb import __version__

    profile = HardwareProfile(
        verifier=pair.verifier_name, device=str(pair.device), machine=describe_machine(pair.device),
        verifier_decode=v_decode, verifier_prefill=v_prefill, verifier_flops_per_token=flops_per_token(pair.verifier),
        drafts=costs, acceptance={name: profile_from_traces(t, gamma, max_new_tokens) for name, t in traces.items()},
        traces=traces, overhead_ms=overhead, max_new_tokens=max_new_tokens, prompt_tokens=width,
        grid=grid.to_dict("records"),
        prompts=",".join(frame["id"].astype(str)), created_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        specnb_version=__version__)
    return profile, records


def replay_check(profile: HardwareProfile, records: pd.DataFrame) -> pd.DataFrame:
    """Per (draft, prompt) of a batch-1 speculative run: the tokens each step emitted, as the engine
    recorded them and as the replayed traces say. Greedy decoding makes them identical; a
    mismatch means float noise flipped a near-tied argmax between the cached (incremental) and the
    teacher-forced (full-sequence) forward."""
    rows = []
    for _, r in records[(records["gamma"] > 0) & (records["batch_size"] == 1)].iterrows():
        traces = [t for t in profile.traces.get(r["draft"], []) if t.prompt_id == str(r["prompt_ids"])]
        if not traces:
            continue
        packed = pack(traces, profile.max_new_tokens)
        got = replay(packed, np.zeros((1, 1), dtype=int), int(r["gamma"]), profile.max_new_tokens)
        length = int(packed.lengths[0])
        replayed = emitted_per_step(got.accepted[got.active[:, 0, 0], 0, 0], length)
        measured = emitted_per_step([int(n) for n in r["accept_lengths"]], length)
        rows.append({"draft": r["draft"], "prompt_id": str(r["prompt_ids"]), "gamma": int(r["gamma"]),
                     "measured_steps": len(measured), "replayed_steps": len(replayed),
                     "measured_tokens_per_step": sum(measured) / max(len(measured), 1),
                     "replayed_tokens_per_step": sum(replayed) / max(len(replayed), 1),
                     "identical": measured == replayed})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------- validation


def validate(profile: HardwareProfile, loaded, prompts, gammas=(1, 2, 3, 4, 6), batch_sizes=(1,),
             max_new_tokens: int | None = None, repeats: int = 1, progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Measure every (draft, γ, batch size) on ``prompts`` and set predictions beside it.

    Batch size b runs ``repeats × b`` interleaved repeats, so every grid point rests on the same
    number of timed generations (P prompts make P / b batches). Why: with 4 prompts, batch 2 would
    otherwise be 2 timed runs per point, and two options 5% apart would be ranked by timing noise.

    Returns (raw records, one row per grid point with measured and predicted speedups and errors).
    """
    pair, models = loaded
    frame = bench.as_prompt_frame(prompts)
    n_new = int(max_new_tokens or profile.max_new_tokens)
    records, rows = [], []
    for b in batch_sizes:
        full = frame.iloc[: len(frame) // b * b]  # whole batches only: a last, smaller batch is another grid point
        if full.empty:
            raise ParameterError(f"batch size {b} needs at least {b} validation prompts, got {len(frame)}")
        got = bench.run_interleaved(pair, full, bench.make_candidates(models, gammas), max_new_tokens=n_new,
                                    batch_size=b, repeats=repeats * b, progress=progress)
        records.append(got)
        measured = bench.summarise(got, n_boot=500)
        width = prompt_tokens(pair.tokenizer, full, b)
        for name in models:
            pred = predict(profile, name, gammas, b, n_new, width).table.set_index("gamma")
            for _, m in measured[measured["draft"] == name].iterrows():
                p = pred.loc[int(m["gamma"])]
                rows.append({"draft": name, "gamma": int(m["gamma"]), "batch_size": b,
                             "measured_speedup": m["speedup"], "measured_lo": m["speedup_lo"],
                             "measured_hi": m["speedup_hi"], "measured_alpha": m["alpha"], "measured_tau": m["tau"],
                             "predicted_speedup": p["predicted_speedup"], "predicted_lo": p["speedup_lo"],
                             "predicted_hi": p["speedup_hi"], "predicted_tau": p["tokens_per_step"],
                             "flops_leviathan_speedup": p["flops_leviathan_speedup"],
                             "wallclock_leviathan_speedup": p["wallclock_leviathan_speedup"]})
    table = pd.DataFrame(rows)
    for column, name in (("predicted_speedup", "error"), ("flops_leviathan_speedup", "flops_error"),
                         ("wallclock_leviathan_speedup", "wallclock_error")):
        table[name] = (table[column] - table["measured_speedup"]) / table["measured_speedup"]
    return pd.concat(records, ignore_index=True), table


def recommendation_check(table: pd.DataFrame) -> pd.DataFrame:
    """Per (draft, batch): the γ the predictor recommends among the measured ones (None: verifier
    only, worth 1.0x; the rule of ``predict.Prediction``) and its measured speedup against the best
    measured option."""
    rows = []
    for (draft, b), group in table.groupby(["draft", "batch_size"], sort=False):
        rows.append(check_choice(group, draft=draft, batch_size=b))
    for b, group in table.groupby("batch_size", sort=False):  # the whole verdict: which draft and γ
        rows.append(check_choice(group, draft="any", batch_size=b))
    return pd.DataFrame(rows)


def check_choice(group: pd.DataFrame, **keys) -> dict:
    best_pred = group.loc[group["predicted_speedup"].idxmax()]
    recommended = best_pred if clears_break_even(best_pred["predicted_speedup"], best_pred["predicted_lo"]) else None
    got = float(recommended["measured_speedup"]) if recommended is not None else 1.0
    best = group.loc[group["measured_speedup"].idxmax()]
    best_measured = max(float(best["measured_speedup"]), 1.0)
    spec_wins = best["measured_speedup"] > 1.0
    return {**keys, "recommended": None if recommended is None else f"{recommended['draft']} γ={int(recommended['gamma'])}",
            "recommended_predicted_speedup": float(best_pred["predicted_speedup"]) if recommended is not None else 1.0,
            "recommended_measured_speedup": got,
            "best_measured": f"{best['draft']} γ={int(best['gamma'])}" if spec_wins else "verifier-only",
            "best_measured_predicted_speedup": float(best["predicted_speedup"]) if spec_wins else 1.0,
            "best_measured_speedup": best_measured, "ratio_to_best": got / best_measured,
            "within_5pct": got >= 0.95 * best_measured}


def validation_summary(table: pd.DataFrame) -> dict[str, Any]:
    """Headline numbers: median |error| as a fraction of measured speedup, for the predictor and
    for the Leviathan formula with FLOPs-c and with wall-clock c, and the recommendation check."""
    checks = recommendation_check(table)
    return {
        "grid_points": int(len(table)),
        "median_abs_error": float(table["error"].abs().median()),
        "max_abs_error": float(table["error"].abs().max()),
        "flops_leviathan_median_abs_error": float(table["flops_error"].abs().median()),
        "wallclock_leviathan_median_abs_error": float(table["wallclock_error"].abs().median()),
        "within_band": float(((table["measured_speedup"] >= table["predicted_lo"]) &
                              (table["measured_speedup"] <= table["predicted_hi"])).mean()),
        "recommendation_worst_ratio": float(checks["ratio_to_best"].min()),
        "recommendations_within_5pct": f"{int(checks['within_5pct'].sum())}/{len(checks)}",
        "target_error_met": bool(table["error"].abs().median() <= 0.10),
        "target_recommendation_met": bool(checks["within_5pct"].all()),
    }


# ---------------------------------------------------------------------------- what `specnb predict` runs


def ensure_calibrated(verifier: str, draft: str, profile: HardwareProfile | None = None, *, device="auto",
                      prompts=None, gamma: int = 8, max_new_tokens: int = 48, progress: bool = False) -> HardwareProfile:
    """A profile that covers ``draft``: measured now when ``profile`` is None (a short calibration),
    else completed by measuring only what it lacks: the draft's costs if it was never calibrated,
    its acceptance if it has none or if ``prompts`` (acceptance depends on them) are given."""
    if profile is None:
        return calibrate(verifier, [draft], device=device, prompts=prompts, gamma=gamma,
                         max_new_tokens=max_new_tokens, repeats=7, progress=progress)[0]
    if profile.verifier != verifier:
        raise ParameterError(f"profile was calibrated for verifier {profile.verifier!r}, not {verifier!r}; "
                             "pass the same --verifier or calibrate a new profile")
    if device != "auto" and str(device) != profile.device:
        raise ParameterError(f"profile was measured on device {profile.device!r}, not {device!r}; "
                             "use --device auto or calibrate on that device")
    if draft in profile.drafts and draft in profile.traces and prompts is None:
        return profile
    return complete_profile(profile, draft, prompts, gamma, progress)


def complete_profile(profile: HardwareProfile, draft: str, prompts, gamma: int, progress: bool) -> HardwareProfile:
    pair, models = bench.load_candidates(profile.verifier, [draft], device=profile.device)
    frame = split_prompts("all", 3, 0)[0] if prompts is None else bench.as_prompt_frame(prompts)
    width = prompt_tokens(pair.tokenizer, frame)
    drafts = dict(profile.drafts)
    if draft not in drafts:
        batch_sizes = sorted({int(g["batch_size"]) for g in profile.grid} or {1})
        shapes = draft_shapes(models)
        grid = measure_costs(shapes, batch_sizes, int(width + profile.max_new_tokens // 2), int(width), 7,
                             pair.device) if shapes else None
        drafts[draft] = draft_cost(models[draft], draft, grid)
    traces = measure_traces(pair, models, frame, profile.max_new_tokens, progress=progress)[draft]
    _, measured = time_steps(pair, models, drafts, frame.iloc[:OVERHEAD_PROMPTS], gamma, profile.max_new_tokens,
                             baseline=False, progress=progress)
    overhead = {**profile.overhead_ms, **measured}
    return HardwareProfile(**{**profile.__dict__, "drafts": drafts, "overhead_ms": overhead, "prompt_tokens": width,
                              "traces": {**profile.traces, draft: traces},
                              "acceptance": {**profile.acceptance,
                                             draft: profile_from_traces(traces, gamma, profile.max_new_tokens)},
                              "prompts": ",".join(frame["id"].astype(str))})
