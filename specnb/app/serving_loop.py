"""The closed loop on vLLM: measure the static configurations, turn the policy into a configuration of
its own and measure it beside them.

1. **Sweep** the static configurations (spec-off, ``ngram:K``, ...) at every level: where the policy
   comes from (``serving_predictor.serving_policy``, one method per server: ``serving_setup.vllm_policy``).
2. **Adaptive**: a vLLM launched with the policy's ranges as ``num_speculative_tokens_per_batch_size``
   (``adaptive_config``), while the static servers keep running — or none where no launch is expected
   to do better than vLLM without speculation (``vllm_policy``: a k = 0 range is not free): then the
   policy is "no ``--speculative-config``", and nothing is launched for it.
3. **Check**: the same levels again on every configuration, adaptive included, interleaved as any
   sweep (``serving_summary.adaptive_check`` holds it against the best static one per level).
4. **Trace**: one bursty open-loop run (gamma gaps, ``serving_load.arrival_gaps``) at the rate that
   keeps the policy's switch-off load (or where its k first falls) in flight on spec-off
   (``serving_summary.trace_rate`` at ``serving_predictor.policy_switch``), so bursts go above the
   crossover and quiet spells below it;
   ``serving_summary.trace_check`` compares mean TPOT.

Every server is stopped however the loop ends (the ``start`` context managers).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pandas as pd

from specnb.app.serving_setup import no_launch_why, vllm_policy
from specnb.measure.serving_load import Target
from specnb.measure.serving_summary import ADAPTIVE_CONFIG, summarise_sweep, trace_rate
from specnb.measure.serving_sweep import Sweep, run_sweep
from specnb.predict.serving_predictor import policy_ranges, policy_switch, serving_policy


def empty() -> Sweep:
    return Sweep(records=pd.DataFrame(), runs=pd.DataFrame())


@dataclass(kw_only=True)
class ClosedLoop:
    """``sweep``: the static configurations; ``check`` and ``trace``: every configuration with the
    adaptive one beside them (empty where it was not launched); ``adaptive``: its launch (None: none);
    ``rate``: the trace's mean arrival rate (requests/s); ``note``: why a part is missing, one line."""

    sweep: Sweep
    check: Sweep = field(default_factory=empty)
    trace: Sweep = field(default_factory=empty)
    adaptive: object | None = None
    rate: float = math.nan
    note: str = ""


def adaptive_config(configs: list, policy: pd.DataFrame, method: str):
    """The policy as one vLLM launch named ``adaptive``: ``method``'s static configuration with the
    largest k, at the policy's largest k, with its ranges as the schedule (none where one range drafts
    at every batch size: a static launch, as ``serving_predictor.speculative_config`` prints it); None
    where no range drafts."""
    ranges = policy_ranges(policy)
    k = max((r[2] for r in ranges), default=0)
    family = [c for c in configs if c.method == method]
    if not k or not family:
        return None
    base = max(family, key=lambda c: c.k)
    return replace(base, name=ADAPTIVE_CONFIG, k=k, schedule=[tuple(r) for r in ranges] if len(ranges) > 1 else None)


def targets_of(servers: dict) -> list[Target]:
    return [Target(name=name, url=server.url, engine="vllm", model=server.model) for name, server in servers.items()]


def closed_loop(configs: list, prompts: pd.DataFrame, levels: list[int], lengths: dict[str, int], *,
                start: Callable | None = None, burstiness: float = 0.25, trace_repeats: int = 2,
                on_run: Callable[[str], Callable | None] = lambda phase: None, **settings) -> ClosedLoop:
    """Steps 1–4 of the module docstring on ``configs`` (``VllmConfig``), closed loop at ``levels``;
    ``lengths``: each speculative configuration's k; ``start``: the context manager that starts
    servers and yields ``Running`` (``specnb.engine.servers.servers``: a method vLLM refuses is left
    out with its line); ``on_run(phase)``: the saver for "sweep", "check" and "trace"; ``settings``:
    ``run_sweep``'s. A server that dies ends the loop with what was measured."""
    if start is None:
        from specnb.engine.servers import servers as start
    with start(configs, keep_going=True) as running:
        every = dict(running.servers)
        skipped = "; ".join(f"{name} left out: {line}" for name, line in running.failed.items())
        down = lambda name: every[name].exit_note()  # noqa: E731
        sweep = run_sweep(targets_of(every), prompts, levels, down=down, on_run=on_run("sweep"), **settings)
        ended_early, sweep.stopped = sweep.stopped, "; ".join(filter(None, [skipped, sweep.stopped]))
        if ended_early:
            return ClosedLoop(sweep=sweep, note="no adaptive configuration: the sweep ended early")
        summary = summarise_sweep(sweep.records, sweep.runs)
        lengths = {name: k for name, k in lengths.items() if name in every}
        overall = serving_policy(summary, lengths)
        method, policy = vllm_policy(summary, overall, lengths)
        adaptive = adaptive_config([c for c in configs if c.name in every], policy, method)
        if adaptive is None:
            why = no_launch_why(overall, method)
            return ClosedLoop(sweep=sweep, note=f"no adaptive configuration: {why}, so the policy is vLLM without "
                                                "--speculative-config")
        with start([adaptive]) as extra:
            every |= extra.servers
            check = run_sweep(targets_of(every), prompts, levels, down=down, on_run=on_run("check"),
                              **(settings | {"probe_upto": 0}))  # the sweep's forward probe serves both
            switch = policy_switch(policy)
            rate = trace_rate(summary, switch if not math.isnan(switch) else max(levels))
            trace_prompts = pd.concat([prompts] * trace_repeats, ignore_index=True)
            trace = empty() if check.stopped else run_sweep(
                targets_of(every), trace_prompts, [rate], down=down, on_run=on_run("trace"),
                **(settings | {"mode": "poisson", "burstiness": burstiness, "probe_upto": 0}))
        return ClosedLoop(sweep=sweep, check=check, trace=trace, adaptive=adaptive, rate=rate,
                          note=check.stopped or trace.stopped)
