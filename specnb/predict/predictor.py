"""Predict speculative-decoding speedup on *this* machine from a calibrated cost model.

The Leviathan et al. 2023 formula E = (1 − α^(γ+1)) / ((1 − α)(γc + 1)) assumes that a verifier
forward of γ+1 tokens costs the same as one of 1 token, that c is a ratio of FLOPs, and that every
drafted token is accepted independently with the same α. On real hardware none of the three holds:
a fixed dispatch cost makes small drafts relatively expensive, verification of γ+1 tokens is not
free, and acceptance is neither independent nor the same at every position. This module replaces each assumption by
a measurement (made in ``specnb.predict.calibrate``) and keeps the formula's structure.

Forward times come from the cost model of ``specnb.predict.costs`` (measured times inside the grid, the
line t(n, b) = t0 + k·n·b beyond it), for the verifier (t_v) and the draft (t_d).

One speculative step with k = min(γ, tokens still wanted − 1) drafts, exactly as
``specnb.decode.generate`` does it::

    draft:  t_d(w, b) + (k − 1)·t_d(1, b)   w = 2 when the previous step accepted every draft
                                             (the draft catches up on its last token + the bonus);
                                             k shorter when a confidence threshold stops every row
    verify: t_v(k + 1, b)
    other:  o_step                           accept/rollback/bookkeeping, measured per step

Verifier-only costs prefill_v + (N − 1)(t_v(1, b) + o_token), N the batch's longest generation.
Speculative costs prefill_v + prefill_d + Σ steps. Prefill is shared, which pulls speedup towards 1
for short generations.

Acceptance comes from measured traces (``specnb.predict.traces``): for every token of the verifier's own
greedy output, how many following tokens the draft would propose and have accepted. Replaying them
gives the exact steps at any γ and batch size, with what a per-position profile measured at one γ
loses: acceptance that comes in spans (so it depends on where steps start, hence on γ), drafts that
propose nothing (prompt lookup without a match: a 1-token verification), generations that end at
EOS, and a batch that runs until its slowest row is done. Batches draw their rows from the
calibration prompts; the band is the 10th–90th percentile of the predicted speedup when those
prompts are bootstrapped. Hypothetical drafts ("what if α were 0.7") use synthetic i.i.d. traces.

References: Leviathan, Kalman & Matias 2023; Chen et al. 2023; Spec-Bench (Xia et al. 2024) for
measuring speedup on the same prompts; the per-position view follows vLLM's spec-decode metrics.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from specnb.core import theory
from specnb.core.errors import ParameterError
from specnb.core.intervals import interval_text
from specnb.decode.kinds.kind import PER_STEP, PER_TOKEN
from specnb.measure.runs import BASELINE
from specnb.predict.costs import HardwareProfile
from specnb.predict.traces import AcceptanceTrace, PackedTraces, flat_packed, pack, replay

BAND = (10, 90)  # percentiles of the bootstrap distribution shown as the uncertainty band


# ---------------------------------------------------------------------------- simulation


@dataclass(kw_only=True)
class ForwardCosts:
    """Vectorised per-forward costs for one (draft, batch size)."""

    verify_ms: Callable[[np.ndarray], np.ndarray]  # n tokens per row -> ms
    draft_ms: Callable[[np.ndarray, np.ndarray], np.ndarray]  # (k drafts, first-chunk width) -> ms
    overhead_ms: float  # host bookkeeping per speculative step
    prefill_ms: float  # verifier + draft prefill
    baseline_prefill_ms: float  # verifier-only: prefill, then per further token:
    baseline_token_ms: float  # one 1-token forward + its bookkeeping
    catch_up: str = "tokens"  # how wide the draft's first forward of a step is (``traces.replay``)


def forward_costs(profile: HardwareProfile, draft: str, batch_size: int, prompt_tokens: float) -> ForwardCosts:
    v, d = profile.verifier_decode, profile.drafts[draft]
    v_prefill = float(profile.verifier_prefill.forward_ms(prompt_tokens, batch_size))
    token_ms = float(v.forward_ms(1, batch_size)) + profile.overhead_ms.get(BASELINE, 0.0)
    if d.kind in (PER_STEP, PER_TOKEN):  # no draft forward: host time per step, or per drafted token

        def draft_ms(k, width):
            return np.where(k > 0, d.step_ms * (np.asarray(k) if d.kind == PER_TOKEN else 1.0), 0.0)

        d_prefill = 0.0
    else:
        draft_curve = d.decode.curve(batch_size)
        d_prefill = float(d.prefill.forward_ms(prompt_tokens, batch_size))

        def draft_ms(k, width):
            # k forwards: the first feeds the pending tokens (``width``), the rest one token each
            return np.where(k > 0, draft_curve(width) + (k - 1) * draft_curve(1), 0.0)

    return ForwardCosts(verify_ms=v.curve(batch_size), draft_ms=draft_ms,
                        overhead_ms=profile.overhead_ms.get(draft, 0.0), prefill_ms=v_prefill + d_prefill,
                        baseline_prefill_ms=v_prefill, baseline_token_ms=token_ms, catch_up=d.catch_up)


def simulate_ms(costs: ForwardCosts, packed: PackedTraces, rows: np.ndarray, gamma: int, n_new: int):
    """(speculative ms [S], verifier-only ms [S], replay) for the batches ``rows`` [S, B].

    Verifier-only generates the same tokens (greedy is lossless): prefill, then one forward per
    further token of the batch's longest row."""
    got = replay(packed, rows, gamma, n_new, costs.catch_up)
    step = costs.draft_ms(got.k, got.draft_width) + costs.verify_ms(got.verify_tokens) + costs.overhead_ms  # [T, S]
    spec = costs.prefill_ms + np.where(got.live, step, 0.0).sum(0)
    base = costs.baseline_prefill_ms + (got.lengths - 1) * costs.baseline_token_ms
    return spec, base, got


