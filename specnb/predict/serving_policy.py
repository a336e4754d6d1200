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
``launch_policy`` drafts instead at a level where the method's measured speedup beats that.

One vLLM server runs one method: ``choose_launch`` prices each method's own schedule
(``launch_policy``) and vLLM without speculation against the best static configuration per level
and keeps the one closest at its worst level; the ``Launch`` it returns is what an engine's
``launch_json`` / ``policy_lines`` print. The best static configuration per level, spec-off counting
as 1.00x, is ``serving_summary.best_static``'s, the one home the closed loop's check uses too.

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
from dataclasses import dataclass

import pandas as pd

from specnb.core.errors import ParameterError
from specnb.engine.engines.seam import BASELINE_CONFIG, NOT_CANDIDATES, Launch
from specnb.measure.load_shapes import shape_of
from specnb.measure.serving_summary import best_static, draft_lengths
from specnb.predict.noise_aware import MIN_ROUNDS, noise_aware_policy
from specnb.predict.serving_predictor import predict_serving, require_steps, step_cost, step_ms

POLICY_FLOOR = 0.95  # the lowest lower 95% bound of a TPOT speedup the policy will run
BATCH_ONE = 1.5  # a level whose measured batch is at most this is the batch-1 anchor


def serving_policy(summary: pd.DataFrame, lengths: dict[str, int] | None = None, baseline: str = BASELINE_CONFIG,
                   records: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per measured level: the configuration to run, its draft length k (0 for spec-off; ``lengths``
    default: as the records carry them, ``draft_lengths``) and the speedup it stands on.

    Given the sweep's ``records`` from at least ``MIN_ROUNDS`` rounds: ``noise_aware_policy`` (the
    median over rounds, ties and noisy levels to the cheaper configuration, ranges on the engine's
    batch). Otherwise — no records, or fewer rounds, one noisy figure per level — the rule from the
    summary alone: the best TPOT speedup above 1 whose lower CI bound is at least ``POLICY_FLOOR``,
    else spec-off."""
    if records is not None and {"success", "round"} <= set(records.columns) and \
            records.loc[records["success"], "round"].nunique() >= MIN_ROUNDS:
        return noise_aware_policy(records, summary, lengths, baseline)
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
    return pd.DataFrame(rows)


def zero_range_speedup(summary: pd.DataFrame, base: str, levels, baseline: str = BASELINE_CONFIG) -> pd.Series:
    """Per level, the TPOT speedup over spec-off of a launch built on configuration ``base`` where its
    schedule says k = 0: the step is spec-off's plus ``base``'s own cost beyond verification δ(b)
    (``predict_serving``'s ``draft_ms``, calibrated at its lowest level), since vLLM still takes the
    speculative path at k = 0 — for n-gram as for a head, whose first forward is only part of it."""
    cost = step_cost(summary, baseline)
    own = predict_serving(summary, base, list(levels), baseline).set_index("concurrency")["draft_ms"]
    return pd.Series({b: step_ms(cost, b) / (step_ms(cost, b) + own[b]) for b in levels}, name="zero_range_speedup")


def launch_policy(summary: pd.DataFrame, family: dict[str, int], baseline: str = BASELINE_CONFIG,
                  records: pd.DataFrame | None = None) -> pd.DataFrame:
    """One vLLM launch's schedule over ``family`` (one method's configurations and their k, the
    launch built on the one with the largest k): ``serving_policy``'s choice per level, except where
    it says k = 0 and the family's best measured configuration there is faster than the launch's k = 0
    range (``zero_range_speedup``) — there the launch drafts with that configuration's k, unless its
    lower bound admits a loss of more than 5% against that range (``POLICY_FLOOR``, as against
    spec-off in ``serving_policy``). ``records``: the sweep's, for the noise-aware rule over rounds."""
    base = max(family, key=family.get)
    mine = None if records is None or "config" not in records else records[records["config"].isin([baseline, *family])]
    policy = serving_policy(summary[summary["config"].isin([baseline, *family])], family, baseline, records=mine)
    zero = zero_range_speedup(summary, base, policy["concurrency"], baseline)
    own = summary[summary["config"].isin(list(family))]
    rows = []
    for row in policy.to_dict("records"):
        here = own[own["concurrency"] == row["concurrency"]].sort_values("speedup_tpot")
        best = here.iloc[-1] if len(here) else None
        z = zero[row["concurrency"]]
        if row["k"] == 0 and best is not None and best["speedup_tpot"] > z and \
                best["speedup_tpot_lo"] >= POLICY_FLOOR * z:
            row = row | {"config": best["config"], "k": family[best["config"]],
                         "speedup_tpot": float(best["speedup_tpot"])}
        rows.append(row)
    return pd.DataFrame(rows)


def adaptive_expected(summary: pd.DataFrame, policy: pd.DataFrame, base: str,
                      baseline: str = BASELINE_CONFIG) -> pd.Series:
    """The TPOT speedup one launch of ``policy``'s schedule, built on configuration ``base``, should
    reach per level: the chosen configuration's measured one where it drafts, ``zero_range_speedup``
    where k = 0."""
    levels = policy.sort_values("concurrency")
    zero = zero_range_speedup(summary, base, list(levels["concurrency"]), baseline)
    return pd.Series({row["concurrency"]: float(row["speedup_tpot"] if row["k"] > 0 else zero[row["concurrency"]])
                      for row in levels.to_dict("records")}, name="expected_speedup_tpot")


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


def batch_cuts(batches) -> list[int]:
    """The first batch size of each measured batch's range after the first: where the geometric mean
    of two adjacent measured batches falls (the nearer one in log takes a batch between them)."""
    return [math.ceil(math.sqrt(a * b) - 1e-9) for a, b in zip(batches[:-1], batches[1:])]


