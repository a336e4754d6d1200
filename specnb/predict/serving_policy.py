"""The policy that follows from a serving sweep: per load, whether to speculate and with which k,
and the one launch an engine is given for it.

The policy (``serving_policy``): per concurrency level the configuration (of those measured) with the
best TPOT speedup above 1 whose lower 95% bound is at least ``POLICY_FLOOR``, else none — as vLLM's
``num_speculative_tokens_per_batch_size`` and as llama-server flags. A policy is held against the
best static configuration at each level, so it follows the best point estimate; the floor keeps out
one whose interval admits a loss of more than 5%. A vLLM server runs one method, and a schedule's
k = 0 range is not spec-off for any method: the step still goes through the speculative path (the
proposer is called, a draft model's or head's first forward runs, the scheduler and sampler take
their speculative branches). ``zero_range_speedup`` prices it at the method's own step cost δ(b),
which is what an all-zero schedule measured against spec-off (``benchmarks/vllm_k0.py``);
``launch_policy`` drafts instead at a level where the method's measured speedup beats that, each
side judged with its own 95% CI (``zero_range_ci``: the calibration's; ``drafts_over_zero``).

One vLLM server runs one method: ``choose_launch`` prices every candidate launch — vLLM without
speculation, each static configuration, each method's own schedule (``launch_policy``) where it has
more than one range (one range is that static configuration) — against the best static configuration
per level and keeps the one closest at its worst level; the ``Launch`` it returns is what an
engine's ``launch_json`` / ``policy_lines`` print. The best static configuration per level, spec-off
counting as 1.00x, is ``serving_summary.best_static``'s, the one home the closed loop's check uses too.

**A policy that knows its noise** (``noise_aware.noise_aware_policy``, what ``serving_policy`` runs
given the sweep's records from at least 3 rounds): the median over rounds, ties and too-noisy
measurements to the cheaper configuration, as vLLM's proposed ``tune_speculative_k`` (PR #49163).

**Ranges keyed on the engine's batch** (``batch_ranges``): vLLM looks k up by the scheduler's running
batch, not by how many requests a client keeps in flight, and the load is what decides whether
speculation pays — acceptance is not a load signal (vllm#26504). So a noise-aware policy carries each
level's measured mean batch (``serving_rounds.batch_of``: ``mean_batch``, else the level) and its
ranges change k at the geometric mean of adjacent measured batches, from a batch-1 anchor (required)
to the largest measured batch (reported: above it nothing is extrapolated, the last choice holds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from specnb.core.errors import ParameterError
from specnb.engine.engines.seam import ADAPTIVE_CONFIG, BASELINE_CONFIG, Launch
from specnb.measure.load_shapes import shape_of
from specnb.measure.serving_summary import best_static, draft_lengths
from specnb.predict.noise_aware import MIN_ROUNDS, noise_aware_policy
from specnb.predict.serving_predictor import predict_serving, require_steps, step_cost, step_ms

POLICY_FLOOR = 0.95  # the lowest lower 95% bound of a TPOT speedup the policy will run
BATCH_ONE = 1.5  # a level whose measured batch is at most this is the batch-1 anchor
MAX_BATCH = 4096  # the last range of a launch runs to this batch size


def serving_policy(summary: pd.DataFrame, lengths: dict[str, int] | None = None, baseline: str = BASELINE_CONFIG,
                   records: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per measured level: the configuration to run, its draft length k (0 for spec-off; ``lengths``
    default: as the records carry them, ``draft_lengths``) and the speedup it stands on.

    Given the sweep's ``records`` from at least ``MIN_ROUNDS`` rounds: ``noise_aware_policy`` (the
    median over rounds, ties and noisy levels to the cheaper configuration, ranges on the engine's
    batch). Otherwise — no records, or fewer rounds, one noisy figure per level — the rule from the
    summary alone: the best TPOT speedup above 1 whose lower CI bound is at least ``POLICY_FLOOR``,
    else spec-off. Either way each level after the first carries the load its range starts at
    (``with_cuts``: where the two choices' speedups cross)."""
    if records is not None and {"success", "round"} <= set(records.columns) and \
            records.loc[records["success"], "round"].nunique() >= MIN_ROUNDS:
        return with_cuts(noise_aware_policy(records, summary, lengths, baseline), summary, baseline)
    require_steps(summary)
    lengths = draft_lengths(summary) if lengths is None else lengths
    rows = []
    for level, group in summary[summary["config"] != baseline].groupby("concurrency"):
        paying = group[(group["speedup_tpot"] > 1.0) & (group["speedup_tpot_lo"] >= POLICY_FLOOR)]
        if paying.empty:
            rows.append({"concurrency": level, "config": baseline, "k": 0, "speedup_tpot": 1.0})
            continue
        best = paying.sort_values("speedup_tpot").iloc[-1]
        rows.append({"concurrency": level, "config": best["config"], "k": lengths.get(best["config"], 0),
                     "speedup_tpot": float(best["speedup_tpot"])})
    return with_cuts(pd.DataFrame(rows), summary, baseline)