# ---------------------------------------------------------------------------- prediction


@dataclass(kw_only=True)
class Prediction:
    """The verdict for one (draft, batch size): recommended γ (None: don't speculate) and the table.

    The recommendation is the γ with the highest predicted speedup, *if* the lower end of its band
    (10th percentile over bootstrapped calibration prompts) is above 1.0. Why not "any γ above
    1.0x": a predicted 1.005x is a coin flip between a small gain and a small loss on the next
    prompts, and speculation costs memory and a second model; the gain forgone by waiting for a
    clear margin is at most the margin. ``best_gamma`` and the table keep the raw predictions.
    """

    draft: str
    batch_size: int
    recommended_gamma: int | None
    best_gamma: int
    predicted_speedup: float  # at best_gamma
    speedup_lo: float
    speedup_hi: float
    break_even_alpha: float  # flat α at which the best γ just breaks even (NaN: never)
    baseline_tok_s: float
    table: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    confidence: float = 0.0  # the confidence threshold the replayed chains stop at (0: never)

    def as_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in asdict(self).items() if k != "table"}
        data["table"] = [{k: _py(v) for k, v in row.items()} for row in self.table.to_dict("records")]
        return {k: _py(v) for k, v in data.items()}


def _py(value):
    if isinstance(value, (np.generic,)):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def check_gammas(gammas) -> list[int]:
    gammas = [int(g) for g in np.atleast_1d(theory.validate_gamma(list(gammas) if not np.isscalar(gammas) else gammas))]
    if not gammas:
        raise ParameterError("no gamma to predict for; pass gammas >= 1, e.g. range(1, 9)")
    return gammas


def check_known(profile: HardwareProfile, draft: str) -> None:
    if draft not in profile.drafts or draft not in profile.traces:
        known = sorted(set(profile.drafts) & set(profile.traces))
        raise ParameterError(
            f"profile has no calibration for draft {draft!r} (calibrated: {', '.join(known) or 'none'}); "
            f"run `specnb calibrate --draft {draft} ...` or predict without --profile"
        )


@dataclass(frozen=True, kw_only=True)
class Workload:
    """What a prediction is for: the batch size, the tokens to generate and the prompt width (None:
    the profile's), and the confidence below which chains stop (0: never; ``specnb.decode.confidence``)."""

    batch_size: int = 1
    max_new_tokens: int | None = None
    prompt_tokens: float | None = None
    confidence: float = 0.0


@dataclass(frozen=True, kw_only=True)
class Bootstrap:
    """How the band is drawn: ``n_boot`` resampled sets of calibration prompts, ``sims_per_boot``
    batches from each; fewer is faster and noisier."""

    n_boot: int = 200
    sims_per_boot: int = 16
    seed: int = 0