def level_spans(policy: pd.DataFrame, max_batch: int = 4096) -> list[tuple[int, int, int, str]]:
    """(first, last, k, config) per level over batch sizes, unmerged. With a ``batch`` column (a
    noise-aware policy): from 1 to the geometric mean with the next measured batch, the last to
    ``max_batch`` (``batch_ranges``). Without (the summary-only rule): each level's k from that level
    up to the next level − 1, as launches printed before the batch was measured."""
    if "batch" in policy:
        levels = policy.sort_values("batch")
        cuts = batch_cuts(levels["batch"].to_numpy(float))
        starts, ends = [1, *cuts], [c - 1 for c in cuts] + [max_batch]
    else:
        levels = policy.sort_values("concurrency")
        starts = [int(x) for x in levels["concurrency"]]
        ends = [s - 1 for s in starts[1:]] + [max_batch]
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
    """A noise-aware policy's ranges over the engine's batch (its ``batch`` column): k changes at the
    geometric mean of adjacent measured batches, the first range starts at 1 and the last measured
    choice holds beyond the largest measured batch (reported, not extrapolated: ``max_measured``).
    Refused (ParameterError) without a batch-1 anchor, a level whose measured batch is at most
    ``BATCH_ONE`` (PR #49163 requires one: below the smallest measured batch nothing says what pays)."""
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
    ranges, k changing at the geometric mean of adjacent measured batches from 1. One without (the
    summary-only rule): each level's k holds from the level up to the next level − 1, the last
    level's to ``max_batch``."""
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
    """The load where the policy stops speculating: the geometric mean of its last level that drafts
    and the next one, which does not; where it drafts at every level, the load where its k first falls
    (a schedule of k alone, e.g. 4 at low load and 1 above); NaN where neither happens (it never
    drafts, or drafts one k throughout). The load is the measured ``batch`` where the policy carries
    one (a noise-aware policy), else the ``concurrency``."""
    key = "batch" if "batch" in policy else "concurrency"
    levels = policy.sort_values(key)
    at, ks = levels[key].to_numpy(float), levels["k"].to_numpy()
    falls = [i for i in range(1, len(ks)) if ks[i] < ks[i - 1]]
    i = next((i for i in falls if ks[i] == 0), falls[0] if falls and ks.all() else None)
    return math.nan if i is None else float(math.sqrt(at[i - 1] * at[i]))


@dataclass(frozen=True, kw_only=True)
class LaunchChoice:
    """The one launch a policy becomes on a server that runs one method: its per-level ``policy`` (as
    ``serving_policy``'s table), the ``Launch`` engines print, and ``why_not``: why it drafts nowhere,
    where it does not ("" otherwise)."""

    policy: pd.DataFrame
    launch: Launch
    why_not: str = ""


def choose_launch(summary: pd.DataFrame, policy: pd.DataFrame, drafts: dict[str, str] | None = None,
                  records: pd.DataFrame | None = None) -> LaunchChoice:
    """Each method family's launch (``launch_policy``: its own schedule, drafting where that beats its
    k = 0 range) priced per level (``adaptive_expected``), and no speculation at all beside them; the
    one whose worst level comes closest to the best static configuration there wins, ties to the
    higher mean, then to the family ``policy`` (the one over every configuration) chose most. Where
    ``policy`` drafts at no level (none paid within ``POLICY_FLOOR``), no launch drafts either.
    ``drafts``: each launched configuration's head or draft-model folder, for the launch's ``model``;
    ``records``: the sweep's, so each family's schedule follows the noise-aware rule as ``policy`` did."""
    lengths, family_of = draft_lengths(summary), families(summary)
    if not lengths:
        return LaunchChoice(policy=policy, launch=as_launch(policy, "ngram", ""))
    chosen = [c for c in policy["config"] if c != BASELINE_CONFIG] or list(lengths)
    best = best_static(summary).set_index(shape_of(summary).column)["speedup_tpot"]
    ranked = []
    for family in sorted(set(family_of.values())):
        members = {c: k for c, k in lengths.items() if family_of[c] == family}
        own = launch_policy(summary, members, records=records)
        ratio = adaptive_expected(summary, own, max(members, key=members.get)) / best.reindex(own["concurrency"])
        votes = sum(family_of.get(c) == family for c in chosen)
        ranked.append((round(float(ratio.min()), 6), round(float(ratio.mean()), 6), votes, family, own))
    worst, mean, _, family, own = max(ranked, key=lambda r: r[:3])
    spec_off = 1.0 / best.reindex(own["concurrency"])  # no speculation, against the same
    if not (policy["k"] > 0).any() or (round(float(spec_off.min()), 6), round(float(spec_off.mean()), 6)) > \
            (worst, mean):
        off = own.assign(config=BASELINE_CONFIG, k=0, speedup_tpot=1.0)
        return LaunchChoice(policy=off, launch=as_launch(off, family, ""), why_not=no_launch_why(policy, family))
    return LaunchChoice(policy=own, launch=as_launch(own, family, launch_model(own, family, summary, drafts or {})))


def families(summary: pd.DataFrame) -> dict[str, str]:
    """Each speculative static configuration's method family (vLLM's words: ngram, eagle3, ...), as
    its records carry it."""
    rows = summary[~summary["config"].isin([BASELINE_CONFIG, *NOT_CANDIDATES])]
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
    return (f"{family} pays at some levels, but its schedule's k = 0 ranges elsewhere cost more than that gains "
            "(vLLM still takes the speculative path at k = 0), judged at its worst level against the best static "
            "configuration")


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
