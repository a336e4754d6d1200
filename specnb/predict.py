"""Predict speculative-decoding speedup on *this* machine from a calibrated cost model.

The Leviathan et al. 2023 formula E = (1 − α^(γ+1)) / ((1 − α)(γc + 1)) assumes that a verifier
forward of γ+1 tokens costs the same as one of 1 token, that c is a ratio of FLOPs, and that every
drafted token is accepted independently with the same α. On real hardware none of the three holds:
a fixed dispatch cost makes small drafts relatively expensive, verification of γ+1 tokens is not
free, and acceptance falls with the position in the draft. This module replaces each assumption by
a measurement (made in ``specnb.calibrate``) and keeps the formula's structure.

Cost model (per model m, fitted by least squares on a microbenchmark grid)::

    t_m(n, b) = t0_m + k_m · n · b          ms for one forward of n new tokens in each of b rows

t0 is the fixed dispatch/launch/bandwidth cost, k the per-token compute. The decode grid is measured
on a cache of the context the generation will see (prompt + half the new tokens), so the attention
term is folded into k. Prefill is a second fit of the same form on prompt-length forwards.

One speculative step with k = min(γ, tokens still wanted − 1) drafts, exactly as
``specnb.decoding.generate`` does it::

    draft:  t_d(w, b) + (k − 1)·t_d(1, b)   w = 2 when the previous step accepted every draft
                                             (the draft catches up on its last token + the bonus)
    verify: t_v(k + 1, b)
    other:  o_step                           accept/rollback/bookkeeping, measured per step

Verifier-only costs prefill_v + (N − 1)(t_v(1, b) + o_token). Speculative costs prefill_v +
prefill_d + Σ steps. Prefill is shared, which pulls speedup towards 1 for short generations.

Acceptance is a per-position *conditional* profile a_i = P(position i accepted | positions < i
accepted) (Chen et al. 2023 ask the same question per position; ``theory.tokens_per_step_from_profile``
turns it into τ). Steps are simulated (Monte Carlo, common random numbers) rather than taking
(N − 1)/τ, because short generations end in truncated steps, the draft's catch-up depends on the
previous step, and a batch runs until its slowest row is done. Each simulated row draws one
calibration prompt's profile (shrunk towards the pooled profile), so prompt-to-prompt variance
reaches the prediction; the band is the 10th–90th percentile of the predicted speedup when the
calibration prompts are bootstrapped. Beyond the profiled γ the conditional acceptance of the last
profiled positions is reused, capped at the pooled rate (conservative), and flagged.

References: Leviathan, Kalman & Matias 2023; Chen et al. 2023; Spec-Bench (Xia et al. 2024) for
measuring speedup on the same prompts; the per-position view follows vLLM's spec-decode metrics.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from specnb import theory
from specnb.errors import ParameterError

PROFILE_FORMAT = "specnb-hardware-profile/1"
BAND = (10, 90)  # percentiles of the bootstrap distribution shown as the uncertainty band
SHRINK_STEPS = 2.0  # pseudo-counts pulling a prompt's per-position rate towards the pooled one
LOOKUP = "lookup"


# ---------------------------------------------------------------------------- cost model


@dataclass
class CostModel:
    """t(n, b) = t0_ms + ms_per_token · n · b for one forward of ``n`` tokens in ``b`` rows, and the
    measured medians it was fitted on.

    Where (n, b) lies inside the measured grid the measured time is used (linear interpolation
    between measured n at that b); the line only extrapolates. Why: on a CPU the forward of 2
    tokens costs far more than 1 more token's worth (matrix-vector products become matrix-matrix
    products, with their packing overhead), a jump that a line through 1..γ+1 tokens smooths away,
    and it is exactly the cost of a verification step.
    """

    t0_ms: float
    ms_per_token: float
    r2: float = float("nan")
    n_points: int = 0
    measured: list = field(default_factory=list)  # [[n_tokens, batch_size, median_ms], ...]

    def curve(self, batch_size=1) -> Callable[[np.ndarray], np.ndarray]:
        """ms per forward as a function of n at one batch size, the measured points sorted once
        (the simulation calls it every step)."""
        points = sorted((row[0], row[2]) for row in self.measured if row[1] == batch_size)
        xs, ys = (np.array(v, dtype=float) for v in zip(*points)) if len(points) >= 2 else (None, None)

        def ms(n_tokens):
            n = np.asarray(n_tokens, dtype=float)
            fitted = self.t0_ms + self.ms_per_token * n * batch_size
            return fitted if xs is None else np.where((n >= xs[0]) & (n <= xs[-1]), np.interp(n, xs, ys), fitted)

        return ms

    def forward_ms(self, n_tokens, batch_size=1):
        return self.curve(batch_size)(n_tokens)


def fit_cost_model(grid: pd.DataFrame) -> CostModel:
    """Least squares of ``median_ms`` on tokens × batch (columns n_tokens, batch_size, median_ms)."""
    x = (grid["n_tokens"] * grid["batch_size"]).to_numpy(dtype=float)
    y = grid["median_ms"].to_numpy(dtype=float)
    if len(np.unique(x)) < 2:
        raise ParameterError("a cost model needs forwards of at least two sizes (n_tokens × batch_size); "
                             f"got {sorted(set(x))}")
    design = np.stack([np.ones_like(x), x], axis=1)  # [P, 2]
    (t0, k), *_ = np.linalg.lstsq(design, y, rcond=None)
    total = np.sum((y - y.mean()) ** 2)
    r2 = 1.0 - np.sum((y - design @ [t0, k]) ** 2) / total if total > 0 else 1.0
    measured = grid[["n_tokens", "batch_size", "median_ms"]].to_numpy(dtype=float).tolist()
    return CostModel(float(t0), float(max(k, 0.0)), float(r2), len(y), measured)


# ---------------------------------------------------------------------------- acceptance profile


@dataclass
class AcceptanceProfile:
    """Counts per position i = 1..gamma: how often position i was *reached* (drafted with every
    earlier position accepted) and accepted, pooled and per prompt (rows of ``per_prompt``)."""

    gamma: int
    reached: list[int]
    accepted: list[int]
    per_prompt: list[dict] = field(default_factory=list)  # {"prompt_id", "reached", "accepted"}

    def conditional(self) -> np.ndarray:
        """a_i = accepted_i / reached_i; an unreached position repeats the one before it."""
        return rates(np.asarray(self.accepted, float), np.asarray(self.reached, float))

    def alpha_iid(self) -> float:
        """The i.i.d. α that best explains the counts (pooled accepted ÷ reached): the maximum
        likelihood α of the geometric model Leviathan et al. assume."""
        reached = sum(self.reached)
        return sum(self.accepted) / reached if reached else 0.0

    def extended(self, gamma: int) -> tuple[np.ndarray, np.ndarray]:
        """(per-prompt conditional profiles [P, gamma], pooled [gamma]), extrapolated past the
        profiled length with the tail rate (last two positions pooled), capped at the pooled α."""
        pooled = self.conditional()
        rows = [shrink(p["accepted"], p["reached"], pooled) for p in self.per_prompt] or [pooled]
        table = np.vstack(rows)  # [P, G]
        if gamma > self.gamma:
            acc, rch = np.asarray(self.accepted, float), np.asarray(self.reached, float)
            tail = acc[-2:].sum() / rch[-2:].sum() if rch[-2:].sum() else pooled[-1]
            fill = min(tail, self.alpha_iid()) if self.alpha_iid() > 0 else tail
            table = np.hstack([table, np.full((len(table), gamma - self.gamma), fill)])
            pooled = np.concatenate([pooled, np.full(gamma - self.gamma, fill)])
        return table[:, :gamma], pooled[:gamma]

    def to_frame(self) -> pd.DataFrame:
        cond = self.conditional()
        return pd.DataFrame({"position": np.arange(1, self.gamma + 1), "reached": self.reached,
                             "accepted": self.accepted, "conditional_rate": cond,
                             "rate": np.cumprod(cond)})


def rates(accepted: np.ndarray, reached: np.ndarray) -> np.ndarray:
    """accepted ÷ reached per position; positions never reached repeat the previous rate (0 at first)."""
    out = np.zeros(len(reached))
    for i, (a, r) in enumerate(zip(accepted, reached)):
        out[i] = a / r if r > 0 else (out[i - 1] if i else 0.0)
    return np.clip(out, 0.0, 1.0)


def shrink(accepted, reached, pooled: np.ndarray) -> np.ndarray:
    """A prompt's conditional profile with SHRINK_STEPS pseudo-observations at the pooled rate:
    a prompt that reached position 6 once should not be predicted to accept it always."""
    acc = np.asarray(accepted, float)[: len(pooled)]
    rch = np.asarray(reached, float)[: len(pooled)]
    return (acc + SHRINK_STEPS * pooled[: len(acc)]) / (rch + SHRINK_STEPS)


def counts_from_positions(accepted_by_position, drafted_by_position) -> tuple[list[int], list[int]]:
    """(reached, accepted) from per-position counts of a run (``bench`` records).

    reached_i = min(accepted_{i-1}, drafted_i): a step reaches position i when it accepted i − 1
    and drafted i (drafts shrink only in the last steps, so the min is exact but for those).
    """
    acc = [int(a) for a in accepted_by_position]
    drafted = [int(d) for d in drafted_by_position]
    reached = [drafted[0]] + [min(acc[i - 1], drafted[i]) for i in range(1, len(acc))] if acc else []
    return reached, acc


def profile_from_records(records: pd.DataFrame, draft: str) -> AcceptanceProfile:
    """The acceptance profile of one draft from ``bench.run_interleaved`` records (batch size 1)."""
    rows = records[(records["draft"] == draft) & (records["gamma"] > 0)]
    if rows.empty:
        raise ParameterError(f"no speculative records for draft {draft!r} to build an acceptance profile from")
    gamma = int(rows["gamma"].max())
    per_prompt = []
    for prompt_id, group in rows[rows["gamma"] == gamma].groupby("prompt_ids", sort=False):
        acc = np.sum(np.stack(group["accepted_by_position"].map(np.asarray).to_list()), axis=0)
        drafted = np.sum(np.stack(group["drafted_by_position"].map(np.asarray).to_list()), axis=0)
        reached, accepted = counts_from_positions(acc, drafted)
        per_prompt.append({"prompt_id": str(prompt_id), "reached": reached, "accepted": accepted})
    reached = np.sum([p["reached"] for p in per_prompt], axis=0).astype(int).tolist()
    accepted = np.sum([p["accepted"] for p in per_prompt], axis=0).astype(int).tolist()
    return AcceptanceProfile(gamma, reached, accepted, per_prompt)


def flat_profile(alpha: float, gamma: int = 8) -> AcceptanceProfile:
    """An i.i.d. profile (every a_i = α), as 1000 pseudo-steps per position, for what-if questions."""
    alpha = float(theory.validate_alpha(alpha))
    reached = [1000] * gamma
    return AcceptanceProfile(gamma, reached, [round(1000 * alpha)] * gamma)


# ---------------------------------------------------------------------------- hardware profile


@dataclass
class DraftCosts:
    """What a draft costs: a model's cost models, or a fixed ms per step (prompt lookup)."""

    kind: str  # "model" or LOOKUP
    decode: CostModel | None
    prefill: CostModel | None
    flops_per_token: float  # for the FLOPs-c Leviathan comparison (0 for lookup)
    step_ms: float = 0.0  # lookup: host time to propose per step


