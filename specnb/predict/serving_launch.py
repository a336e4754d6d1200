"""The one launch a serving policy becomes on a server that runs one method (vLLM), every k = 0 range
priced.

A schedule's k = 0 range is not spec-off for any method: the step still goes through the speculative
path (the proposer is called, a draft model's or head's first forward runs, the scheduler and sampler
take their speculative branches). ``zero_range_speedup`` prices it at the method's own step cost
δ(b), which is what an all-zero schedule measured against spec-off (``benchmarks/vllm_k0.py``), with
its calibration's 95% CI (``zero_range_ci``); ``launch_policy`` drafts instead at a level where the
method's measured speedup beats that, each side judged with its own CI (``drafts_over_zero``).

``choose_launch`` prices every candidate launch — vLLM without speculation, each static
configuration, each method's own schedule (``launch_policy``) where it has more than one range (one
range is that static configuration) — against the best static configuration per level and keeps the
one closest at its worst level (``rank_launches``); the ``Launch`` it returns is what an engine's
``launch_json`` / ``policy_lines`` print. The best static configuration per level, spec-off counting
as 1.00x, is ``serving_stats.best_static``'s, the one home the closed loop's check uses too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import pandas as pd

from specnb.measure.load_shapes import shape_of
from specnb.measure.serving_stats import best_static, draft_lengths
from specnb.predict.policy_record import Policy
from specnb.predict.serving_policy import (
    MAX_BATCH,
    POLICY_FLOOR,
    as_launch,
    policy_ranges,
    serving_policy,
    with_cuts,
    without_cuts,
)
from specnb.predict.serving_predictor import predict_serving, step_cost, step_ms
from specnb.serve.speculation import ADAPTIVE_CONFIG, BASELINE_CONFIG, NOT_CANDIDATES, Launch


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
                  records: pd.DataFrame | None = None) -> Policy:
    """One vLLM launch's schedule over ``family`` (one method's configurations and their k, the
    launch built on the one with the largest k): ``serving_policy``'s choice per level, except where
    it says k = 0 and the family's best measured configuration there beats the launch's k = 0 range
    (``zero_range_ci``) by ``drafts_over_zero``'s rule, both sides with their CIs — there the launch
    drafts with that configuration's k. Its ranges cut where the choices' speedups cross, the k = 0
    range's priced (``with_cuts``). ``records``: the sweep's, for the noise-aware rule over rounds."""
    base = max(family, key=family.get)
    mine = None if records is None or "config" not in records else records[records["config"].isin([baseline, *family])]
    policy = serving_policy(summary[summary["config"].isin([baseline, *family])], family, baseline, records=mine)
    zero = zero_range_ci(summary, base, [level.concurrency for level in policy.levels], baseline)
    own = summary[summary["config"].isin(list(family))]
    rows = []
    for row in policy.levels:
        here = own[own["concurrency"] == row.concurrency].sort_values("speedup_tpot")
        best = here.iloc[-1] if len(here) else None
        if row.k == 0 and best is not None and \
                drafts_over_zero(interval(best), interval(zero.loc[row.concurrency])):
            row = replace(row, config=best["config"], k=family[best["config"]],
                          speedup_tpot=float(best["speedup_tpot"]))
        rows.append(row)
    return with_cuts(without_cuts(policy.with_levels(rows)), summary, baseline, zero["speedup_tpot"])


def adaptive_expected(summary: pd.DataFrame, policy: Policy, base: str,
                      baseline: str = BASELINE_CONFIG) -> pd.DataFrame:
    """The TPOT speedup one launch of ``policy``'s schedule, built on configuration ``base``, should
    reach per level, with its 95% CI (``speedup_tpot``, ``_lo``, ``_hi``, indexed by level): the chosen
    configuration's measured one where it drafts, the k = 0 range's (``zero_range_ci``) where not."""
    levels = sorted(policy.levels, key=lambda row: row.concurrency)
    zero = zero_range_ci(summary, base, [row.concurrency for row in levels], baseline)
    measured = summary.set_index(["config", "concurrency"])
    rows = {}
    for row in levels:
        level = row.concurrency
        drafting = row.k > 0 and (row.config, level) in measured.index
        point, lo, hi = interval(measured.loc[(row.config, level)] if drafting else zero.loc[level])
        rows[level] = {"speedup_tpot": float(row.speedup_tpot) if row.k > 0 else point,
                       "speedup_tpot_lo": lo, "speedup_tpot_hi": hi}
    return pd.DataFrame.from_dict(rows, orient="index")


@dataclass(frozen=True, kw_only=True)
class LaunchChoice:
    """The one launch a policy becomes on a server that runs one method: its per-level ``policy`` (as
    ``serving_policy``'s table: what the launch runs at each level), the ``Launch`` engines print, its
    ``kind`` ("none": no ``--speculative-config``; "static": one configuration at every load, ``config``;
    "schedule": a per-batch-size schedule of more than one range), ``why_not``: why it drafts nowhere,
    where it does not ("" otherwise), and ``candidates``: every launch priced (``rank_launches``)."""

    policy: Policy
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
            k = max(level.k for level in own.levels)
            priced.append((f"{family} schedule", "schedule", family, k, expected.reindex(levels)))
    rows = []
    for name, kind, family, k, speedups in priced:
        ratio = speedups / best.reindex(levels)
        rows.append({"candidate": name, "kind": kind, "family": family, "k": k,
                     "worst": round(float(ratio.min()), 6), "mean": round(float(ratio.mean()), 6)})
    table = pd.DataFrame(rows)
    order = table.assign(_simple=table["kind"].map(SIMPLER), _k=table["k"])
    order = order.sort_values(["worst", "mean", "_simple", "_k"], ascending=[False, False, True, True], kind="stable")
    return table.loc[order.index].reset_index(drop=True), schedules


def choose_launch(summary: pd.DataFrame, policy: Policy, drafts: dict[str, str] | None = None,
                  records: pd.DataFrame | None = None) -> LaunchChoice:
    """The best of ``rank_launches``' candidates: the launch whose worst level comes closest to the
    best static configuration there. Where ``policy`` (the one over every configuration) drafts at no
    level (none paid within ``POLICY_FLOOR``), no launch drafts either. ``drafts``: each launched
    configuration's head or draft-model folder, for the launch's ``model``; ``records``: the sweep's,
    so each family's schedule follows the noise-aware rule as ``policy`` did."""
    lengths = draft_lengths(summary)
    off = policy.with_levels(replace(level, config=BASELINE_CONFIG, k=0, speedup_tpot=1.0) for level in policy.levels)
    if not lengths:
        return LaunchChoice(policy=off, launch=as_launch(off, "ngram", ""))
    candidates, schedules = rank_launches(summary, records)
    top = candidates.iloc[0]
    drafting = candidates[candidates["kind"] != "none"].iloc[0]
    if not policy.drafts() or top["kind"] == "none":
        return LaunchChoice(policy=off, launch=as_launch(off, drafting["family"], ""), candidates=candidates,
                            why_not=no_launch_why(policy, drafting["family"]))
    family = top["family"]
    if top["kind"] == "schedule":
        own = schedules[family]
        return LaunchChoice(policy=own, launch=as_launch(own, family, launch_model(own, family, summary, drafts or {})),
                            kind="schedule", config=ADAPTIVE_CONFIG, candidates=candidates)
    config, k = top["candidate"], lengths[top["candidate"]]
    measured = summary[summary["config"] == config].set_index("concurrency")["speedup_tpot"]
    static = without_cuts(off.with_levels(
        replace(level, config=config, k=k, speedup_tpot=float(measured.get(level.concurrency, math.nan)))
        for level in off.levels))
    return LaunchChoice(policy=static, launch=Launch(ranges=((1, MAX_BATCH, k),), by_k={k: config}, family=family,
                                                     draft=launch_model(static, family, summary, drafts or {})),
                        kind="static", config=config, candidates=candidates)


def families(summary: pd.DataFrame) -> dict[str, str]:
    """Each speculative static configuration's method family (vLLM's words: ngram, eagle3, ...), as
    its records carry it."""
    rows = summary[~summary["config"].isin([BASELINE_CONFIG, *NOT_CANDIDATES])]
    return dict(zip(rows["config"], rows["family"])) if "family" in rows else {c: "ngram" for c in rows["config"]}


def no_launch_why(policy: Policy, family: str) -> str:
    """Why a launch drafts nowhere, given the policy over every configuration."""
    if not policy.drafts():
        return f"{family} did not pay at any level measured"
    return (f"{family} pays at some levels, but no launch of it comes closer to the best static configuration at "
            "its worst level than no speculation: a static one loses elsewhere, and a schedule's k = 0 ranges "
            "elsewhere cost more than that gains (vLLM still takes the speculative path at k = 0)")


def launch_model(policy: Policy, family: str, summary: pd.DataFrame, drafts: dict[str, str]) -> str:
    """The ``model`` a pasted launch names for ``family``: the folder of the launched configuration its
    levels chose most (an EAGLE-3 head's, a draft model's); a placeholder where the sweep ran on an
    endpoint, whose folder only its operator knows; "" for a family that drafts without a model."""
    members = [c for c, f in families(summary).items() if f == family]
    folders = {c: drafts[c] for c in members if drafts.get(c)}
    if folders:
        chosen = [level.config for level in policy.levels if level.config in folders] or list(folders)
        return folders[max(sorted(set(chosen)), key=chosen.count)]
    uses = summary[summary["config"].isin(members)]
    needs_model = bool(uses["uses_model"].any()) if "uses_model" in uses else False
    return f"<the {family} model's folder>" if needs_model else ""
