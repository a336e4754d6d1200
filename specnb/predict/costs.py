"""The hardware profile: what calibration measured on one machine, as plain JSON, and the cost model.

Cost model (per model m, fitted by least squares on a microbenchmark grid)::

    t_m(n, b) = t0_m + k_m · n · b          ms for one forward of n new tokens in each of b rows

t0 is the fixed dispatch/launch/bandwidth cost, k the per-token compute. Forwards are priced from
the measured points (``CostModel.curve``: one-token forwards apart, all larger ones on a line
through the grid's multi-token points, by tokens in all). The decode grid is
measured on a cache of the context the generation will see (prompt + half the new tokens), so the
attention term is folded into k. Prefill is a second fit of the same form on prompt-length forwards.

A ``HardwareProfile`` holds these for the verifier and each draft, the drafts' acceptance traces
and per-step host overhead: everything ``specnb.predict.predictor`` needs, measured by
``specnb.predict.calibrate``,
saved once (``specnb calibrate --out``) and reused.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from specnb.core.errors import ParameterError
from specnb.measure.acceptance import AcceptanceProfile
from specnb.predict.traces import AcceptanceTrace

PROFILE_FORMAT = "specnb-hardware-profile/3"
# how a draft step is priced (``DraftKind.pricing``, specnb.engine.kinds.kind): its forwards, a fixed
# host time per step, or a host time per drafted token


# ---------------------------------------------------------------------------- cost model


@dataclass(kw_only=True)
class CostModel:
    """t(n, b) = t0_ms + ms_per_token · n · b for one forward of ``n`` tokens in ``b`` rows, and the
    measured medians it was fitted on.

    What ``curve`` prices is not that line but the measured points, read by the tokens a forward
    carries in all (M = n · b): a one-token forward (M = 1) at its own measured time, and every
    larger one on a line through all measured forwards of M ≥ 2, pooled over batch sizes. Why: on
    a CPU the forward of 2 tokens costs far more than 1 more token's worth (matrix-vector products
    become matrix-matrix products, with their packing overhead), a jump that one line through
    1..γ+1 tokens smooths away, and it is exactly the cost of a verification step; past that jump
    2 to 18 tokens cost nearly alike, whichever rows they sit in. Read cell by cell, one noisy
    median (on a shared machine one cell in ten lands 15% off) decides a verification's price;
    pooled, each price rests on every multi-token forward of the grid.
    """

    t0_ms: float
    ms_per_token: float
    r2: float = float("nan")
    n_points: int = 0
    measured: list = field(default_factory=list)  # [[n_tokens, batch_size, median_ms], ...]

    def curve(self, batch_size=1) -> Callable[[np.ndarray], np.ndarray]:
        """ms per forward as a function of n at one batch size (the simulation calls it every step)."""
        one, multi = self.pieces()

        def ms(n_tokens):
            tokens = np.asarray(n_tokens, dtype=float) * batch_size  # M = n · b
            return np.where(tokens <= 1, one, multi[0] + multi[1] * tokens)

        return ms

    def pieces(self) -> tuple[float, tuple[float, float]]:
        """(ms of a one-token forward, (intercept, slope) of a robust line over the forwards of M ≥ 2
        tokens); the fitted line stands in for a piece the grid has too few points for."""
        rows = np.array(self.measured, dtype=float).reshape(-1, 3)
        tokens, ms = rows[:, 0] * rows[:, 1], rows[:, 2]
        one = float(np.median(ms[tokens == 1])) if (tokens == 1).any() else self.t0_ms + self.ms_per_token
        many = tokens >= 2
        if len(np.unique(tokens[many])) < 2:
            return one, (self.t0_ms, self.ms_per_token)
        return one, theil_sen(tokens[many], ms[many])

    def forward_ms(self, n_tokens, batch_size=1):
        return self.curve(batch_size)(n_tokens)


def theil_sen(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(intercept, slope ≥ 0) of the Theil-Sen line: the median slope over all pairs of points, the
    median intercept given it. Why not least squares: a cell timed in a slow spell sits at the edge
    of the range as often as not, where least squares lets it tilt the whole line."""
    i, j = np.triu_indices(len(x), 1)
    apart = x[j] != x[i]
    slope = max(float(np.median((y[j] - y[i])[apart] / (x[j] - x[i])[apart])), 0.0)
    return float(np.median(y - slope * x)), slope