@dataclass
class HardwareProfile:
    """Everything ``predict`` needs, as plain JSON (``save_profile`` / ``load_profile``)."""

    verifier: str
    device: str
    machine: dict
    verifier_decode: CostModel
    verifier_prefill: CostModel
    verifier_flops_per_token: float
    drafts: dict[str, DraftCosts]
    acceptance: dict[str, AcceptanceProfile]
    overhead_ms: dict[str, float]  # "verifier-only": per token; a draft name: per speculative step
    max_new_tokens: int
    prompt_tokens: float
    grid: list[dict] = field(default_factory=list)
    prompts: str = ""
    created_utc: str = ""
    specnb_version: str = ""
    notes: list[str] = field(default_factory=list)


def save_profile(profile: HardwareProfile, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"format": PROFILE_FORMAT, **asdict(profile)}
    path.write_text(json.dumps(data, indent=1, default=_plain))
    return path


def _plain(value):
    return value.item() if hasattr(value, "item") else str(value)


def load_profile(path) -> HardwareProfile:
    """Read a profile written by ``save_profile``; a malformed file is a ParameterError saying why."""
    path = Path(path).expanduser()
    fix = "recreate it with `specnb calibrate ... --out PROFILE.json`"
    try:
        data = json.loads(path.read_text())
    except OSError as err:
        raise ParameterError(f"cannot read profile {str(path)!r} ({err.strerror}); {fix}") from None
    except ValueError as err:
        raise ParameterError(f"profile {str(path)!r} is not valid JSON ({err}); {fix}") from None
    try:
        return profile_from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ParameterError(f"profile {str(path)!r} is malformed ({type(err).__name__}: {err}); {fix}") from None