def speedups_of(summary: pd.DataFrame, baseline: str = BASELINE_CONFIG,
                zero: pd.Series | None = None) -> dict[tuple[str, float], float]:
    """(configuration, level) → its measured TPOT speedup; ``baseline``'s is 1.00, or, in a launch whose
    k = 0 ranges are priced (``zero``: per level), that range's."""
    rows = summary[summary["config"] != baseline]
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


def with_cuts(policy: pd.DataFrame, summary: pd.DataFrame, baseline: str = BASELINE_CONFIG,
              zero: pd.Series | None = None) -> pd.DataFrame:
    """``policy`` with ``cut``: per level after the first, the load (its ``batch``, else its
    ``concurrency``) where its range starts — where the previous level's choice and its own cross,
    each one's measured speedup at both levels interpolated in log load (``crossing``); NaN on the
    first. ``zero``: the k = 0 range's speedup per level, for a launch's table (spec-off's is 1.00)."""
    if policy.empty:
        return policy
    key = "batch" if "batch" in policy else "concurrency"
    levels = policy.sort_values(key)
    speed = speedups_of(summary, baseline, zero)
    at = lambda config, level: speed.get((config, level), math.nan)  # noqa: E731
    rows = levels.to_dict("records")
    cuts = [math.nan] + [crossing((float(a[key]), float(b[key])),
                                  (at(a["config"], a["concurrency"]) - at(b["config"], a["concurrency"]),
                                   at(a["config"], b["concurrency"]) - at(b["config"], b["concurrency"])))
                         for a, b in zip(rows[:-1], rows[1:])]
    return levels.assign(cut=cuts).sort_index()


def zero_range_speedup(summary: pd.DataFrame, base: str, levels, baseline: str = BASELINE_CONFIG) -> pd.Series:
    """Per level, the TPOT speedup over spec-off of a launch built on configuration ``base`` where its
    schedule says k = 0: the step is spec-off's plus ``base``'s own cost beyond verification δ(b)
    (``predict_serving``'s ``draft_ms``, calibrated at its lowest level), since vLLM still takes the
    speculative path at k = 0 — for n-gram as for a head, whose first forward is only part of it."""
    cost = step_cost(summary, baseline)
    own = predict_serving(summary, base, list(levels), baseline).set_index("concurrency")["draft_ms"]
    return pd.Series({b: step_ms(cost, b) / (step_ms(cost, b) + own[b]) for b in levels}, name="zero_range_speedup")


def zero_range_ci(summary: pd.DataFrame, base: str, levels, baseline: str = BASELINE_CONFIG) -> pd.DataFrame:
    """``zero_range_speedup`` per level with its 95% CI, the calibration's: ``base``'s TPOT at its
    lowest level read at its speedup's CI bounds (the slower bound, the larger δ, the dearer k = 0
    range). Columns ``speedup_tpot``, ``_lo``, ``_hi``, indexed by level; a bound not measured is the
    point."""
    def at(side: str) -> pd.Series:
        rows = summary[summary["config"] == base].sort_values("concurrency")
        bound = rows[f"speedup_tpot_{side}"].iloc[0] if f"speedup_tpot_{side}" in rows else math.nan
        if pd.isna(bound) or not bound > 0:
            return zero_range_speedup(summary, base, levels, baseline)
        calibration = (summary["config"] == base) & (summary["concurrency"] == rows["concurrency"].iloc[0])
        slower = summary["mean_tpot_ms"].where(~calibration, summary["mean_tpot_ms"] * rows["speedup_tpot"].iloc[0]
                                               / bound)
        return zero_range_speedup(summary.assign(mean_tpot_ms=slower), base, levels, baseline)

    return pd.DataFrame({"speedup_tpot": zero_range_speedup(summary, base, levels, baseline),
                         "speedup_tpot_lo": at("lo"), "speedup_tpot_hi": at("hi")})


