"""Measuring what the predictor needs on the target device, into a ``HardwareProfile``.

Calibration (``calibrate``) measures each model's forward time over tokens per forward (1..γ+1)
and batch sizes (``specnb.measure.forward.measure_forward_grids``: every model's shapes interleaved,
each forward asking for the logits the decoding loop asks for), prompt-length prefill forwards, the
acceptance traces of every draft on the user's prompts (``specnb.predict.traces.measure_traces``:
one greedy verifier-only generation per prompt plus each draft's trace), and one short
speculative run per draft at the longest γ on the first prompts, which gives the per-step
bookkeeping time from the stage timers and checks that replaying the traces reproduces the steps
the engine took (``replay_check``). The profile is saved as JSON and reused by ``predict``;
``specnb.predict.validate`` checks its predictions against measurement on other prompts.

Reference for the measurement protocol: Spec-Bench (Xia et al. 2024).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from specnb import __version__
from specnb.core.devices import describe_machine
from specnb.core.errors import ParameterError
from specnb.core.flops import analytic_flops
from specnb.decode.kinds import kind_of
from specnb.decode.kinds.kind import FORWARDS, PER_STEP, PER_TOKEN
from specnb.decode.pairs import load_drafts
from specnb.decode.timing import BOOKKEEPING, stage_columns
from specnb.measure.forward import GridShapes, measure_forward_grids
from specnb.measure.prompts import as_prompt_frame, prompt_tokens, split_prompts
from specnb.measure.runs import BASELINE, make_candidates, run_interleaved
from specnb.models.kernels import route_breaks
from specnb.predict.costs import CostModel, DraftCosts, HardwareProfile, fit_cost_model
from specnb.predict.drafts import DraftTraits, draft_traits
from specnb.predict.traces import emitted_per_step, measure_traces, pack, profile_from_traces, replay

OVERHEAD = stage_columns(BOOKKEEPING)  # a step's host time beyond its forwards
OVERHEAD_PROMPTS = 2  # prompts of the short speculative run that times per-step bookkeeping


@dataclass(frozen=True, kw_only=True)
class CalibrationSettings:
    """How a calibration measures: its models loaded on ``device`` with ``kernels`` (as ``load_drafts``
    takes them), acceptance up to ``gamma`` over ``max_new_tokens``, the forward grid at
    ``batch_sizes`` with ``repeats`` timed forwards per size, and the short speculative run on the
    first ``overhead_prompts`` prompts."""

    device: object = "auto"
    kernels: str = "auto"
    gamma: int = 8
    max_new_tokens: int = 48
    batch_sizes: tuple[int, ...] = (1,)
    repeats: int = 15
    overhead_prompts: int = OVERHEAD_PROMPTS
    progress: bool = True


# a short calibration, quiet: what ``ensure_calibrated`` measures when a profile lacks something
SHORT_CALIBRATION = CalibrationSettings(repeats=7, progress=False)


# ---------------------------------------------------------------------------- calibration


def measure_costs(shapes: list[GridShapes], batch_sizes, context_len: int, prefill_len: int, repeats: int,
                  device) -> pd.DataFrame:
    """Decode grid (each model's tokens per forward) and prefill grid (half and full prompt length,
    last logits only, as a prefill asks), every model's shapes interleaved."""
    decode = measure_forward_grids(shapes, batch_sizes, context_len, repeats, device).assign(kind="decode")
    lengths = tuple(sorted({max(2, prefill_len // 2), max(3, prefill_len)}))
    prefill_shapes = [GridShapes(name=s.name, model=s.model, n_tokens=lengths, keep=1) for s in shapes]
    prefill = measure_forward_grids(prefill_shapes, batch_sizes, 1, max(2, repeats // 3), device).assign(kind="prefill")
    return pd.concat([decode, prefill], ignore_index=True).drop(columns="samples_ms")


def fit_costs(grid: pd.DataFrame, name: str, model=None) -> tuple[CostModel, CostModel]:
    """(decode, prefill) cost models of one model's rows of a ``measure_costs`` grid, the decode one
    priced per stretch of row counts ``model``'s linear layers run on one kernel (``route_breaks``)."""
    rows = grid[grid["model"] == name]
    return (fit_cost_model(rows[rows["kind"] == "decode"], route_breaks(model)),
            fit_cost_model(rows[rows["kind"] == "prefill"]))


def draft_shapes(traits: dict[str, DraftTraits]) -> list[GridShapes]:
    """The forwards each draft runs (``forward_tokens``: 1 token, or 2 when a model draft catches
    up), with only the last logits, as the loop keeps them; prompt lookup runs none."""
    return [GridShapes(name=name, model=t.module, n_tokens=t.forward_tokens, keep=1)
            for name, t in traits.items() if t.forward_tokens]


def draft_cost(traits: DraftTraits, name: str, grid: pd.DataFrame, verifier) -> DraftCosts:
    """A draft's fitted forward costs from the grid; one that runs no forward (prompt lookup, Medusa
    heads) is priced by host time per step or per drafted token instead (from ``time_steps``)."""
    flops = draft_flops(traits.module, verifier) if traits.module is not None else 0.0
    decode, prefill = fit_costs(grid, name, traits.module) if traits.pricing == FORWARDS else (None, None)
    return DraftCosts(kind=traits.pricing, decode=decode, prefill=prefill, flops_per_token=flops,
                      catch_up=traits.catch_up)


def per_step_overhead(records: pd.DataFrame, draft: str) -> float:
    """Host bookkeeping per speculative step (accept, rollback, other)."""
    rows = records[records["draft"] == draft]
    return float(rows[OVERHEAD].to_numpy().sum() / max(rows["steps"].sum(), 1))


def proposing_ms(records: pd.DataFrame, draft: str, per: str) -> float:
    """A forward-free draft's host time in the "draft" stage, per step or per drafted token."""
    rows = records[records["draft"] == draft]
    return float(rows["draft_ms"].sum() / max(rows["steps" if per == PER_STEP else "drafted"].sum(), 1))


def baseline_overhead(records: pd.DataFrame) -> float:
    """Host time per generated token of verifier-only beyond its forwards."""
    rows = records[records["candidate"] == BASELINE]
    return float(rows[OVERHEAD].to_numpy().sum() / max((rows["verifier_forwards"] - 1).sum(), 1))


def time_steps(pair, models: dict, costs: dict[str, DraftCosts], prompts: pd.DataFrame, settings: CalibrationSettings,
               baseline: bool) -> tuple[pd.DataFrame, dict[str, float]]:
    """A short interleaved speculative run at ``settings.gamma``: its records and the host time per
    step of each draft (per generated token for verifier-only, with ``baseline``). A forward-free
    draft's proposing time (per step, or per drafted token) is set on its ``costs`` entry."""
    candidates = make_candidates(models, [settings.gamma], baseline=baseline)
    records = run_interleaved(pair, prompts, candidates, max_new_tokens=settings.max_new_tokens,
                              progress=settings.progress)
    overhead = {BASELINE: baseline_overhead(records)} if baseline else {}
    for name in models:
        overhead[name] = per_step_overhead(records, name)
        if costs[name].kind in (PER_STEP, PER_TOKEN):  # proposing is host work in the "draft" stage
            costs[name].step_ms = proposing_ms(records, name, costs[name].kind)
    return records, overhead


def flops_per_token(model) -> float:
    return float(analytic_flops(model.config).flops_per_token)


def draft_flops(model, verifier) -> float:
    """FLOPs per drafted token, as the draft's kind counts them (a head's from its config, any other
    model's from its transformers config)."""
    return float(kind_of(model).flops_of(model, verifier.config).flops_per_token)


def calibrate(
    verifier: str = "smollm2-135m",
    drafts=("smollm2-exit-4",),
    *,
    prompts=None,
    loaded=None,
    settings: CalibrationSettings = CalibrationSettings(),
) -> tuple[HardwareProfile, pd.DataFrame]:
    """Measure a ``HardwareProfile`` for a verifier and its drafts; returns it and the raw records
    of the short speculative run (per-step overhead; ``replay_check`` compares it with the traces).

    ``loaded`` = (pair, {name: draft}) from ``specnb.decode.pairs.load_drafts`` reuses models already in
    memory; ``prompts`` is a frame/list, or None for 3 prompts of the shipped set; acceptance
    traces are measured on all of them, the speculative run on the first ``settings.overhead_prompts``;
    ``settings.kernels`` as for ``load_drafts`` when it loads them (the profile's ``machine`` records
    each model's path)."""
    gamma, max_new_tokens, overhead_prompts = settings.gamma, settings.max_new_tokens, settings.overhead_prompts
    if gamma < 1 or max_new_tokens < 2 or overhead_prompts < 1:
        raise ParameterError(
            f"calibration needs gamma >= 1, max_new_tokens >= 2 and overhead_prompts >= 1, "
            f"got {gamma}, {max_new_tokens}, {overhead_prompts}"
        )
    pair, models = loaded or load_drafts(verifier, list(drafts), device=settings.device, kernels=settings.kernels)
    frame = split_prompts("all", 3, 0)[0] if prompts is None else as_prompt_frame(prompts)
    width = prompt_tokens(pair.tokenizer, frame)
    context = int(width + max_new_tokens // 2)
    traits = {name: draft_traits(draft, pair.vocab_size) for name, draft in models.items()}
    verifier = GridShapes(name=pair.verifier_name, model=pair.verifier, n_tokens=tuple(range(1, gamma + 2)))
    shapes = [verifier] + draft_shapes(traits)
    grid = measure_costs(shapes, settings.batch_sizes, context, int(width), settings.repeats, pair.device)
    v_decode, v_prefill = fit_costs(grid, pair.verifier_name, pair.verifier)
    costs = {name: draft_cost(t, name, grid, pair.verifier) for name, t in traits.items()}
    traces = measure_traces(pair, models, frame, max_new_tokens, progress=settings.progress)
    records, overhead = time_steps(pair, models, costs, frame.iloc[:overhead_prompts], settings, baseline=True)
    profile = HardwareProfile(
        verifier=pair.verifier_name,
        device=str(pair.device),
        machine={**describe_machine(pair.device), "kernels": pair.kernels},  # the costs hold on these paths
        verifier_decode=v_decode,
        verifier_prefill=v_prefill,
        verifier_flops_per_token=flops_per_token(pair.verifier),
        drafts=costs,
        acceptance={name: profile_from_traces(t, gamma, max_new_tokens) for name, t in traces.items()},
        traces=traces,
        overhead_ms=overhead,
        max_new_tokens=max_new_tokens,
        prompt_tokens=width,
        grid=grid.to_dict("records"),
        prompts=",".join(frame["id"].astype(str)),
        created_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        specnb_version=__version__,
    )
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
        packed = pack(traces, profile.max_new_tokens, float(r.get("confidence", 0.0) or 0.0))
        got = replay(packed, np.zeros((1, 1), dtype=int), int(r["gamma"]), profile.max_new_tokens)
        length = int(packed.lengths[0])
        replayed = emitted_per_step(got.accepted[got.active[:, 0, 0], 0, 0], length)
        measured = emitted_per_step([int(n) for n in r["accept_lengths"]], length)
        rows.append(
            {
                "draft": r["draft"],
                "prompt_id": str(r["prompt_ids"]),
                "gamma": int(r["gamma"]),
                "measured_steps": len(measured),
                "replayed_steps": len(replayed),
                "measured_tokens_per_step": sum(measured) / max(len(measured), 1),
                "replayed_tokens_per_step": sum(replayed) / max(len(replayed), 1),
                "identical": measured == replayed,
            }
        )
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------- what `specnb predict` runs


def ensure_calibrated(
    verifier: str,
    draft: str,
    profile: HardwareProfile | None = None,
    *,
    prompts=None,
    settings: CalibrationSettings = SHORT_CALIBRATION,
) -> HardwareProfile:
    """A profile that covers ``draft``: measured now when ``profile`` is None (a calibration with
    ``settings``), else completed by measuring only what it lacks: the draft's costs if it was never
    calibrated, its acceptance if it has none or if ``prompts`` (acceptance depends on them) are given."""
    if profile is None:
        return calibrate(verifier, [draft], prompts=prompts, settings=settings)[0]
    if profile.verifier != verifier:
        raise ParameterError(
            f"profile was calibrated for verifier {profile.verifier!r}, not {verifier!r}; "
            "pass the same --verifier or calibrate a new profile"
        )
    if settings.device != "auto" and str(settings.device) != profile.device:
        raise ParameterError(
            f"profile was measured on device {profile.device!r}, not {settings.device!r}; "
            "use --device auto or calibrate on that device"
        )
    if draft in profile.drafts and draft in profile.traces and prompts is None:
        return profile
    return complete_profile(profile, draft, prompts, settings)


def complete_profile(profile: HardwareProfile, draft: str, prompts, settings: CalibrationSettings) -> HardwareProfile:
    """``profile`` with ``draft``'s costs (if it lacks them) and acceptance measured now, at the profile's
    ``max_new_tokens`` and batch sizes."""
    settings = replace(settings, max_new_tokens=profile.max_new_tokens)
    pair, models = load_drafts(profile.verifier, [draft], device=profile.device)
    frame = split_prompts("all", 3, 0)[0] if prompts is None else as_prompt_frame(prompts)
    width = prompt_tokens(pair.tokenizer, frame)
    drafts = dict(profile.drafts)
    if draft not in drafts:
        batch_sizes = sorted({int(g["batch_size"]) for g in profile.grid} or {1})
        traits = {draft: draft_traits(models[draft], pair.vocab_size)}
        shapes = draft_shapes(traits)
        grid = (
            measure_costs(shapes, batch_sizes, int(width + profile.max_new_tokens // 2), int(width), settings.repeats,
                          pair.device)
            if shapes
            else None
        )
        drafts[draft] = draft_cost(traits[draft], draft, grid, pair.verifier)
    traces = measure_traces(pair, models, frame, profile.max_new_tokens, progress=settings.progress)[draft]
    _, measured = time_steps(pair, models, drafts, frame.iloc[:settings.overhead_prompts], settings, baseline=False)
    overhead = {**profile.overhead_ms, **measured}
    acceptance = profile_from_traces(traces, settings.gamma, settings.max_new_tokens)
    return HardwareProfile(
        **{
            **profile.__dict__,
            "drafts": drafts,
            "overhead_ms": overhead,
            "prompt_tokens": width,
            "traces": {**profile.traces, draft: traces},
            "acceptance": {**profile.acceptance, draft: acceptance},
            "prompts": ",".join(frame["id"].astype(str)),
        }
    )
