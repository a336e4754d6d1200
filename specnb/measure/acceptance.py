"""What a run's acceptance was, position by position: the one home of "reached" and per-token α.

A draft position i is *reached* in a step when the step drafted it and accepted every earlier
position. Two acceptance rates follow from the counts:

- α = accepted ÷ drafted (vLLM's "draft acceptance rate", the summaries' ``alpha``); it falls with γ
  even when every position is accepted with the same probability, because positions after a
  rejection are drafted but never get a chance;
- per-token α = accepted ÷ reached, the probability in Leviathan et al.'s formula, flat in γ when
  acceptance does not depend on the position (``alpha_token``).

``AcceptanceProfile`` keeps the counts per position, pooled and per prompt, as vLLM's spec-decode
metrics and Chen et al. 2023 report them. Run records (``specnb.measure.runs``) carry
``accepted_by_position`` and ``drafted_by_position``; everything here derives from those.

A serving engine reports only counters (vLLM's ``spec_decode_num_drafts``, ``…num_draft_tokens``,
``…num_accepted_tokens``, ``…num_accepted_tokens_per_pos``; llama.cpp's under the same names):
``counter_rates`` turns them into α, τ and the per-position rate, as vLLM's
``v1/spec_decode/metrics.py`` does, here and nowhere else. SGLang has no such counters: per request
it may return ``meta_info.spec_verify_ct`` (verification steps), and its Prometheus endpoint has two
*gauges*, ``sglang:spec_accept_length`` and ``sglang:spec_accept_rate``, each the average over its
scheduler's last logging window. A gauge cannot be differenced around a run, so it is read as is
after the run and used only where nothing countable was returned (``CounterRates.source`` says
which source each figure came from).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from specnb.core.errors import ParameterError


@dataclass(kw_only=True)
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

    def to_frame(self) -> pd.DataFrame:
        cond = self.conditional()
        return pd.DataFrame({"position": np.arange(1, self.gamma + 1), "reached": self.reached,
                             "accepted": self.accepted, "conditional_rate": cond,
                             "rate": np.cumprod(cond)})


@dataclass(kw_only=True)
class CounterRates:
    """Acceptance from a serving engine's counters: α = accepted ÷ draft tokens; τ = 1 + accepted ÷
    drafts (mean tokens per verification step, bonus token included: vLLM's mean acceptance length);
    ``per_position[i]`` = steps that accepted position i + 1 ÷ drafts (vLLM's per-position rate,
    unconditional: it falls with i even at a flat per-token α). ``source``: "counters", "verify
    counts" (τ from per-request verification steps), "gauges" (SGLang's windowed averages) or ""."""

    alpha: float
    tau: float
    per_position: list[float]
    source: str = ""


@dataclass(frozen=True, kw_only=True)
class Fallback:
    """What an engine without a drafts counter (SGLang) reports instead: ``verify_steps`` and the
    ``verified_tokens`` of the requests that returned them, and ``gauges`` = (accept rate, accept
    length) as the engine averaged them (NaN: none)."""

    verify_steps: float = 0.0
    verified_tokens: float = 0.0
    gauges: tuple[float, float] = (math.nan, math.nan)


def counter_rates(drafts: float, draft_tokens: float, accepted: float, accepted_per_pos=(),
                  fallback: Fallback = Fallback()) -> CounterRates:
    """α, τ and the per-position rate from (differenced) spec-decode counters; NaN where nothing was drafted.

    Without a drafts counter (SGLang), τ = ``verified_tokens`` ÷ ``verify_steps`` (``fallback``):
    output tokens over verification steps of the requests that reported them (SGLang's accept length,
    bonus token included), and α only where draft and accepted token counts came back. Where neither
    came back, the ``gauges`` as the engine reported them, never derived."""
    nan = math.nan
    verify_steps, verified_tokens, gauges = fallback.verify_steps, fallback.verified_tokens, fallback.gauges
    if drafts:
        return CounterRates(alpha=accepted / draft_tokens if draft_tokens else nan, tau=1 + accepted / drafts,
                            per_position=[a / drafts for a in accepted_per_pos], source="counters")
    alpha = accepted / draft_tokens if draft_tokens else nan
    if verify_steps:
        return CounterRates(alpha=alpha, tau=verified_tokens / verify_steps, per_position=[], source="verify counts")
    if not all(math.isnan(g) for g in gauges):
        return CounterRates(alpha=gauges[0] if math.isnan(alpha) else alpha, tau=gauges[1], per_position=[],
                            source="gauges")
    return CounterRates(alpha=alpha, tau=nan, per_position=[nan for _ in accepted_per_pos],
                        source="counters" if draft_tokens else "")


MIN_EVENTS = 5  # a rate from fewer events is shown with its count and interval, and decides nothing alone


def rate_interval(accepted, reached, z: float = 1.96) -> tuple[np.ndarray, np.ndarray]:
    """Wilson's 95% interval of accepted ÷ reached (per position): honest at 3 of 3, where the plain
    rate says 1.0 and the interval says 0.44–1; NaN where nothing was reached."""
    k, n = np.asarray(accepted, float), np.asarray(reached, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = k / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return np.clip(centre - half, 0, 1), np.clip(centre + half, 0, 1)


def supported_rates(profile: AcceptanceProfile, gamma: int) -> np.ndarray:
    """a_1..a_gamma to price a γ with: a position's own rate where it was reached at least
    ``MIN_EVENTS`` times, else (and past the profile's γ) the pooled per-token α of the positions that
    were, so one 3-of-3 position cannot pick a γ (all positions pooled where none was)."""
    reached, accepted = np.asarray(profile.reached, float), np.asarray(profile.accepted, float)
    enough = reached >= MIN_EVENTS
    pooled = accepted[enough].sum() / reached[enough].sum() if enough.any() else profile.alpha_iid()
    own = profile.conditional()
    return np.array([own[i] if i < len(own) and enough[i] else pooled for i in range(gamma)])


def rates(accepted: np.ndarray, reached: np.ndarray) -> np.ndarray:
    """accepted ÷ reached per position; positions never reached repeat the previous rate (0 at first)."""
    out = np.zeros(len(reached))
    for i, (a, r) in enumerate(zip(accepted, reached)):
        out[i] = a / r if r > 0 else (out[i - 1] if i else 0.0)
    return np.clip(out, 0.0, 1.0)


def counts_from_positions(accepted_by_position, drafted_by_position) -> tuple[list[int], list[int]]:
    """(reached, accepted) per position from a record's per-position counts.

    reached_i = min(accepted_{i-1}, drafted_i): a step reaches position i when it accepted i − 1
    and drafted i (drafts shrink only in the last steps, so the min is exact but for those).
    """
    acc = [int(a) for a in accepted_by_position]
    drafted = [int(d) for d in drafted_by_position]
    reached = [drafted[0]] + [min(acc[i - 1], drafted[i]) for i in range(1, len(acc))] if acc else []
    return reached, acc


def reached_total(records: pd.DataFrame) -> int:
    """Draft positions reached over a set of records."""
    return int(sum(sum(counts_from_positions(a, d)[0])
                   for a, d in zip(records["accepted_by_position"], records["drafted_by_position"])))


def token_alpha(records: pd.DataFrame) -> float:
    """Per-token α over a set of records: accepted ÷ positions reached (NaN when none was reached)."""
    if "accepted_by_position" not in records:
        return float("nan")
    reached = reached_total(records)
    return float(records["accepted"].sum() / reached) if reached else float("nan")


def token_alpha_by_candidate(records: pd.DataFrame) -> pd.DataFrame:
    """Per speculative candidate and batch size: accepted, reached and the per-token α."""
    records = pd.DataFrame(records)
    rows = []
    for (name, batch_size), group in records[records["gamma"] > 0].groupby(["candidate", "batch_size"], sort=False):
        reached = reached_total(group)
        accepted = int(group["accepted"].sum())
        rows.append({"candidate": name, "batch_size": int(batch_size), "accepted": accepted, "reached": reached,
                     "alpha_token": accepted / reached if reached else float("nan")})
    return pd.DataFrame(rows, columns=["candidate", "batch_size", "accepted", "reached", "alpha_token"])


def token_alpha_by_draft(records: pd.DataFrame) -> pd.DataFrame:
    """Per draft, pooled over its γs (batch sizes as given): accepted ÷ positions reached, the i.i.d. α
    break-even curves are drawn in (accepted ÷ drafted is lower: at γ = 4 an α of 0.66 shows as 0.39)."""
    records = pd.DataFrame(records)
    drafts = records[records["gamma"] > 0][["candidate", "draft"]].drop_duplicates("candidate")
    sums = token_alpha_by_candidate(records).merge(drafts, on="candidate").groupby("draft", sort=False)[
        ["accepted", "reached"]].sum()
    sums["alpha_token"] = sums["accepted"] / sums["reached"].where(sums["reached"] > 0)
    return sums.reset_index()


def profile_from_records(records: pd.DataFrame, draft: str) -> AcceptanceProfile:
    """The acceptance profile of one draft from run records, at its largest γ."""
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
    return pooled_profile(gamma, per_prompt)


def flat_profile(alpha: float, gamma: int = 8) -> AcceptanceProfile:
    """An i.i.d. profile (every a_i = α exactly), as 1000 pseudo-steps per position."""
    return AcceptanceProfile(gamma=gamma, reached=[1000] * gamma, accepted=[round(1000 * alpha)] * gamma)


def pooled_profile(gamma: int, per_prompt: list[dict]) -> AcceptanceProfile:
    reached = np.sum([p["reached"] for p in per_prompt], axis=0).astype(int).tolist()
    accepted = np.sum([p["accepted"] for p in per_prompt], axis=0).astype(int).tolist()
    return AcceptanceProfile(gamma=gamma, reached=reached, accepted=accepted, per_prompt=per_prompt)


def profile_frames(profiles: dict[str, AcceptanceProfile]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(pooled, per prompt) tidy frames of several drafts' profiles: one row per (draft, position), and
    per (draft, prompt, position) where that position was reached."""
    pooled = pd.concat([a.to_frame().assign(draft=name) for name, a in profiles.items()], ignore_index=True)
    per_prompt = pd.DataFrame([{"draft": name, "prompt_id": p["prompt_id"], "position": i + 1, "reached": r,
                                "accepted": acc, "conditional_rate": acc / r}
                               for name, a in profiles.items() for p in a.per_prompt
                               for i, (r, acc) in enumerate(zip(p["reached"], p["accepted"])) if r > 0])
    return pooled, per_prompt


def accept_lengths(records: pd.DataFrame, gamma: int, draft: str | None = None) -> pd.DataFrame:
    """Share of verifier steps at one γ (of one ``draft``: records of several drafts at that γ are
    refused, their steps are not one distribution) that accepted n = 0..γ draft tokens
    (``measured``), and what i.i.d. acceptance at the records' per-token α would give (``iid``: stop
    at the first rejection). Mass at 0 is why τ saturates as γ grows."""
    rows = records[records["gamma"] == gamma]
    rows = rows if draft is None else rows[rows["draft"] == draft]
    if "draft" in rows and rows["draft"].nunique() > 1:
        raise ParameterError(f"accept_lengths at γ = {gamma}: records of {rows['draft'].nunique()} drafts "
                             f"({', '.join(map(str, rows['draft'].unique()))}) would pool into one; name the draft")
    lengths = np.array([n for row in rows["accept_lengths"] for n in row], dtype=int)
    counts = np.bincount(lengths, minlength=gamma + 1)[:gamma + 1] if len(lengths) else np.zeros(gamma + 1)
    alpha = min(token_alpha(rows), 1.0) if len(rows) else float("nan")
    alpha = 0.0 if not np.isfinite(alpha) else alpha
    iid = [alpha ** n * (1 - alpha) for n in range(gamma)] + [alpha ** gamma]
    frame = pd.DataFrame({"accepted": np.arange(gamma + 1), "measured": counts / max(counts.sum(), 1), "iid": iid})
    frame.attrs["alpha_token"] = alpha
    return frame
