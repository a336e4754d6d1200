"""The policy's measured run, in four phases, on the engine that can run it as one server
(``ServingEngine.schedules``: vLLM, the simulated engine): measure the static configurations, decide
once what to launch, launch it where it is a schedule, measure it beside them and over a bursty trace.

1. **Sweep** the static configurations (spec-off, ``ngram:K``, ...) at every level, summarised with
   the run's seed, and **decide** (``serving_decision.decide``: the per-level policy and the one
   launch, ``serving_launch.choose_launch``): that record is what is launched here and what the
   notebook prints.
2. **Adaptive**: where the launch is a schedule of more than one range, a server launched with it
   (``decision.server``), while the static servers keep running. A launch of one range is a static
   configuration, measured as itself already, and no speculation needs no server: nothing more is
   launched for either.
3. **Check** (a schedule only): the same levels again on every configuration, adaptive included,
   interleaved as any sweep (``serving_stats.adaptive_check`` holds it against the best static one
   per level).
4. **Trace**: one bursty open-loop run (gamma gaps, ``serving_load.arrival_gaps``) at the rate that
   keeps the decision's switch load (``decision.switch``: where the policy stops speculating or its k
   first falls) in flight on spec-off (``serving_stats.trace_rate``), so bursts go above the
   crossover and quiet spells below it, on every configuration running — the schedule beside the
   static ones, or the static ones alone: the only check of the verdict on bursty load either way
   (``serving_stats.trace_check``, ``serving_decision.with_trace``). Just before it is sent, its
   speedups are forecast from the sweep's figures alone (``trace_forecast``) and handed to
   ``on_forecast``, so the forecast is on record before the trace.

Every server is stopped however the check ends (the ``start`` context managers).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pandas as pd

from specnb.measure.load_shapes import Open
from specnb.measure.serving_stats import noise_for, noise_key, summarise_sweep, trace_rate
from specnb.measure.serving_sweep import Sweep, SweepHooks, SweepSettings, run_sweep, targets_of
from specnb.predict.policy_record import Policy
from specnb.predict.serving_decision import ServingDecision, decide
from specnb.predict.trace_forecast import forecast_trace, trace_rounds
from specnb.serve.speculation import AA_TWIN_CONFIG


def empty() -> Sweep:
    return Sweep(records=pd.DataFrame(), runs=pd.DataFrame())


@dataclass(kw_only=True)
class PolicyRun:
    """``sweep``: the static configurations; ``decision``: what to launch, made once from them
    (``serving_decision.decide``); ``check``: every configuration with the adaptive one beside them
    (empty where no schedule was launched); ``trace``: every configuration running over the bursty
    trace; ``rate``: its mean arrival rate (requests/s); ``forecast``: the trace's speedups as forecast
    before it was sent (``trace_forecast.forecast_trace``); ``note``: why a part is missing, one line."""

    sweep: Sweep
    decision: ServingDecision | None = None
    check: Sweep = field(default_factory=empty)
    trace: Sweep = field(default_factory=empty)
    rate: float = math.nan
    forecast: pd.DataFrame = field(default_factory=pd.DataFrame)
    noise: object | None = None  # the launch noise every CI here was widened by (``serving_stats.LaunchNoise``)
    note: str = ""

    @property
    def adaptive(self):
        """The schedule's server as launched (None: no schedule was launched)."""
        return self.decision.server if self.decision is not None and self.decision.checked else None

    @property
    def policy(self) -> Policy | None:
        """The launched schedule's per-level policy (what a trace prediction reads adaptive's TPOT from);
        None where none was launched."""
        return self.decision.launched if self.adaptive is not None else None


def unchecked_note(decision: ServingDecision) -> str:
    """Why no schedule is launched beside the static configurations."""
    if decision.kind == "static":
        return (f"the launch is {decision.config} at every load, a static configuration measured as itself (one "
                "range, no schedule to check)")
    if decision.kind == "none":
        return f"{decision.why_not}, so the policy is no --speculative-config"
    return "the engine has no launch of its own for the schedule"


@dataclass(frozen=True, kw_only=True)
class TraceSettings:
    """The bursty trace's shape: gamma gaps of ``burstiness`` (1: Poisson; lower: burstier), the
    prompts sent ``repeats`` times over."""

    burstiness: float = 0.25
    repeats: int = 2


