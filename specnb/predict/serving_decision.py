"""The serving decision: what a run of notebook 08 says to launch, made once and only rendered after.

One record (``ServingDecision``) holds the per-level policy, the one launch chosen for it
(``serving_launch.choose_launch``), the engine configuration that launch is (the static one, or the
schedule as one server), the ``--speculative-config`` it is launched with, the lines an engine that
fixes speculation per launch prints, the load the bursty trace is centred on and, once the trace is
measured, what the trace supports (``with_trace``). ``decide`` makes it from the sweep's summary,
summarised with the run's seed; the policy check launches it and the text renders it, so what was
launched and what is printed cannot differ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import pandas as pd

from specnb.measure.load_shapes import shape_of
from specnb.measure.serving_stats import draft_lengths
from specnb.predict.policy_record import Policy
from specnb.predict.serving_launch import choose_launch
from specnb.predict.serving_policy import as_launch, policy_ranges, policy_switch, serving_policy
from specnb.serve.engines import engine_named
from specnb.serve.speculation import ADAPTIVE_CONFIG, BASELINE_CONFIG, Launch

SCHEDULE_FORMAT = "vllm"  # the engine whose --speculative-config is the form a per-batch-size schedule is pasted in


@dataclass(frozen=True, kw_only=True)
class ServingDecision:
    """What to launch, and what it rests on.

    ``policy``: per level, the configuration to run over every configuration (``serving_policy``);
    ``launched``: per level, what the one launch runs (``choose_launch``'s table); ``launch``: that
    launch as engines print it; ``kind``: "none" (no ``--speculative-config``), "static" (``config`` at
    every load), "schedule" (a per-batch-size schedule of more than one range, ``config`` "adaptive"),
    "per_load" (an engine that fixes speculation per launch, the policy mixing configurations: its
    ``lines``) or "" (nothing to decide: no speculative configuration, or open-loop levels); ``server``: the
    engine configuration launched for it where this run's engine runs it as one server (the static
    configuration itself, or the schedule built on its family's largest k), else None;
    ``launch_json``: the ``--speculative-config`` of that launch in vLLM's form ("" for none), what
    results.json's ``policy_vllm`` holds; ``lines``: the policy per load range for an engine that
    fixes speculation per launch (llama-server), else (); ``candidates``: every launch priced
    (``serving_launch.rank_launches``); ``switch``: the load the bursty trace keeps in flight on
    spec-off (where the policy stops speculating or its k first falls; NaN: none); ``configs``: the
    static configurations measured. After the trace (``with_trace``): ``trace_pick``, the
    configuration it supports ("adaptive" for the schedule) and ``trace_json``, its launch line."""

    seed: int
    engine: str
    policy: Policy
    launched: Policy
    launch: Launch | None = None
    kind: str = ""
    config: str = BASELINE_CONFIG
    server: object | None = None
    launch_json: str = ""
    lines: tuple[str, ...] = ()
    why_not: str = ""
    candidates: pd.DataFrame = field(default_factory=pd.DataFrame)
    switch: float = math.nan
    configs: tuple = ()
    trace_pick: str = ""
    trace_json: str = ""

    @property
    def checked(self) -> bool:
        """Whether the launch is run as its own server and measured again at every level: a real
        schedule, on an engine that runs one (a static launch was measured as itself already)."""
        return self.kind == "schedule" and self.server is not None

    @property
    def launch_line(self) -> str:
        """What a user pastes for the load this run measured (results.json's ``launch_line``): the trace's
        pick where the trace ran, else the launch's ``--speculative-config`` ("" for none), or for an
        engine that fixes speculation per launch its one configuration's flags, or its lines per load."""
        if self.trace_pick:
            return self.trace_json
        if self.kind in ("", "none"):
            return ""
        if self.kind == "per_load":
            return "; ".join(self.lines)
        return self.launch_json if engine_named(self.engine).schedules else static_text(self.configs, self.config)


def config_drafts(configs) -> dict[str, str]:
    """Each launched configuration's head or draft-model folder (what a pasted launch's ``model`` names)."""
    return {c.name: str(c.draft) for c in configs if getattr(c, "draft", None)}


def static_text(configs, name: str) -> str:
    """A static configuration's launch line as its engine prints it ("" for spec-off or one not here)."""
    return next((c.engine.launch_text(c) for c in configs if c.name == name), "")


def scheduled_server(configs, policy: Policy, family: str):
    """A schedule as one launch named ``adaptive``: ``family``'s static configuration with the largest
    k, at the schedule's largest k, with its ranges; None where no range drafts or no configuration of
    the family was launched."""
    ranges = policy_ranges(policy)
    k = max((r[2] for r in ranges), default=0)
    members = [c for c in configs if c.speculative and c.speculation.family == family]
    if not k or not members:
        return None
    base = max(members, key=lambda c: c.draft_length)
    return base.engine.scheduled(base, k, ranges)


def decide(summary: pd.DataFrame, records: pd.DataFrame | None = None, seed: int = 0, *, engine: str = "vllm",
           configs=()) -> ServingDecision:
    """The decision from a sweep's ``summary`` (summarised with ``seed``: its CIs are the seed's) and
    its ``records`` (the noise-aware policy's rounds): the per-level policy, the one launch
    (``choose_launch``), the engine configuration that is where ``engine`` runs one server for it
    (``configs``: the static ones measured), its ``--speculative-config``, the lines per load for an
    engine that fixes speculation per launch, and the trace's load (``switch``). Nothing to decide
    (kind "") without a speculative configuration measured against spec-off on closed-loop levels."""
    served, configs = engine_named(engine), tuple(configs)
    if not draft_lengths(summary) or "speedup_tpot" not in summary or not shape_of(summary).steps_batch:
        empty = Policy(levels=(), keyed_on="concurrency", columns=tuple(summary.columns))
        return ServingDecision(seed=seed, engine=engine, policy=empty, launched=empty, configs=configs)
    policy = serving_policy(summary, records=records)
    choice = choose_launch(summary, policy, config_drafts(configs), records=records)
    server = None
    if served.schedules and choice.kind == "schedule":
        server = scheduled_server(configs, choice.policy, choice.launch.family)
    elif served.schedules and choice.kind == "static":
        server = next((c for c in configs if c.name == choice.config), None)
    vllm_form = engine_named(SCHEDULE_FORMAT).launch_json(choice.launch)
    lines = tuple(served.policy_lines(as_launch(policy, choice.launch.family, ""), list(configs)))
    kind, config = (choice.kind, choice.config) if served.schedules else fixed_kind(policy)
    switch = next((s for s in (policy_switch(choice.policy), policy_switch(policy)) if not math.isnan(s)), math.nan)
    return ServingDecision(seed=seed, engine=engine, policy=policy, launched=choice.policy, launch=choice.launch,
                           kind=kind, config=config, server=server,
                           launch_json=server.engine.launch_text(server) if server is not None else vllm_form,
                           lines=lines, why_not=choice.why_not, candidates=choice.candidates, switch=switch,
                           configs=configs)


def fixed_kind(policy: Policy) -> tuple[str, str]:
    """(kind, configuration) on an engine that fixes speculation per launch: it runs the per-level
    policy itself, one server per load range — "none" where no level drafts, "static" where one
    configuration runs at every level, else "per_load" (its lines per load range)."""
    drafting = [level for level in policy.levels if level.k > 0]
    if not drafting:
        return "none", BASELINE_CONFIG
    one = drafting[0].config
    return ("static", one) if {level.config for level in policy.levels} == {one} else ("per_load", "")


def with_trace(decision: ServingDecision, trace: pd.DataFrame) -> ServingDecision:
    """``decision`` completed with what the bursty trace supports (``trace_pick`` on
    ``serving_stats.trace_check``'s table) and its launch line: the schedule's ``launch_json``, a
    static configuration's own, "" for spec-off. Unchanged where no trace was measured."""
    if trace is None or trace.empty:
        return decision
    pick = trace_pick(trace)
    line = decision.launch_json if pick == ADAPTIVE_CONFIG else static_text(decision.configs, pick)
    return replace(decision, trace_pick=pick, trace_json=line)


def adaptive_ran(trace: pd.DataFrame) -> bool:
    """Whether the schedule ran over the trace beside the static configurations."""
    return "adaptive_mean_tpot_ms" in trace and bool(trace["adaptive_mean_tpot_ms"].notna().any())


def trace_pick(trace: pd.DataFrame) -> str:
    """What the trace supports launching. The adaptive schedule only where it wins: its 95% CI against
    every static configuration, spec-off included, lies above 1 (``beats``). Otherwise the simplest
    configuration inside the tie with the trace's fastest (``best``; inside: its CI against the best
    holds 1): spec-off, then static configurations by smaller k, then the schedule. As vLLM's proposed
    ``tune_speculative_k`` (PR #49163) does, a difference within the noise is a tie, and a tie goes to
    the simpler setting: nothing measurable is given up for it."""
    if adaptive_ran(trace) and trace["beats"].all():
        return ADAPTIVE_CONFIG
    return min(tied_with_best(trace), key=lambda name: simplicity(name, trace))


def tied_with_best(trace: pd.DataFrame) -> list[str]:
    """The configurations whose TPOT CI against the trace's fastest holds 1 (NaN, too few prompts to
    tell: a tie), the fastest included; adaptive's, where it ran, is its own CI against the best static
    one."""
    holds = lambda lo, hi: ~((lo > 1.0) | (hi < 1.0))  # noqa: E731
    best = trace["best"].iloc[0]
    names = trace.loc[holds(trace["speedup_over_best_lo"], trace["speedup_over_best_hi"]), "config"].tolist()
    against = trace[trace["config"] == best]
    if adaptive_ran(trace) and (best == ADAPTIVE_CONFIG or holds(against["adaptive_speedup_tpot_lo"],
                                                                 against["adaptive_speedup_tpot_hi"]).all()):
        names.append(ADAPTIVE_CONFIG)
    return names or [best]


def simplicity(name: str, trace: pd.DataFrame) -> tuple[int, float]:
    """Sort key, simplest first: spec-off, static configurations by k (as the trace's records carry
    it), the schedule."""
    if name == BASELINE_CONFIG:
        return 0, 0
    if name == ADAPTIVE_CONFIG:
        return 2, 0
    ks = dict(zip(trace["config"], trace["k"])) if "k" in trace else {}
    return 1, float(ks[name]) if name in ks and not pd.isna(ks[name]) else math.inf


@dataclass(frozen=True, kw_only=True)
class FinalLaunch:
    """The one answer a report gives for the load a run measured. ``basis``: what it rests on —
    "trace" (the bursty trace judged it: paired CIs, a tie to the simplest), else the decision's own
    ``kind`` ("none", "static", "schedule", "per_load"), or "" (nothing to decide); ``config``: the
    configuration launched (the trace's pick, or the decision's); ``line``: what a user pastes
    (``ServingDecision.launch_line``, "" for no speculation); ``low``/``high``: the levels measured;
    ``drafted``: whether the policy drafts at any level."""

    basis: str
    config: str = ""
    line: str = ""
    low: float = math.nan
    high: float = math.nan
    drafted: bool = False


def final_launch(decision: ServingDecision, trace: pd.DataFrame | None = None) -> FinalLaunch:
    """What to launch: where the bursty trace ran (the load most like production, ``with_trace``), its
    pick; otherwise the decision's launch — no speculation, one static configuration at every load, a
    schedule, or an engine's lines per load range."""
    if decision.trace_pick and trace is not None and len(trace):
        return FinalLaunch(basis="trace", config=decision.trace_pick, line=decision.launch_line)
    if not decision.kind:
        return FinalLaunch(basis="")
    loads = [level.concurrency for level in decision.policy.levels]
    return FinalLaunch(basis=decision.kind, config=decision.config, line=decision.launch_line,
                       low=float(min(loads)), high=float(max(loads)), drafted=decision.policy.drafts())