def interval(row) -> tuple[float, float, float]:
    """(point, lo, hi) of a row's TPOT speedup; a bound not measured is the point."""
    point = float(row["speedup_tpot"])
    bound = lambda side: point if pd.isna(row.get(f"speedup_tpot_{side}", math.nan)) else float(  # noqa: E731
        row[f"speedup_tpot_{side}"])
    return point, bound("lo"), bound("hi")


def drafts_over_zero(drafting: tuple[float, float, float], zero: tuple[float, float, float]) -> bool:
    """Whether a launch drafts at a level rather than run its k = 0 range there, each (point, lo, hi):
    as ``serving_policy`` holds a configuration against spec-off (above it, its lower bound at least
    ``POLICY_FLOOR``), with the ratio's interval from both sides' CIs — drafting's lower bound over
    the range's upper one — since neither is exact: the k = 0 range is priced from a calibration."""
    (x, x_lo, _), (z, _, z_hi) = drafting, zero
    return x > z and x_lo / z_hi >= POLICY_FLOOR


def launch_policy(summary: pd.DataFrame, family: dict[str, int], baseline: str = BASELINE_CONFIG,
                  records: pd.DataFrame | None = None) -> pd.DataFrame:
    """One vLLM launch's schedule over ``family`` (one method's configurations and their k, the
    launch built on the one with the largest k): ``serving_policy``'s choice per level, except where
    it says k = 0 and the family's best measured configuration there beats the launch's k = 0 range
    (``zero_range_ci``) by ``drafts_over_zero``'s rule, both sides with their CIs — there the launch
    drafts with that configuration's k. Its ranges cut where the choices' speedups cross, the k = 0
    range's priced (``with_cuts``). ``records``: the sweep's, for the noise-aware rule over rounds."""
    base = max(family, key=family.get)
    mine = None if records is None or "config" not in records else records[records["config"].isin([baseline, *family])]
    policy = serving_policy(summary[summary["config"].isin([baseline, *family])], family, baseline, records=mine)
    zero = zero_range_ci(summary, base, policy["concurrency"], baseline)
    own = summary[summary["config"].isin(list(family))]
    rows = []
    for row in policy.to_dict("records"):
        here = own[own["concurrency"] == row["concurrency"]].sort_values("speedup_tpot")
        best = here.iloc[-1] if len(here) else None
        if row["k"] == 0 and best is not None and \
                drafts_over_zero(interval(best), interval(zero.loc[row["concurrency"]])):
            row = row | {"config": best["config"], "k": family[best["config"]],
                         "speedup_tpot": float(best["speedup_tpot"])}
        rows.append(row)
    return with_cuts(pd.DataFrame(rows).drop(columns="cut", errors="ignore"), summary, baseline,
                     zero["speedup_tpot"])


def adaptive_expected(summary: pd.DataFrame, policy: pd.DataFrame, base: str,
                      baseline: str = BASELINE_CONFIG) -> pd.DataFrame:
    """The TPOT speedup one launch of ``policy``'s schedule, built on configuration ``base``, should
    reach per level, with its 95% CI (``speedup_tpot``, ``_lo``, ``_hi``, indexed by level): the chosen
    configuration's measured one where it drafts, the k = 0 range's (``zero_range_ci``) where not."""
    levels = policy.sort_values("concurrency")
    zero = zero_range_ci(summary, base, list(levels["concurrency"]), baseline)
    measured = summary.set_index(["config", "concurrency"])
    rows = {}
    for row in levels.to_dict("records"):
        level = row["concurrency"]
        drafting = row["k"] > 0 and (row["config"], level) in measured.index
        point, lo, hi = interval(measured.loc[(row["config"], level)] if drafting else zero.loc[level])
        rows[level] = {"speedup_tpot": float(row["speedup_tpot"]) if row["k"] > 0 else point,
                       "speedup_tpot_lo": lo, "speedup_tpot_hi": hi}
    return pd.DataFrame.from_dict(rows, orient="index")


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