def fit_cost_model(grid: pd.DataFrame) -> CostModel:
    """Least squares of ``median_ms`` on tokens × batch (columns n_tokens, batch_size, median_ms)."""
    from specnb.measure.forward import fit_line

    x = (grid["n_tokens"] * grid["batch_size"]).to_numpy(dtype=float)
    if len(np.unique(x)) < 2:
        raise ParameterError("a cost model needs forwards of at least two sizes (n_tokens × batch_size); "
                             f"got {sorted(set(x))}")
    t0, k, r2 = fit_line(x, grid["median_ms"])
    measured = grid[["n_tokens", "batch_size", "median_ms"]].to_numpy(dtype=float).tolist()
    return CostModel(t0_ms=t0, ms_per_token=max(k, 0.0), r2=r2, n_points=len(x), measured=measured)


# ---------------------------------------------------------------------------- hardware profile


@dataclass(kw_only=True)
class DraftCosts:
    """What a draft costs: the cost models of the forwards it runs (``FORWARDS``: a model, an EAGLE
    draft), or host time per step (``PER_STEP``: prompt lookup) or per drafted token (``PER_TOKEN``:
    Medusa heads, whose proposing is a few matrix products on the verifier's feature)."""

    kind: str  # FORWARDS, PER_STEP or PER_TOKEN
    decode: CostModel | None
    prefill: CostModel | None
    flops_per_token: float  # for the FLOPs-c Leviathan comparison (0 for lookup)
    step_ms: float = 0.0  # PER_STEP: host time to propose, per step; PER_TOKEN: per drafted token
    catch_up: str = "tokens"  # width of a step's first forward: "tokens" (1 or 2) or "features" (accepted + 1)


@dataclass(kw_only=True)
class HardwareProfile:
    """Everything ``predict`` needs, as plain JSON (``save_profile`` / ``load_profile``)."""

    verifier: str
    device: str
    machine: dict
    verifier_decode: CostModel
    verifier_prefill: CostModel
    verifier_flops_per_token: float
    drafts: dict[str, DraftCosts]
    acceptance: dict[str, AcceptanceProfile]  # per-position report, replayed at the calibration γ
    traces: dict[str, list[AcceptanceTrace]]  # what the simulation replays
    overhead_ms: dict[str, float]  # "verifier-only": per token; a draft name: per speculative step
    max_new_tokens: int
    prompt_tokens: float
    grid: list[dict] = field(default_factory=list)
    prompts: str = ""
    created_utc: str = ""
    specnb_version: str = ""
    notes: list[str] = field(default_factory=list)


def cost_model_table(profile: HardwareProfile) -> pd.DataFrame:
    """One row per (model, decode or prefill) cost model of a profile: t0_ms, ms_per_token, r2, points."""
    rows = [{"model": profile.verifier, "kind": "decode", **vars(profile.verifier_decode)},
            {"model": profile.verifier, "kind": "prefill", **vars(profile.verifier_prefill)}]
    rows += [{"model": name, "kind": kind, **vars(getattr(cost, kind))}
             for name, cost in profile.drafts.items() if cost.decode for kind in ("decode", "prefill")]
    return pd.DataFrame(rows)


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
    drafts = {name: DraftCosts(kind=d["kind"], decode=d["decode"] and CostModel(**d["decode"]),
                               prefill=d["prefill"] and CostModel(**d["prefill"]),
                               flops_per_token=float(d["flops_per_token"]), step_ms=float(d.get("step_ms", 0.0)),
                               catch_up=d.get("catch_up", "tokens"))
              for name, d in data["drafts"].items()}
    acceptance = {name: AcceptanceProfile(**a) for name, a in data["acceptance"].items()}
    traces = {name: [AcceptanceTrace(**t) for t in ts] for name, ts in data["traces"].items()}
    fields = {k: v for k, v in data.items() if k not in ("format", "drafts", "acceptance", "traces")}
    profile = HardwareProfile(**{**fields, "drafts": drafts, "acceptance": acceptance, "traces": traces,
                                 "verifier_decode": CostModel(**data["verifier_decode"]),
                                 "verifier_prefill": CostModel(**data["verifier_prefill"])})
    for name, a in acceptance.items():
        if len(a.reached) != a.gamma or len(a.accepted) != a.gamma:
            raise ValueError(f"acceptance of {name!r} has {len(a.reached)} positions, gamma {a.gamma}")
    return profile
