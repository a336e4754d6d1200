"""The policy that follows from a serving sweep: per load, whether to speculate and with which k,
as ranges a launch takes.

The policy (``serving_policy``): per concurrency level the configuration (of those measured) with the
best TPOT speedup above 1 whose lower 95% bound is at least ``POLICY_FLOOR``, else none — as vLLM's
``num_speculative_tokens_per_batch_size`` and as llama-server flags. A policy is held against the
best static configuration at each level, so it follows the best point estimate; the floor keeps out
one whose interval admits a loss of more than 5%. The one launch a server running one method is
given for it is ``serving_launch``'s.

**A policy that knows its noise** (``noise_aware.noise_aware_policy``, what ``serving_policy`` runs
given the sweep's records from at least 3 rounds): the median over rounds, ties and too-noisy
measurements to the cheaper configuration, as vLLM's proposed ``tune_speculative_k`` (PR #49163).

**Ranges keyed on the engine's batch** (``batch_ranges``): vLLM looks k up by the scheduler's running
batch, not by how many requests a client keeps in flight, and the load is what decides whether
speculation pays — acceptance is not a load signal (vllm#26504). So a noise-aware policy carries each
level's measured mean batch (``serving_rounds.batch_of``: ``mean_batch``, else the level) and its
ranges change k where the two choices' speedups cross, each interpolated in log batch between the
measured batches (``with_cuts``, the ``cut`` column), from a batch-1 anchor (required) to the largest
measured batch (reported: above it nothing is extrapolated, the last choice holds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pandas as pd

from specnb.core.errors import ParameterError
from specnb.measure.serving_stats import draft_lengths
from specnb.predict.noise_aware import MIN_ROUNDS, noise_aware_policy
from specnb.predict.policy_record import Policy, PolicyLevel, policy_of
from specnb.predict.serving_predictor import require_steps
from specnb.serve.speculation import BASELINE_CONFIG, NOT_CANDIDATES, Launch

POLICY_FLOOR = 0.95  # the lowest lower 95% bound of a TPOT speedup the policy will run
BATCH_ONE = 1.5  # a level whose measured batch is at most this is the batch-1 anchor
MAX_BATCH = 4096  # the last range of a launch runs to this batch size


def serving_policy(summary: pd.DataFrame, lengths: dict[str, int] | None = None, baseline: str = BASELINE_CONFIG,
                   records: pd.DataFrame | None = None) -> Policy:
    """Per measured level: the configuration to run, its draft length k (0 for spec-off; ``lengths``
    default: as the records carry them, ``draft_lengths``) and the speedup it stands on.

    Given the sweep's ``records`` from at least ``MIN_ROUNDS`` rounds: ``noise_aware_policy`` (the
    median over rounds, ties and noisy levels to the cheaper configuration, ranges on the engine's
    batch). Otherwise — no records, or fewer rounds, one noisy figure per level — the rule from the
    summary alone: the best TPOT speedup above 1 whose lower CI bound is at least ``POLICY_FLOOR``,
    else spec-off, keyed on the concurrency. Either way each level after the first carries the load
    its range starts at (``with_cuts``: where the two choices' speedups cross)."""
    if records is not None and {"success", "round"} <= set(records.columns) and \
            records.loc[records["success"], "round"].nunique() >= MIN_ROUNDS:
        return with_cuts(noise_aware_policy(records, summary, lengths, baseline), summary, baseline)
    require_steps(summary)
    lengths = draft_lengths(summary) if lengths is None else lengths
    rows = []
    for level, group in summary[~summary["config"].isin([baseline, *NOT_CANDIDATES])].groupby("concurrency"):
        paying = group[(group["speedup_tpot"] > 1.0) & (group["speedup_tpot_lo"] >= POLICY_FLOOR)]
        if paying.empty:
            rows.append({"concurrency": level, "config": baseline, "k": 0, "speedup_tpot": 1.0})
            continue
        best = paying.sort_values("speedup_tpot").iloc[-1]
        rows.append({"concurrency": level, "config": best["config"], "k": lengths.get(best["config"], 0),
                     "speedup_tpot": float(best["speedup_tpot"])})
    return with_cuts(policy_of(pd.DataFrame(rows), "concurrency"), summary, baseline)


def speedups_of(summary: pd.DataFrame, baseline: str = BASELINE_CONFIG,
                zero: pd.Series | None = None) -> dict[tuple[str, float], float]:
    """(configuration, level) → its measured TPOT speedup; ``baseline``'s is 1.00, or, in a launch whose
    k = 0 ranges are priced (``zero``: per level), that range's."""
    rows = summary[~summary["config"].isin([baseline, *NOT_CANDIDATES])]
    out = dict(zip(zip(rows["config"], rows["concurrency"]), rows["speedup_tpot"])) if "speedup_tpot" in rows else {}
    levels = summary["concurrency"].unique()
    return out | {(baseline, level): 1.0 if zero is None else float(zero[level]) for level in levels}


def crossing(loads: tuple[float, float], gaps: tuple[float, float]) -> float:
    """Where one choice's speedup minus the next one's, ``gaps`` at the two ``loads``, reaches 0, the
    gap linear in log load: from there the next choice is the faster. The geometric mean of the loads
    where the gap does not change sign (a tie kept by the cheaper, a noisy level, a speedup not
    measured): no crossing was measured between them."""
    (a, b), (g0, g1) = loads, gaps
    frac = g0 / (g0 - g1) if g0 >= 0 >= g1 and g0 > g1 else 0.5  # NaN fails every comparison
    return float(math.exp(math.log(a) + frac * (math.log(b) - math.log(a))))


def with_cuts(policy: Policy, summary: pd.DataFrame, baseline: str = BASELINE_CONFIG,
              zero: pd.Series | None = None) -> Policy:
    """``policy`` with ``cut``: per level after the first, the load (on ``policy.keyed_on``: the
    measured batch or the concurrency) where its range starts — where the previous level's choice and
    its own cross, each one's measured speedup at both levels interpolated in log load (``crossing``);
    NaN on the first. ``zero``: the k = 0 range's speedup per level, for a launch's table (spec-off's
    is 1.00)."""
    if not policy.levels:
        return policy
    key = policy.keyed_on
    order = sorted(range(len(policy)), key=lambda i: policy.levels[i].load(key))
    rows = [policy.levels[i] for i in order]
    speed = speedups_of(summary, baseline, zero)
    at = lambda config, level: speed.get((config, level), math.nan)  # noqa: E731
    cuts = [math.nan] + [crossing((float(a.load(key)), float(b.load(key))),
                                  (at(a.config, a.concurrency) - at(b.config, a.concurrency),
                                   at(a.config, b.concurrency) - at(b.config, b.concurrency)))
                         for a, b in zip(rows[:-1], rows[1:])]
    cut_of = dict(zip(order, cuts))
    columns = policy.columns if "cut" in policy.columns else (*policy.columns, "cut")
    return policy.with_levels((replace(level, cut=cut_of[i]) for i, level in enumerate(policy.levels)), columns)


def without_cuts(policy: Policy) -> Policy:
    """``policy`` without its ``cut`` column: its ranges start halfway in log load (``level_cuts``)
    until ``with_cuts`` prices them again."""
    return policy.with_levels((replace(level, cut=math.nan) for level in policy.levels),
                              tuple(c for c in policy.columns if c != "cut"))


@dataclass(frozen=True, kw_only=True)
class BatchRanges:
    """A batch-keyed policy as vLLM's ``num_speculative_tokens_per_batch_size`` takes it, and what it
    rests on. ``ranges``: inclusive [first, last, k] over batch sizes from 1 to the launch's largest;
    ``measured``: the measured batches, ascending; ``interpolated``: [first, last] spans of batch
    sizes up to the largest measured one that no level measured (each takes the k of the measured
    batch nearer in log); ``max_measured``: the largest measured batch, above which nothing was
    measured and the last measured choice holds."""

    ranges: list[list[int]]
    measured: list[float]
    interpolated: list[list[int]]
    max_measured: float
    max_batch: int

    def text(self) -> str:
        """One line a notebook prints under the schedule: where its k is read between measurements,
        and above which batch it is not measured at all."""
        spans = ", ".join(f"{lo}" if lo == hi else f"{lo}–{hi}" for lo, hi in self.interpolated)
        between = (f"batch sizes {spans} were never measured (each takes the k of the measured batch nearer in log); "
                   if spans else "")
        return (f"{between}not measured above a batch of {self.max_measured:.3g}: the last measured choice holds "
                f"from there to {self.max_batch}")


def level_cuts(levels: list[PolicyLevel], key: str) -> list[float]:
    """Per level after the first (``levels`` sorted on the load ``key``), the load its range starts
    at: its ``cut`` (``with_cuts``: where the speedups cross), else — a policy made without the summary
    — the geometric mean of the two loads (``crossing`` with nothing measured)."""
    at = [float(level.load(key)) for level in levels]
    given = [float(level.cut) for level in levels[1:]]
    return [c if not math.isnan(c) else crossing((a, b), (math.nan, math.nan))
            for a, b, c in zip(at[:-1], at[1:], given)]


def level_spans(policy: Policy, max_batch: int = 4096) -> list[tuple[int, int, int, str]]:
    """(first, last, k, config) per level over batch sizes, unmerged: each level's from where its
    speedup crosses the previous level's choice (``level_cuts``) to the next cut − 1, the last to
    ``max_batch``. Keyed on the measured batch (``policy.keyed_on``, a noise-aware policy: the first
    from 1, ``batch_ranges``), else on the concurrency (the summary-only rule: the first from its level)."""
    key = policy.keyed_on
    levels = policy.by_load()
    cuts = [math.ceil(c - 1e-9) for c in level_cuts(levels, key)]
    starts = [1 if key == "batch" else int(levels[0].load(key)), *cuts]
    ends = [c - 1 for c in cuts] + [max_batch]
    return [(lo, hi, int(level.k), level.config) for lo, hi, level in zip(starts, ends, levels) if lo <= hi]


def merged(spans: list[tuple[int, int, int, str]]) -> list[list[int]]:
    """[first, last, k] ranges, adjacent spans with the same k joined."""
    ranges = []
    for lo, hi, k, _ in spans:
        if ranges and ranges[-1][2] == k:
            ranges[-1][1] = hi
        else:
            ranges.append([lo, hi, k])
    return ranges


def batch_ranges(policy: Policy, max_batch: int = 4096) -> BatchRanges:
    """A noise-aware policy's ranges over the engine's batch (its levels' ``batch``): k changes where
    adjacent choices' speedups cross between measured batches (``level_spans``), the first range
    starts at 1 and the last measured choice holds beyond the largest measured batch (reported, not
    extrapolated: ``max_measured``). Refused (ParameterError) without a batch-1 anchor, a level whose
    measured batch is at most ``BATCH_ONE`` (PR #49163 requires one: below the smallest measured
    batch nothing says what pays)."""
    batches = sorted(float(level.batch) for level in policy.levels)
    if not batches or not 0 < batches[0] <= BATCH_ONE:
        smallest = f"{batches[0]:.3g}" if batches else "none"
        raise ParameterError(f"a policy needs a batch-1 anchor: a level whose measured batch is at most {BATCH_ONE} "
                             f"(the smallest here: {smallest}); sweep concurrency 1 as well")
    measured = {round(b) for b in batches}
    top = max(1, round(batches[-1]))
    gaps = [b for b in range(1, top + 1) if b not in measured]
    return BatchRanges(ranges=merged(level_spans(policy, max_batch)), measured=batches, interpolated=runs_of(gaps),
                       max_measured=batches[-1], max_batch=max_batch)


def runs_of(values: list[int]) -> list[list[int]]:
    """Ascending integers as [first, last] runs of consecutive ones."""
    runs = []
    for v in values:
        if runs and runs[-1][1] == v - 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return runs


def policy_ranges(policy: Policy, max_batch: int = 4096) -> list[list[int]]:
    """[[first, last, k], ...] over batch sizes (vLLM's ``num_speculative_tokens_per_batch_size``
    shape). A policy keyed on the measured batch (``noise_aware_policy``): ``batch_ranges``' ranges,
    from 1. One keyed on the concurrency (the summary-only rule): from its first level. Either way k
    changes where adjacent choices' speedups cross (``level_spans``), the last level's holding to
    ``max_batch``."""
    if policy.keyed_on == "batch":
        return batch_ranges(policy, max_batch).ranges
    return merged(level_spans(policy, max_batch))


def scheduled_config(policy: Policy, batch: float, max_batch: int = 4096) -> str:
    """The configuration a launch of ``policy``'s ranges runs at a running batch of ``batch`` (the
    level whose span holds it; below the first span the first level's, above the last the last's)."""
    spans = level_spans(policy, max_batch)
    b = int(round(batch))
    return next((config for lo, hi, _, config in spans if lo <= b <= hi), spans[0][3] if b < spans[0][0] else
                spans[-1][3])


def policy_switch(policy: Policy) -> float:
    """The load where the policy stops speculating: where its range after its last level that drafts
    starts (``level_cuts``: where their speedups cross); where it drafts at every level, where its k
    first falls (a schedule of k alone, e.g. 4 at low load and 1 above); NaN where neither happens (it
    never drafts, or drafts one k throughout). The load is the one the policy is keyed on
    (``policy.keyed_on``: the measured batch of a noise-aware policy, else the concurrency)."""
    levels = policy.by_load()
    ks = [level.k for level in levels]
    falls = [i for i in range(1, len(ks)) if ks[i] < ks[i - 1]]
    i = next((i for i in falls if ks[i] == 0), falls[0] if falls and all(ks) else None)
    return math.nan if i is None else float(level_cuts(levels, policy.keyed_on)[i - 1])


def as_launch(policy: Policy, family: str, draft: str) -> Launch:
    """A policy as the ``Launch`` record engines print: its ranges, the configuration each k comes
    from (the first level, by concurrency, that chose it)."""
    by_k = {int(level.k): level.config for level in sorted(policy.levels, key=lambda level: level.concurrency)[::-1]}
    return Launch(ranges=tuple(tuple(r) for r in policy_ranges(policy)), by_k=by_k, family=family, draft=draft)