@dataclass(frozen=True, kw_only=True)
class PolicyHooks:
    """What the policy's run calls out to: ``start``, the context manager that starts servers and
    yields ``Running`` (None: ``specnb.serve.servers.servers``, where a method the engine refuses is
    left out with its line); ``on_run(phase)``: the saver for "sweep", "check" and "trace";
    ``on_forecast(table)``: sees the trace's forecast before the trace is sent (to record it)."""

    start: Callable | None = None
    on_run: Callable[[str], Callable | None] = lambda phase: None
    on_forecast: Callable[[pd.DataFrame], None] | None = None


def run_policy(configs: list, prompts: pd.DataFrame, loads: list, settings: SweepSettings, *,
               trace_settings: TraceSettings = TraceSettings(), hooks: PolicyHooks = PolicyHooks()) -> PolicyRun:
    """Steps 1–4 of the module docstring on ``configs`` (one engine's, one that schedules), at the
    closed-loop ``loads``; ``settings``: every sweep's, its ``seed`` the summary's and the decision's
    too. A server that dies ends the check with what was measured."""
    start, on_run, on_forecast = hooks.start, hooks.on_run, hooks.on_forecast
    if start is None:
        from specnb.serve.servers import servers as start

    seed = settings.seed
    with start(configs, keep_going=True) as running:
        every = dict(running.servers)
        launched = [c for c in configs if c.name in every]
        skipped = "; ".join(f"{name} left out: {line}" for name, line in running.failed.items())
        down = lambda name: every[name].exit_note()  # noqa: E731
        sweep = run_sweep(targets_of(launched, every), prompts, loads, settings,
                          SweepHooks(down=down, on_run=on_run("sweep")))
        ended_early, sweep.stopped = sweep.stopped, "; ".join(filter(None, [skipped, sweep.stopped]))
        engine = configs[0].engine.name
        noise = noise_for(sweep.records, noise_key(configs))  # the store's, the A/A twin's pair added where it ran
        summary = summarise_sweep(sweep.records, sweep.runs, seed=seed, noise=noise)
        decision = decide(summary, sweep.records, seed, engine=engine, configs=launched)
        if ended_early:
            return PolicyRun(sweep=sweep, decision=decision, noise=noise, note="the sweep ended early")
        # the check and the trace judge candidates: neither the twin (it measured noise) nor one screened out
        launched = [c for c in launched if c.name != AA_TWIN_CONFIG and c.name not in sweep.screened]
        check, again = empty(), replace(settings, probe_max_tokens=0)  # the sweep's forward probe serves every pass
        with contextlib.ExitStack() as stack:
            if decision.checked:
                every |= stack.enter_context(start([decision.server])).servers
                launched.append(decision.server)
                check = run_sweep(targets_of(launched, every), prompts, loads, again,
                                  SweepHooks(down=down, on_run=on_run("check")))
            trace, rate, forecast = empty(), math.nan, pd.DataFrame()
            if decision.kind and len(launched) > 1 and not check.stopped:  # the trace: built and sent here, once
                switch = decision.switch if not math.isnan(decision.switch) else max(load.level for load in loads)
                rate = trace_rate(summary, switch)
                trace_load = Open(rate=rate, burstiness=trace_settings.burstiness, lengths=loads[0].lengths,
                                  seed=loads[0].seed)
                trace_prompts = pd.concat([prompts] * trace_settings.repeats, ignore_index=True)
                forecast = forecast_trace(summary, trace_rounds(trace_load, trace_prompts, settings.rounds,
                                                                seed), decision.launched if decision.checked else None)
                if on_forecast and len(forecast):
                    on_forecast(forecast)
                trace = run_sweep(targets_of(launched, every), trace_prompts, [trace_load], again,
                                  SweepHooks(down=down, on_run=on_run("trace")))
        why = "" if decision.checked else unchecked_note(decision)
        return PolicyRun(sweep=sweep, decision=decision, check=check, trace=trace, rate=rate, forecast=forecast,
                           noise=noise, note="; ".join(filter(None, [why, check.stopped or trace.stopped])))