def profile_from_dict(data: dict) -> HardwareProfile:
    if not isinstance(data, dict) or data.get("format") != PROFILE_FORMAT:
        raise ValueError(f"format is not {PROFILE_FORMAT!r}")
    drafts = {name: DraftCosts(d["kind"], d["decode"] and CostModel(**d["decode"]),
                               d["prefill"] and CostModel(**d["prefill"]), float(d["flops_per_token"]),
                               float(d.get("step_ms", 0.0))) for name, d in data["drafts"].items()}
    acceptance = {name: AcceptanceProfile(**a) for name, a in data["acceptance"].items()}
    fields = {k: v for k, v in data.items() if k not in ("format", "drafts", "acceptance")}
    profile = HardwareProfile(**{**fields, "drafts": drafts, "acceptance": acceptance,
                                 "verifier_decode": CostModel(**data["verifier_decode"]),
                                 "verifier_prefill": CostModel(**data["verifier_prefill"])})
    for name, a in acceptance.items():
        if len(a.reached) != a.gamma or len(a.accepted) != a.gamma:
            raise ValueError(f"acceptance of {name!r} has {len(a.reached)} positions, gamma {a.gamma}")
    return profile


# ---------------------------------------------------------------------------- simulation


@dataclass
class StepCosts:
    """Vectorised per-forward costs for one (draft, batch size)."""

    verify_ms: Callable[[np.ndarray], np.ndarray]  # n tokens per row -> ms
    draft_ms: Callable[[np.ndarray], np.ndarray]  # (k drafts, first-chunk width) -> ms, see step_costs
    overhead_ms: float
    prefill_ms: float  # verifier + draft prefill


