"""The policy, checked on the engine that can run it as one server (``ServingEngine.schedules``: vLLM, the
simulated engine): measure the static configurations, turn the policy into a configuration of its
own and measure it beside them.

1. **Sweep** the static configurations (spec-off, ``ngram:K``, ...) at every level: where the policy
   comes from (``serving_policy.serving_policy``, one method per server: ``serving_policy.choose_launch``).
2. **Adaptive**: a server launched with the policy's ranges as its per-batch-size schedule
   (``adaptive_config``), while the static servers keep running — or none where no launch is expected
   to do better than no speculation (``choose_launch``: a k = 0 range is not free): then the policy
   is "no ``--speculative-config``", and nothing is launched for it.
3. **Check**: the same levels again on every configuration, adaptive included, interleaved as any
   sweep (``serving_summary.adaptive_check`` holds it against the best static one per level).
4. **Trace**: one bursty open-loop run (gamma gaps, ``serving_load.arrival_gaps``) at the rate that
   keeps the policy's switch-off load (or where its k first falls) in flight on spec-off
   (``serving_summary.trace_rate`` at ``serving_policy.policy_switch``), so bursts go above the
   crossover and quiet spells below it; ``serving_summary.trace_check`` compares the configurations.
   Just before it is sent, its speedups are forecast from the sweep's figures alone
   (``trace_forecast``) and handed to ``on_forecast``, so the forecast is on record before the trace.

Every server is stopped however the check ends (the ``start`` context managers).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from specnb.measure.load_shapes import Open
from specnb.measure.serving_summary import summarise_sweep, trace_rate
from specnb.measure.serving_sweep import Sweep, run_sweep, targets_of
from specnb.predict.serving_policy import choose_launch, policy_ranges, policy_switch, serving_policy
from specnb.predict.trace_forecast import forecast_trace, trace_rounds


def empty() -> Sweep:
    return Sweep(records=pd.DataFrame(), runs=pd.DataFrame())


@dataclass(kw_only=True)
class PolicyCheck:
    """``sweep``: the static configurations; ``check`` and ``trace``: every configuration with the
    adaptive one beside them (empty where it was not launched); ``adaptive``: its launch (None: none);
    ``policy``: the per-level policy it launched (what a trace prediction reads adaptive's TPOT from);
    ``rate``: the trace's mean arrival rate (requests/s); ``forecast``: the trace's speedups as
    forecast before it was sent (``trace_forecast.forecast_trace``); ``note``: why a part is missing, one line."""

    sweep: Sweep
    check: Sweep = field(default_factory=empty)
    trace: Sweep = field(default_factory=empty)
    adaptive: object | None = None
    policy: pd.DataFrame = field(default_factory=pd.DataFrame)
    rate: float = math.nan
    forecast: pd.DataFrame = field(default_factory=pd.DataFrame)
    note: str = ""


def adaptive_config(configs: list, policy: pd.DataFrame, family: str):
    """The policy as one launch named ``adaptive``: ``family``'s static configuration with the largest
    k, at the policy's largest k, with its ranges as the schedule (none where one range drafts at every
    batch size: a static launch, as ``launch_json`` prints it); None where no range drafts."""
    ranges = policy_ranges(policy)
    k = max((r[2] for r in ranges), default=0)
    members = [c for c in configs if c.speculative and c.speculation.family == family]
    if not k or not members:
        return None
    from specnb.engine.engines.seam import engine_of

    base = max(members, key=lambda c: c.draft_length)
    return engine_of(base).scheduled(base, k, ranges if len(ranges) > 1 else None)


def check_policy(configs: list, prompts: pd.DataFrame, loads: list, *, start: Callable | None = None,
                 burstiness: float = 0.25, trace_repeats: int = 2,
                 on_run: Callable[[str], Callable | None] = lambda phase: None,
                 on_forecast: Callable[[pd.DataFrame], None] | None = None, **settings) -> PolicyCheck:
    """Steps 1–4 of the module docstring on ``configs`` (one engine's, one that schedules), at the
    closed-loop ``loads``; ``start``: the context manager that starts servers and yields ``Running``
    (``specnb.engine.servers.servers``: a method the engine refuses is left out with its line);
    ``on_run(phase)``: the saver for "sweep", "check" and "trace"; ``on_forecast(table)``: sees the
    trace's forecast before the trace is sent (to record it); ``settings``: ``run_sweep``'s.
    A server that dies ends the check with what was measured."""
    if start is None:
        from specnb.engine.servers import servers as start
    with start(configs, keep_going=True) as running:
        every = dict(running.servers)
        launched = [c for c in configs if c.name in every]
        skipped = "; ".join(f"{name} left out: {line}" for name, line in running.failed.items())
        down = lambda name: every[name].exit_note()  # noqa: E731
        sweep = run_sweep(targets_of(launched, every), prompts, loads, down=down, on_run=on_run("sweep"), **settings)
        ended_early, sweep.stopped = sweep.stopped, "; ".join(filter(None, [skipped, sweep.stopped]))
        if ended_early:
            return PolicyCheck(sweep=sweep, note="no adaptive configuration: the sweep ended early")
        summary = summarise_sweep(sweep.records, sweep.runs)
        overall = serving_policy(summary, records=sweep.records)  # noise-aware from 3 rounds on
        choice = choose_launch(summary, overall, records=sweep.records)
        adaptive = adaptive_config(launched, choice.policy, choice.launch.family)
        if adaptive is None:
            return PolicyCheck(sweep=sweep, note=f"no adaptive configuration: {choice.why_not}, so the policy is "
                                                 "no --speculative-config")
        with start([adaptive]) as extra:
            every |= extra.servers
            launched.append(adaptive)
            check = run_sweep(targets_of(launched, every), prompts, loads, down=down, on_run=on_run("check"),
                              **(settings | {"probe_max_tokens": 0}))  # the sweep's forward probe serves both
            switch = policy_switch(choice.policy)
            rate = trace_rate(summary, switch if not math.isnan(switch) else max(load.level for load in loads))
            trace_load = Open(rate=rate, burstiness=burstiness, lengths=loads[0].lengths, seed=loads[0].seed)
            trace_prompts = pd.concat([prompts] * trace_repeats, ignore_index=True)
            forecast = pd.DataFrame() if check.stopped else forecast_trace(summary, trace_rounds(
                trace_load, trace_prompts, settings.get("rounds", 1), settings.get("seed", 0)), choice.policy)
            if on_forecast and len(forecast):
                on_forecast(forecast)
            trace = empty() if check.stopped else run_sweep(
                targets_of(launched, every), trace_prompts, [trace_load], down=down, on_run=on_run("trace"),
                **(settings | {"probe_max_tokens": 0}))
        return PolicyCheck(sweep=sweep, check=check, trace=trace, adaptive=adaptive, policy=choice.policy, rate=rate,
                           forecast=forecast, note=check.stopped or trace.stopped)