def predict(profile: HardwareProfile, draft: str, gammas=range(1, 9), workload: Workload = Workload(), *,
            bootstrap: Bootstrap = Bootstrap()) -> Prediction:
    """Predicted speedup for every γ, its band, break-even α and the recommendation for ``workload``."""
    gammas = check_gammas(gammas)
    check_known(profile, draft)
    batch_size, confidence, seed = workload.batch_size, workload.confidence, bootstrap.seed
    if batch_size < 1:
        raise ParameterError(f"batch_size must be >= 1, got {batch_size}")
    n_new = int(workload.max_new_tokens or profile.max_new_tokens)
    if n_new < 2:
        raise ParameterError(f"max_new_tokens must be >= 2 for a speculative step to exist, got {n_new}")
    width = float(workload.prompt_tokens if workload.prompt_tokens is not None else profile.prompt_tokens)
    costs = forward_costs(profile, draft, batch_size, width)
    packed = pack(profile.traces[draft], n_new, confidence)
    rows = bootstrap_rows(len(packed.lengths), batch_size, bootstrap.n_boot, bootstrap.sims_per_boot,
                          seed)  # [n_boot, per_boot, B]
    scenario = Scenario(profile=profile, draft=draft, costs=costs, packed=packed, rows=rows,
                        flat=flat_packed(BREAK_EVEN_ALPHAS, n_new, seed=seed), n_new=n_new)
    table = pd.DataFrame([predict_gamma(scenario, g) for g in gammas])
    best = table.loc[table["predicted_speedup"].idxmax()]
    best_gamma = int(best["gamma"])
    notes = trace_notes(profile.traces[draft], packed, max(gammas), n_new)
    notes += confidence_notes(profile, draft, confidence)
    recommended = best_gamma if clears_break_even(best["predicted_speedup"], best["speedup_lo"]) else None
    if recommended is None and best["predicted_speedup"] > 1.0:
        notes.append(
            f"γ={best_gamma} predicts {best['predicted_speedup']:.3f}x on average, but its band reaches down "
            f"to {best['speedup_lo']:.3f}x: on some prompt mixes it loses, so it is not recommended"
        )
    return Prediction(
        draft=draft,
        batch_size=batch_size,
        recommended_gamma=recommended,
        best_gamma=best_gamma,
        predicted_speedup=float(best["predicted_speedup"]),
        speedup_lo=float(best["speedup_lo"]),
        speedup_hi=float(best["speedup_hi"]),
        break_even_alpha=float(np.nanmin(table["break_even_alpha"])) if table["break_even_alpha"].notna().any()
        else float("nan"),
        baseline_tok_s=float(table["baseline_tok_s"].iloc[0]),
        table=table,
        notes=notes,
        confidence=confidence,
    )


def clears_break_even(predicted_speedup: float, speedup_lo: float) -> bool:
    """The recommendation rule (see ``Prediction``): speculate only when even the band's low end wins."""
    return bool(predicted_speedup > 1.0 and speedup_lo > 1.0)


def bootstrap_rows(n_prompts: int, batch: int, n_boot: int, per_boot: int, seed: int) -> np.ndarray:
    """Row indices [n_boot, per_boot, B]: each bootstrap set resamples the calibration prompts, and
    its batches draw their rows from that set. The same seed gives every γ the same batches."""
    rng = np.random.default_rng(seed)
    prompts = rng.integers(0, n_prompts, size=(n_boot, n_prompts))  # bootstrap sets of prompts
    return prompts[:, rng.integers(0, n_prompts, size=(per_boot, batch))]


def trace_notes(traces: list[AcceptanceTrace], packed: PackedTraces, max_gamma: int, n_new: int) -> list[str]:
    notes = []
    if max_gamma > trace_cap(traces):
        notes.append(
            f"traces record proposals of up to {trace_cap(traces)} tokens; longer γ are capped there "
            f"(marked extrapolated)"
        )
    if packed.extended:
        notes.append(
            f"some calibration generations were shorter than {n_new} tokens without reaching EOS; "
            "their acceptance is repeated to fill the budget"
        )
    return notes


def confidence_notes(profile: HardwareProfile, draft: str, confidence: float) -> list[str]:
    if confidence > 0 and all(t.confidence is None for t in profile.traces[draft]):
        return [f"{draft}'s traces record no confidence (prompt lookup has none; a profile calibrated before "
                "confidence stopping lacks it): its chains are replayed without stopping early"]
    return []


def trace_cap(traces: list[AcceptanceTrace]) -> float:
    """The longest proposal every trace recorded (inf for model drafts: they propose what is asked)."""
    return min((t.cap for t in traces if t.cap is not None), default=math.inf)


@dataclass(kw_only=True)
class Scenario:
    """What every γ of one prediction shares: the draft's costs, its traces, the bootstrapped batches."""

    profile: HardwareProfile
    draft: str
    costs: ForwardCosts
    packed: PackedTraces  # the draft's traces, fitted to the budget
    rows: np.ndarray  # [n_boot, per_boot, B] batches of trace indices (``bootstrap_rows``)
    flat: PackedTraces  # i.i.d. traces over ``BREAK_EVEN_ALPHAS`` (``flat_packed``)
    n_new: int