def step_costs(profile: HardwareProfile, draft: str, batch_size: int, prompt_tokens: float) -> StepCosts:
    v, d = profile.verifier_decode, profile.drafts[draft]
    prefill = float(profile.verifier_prefill.forward_ms(prompt_tokens, batch_size))
    if d.kind == LOOKUP:
        def draft_ms(k, width):
            return np.where(k > 0, d.step_ms, 0.0)
    else:
        prefill += float(d.prefill.forward_ms(prompt_tokens, batch_size))

        draft_curve = d.decode.curve(batch_size)

        def draft_ms(k, width):
            # k forwards: the first feeds the pending tokens (width 1 or 2), the rest one token each
            return np.where(k > 0, draft_curve(width) + (k - 1) * draft_curve(1), 0.0)
    return StepCosts(v.curve(batch_size), draft_ms, profile.overhead_ms.get(draft, 0.0), prefill)


def simulate_speculative_ms(profiles: np.ndarray, costs: StepCosts, gamma: int, n_new: int, rng,
                            shared: int = 1) -> np.ndarray:
    """Wall ms of one speculative generation per simulation, profiles [S, B, γ] (one row per sequence).

    ``shared`` > 1 splits the S simulations into that many consecutive blocks that reuse the same
    random numbers (common random numbers: comparing profiles block by block is then monotone).

    Mirrors ``decoding.decode_speculative``: the prefill emits one token; each step drafts
    k = min(γ, max remaining − 1) tokens, accepts a prefix (position i accepted with probability
    a_i given the earlier ones), emits accepted + 1 tokens; the batch runs until every row is done.
    """
    sims, batch, _ = profiles.shape
    remaining = np.full((sims, batch), n_new - 1)  # tokens still wanted after the prefill's first
    width = np.ones(sims)  # the draft's first chunk this step: 1 token, or 2 after a full accept
    total = np.full(sims, costs.prefill_ms)
    positions = np.arange(gamma)
    for _ in range(n_new):
        active = remaining > 0  # [S, B]
        live = active.any(1)  # [S]
        if not live.any():
            break
        k = np.minimum(gamma, np.where(active, remaining, 0).max(1) - 1).clip(0)  # [S]
        drafted = positions[None, None, :] < k[:, None, None]  # [S, 1, γ]
        uniforms = np.tile(rng.random((sims // shared, batch, gamma)), (shared, 1, 1))  # [S, B, γ]
        accept = (uniforms < profiles) & drafted
        n_acc = np.cumprod(accept, axis=2).sum(2)  # [S, B] accepted prefix per row
        step = costs.draft_ms(k, width) + costs.verify_ms(k + 1) + costs.overhead_ms
        total += np.where(live, step, 0.0)
        emitted = np.minimum(n_acc + 1, remaining)
        remaining = np.where(active, remaining - emitted, 0)
        full = (n_acc == k[:, None]) & (k[:, None] > 0) & active
        width = np.where(full.any(1), 2.0, 1.0)
    return total


def baseline_ms(profile: HardwareProfile, batch_size: int, n_new: int, prompt_tokens: float) -> float:
    """Verifier-only: prefill (emits the first token), then one forward per further token."""
    v = profile.verifier_decode
    per_token = float(v.forward_ms(1, batch_size)) + profile.overhead_ms.get("verifier-only", 0.0)
    return float(profile.verifier_prefill.forward_ms(prompt_tokens, batch_size)) + (n_new - 1) * per_token


# ---------------------------------------------------------------------------- prediction


@dataclass
class Prediction:
    """The verdict for one (draft, batch size): recommended γ (None: don't speculate) and the table."""

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
    if draft not in profile.drafts or draft not in profile.acceptance:
        known = sorted(set(profile.drafts) & set(profile.acceptance))
        raise ParameterError(f"profile has no calibration for draft {draft!r} (calibrated: {', '.join(known) or 'none'}); "
                             f"run `specnb calibrate --draft {draft} ...` or predict without --profile")


def predict(profile: HardwareProfile, draft: str, gammas=range(1, 9), batch_size: int = 1,
            max_new_tokens: int | None = None, prompt_tokens: float | None = None, n_boot: int = 200,
            sims_per_boot: int = 16, seed: int = 0) -> Prediction:
    """Predicted speedup for every γ, its band, break-even α and the recommendation."""
    gammas = check_gammas(gammas)
    check_known(profile, draft)
    if batch_size < 1:
        raise ParameterError(f"batch_size must be >= 1, got {batch_size}")
    n_new = int(max_new_tokens or profile.max_new_tokens)
    prompt_tokens = float(prompt_tokens if prompt_tokens is not None else profile.prompt_tokens)
    acceptance = profile.acceptance[draft]
    costs = step_costs(profile, draft, batch_size, prompt_tokens)
    base = baseline_ms(profile, batch_size, n_new, prompt_tokens)
    rows = [predict_gamma(profile, draft, acceptance, costs, base, g, batch_size, n_new, n_boot, sims_per_boot, seed)
            for g in gammas]
    table = pd.DataFrame(rows)
    best = table.loc[table["predicted_speedup"].idxmax()]
    best_gamma = int(best["gamma"])
    notes = []
    if max(gammas) > acceptance.gamma:
        notes.append(f"acceptance was profiled up to γ={acceptance.gamma}; longer drafts reuse the tail rate "
                     f"(capped at the pooled α), marked extrapolated")
    return Prediction(draft, batch_size, best_gamma if best["predicted_speedup"] > 1.0 else None, best_gamma,
                      float(best["predicted_speedup"]), float(best["speedup_lo"]), float(best["speedup_hi"]),
                      float(np.nanmin(table["break_even_alpha"])) if table["break_even_alpha"].notna().any()
                      else float("nan"), n_new * batch_size / base * 1e3, table, notes)


def predict_gamma(profile, draft, acceptance, costs, base_ms, gamma, batch, n_new, n_boot, per_boot, seed) -> dict:
    table, pooled = acceptance.extended(gamma)  # [P, γ], [γ]
    rng = np.random.default_rng(seed)
    prompts = rng.integers(0, len(table), size=(n_boot, len(table)))  # bootstrap sets of prompts
    rows = prompts[:, rng.integers(0, len(table), size=(per_boot, batch))]  # [n_boot, per_boot, B]
    spec_ms = simulate_speculative_ms(table[rows.reshape(-1, batch)], costs, gamma, n_new, rng)
    boot = base_ms / spec_ms.reshape(n_boot, per_boot).mean(1)  # speedup per bootstrap set
    tau = float(theory.tokens_per_step_from_profile(pooled))
    c_flops = flops_c(profile, draft)
    c_wall = float(costs.draft_ms(np.array(1), np.array(1.0))) / float(costs.verify_ms(np.array(1)))
    alpha = acceptance.alpha_iid()
    return {
        "gamma": gamma,
        "predicted_speedup": float(base_ms / spec_ms.mean()),
        "speedup_lo": float(np.percentile(boot, BAND[0])),
        "speedup_hi": float(np.percentile(boot, BAND[1])),
        "predicted_tok_s": n_new * batch / spec_ms.mean() * 1e3,
        "tokens_per_step": tau,
        "verify_ms": float(costs.verify_ms(np.array(gamma + 1))),
        "draft_ms_per_step": float(costs.draft_ms(np.array(gamma), np.array(1.0))),
        "break_even_alpha": break_even_alpha(costs, base_ms, gamma, batch, n_new, seed),
        "flops_leviathan_speedup": float(theory.expected_speedup(min(alpha, 0.999), gamma, c_flops)),
        "wallclock_leviathan_speedup": float(theory.expected_speedup(min(alpha, 0.999), gamma, c_wall)),
        "extrapolated": gamma > acceptance.gamma,
    }


def flops_c(profile: HardwareProfile, draft: str) -> float:
    """c by FLOPs (draft ÷ verifier per token), as the Leviathan formula is usually fed."""
    return profile.drafts[draft].flops_per_token / profile.verifier_flops_per_token


def break_even_alpha(costs: StepCosts, base_ms: float, gamma: int, batch: int, n_new: int, seed: int = 0,
                     sims: int = 32, points: int = 64) -> float:
    """Flat α at which γ drafts just match verifier-only on this hardware; NaN if even α → 1 loses.

    One simulation over a grid of α with common random numbers (so speedup is monotone in α),
    then linear interpolation at the crossing of 1.0.
    """
    alphas = np.linspace(0.0, 0.999, points)
    profiles = np.repeat(alphas, sims)[:, None, None] * np.ones((1, batch, gamma))  # [A·S, B, γ]
    spec = simulate_speculative_ms(profiles, costs, gamma, n_new, np.random.default_rng(seed), shared=points)
    speedup = base_ms / spec.reshape(points, sims).mean(1)  # [A]
    above = np.flatnonzero(speedup >= 1.0)
    if len(above) == 0:
        return float("nan")
    i = above[0]
    if i == 0:
        return 0.0
    return float(np.interp(1.0, speedup[i - 1:i + 1], alphas[i - 1:i + 1]))


def what_if(profile: HardwareProfile, draft: str, alpha: float | None = None, batch_size: int = 1,
            draft_speed: float = 1.0, gammas=range(1, 9), max_new_tokens: int | None = None) -> Prediction:
    """The verdict if acceptance were a flat ``alpha`` (None: as measured), at another batch size,
    or with a draft ``draft_speed`` times faster per forward (t0 and k both divided)."""
    if draft_speed <= 0:
        raise ParameterError(f"draft_speed must be > 0 (2.0 = a draft twice as fast), got {draft_speed}")
    check_known(profile, draft)
    d = profile.drafts[draft]
    scaled = DraftCosts(d.kind, d.decode and scale(d.decode, draft_speed), d.prefill and scale(d.prefill, draft_speed),
                        d.flops_per_token / draft_speed, d.step_ms / draft_speed)
    acceptance = profile.acceptance[draft] if alpha is None else flat_profile(alpha, max(gammas))
    changed = HardwareProfile(**{**profile.__dict__, "drafts": {**profile.drafts, draft: scaled},
                                 "acceptance": {**profile.acceptance, draft: acceptance}})
    return predict(changed, draft, gammas, batch_size, max_new_tokens, n_boot=40, sims_per_boot=8)


def scale(model: CostModel, speed: float) -> CostModel:
    return CostModel(model.t0_ms / speed, model.ms_per_token / speed, model.r2, model.n_points)


# ---------------------------------------------------------------------------- the reference run

REFERENCE_MPS = {  # what the reference reported on an Apple GPU (MPS), Qwen2.5-3B + 0.5B, greedy
    "verifier_tok_s": 14.4, "alpha": 0.392, "draft_speed_ratio": 2.8,
    "reported_tok_s": {4: 12.3, 7: 9.5}, "verifier_flops_per_token": 6_171_394_048,
    "draft_flops_per_token": 987_922_432,
}


def reference_mps_profile(verify_extra_token_fraction: float = 0.0, alpha: float | None = None) -> HardwareProfile:
    """The reference MPS run as a hand-entered profile.

    t_v(1) = 1000 / 14.4 ≈ 69.4 ms; the draft is 2.8x faster per token, t_d(1) ≈ 24.8 ms. The
    reference did not measure t_v(γ+1): ``verify_extra_token_fraction`` is our assumption, each
    extra token adds that fraction of t_v(1) (0 = verification is free, as in a memory-bound
    forward). The same fraction applies to the draft. Acceptance is flat at α (i.i.d.). Prefill and
    per-step overhead are set to zero: the reported tok/s are long-generation rates.
    """
    ref = REFERENCE_MPS
    t_v = 1000.0 / ref["verifier_tok_s"]
    t_d = t_v / ref["draft_speed_ratio"]
    f = float(verify_extra_token_fraction)
    if f < 0:
        raise ParameterError(f"verify_extra_token_fraction must be >= 0, got {f}")
    draft = DraftCosts("model", CostModel(t_d * (1 - f), t_d * f), CostModel(t_d, 0.0), ref["draft_flops_per_token"])
    return HardwareProfile(
        verifier="Qwen/Qwen2.5-3B-Instruct", device="mps", machine={"description": "reference run (hand-entered)"},
        verifier_decode=CostModel(t_v * (1 - f), t_v * f), verifier_prefill=CostModel(t_v, 0.0),
        verifier_flops_per_token=ref["verifier_flops_per_token"],
        drafts={"Qwen/Qwen2.5-0.5B-Instruct": draft},
        acceptance={"Qwen/Qwen2.5-0.5B-Instruct": flat_profile(ref["alpha"] if alpha is None else alpha, 8)},
        overhead_ms={}, max_new_tokens=128, prompt_tokens=0.0,
        notes=[f"hand-entered: t_v(1)={t_v:.1f} ms, t_d(1)={t_d:.1f} ms, each extra verified token "
               f"+{f:.0%} of t_v(1), flat α"])


def flat_alpha_for_rate(rate: float, gamma: int) -> float:
    """The flat conditional α whose accepted ÷ drafted at this γ equals ``rate``: (τ(α, γ) − 1) / γ = rate.

    Tools report α as accepted ÷ drafted; Leviathan's α is a per-token probability. At γ = 4 a
    reported 0.392 means a per-token α of about 0.66, not 0.392."""
    rate = float(theory.validate_alpha(rate))
    low, high = 0.0, 0.999999
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if (theory.tokens_per_step(mid, gamma) - 1) / gamma < rate else (low, mid)
    return (low + high) / 2


def reference_comparison(fractions=(0.0, 0.05, 0.1, 0.15, 0.2, 0.3), measured_at_gamma: int = 4) -> pd.DataFrame:
    """Predictions for the reference MPS run at its reported γ, under each assumption about the cost
    of verifying γ+1 tokens and two readings of its α = 0.392, next to what it reported.

    Readings: Leviathan's per-token probability, or (what tools print) accepted ÷ drafted measured
    at ``measured_at_gamma``, i.e. a per-token α of ``flat_alpha_for_rate(0.392, γ)``, reused for
    every γ because acceptance per position does not depend on how many positions follow."""
    ref = REFERENCE_MPS
    draft = "Qwen/Qwen2.5-0.5B-Instruct"
    readings = {"per-token α (Leviathan)": ref["alpha"],
                f"accepted ÷ drafted at γ={measured_at_gamma}": flat_alpha_for_rate(ref["alpha"], measured_at_gamma)}
    rows = []
    for gamma, reported in ref["reported_tok_s"].items():
        flops_tok_s = ref["verifier_tok_s"] * float(theory.expected_speedup(
            ref["alpha"], gamma, ref["draft_flops_per_token"] / ref["verifier_flops_per_token"]))
        for reading, alpha in readings.items():
            for f in fractions:
                pred = predict(reference_mps_profile(f, alpha), draft, [gamma], n_boot=20, sims_per_boot=8)
                tok_s = float(pred.table["predicted_tok_s"].iloc[0])
                rows.append({"gamma": gamma, "alpha_reading": reading, "flat_alpha": alpha,
                             "verify_extra_token_fraction": f, "predicted_tok_s": tok_s,
                             "reported_tok_s": reported, "verifier_only_tok_s": ref["verifier_tok_s"],
                             "flops_theory_tok_s": flops_tok_s,
                             "error": (tok_s - reported) / reported,
                             "flops_theory_error": (flops_tok_s - reported) / reported})
    return pd.DataFrame(rows)


def verdict_grid(profile: HardwareProfile, draft: str, alphas=(None,), batch_sizes=(1,), draft_speeds=(1.0,),
                 gammas=range(1, 9)) -> pd.DataFrame:
    """What-if verdicts: recommended γ and best predicted speedup over combinations of a flat α
    (None: as measured), batch size and draft speed-up factor."""
    rows = []
    for alpha in alphas:
        for b in batch_sizes:
            for speed in draft_speeds:
                pred = what_if(profile, draft, alpha, b, speed, gammas)
                rows.append({"alpha": "measured" if alpha is None else f"{alpha:.2f}", "batch_size": b,
                             "draft_speed": speed, "recommended_gamma": pred.recommended_gamma,
                             "best_speedup": pred.predicted_speedup, "break_even_alpha": pred.break_even_alpha})
    return pd.DataFrame(rows)