def level_cuts(levels: pd.DataFrame, key: str) -> list[float]:
    """Per level after the first (``levels`` sorted on ``key``), the load its range starts at: its
    ``cut`` (``with_cuts``: where the speedups cross), else — a table made without the summary — the
    geometric mean of the two loads (``crossing`` with nothing measured)."""
    at = levels[key].to_numpy(float)
    given = levels["cut"].to_numpy(float)[1:] if "cut" in levels else [math.nan] * (len(at) - 1)
    return [c if not math.isnan(c) else crossing((a, b), (math.nan, math.nan))
            for a, b, c in zip(at[:-1], at[1:], given)]


def level_spans(policy: pd.DataFrame, max_batch: int = 4096) -> list[tuple[int, int, int, str]]:
    """(first, last, k, config) per level over batch sizes, unmerged: each level's from where its
    speedup crosses the previous level's choice (``level_cuts``) to the next cut − 1, the last to
    ``max_batch``. Keyed on the measured ``batch`` (a noise-aware policy: the first from 1,
    ``batch_ranges``), else on the ``concurrency`` (the summary-only rule: the first from its level)."""
    key = "batch" if "batch" in policy else "concurrency"
    levels = policy.sort_values(key)
    cuts = [math.ceil(c - 1e-9) for c in level_cuts(levels, key)]
    starts = [1 if key == "batch" else int(levels[key].iloc[0]), *cuts]
    ends = [c - 1 for c in cuts] + [max_batch]
    configs = levels["config"] if "config" in levels else [""] * len(levels)
    return [(lo, hi, int(k), config) for lo, hi, k, config in zip(starts, ends, levels["k"], configs) if lo <= hi]


def merged(spans: list[tuple[int, int, int, str]]) -> list[list[int]]:
    """[first, last, k] ranges, adjacent spans with the same k joined."""
    ranges = []
    for lo, hi, k, _ in spans:
        if ranges and ranges[-1][2] == k:
            ranges[-1][1] = hi
        else:
            ranges.append([lo, hi, k])
    return ranges


def batch_ranges(policy: pd.DataFrame, max_batch: int = 4096) -> BatchRanges:
    """A noise-aware policy's ranges over the engine's batch (its ``batch`` column): k changes where
    adjacent choices' speedups cross between measured batches (``level_spans``), the first range
    starts at 1 and the last measured choice holds beyond the largest measured batch (reported, not
    extrapolated: ``max_measured``). Refused (ParameterError) without a batch-1 anchor, a level whose
    measured batch is at most ``BATCH_ONE`` (PR #49163 requires one: below the smallest measured
    batch nothing says what pays)."""
    batches = sorted(float(b) for b in policy["batch"])
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


def policy_ranges(policy: pd.DataFrame, max_batch: int = 4096) -> list[list[int]]:
    """[[first, last, k], ...] over batch sizes (vLLM's ``num_speculative_tokens_per_batch_size``
    shape). A policy with a measured ``batch`` column (``noise_aware_policy``): ``batch_ranges``'
    ranges, from 1. One without (the summary-only rule): from its first level. Either way k changes
    where adjacent choices' speedups cross (``level_spans``), the last level's holding to ``max_batch``."""
    if "batch" in policy:
        return batch_ranges(policy, max_batch).ranges
    return merged(level_spans(policy, max_batch))


def scheduled_config(policy: pd.DataFrame, batch: float, max_batch: int = 4096) -> str:
    """The configuration a launch of ``policy``'s ranges runs at a running batch of ``batch`` (the
    level whose span holds it; below the first span the first level's, above the last the last's)."""
    spans = level_spans(policy, max_batch)
    b = int(round(batch))
    return next((config for lo, hi, _, config in spans if lo <= b <= hi), spans[0][3] if b < spans[0][0] else
                spans[-1][3])