def predict_gamma(scenario: Scenario, gamma: int) -> dict:
    """One row of a prediction's table: the speedup at ``gamma``, its band, and what explains it."""
    profile, draft, costs, packed = scenario.profile, scenario.draft, scenario.costs, scenario.packed
    rows = scenario.rows  # [n_boot, per_boot, B]
    n_boot, per_boot, batch = rows.shape
    spec_ms, base_ms, got = simulate_ms(costs, packed, rows.reshape(-1, batch), gamma, scenario.n_new)
    boot = base_ms.reshape(n_boot, per_boot).sum(1) / spec_ms.reshape(n_boot, per_boot).sum(1)  # [n_boot]
    tokens = (packed.lengths[rows.reshape(-1, batch)]).sum()
    active = got.active
    c_wall = float(costs.draft_ms(np.array(1), np.array(1.0))) / float(costs.verify_ms(np.array(1)))
    alpha = profile.acceptance[draft].alpha_iid() if draft in profile.acceptance else float("nan")
    return {
        "gamma": gamma,
        "predicted_speedup": float(base_ms.sum() / spec_ms.sum()),
        "speedup_lo": float(np.percentile(boot, BAND[0])),
        "speedup_hi": float(np.percentile(boot, BAND[1])),
        "predicted_tok_s": float(tokens / spec_ms.sum() * 1e3),
        "baseline_tok_s": float(tokens / base_ms.sum() * 1e3),
        "tokens_per_step": float((got.accepted + 1)[active].sum() / max(active.sum(), 1)),
        "drafted_per_step": float(got.drafted[active].sum() / max(active.sum(), 1)),
        "verify_ms": float(costs.verify_ms(np.array(gamma + 1))),
        "draft_ms_per_step": float(costs.draft_ms(np.array(gamma), np.array(1.0))),
        "break_even_alpha": simulated_break_even_alpha(scenario, gamma),
        "flops_leviathan_speedup": float(theory.expected_speedup(min(alpha, 0.999), gamma, flops_c(profile, draft))),
        "wallclock_leviathan_speedup": float(theory.expected_speedup(min(alpha, 0.999), gamma, c_wall)),
        "extrapolated": gamma > trace_cap(profile.traces[draft]),
    }


def flops_c(profile: HardwareProfile, draft: str) -> float:
    """c by FLOPs (draft ÷ verifier per token), as the Leviathan formula is usually fed."""
    return profile.drafts[draft].flops_per_token / profile.verifier_flops_per_token


BREAK_EVEN_ALPHAS = np.linspace(0.0, 0.999, 64)


def simulated_break_even_alpha(scenario: Scenario, gamma: int, sims: int = 32, seed: int = 0) -> float:
    """Flat α at which γ drafts just match verifier-only on this hardware, at the scenario's batch
    size and budget; NaN if even α → 1 loses.

    One replay of i.i.d. traces over a grid of α with common random numbers (``flat_packed``: the
    same uniforms thresholded at each α, the same batches), then linear interpolation at the
    crossing of 1.0.
    """
    costs, flat, batch = scenario.costs, scenario.flat, scenario.rows.shape[-1]
    alphas = BREAK_EVEN_ALPHAS
    per_alpha = len(flat.lengths) // len(alphas)
    rows = np.random.default_rng(seed).integers(0, per_alpha, size=(sims, batch))  # [S, B]
    rows = (np.arange(len(alphas))[:, None, None] * per_alpha + rows[None]).reshape(-1, batch)  # [A·S, B]
    spec, base, _ = simulate_ms(costs, flat, rows, gamma, scenario.n_new)
    speedup = base.reshape(len(alphas), sims).sum(1) / spec.reshape(len(alphas), sims).sum(1)  # [A]
    above = np.flatnonzero(speedup >= 1.0)
    if len(above) == 0:
        return float("nan")
    i = above[0]
    if i == 0:
        return 0.0
    return float(np.interp(1.0, speedup[i - 1 : i + 1], alphas[i - 1 : i + 1]))


def predict_grid(
    profile: HardwareProfile,
    batch_sizes,
    prompt_tokens: dict[int, float],
    gammas=range(1, 9),
    max_new_tokens: int | None = None,
) -> dict[tuple[str, int], Prediction]:
    """``predict`` for every calibrated draft at every batch size (``prompt_tokens``: batch size ->
    mean prefill width of its batches)."""
    return {
        (name, b): predict(profile, name, gammas,
                           Workload(batch_size=b, max_new_tokens=max_new_tokens, prompt_tokens=prompt_tokens[b]))
        for name in profile.drafts
        for b in batch_sizes
    }


def verdict_table(predictions: dict[tuple[str, int], Prediction], profile: HardwareProfile) -> pd.DataFrame:
    """One row per (draft, batch size): recommended γ, predicted speedup and band, break-even α on this
    hardware and the measured per-token α."""
    return pd.DataFrame(
        [
            {
                "draft": name,
                "batch_size": b,
                "recommended_gamma": p.recommended_gamma,
                "predicted_speedup": p.predicted_speedup,
                "band": interval_text(p.speedup_lo, p.speedup_hi),
                "break_even_alpha": p.break_even_alpha,
                "measured_alpha_iid": profile.acceptance[name].alpha_iid(),
            }
            for (name, b), p in predictions.items()
        ]
    )
