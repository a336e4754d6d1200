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
from specnb.measure.forward import fit_line
from specnb.models.kernels import KernelChoice
from specnb.predict.traces import AcceptanceTrace

PROFILE_FORMAT = "specnb-hardware-profile/4"  # 4: kernel choices record the rows each model sends to oneDNN
# how a draft step is priced (``DraftKind.pricing``, specnb.decode.kinds.kind): its forwards, a fixed
# host time per step, or a host time per drafted token


# ---------------------------------------------------------------------------- cost model


@dataclass(kw_only=True)
class CostModel:
    """t(n, b) = t0_ms + ms_per_token · n · b for one forward of ``n`` tokens in ``b`` rows, and the
    measured medians it was fitted on.

    What ``curve`` prices is not that line but the measured points, read by the tokens a forward
    carries in all (M = n · b), one piece per kernel: the row counts from each of ``breaks`` to the
    next run one kernel (``specnb.models.kernels.route_breaks``), so each piece is priced on its own
    — one measured point at its median, several on a robust line through them, pooled over batch
    sizes. M = 1 is always a piece of its own (2 is always a break). Why: on a CPU the forward of 2
    tokens costs far more than 1 more token's worth on MKL (matrix-vector products become
    matrix-matrix products, with their packing overhead), and where a model sends some row counts
    to oneDNN and others to MKL (``kernels="auto"`` on a mixed path: on the AMD EPYC one day oneDNN
    for 1 and 4+ rows, MKL's GEMM for 2–3) verifying 2 tokens cost 1.9x one token and 4 tokens 1.0x;
    one line through every M ≥ 2 priced both at 1.2x and over-predicted γ = 1 by half. Within one
    kernel 2 to 18 tokens cost nearly alike, so pooling a piece's points keeps one noisy median (on
    a shared machine one cell in ten lands 15% off) from deciding a verification's price. A piece
    the grid has no point in is priced on the line through every M ≥ 2.
    """

    t0_ms: float
    ms_per_token: float
    r2: float = float("nan")
    n_points: int = 0
    measured: list = field(default_factory=list)  # [[n_tokens, batch_size, median_ms], ...]
    breaks: list = field(default_factory=lambda: [2])  # first M of each piece after M = 1

    def curve(self, batch_size=1) -> Callable[[np.ndarray], np.ndarray]:
        """ms per forward as a function of n at one batch size (the simulation calls it every step)."""
        starts, lines = self.pieces()
        intercepts, slopes = np.array([a for a, _ in lines]), np.array([b for _, b in lines])

        def ms(n_tokens):
            tokens = np.asarray(n_tokens, dtype=float) * batch_size  # M = n · b
            piece = np.searchsorted(starts, tokens, side="right") - 1
            return intercepts[piece] + slopes[piece] * tokens

        return ms

    def pieces(self) -> tuple[np.ndarray, list[tuple[float, float]]]:
        """(first M of each piece: 1 and the breaks, [(intercept, slope) per piece]): a piece's one
        measured M at its median (slope 0), several on a Theil-Sen line; a piece without points on
        the line over all M ≥ 2 (or the fitted line when the grid has fewer than two such M)."""
        rows = np.array(self.measured, dtype=float).reshape(-1, 3)
        tokens, ms = rows[:, 0] * rows[:, 1], rows[:, 2]
        many = tokens >= 2
        fallback = ((self.t0_ms, self.ms_per_token) if len(np.unique(tokens[many])) < 2
                    else theil_sen(tokens[many], ms[many]))
        starts = np.array([1.0, *sorted({float(b) for b in self.breaks if b > 1} | {2.0})])
        ends = [*starts[1:], np.inf]
        lines = []
        for lo, hi in zip(starts, ends):
            inside = (tokens >= lo) & (tokens < hi)
            distinct = np.unique(tokens[inside])
            if len(distinct) >= 2:
                lines.append(theil_sen(tokens[inside], ms[inside]))
            elif len(distinct) == 1:
                lines.append((float(np.median(ms[inside])), 0.0))
            else:
                lines.append(fallback)
        return starts, lines

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


def fit_cost_model(grid: pd.DataFrame, breaks=(2,)) -> CostModel:
    """Least squares of ``median_ms`` on tokens × batch (columns n_tokens, batch_size, median_ms);
    ``breaks``: where the model's kernel changes with the row count (``CostModel``)."""
    x = (grid["n_tokens"] * grid["batch_size"]).to_numpy(dtype=float)
    if len(np.unique(x)) < 2:
        raise ParameterError("a cost model needs forwards of at least two sizes (n_tokens × batch_size); "
                             f"got {sorted(set(x))}")
    t0, k, r2 = fit_line(x, grid["median_ms"])
    measured = grid[["n_tokens", "batch_size", "median_ms"]].to_numpy(dtype=float).tolist()
    return CostModel(t0_ms=t0, ms_per_token=max(k, 0.0), r2=r2, n_points=len(x), measured=measured,
                     breaks=[int(b) for b in breaks])


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


def priced_paths(profile: HardwareProfile) -> dict[str, str]:
    """Model name -> the kernel path its costs were measured on (``specnb.models.kernels.spans_label``)."""
    return {name: KernelChoice.from_dict(c).label() for name, c in profile.machine.get("kernels", {}).items()}


def path_mismatches(profile: HardwareProfile, kernels: dict[str, dict]) -> list[str]:
    """What a loaded pair runs (``Pair.kernels``) that the profile did not price: one "model: priced
    X, runs Y" per model both know of whose path differs. Why it matters: on an AMD EPYC verifying 2
    tokens on oneDNN costs 0.77x one token on MKL; a profile priced on one path predicts for
    another a speedup the run does not get."""
    priced = priced_paths(profile)
    runs = {name: KernelChoice.from_dict(c).label() for name, c in kernels.items()}
    return [f"{name}: priced {priced[name]}, runs {runs[name]}" for name in runs
            if name in priced and priced[name] != runs[name]]


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