def policy_switch(policy: pd.DataFrame) -> float:
    """The load where the policy stops speculating: where its range after its last level that drafts
    starts (``level_cuts``: where their speedups cross); where it drafts at every level, where its k
    first falls (a schedule of k alone, e.g. 4 at low load and 1 above); NaN where neither happens (it
    never drafts, or drafts one k throughout). The load is the measured ``batch`` where the policy
    carries one (a noise-aware policy), else the ``concurrency``."""
    key = "batch" if "batch" in policy else "concurrency"
    levels = policy.sort_values(key)
    ks = levels["k"].to_numpy()
    falls = [i for i in range(1, len(ks)) if ks[i] < ks[i - 1]]
    i = next((i for i in falls if ks[i] == 0), falls[0] if falls and ks.all() else None)
    return math.nan if i is None else float(level_cuts(levels, key)[i - 1])


@dataclass(frozen=True, kw_only=True)
class LaunchChoice:
    """The one launch a policy becomes on a server that runs one method: its per-level ``policy`` (as
    ``serving_policy``'s table: what the launch runs at each level), the ``Launch`` engines print, its
    ``kind`` ("none": no ``--speculative-config``; "static": one configuration at every load, ``config``;
    "schedule": a per-batch-size schedule of more than one range), ``why_not``: why it drafts nowhere,
    where it does not ("" otherwise), and ``candidates``: every launch priced (``rank_launches``)."""

    policy: pd.DataFrame
    launch: Launch
    kind: str = "none"
    config: str = BASELINE_CONFIG
    why_not: str = ""
    candidates: pd.DataFrame = field(default_factory=pd.DataFrame)


SIMPLER = {"none": 0, "static": 1, "schedule": 2}  # a tie goes to the simpler launch


def rank_launches(summary: pd.DataFrame, records: pd.DataFrame | None = None) -> tuple[pd.DataFrame, dict]:
    """Every launch one server could be given, priced per level against the best static configuration
    there (``best_static``): vLLM without speculation (1.00x); each static configuration (its measured
    speedup); each method family's schedule (``launch_policy``, ``adaptive_expected``: its k = 0 ranges
    at their own price) where it has more than one range — a single range is that static
    configuration. One row per candidate: ``candidate``, ``kind``, ``family``, ``k``, ``worst`` and
    ``mean`` (of its speedup ÷ the best static one's), best first: the higher worst, then the higher
    mean, then the simpler (spec-off, a static one by smaller k, a schedule). With each schedule's
    per-level table, by family."""
    column = shape_of(summary).column
    best = best_static(summary).set_index(column)["speedup_tpot"]
    lengths, family_of = draft_lengths(summary), families(summary)
    levels = sorted(summary.loc[summary["config"] == BASELINE_CONFIG, column])
    measured = summary.set_index(["config", column])["speedup_tpot"]
    priced = [("spec-off", "none", "", 0, pd.Series(1.0, index=levels))]
    priced += [(c, "static", family_of.get(c, "ngram"), k, measured[c].reindex(levels)) for c, k in lengths.items()]
    schedules = {}
    for family in sorted(set(family_of.values())):
        members = {c: k for c, k in lengths.items() if family_of[c] == family}
        own = launch_policy(summary, members, records=records) if members else None
        if own is not None and len(policy_ranges(own)) > 1:
            schedules[family] = own
            expected = adaptive_expected(summary, own, max(members, key=members.get))["speedup_tpot"]
            priced.append((f"{family} schedule", "schedule", family, int(own["k"].max()), expected.reindex(levels)))
    rows = []
    for name, kind, family, k, speedups in priced:
        ratio = speedups / best.reindex(levels)
        rows.append({"candidate": name, "kind": kind, "family": family, "k": k,
                     "worst": round(float(ratio.min()), 6), "mean": round(float(ratio.mean()), 6)})
    table = pd.DataFrame(rows)
    order = table.assign(_simple=table["kind"].map(SIMPLER), _k=table["k"])
    order = order.sort_values(["worst", "mean", "_simple", "_k"], ascending=[False, False, True, True], kind="stable")
    return table.loc[order.index].reset_index(drop=True), schedules


def choose_launch(summary: pd.DataFrame, policy: pd.DataFrame, drafts: dict[str, str] | None = None,
                  records: pd.DataFrame | None = None) -> LaunchChoice:
    """The best of ``rank_launches``' candidates: the launch whose worst level comes closest to the
    best static configuration there. Where ``policy`` (the one over every configuration) drafts at no
    level (none paid within ``POLICY_FLOOR``), no launch drafts either. ``drafts``: each launched
    configuration's head or draft-model folder, for the launch's ``model``; ``records``: the sweep's,
    so each family's schedule follows the noise-aware rule as ``policy`` did."""
    lengths = draft_lengths(summary)
    off = policy.assign(config=BASELINE_CONFIG, k=0, speedup_tpot=1.0)
    if not lengths:
        return LaunchChoice(policy=off, launch=as_launch(off, "ngram", ""))
    candidates, schedules = rank_launches(summary, records)
    top = candidates.iloc[0]
    drafting = candidates[candidates["kind"] != "none"].iloc[0]
    if not (policy["k"] > 0).any() or top["kind"] == "none":
        return LaunchChoice(policy=off, launch=as_launch(off, drafting["family"], ""), candidates=candidates,
                            why_not=no_launch_why(policy, drafting["family"]))
    family = top["family"]
    if top["kind"] == "schedule":
        own = schedules[family]
        return LaunchChoice(policy=own, launch=as_launch(own, family, launch_model(own, family, summary, drafts or {})),
                            kind="schedule", config=ADAPTIVE_CONFIG, candidates=candidates)
    config, k = top["candidate"], lengths[top["candidate"]]
    measured = summary[summary["config"] == config].set_index("concurrency")["speedup_tpot"]
    static = off.assign(config=config, k=k, speedup_tpot=off["concurrency"].map(measured)).drop(
        columns="cut", errors="ignore")
    return LaunchChoice(policy=static, launch=Launch(ranges=((1, MAX_BATCH, k),), by_k={k: config}, family=family,
                                                     draft=launch_model(static, family, summary, drafts or {})),
                        kind="static", config=config, candidates=candidates)


def families(summary: pd.DataFrame) -> dict[str, str]:
    """Each speculative static configuration's method family (vLLM's words: ngram, eagle3, ...), as
    its records carry it."""
    rows = summary[(summary["config"] != BASELINE_CONFIG) & (summary["config"] != ADAPTIVE_CONFIG)]
    return dict(zip(rows["config"], rows["family"])) if "family" in rows else {c: "ngram" for c in rows["config"]}


def as_launch(policy: pd.DataFrame, family: str, draft: str) -> Launch:
    """A policy table as the ``Launch`` record engines print: its ranges, the configuration each k
    comes from (the first level that chose it)."""
    by_k = {int(r["k"]): r["config"] for r in policy.sort_values("concurrency").to_dict("records")[::-1]}
    return Launch(ranges=tuple(tuple(r) for r in policy_ranges(policy)), by_k=by_k, family=family, draft=draft)


def no_launch_why(policy: pd.DataFrame, family: str) -> str:
    """Why a launch drafts nowhere, given the policy over every configuration."""
    if not (policy["k"] > 0).any():
        return f"{family} did not pay at any level measured"
    return (f"{family} pays at some levels, but no launch of it comes closer to the best static configuration at "
            "its worst level than no speculation: a static one loses elsewhere, and a schedule's k = 0 ranges "
            "elsewhere cost more than that gains (vLLM still takes the speculative path at k = 0)")


def launch_model(policy: pd.DataFrame, family: str, summary: pd.DataFrame, drafts: dict[str, str]) -> str:
    """The ``model`` a pasted launch names for ``family``: the folder of the launched configuration its
    levels chose most (an EAGLE-3 head's, a draft model's); a placeholder where the sweep ran on an
    endpoint, whose folder only its operator knows; "" for a family that drafts without a model."""
    members = [c for c, f in families(summary).items() if f == family]
    folders = {c: drafts[c] for c in members if drafts.get(c)}
    if folders:
        chosen = [c for c in policy["config"] if c in folders] or list(folders)
        return folders[max(sorted(set(chosen)), key=chosen.count)]
    uses = summary[summary["config"].isin(members)]
    needs_model = bool(uses["uses_model"].any()) if "uses_model" in uses else False
    return f"<the {family} model's folder>" if needs_model else ""
