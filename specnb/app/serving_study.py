"""Notebook 08's serving study as one call: ``run(params)`` turns the notebook's parameters into the
sweep, the prediction, the decision, the policy's measured run and the conclusion, records every
table and value as it goes (a ``Recorder``: an interrupted study keeps what it measured), and returns
a ``ServingStudy`` holding what the notebook shows, ready to display: every choice of what to run
and what to show is made here, so the notebook only displays parts (``show`` skips a part that does
not exist in this run).

The steps, in order: **prepare** (every parameter checked before any server starts: the loads, the
engine, its configurations, the notes and the machine line), **sweep** (an endpoint's servers, the
policy's four-phase run on an engine that schedules k by batch, or one server per configuration),
**summarise** (the launch noise, the summary, the crossover), **predict** (the serving predictor held
out on prompts), **decide** (the policy and the one launch) and **check** (the adaptive launch, the
bursty trace and its forecast), then the conclusion.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, fields
from urllib.parse import urlsplit

import pandas as pd

from specnb.app import serving_keys as keys
from specnb.app import serving_setup as setup
from specnb.app.charts import load_curves as charts
from specnb.app.policy_run import PolicyHooks, PolicyRun, run_policy
from specnb.app.recorder import Recorder
from specnb.app.text import nb08_serving as text
from specnb.app.text.cell_report import Report
from specnb.core.paths import git_commit
from specnb.measure import serving_endpoint, serving_stats, serving_sweep
from specnb.measure.load_shapes import Lengths
from specnb.measure.prompts import select_prompts
from specnb.predict import serving_decision, trace_prediction
from specnb.predict import serving_predictor as predict
from specnb.serve.speculation import BASELINE_CONFIG

SMOKE = {"n_prompts": 4, "max_new_tokens": 12, "concurrency": [1, 2], "rounds": 3, "turnovers": 1}


@dataclass(frozen=True, kw_only=True)
class Params:
    """Notebook 08's parameters cell, as a record (the cell documents each one)."""

    verifier: str = "smollm2-135m"
    precision: str = "q4_1"
    speculation: list | None = None
    prompts: str = "all"
    n_prompts: int = 16
    max_new_tokens: int = 32
    length_range_ratio: float = 0.5
    turnovers: int = 3
    concurrency: list = field(default_factory=lambda: [1, 2, 4, 8])
    rates: list = field(default_factory=list)
    rounds: int = 3
    slo_tpot_ms: float = 0.0
    endpoint: str = ""
    engine: str = "llama.cpp"
    threads: int = 0
    seed: int = 0
    smoke: bool = False
    output_dir: str = ""
    trimmed: str = ""
    run_name: str = "08_serving"
    interactive: bool = True

    @classmethod
    def of(cls, names: dict) -> Params:
        """The parameters among ``names`` (a notebook's ``globals()``), with a smoke run's small sizes."""
        given = {f.name: names[f.name] for f in fields(cls) if f.name in names}
        return cls(**given | (SMOKE if given.get("smoke") else {}))


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """What the parameters turn into before any server starts."""

    loads: list
    served: object
    speculation: list
    prompts: pd.DataFrame
    configs: list
    absent: str | None
    notes: tuple[str, ...]
    machine: str

    @property
    def steps_batch(self) -> bool:
        return type(self.loads[0]).steps_batch

    @property
    def levels(self) -> list:
        return [load.level for load in self.loads]


@dataclass(frozen=True, kw_only=True)
class ServingStudy:
    """What notebook 08 shows, section by section: ``intro`` (notes and the settings line), the sweep
    (``sweep``, ``run``: the policy's four-phase run where one ran, ``sweep_notes``, ``noise``,
    ``summary`` and its ``summary_table``, ``crossings``, ``sweep_report`` and its charts), the
    prediction (``open_loop_note``, ``validation``, ``prediction_report``, ``prediction_chart``), the
    decision (``decision``, completed with the trace; ``policy_report``), the launch and the trace
    (``check_summary``, ``check_table``, ``adaptive``, ``trace``, ``forecast``, ``reconstruction``,
    ``adaptive_report``, ``forecast_report``) and the ``conclusion``. A part that this run has not
    is None (a report or chart) or empty (a table)."""

    intro: tuple[str, ...]
    machine: str
    sweep: serving_sweep.Sweep
    run: PolicyRun | None
    sweep_notes: tuple[str, ...]
    noise: object | None
    summary: pd.DataFrame
    summary_table: pd.DataFrame
    crossings: pd.DataFrame
    sweep_report: Report
    tpot_chart: object | None
    throughput_chart: object | None
    latency_chart: object | None
    position_chart: object | None
    open_loop_note: Report | None
    validation: pd.DataFrame
    prediction_report: Report | None
    prediction_chart: object | None
    decision: serving_decision.ServingDecision
    policy_report: Report | None
    check_summary: pd.DataFrame | None
    check_table: pd.DataFrame | None
    adaptive: pd.DataFrame
    trace: pd.DataFrame
    forecast: pd.DataFrame
    reconstruction: pd.DataFrame
    adaptive_report: Report
    forecast_report: Report | None
    verdict: str
    conclusion: Report


def show(*parts) -> None:
    """Each part this run has, in order: a line printed, anything else displayed; None skipped."""
    from IPython.display import display

    for part in parts:
        if isinstance(part, str):
            print(part)
        elif part is not None:
            display(part)


def note_lines(*lines) -> tuple[str, ...]:
    return tuple(f"note: {line}" for line in lines if line)


def prepare(params: Params, rec: Recorder) -> Prepared:
    """Every parameter checked (a bad one is a ``ParameterError`` before any server starts), the
    engine's configurations with spec-off's A/A twin (the launch noise), and the settings recorded."""
    p = params
    lengths = Lengths(tokens=p.max_new_tokens, range_ratio=p.length_range_ratio)
    loads = setup.load_shapes(p.concurrency, p.rates, lengths.check(setup.launch_context(p.engine, p.endpoint)),
                              seed=p.seed, turnovers=p.turnovers)
    setup.check_rounds(p.rounds, policy=not p.rates and (not p.endpoint or "," in p.endpoint))
    served = setup.check_engine(p.engine, p.endpoint)
    note = "" if p.endpoint else setup.speculation_note(p.engine, p.speculation, p.smoke, p.verifier)
    speculation = setup.serving_speculation(p.engine, p.speculation, p.smoke, p.verifier)
    chosen = select_prompts(p.prompts, p.n_prompts)
    configs = [] if p.endpoint else setup.launch_configs(p.engine, p.verifier, p.precision, speculation,
                                                         setup.check_levels(p.concurrency), p.threads)
    configs = serving_stats.with_twin(configs) if configs else configs  # spec-off launched twice: the launch noise
    absent = None if p.endpoint else setup.missing_note(p.engine)  # no engine here: a note, and the study still ends
    trimmed = f"make demo trimmed this run for its budget: {p.trimmed}" if p.trimmed else ""
    machine = setup.machine_line(p.engine, configs, p.endpoint)
    rec.value(keys.LOAD_AVERAGE_START, round(os.getloadavg()[0], 1))  # a busy machine slows every configuration alike
    shape, levels = type(loads[0]), [load.level for load in loads]
    rec.value(keys.SETTINGS, {"verifier": p.verifier, "precision": p.precision, "prompts": len(chosen),
                           "load": shape.name, "levels": levels, "rounds": p.rounds,
                           "max_new_tokens": p.max_new_tokens, "turnovers": p.turnovers,
                           "length_range_ratio": p.length_range_ratio, "engine": p.engine,
                           "configs": [c.name for c in configs] or p.endpoint})
    line = (f"{machine}; {len(chosen)} prompts, {p.max_new_tokens} new tokens on average, greedy; {shape.name} loop "
            f"at {levels}, {p.rounds} rounds")
    return Prepared(loads=loads, served=served, speculation=speculation, prompts=chosen, configs=configs,
                    absent=absent, notes=(*note_lines(trimmed, note, absent), line), machine=machine)


def run_sweeps(params: Params, ready: Prepared, rec: Recorder) -> tuple[serving_sweep.Sweep, PolicyRun | None]:
    """The sweep, and the policy's four-phase run where one ran (an engine started here that schedules
    k by batch, on closed-loop levels: its trace forecast recorded before the trace is sent)."""
    settings = serving_sweep.SweepSettings(
        rounds=params.rounds, seed=params.seed, progress=params.interactive,
        probe_max_tokens=setup.probe_max_tokens(ready.levels, ready.configs) if ready.steps_batch else 0,
        noise_key=serving_stats.noise_key(ready.configs) if ready.configs else None)
    if params.endpoint:
        targets = [serving_endpoint.check_target(t) for t in setup.endpoint_targets(params.endpoint, params.engine)]
        hooks = serving_sweep.SweepHooks(on_run=setup.saver(rec, git_commit()))
        return serving_sweep.run_sweep(targets, ready.prompts, ready.loads, settings, hooks), None
    if ready.absent:
        return serving_sweep.Sweep(records=pd.DataFrame(), runs=pd.DataFrame(), stopped=ready.absent), None
    if ready.served.schedules and ready.steps_batch:
        hooks = PolicyHooks(on_run=setup.phase_savers(rec, git_commit()), on_forecast=setup.forecast_saver(rec))
        loop = run_policy(ready.configs, ready.prompts, ready.loads, settings, hooks=hooks)
        return loop.sweep, loop
    return serving_sweep.sweep_servers(ready.configs, ready.prompts, ready.loads, settings,
                                       relaunch=ready.served.relaunch_each_round,  # fresh each round
                                       on_run=setup.saver(rec, git_commit())), None


def noise_of(sweep, loop: PolicyRun | None, configs: list, engine: str, endpoint: str = ""):
    """The launch noise every CI counts: the policy run's, else the store's with the sweep's A/A twin
    added where it ran; at an endpoint, the store of that engine on that host, with a twin URL's pair
    (``spec-off-aa=URL``) added (neither: not measured)."""
    if loop is not None:
        return loop.noise
    if not configs:
        urls = {t.name: t.url for t in setup.endpoint_targets(endpoint, engine)} if endpoint else {}
        host = urlsplit(urls.get(BASELINE_CONFIG, "")).netloc or "none"  # spec-off's server: the one the noise is of
        return serving_stats.noise_for(sweep.records, serving_stats.endpoint_key(engine, host))
    return serving_stats.noise_for(sweep.records, serving_stats.noise_key(configs))


def validate(params: Params, sweep, summary: pd.DataFrame, steps_batch: bool) -> pd.DataFrame:
    """The serving predictor held out on prompts (or, without per-request draft counts, on levels);
    empty where there is nothing to predict (no speculative configuration, or open-loop levels)."""
    lengths = serving_stats.draft_lengths(summary)  # each speculative configuration's k, as its records carry it
    if not (lengths and "speedup_tpot" in summary and steps_batch):  # a step's sequences: closed loop
        return summary.iloc[:0]
    validation = predict.validate_held_out(sweep, lengths, seed=params.seed)
    if validation.empty:  # no draft counts per request or per fold (SGLang): same prompts, other levels
        validation = predict.validate_serving(summary, lengths, probe=sweep.probe)
    return validation


@dataclass(frozen=True, kw_only=True)
class Checked:
    """Section 3's tables: the adaptive launch measured again, the trace, its forecast and reconstruction."""

    check_summary: pd.DataFrame | None = None
    adaptive: pd.DataFrame = field(default_factory=pd.DataFrame)
    trace: pd.DataFrame = field(default_factory=pd.DataFrame)
    forecast: pd.DataFrame = field(default_factory=pd.DataFrame)
    reconstruction: pd.DataFrame = field(default_factory=pd.DataFrame)


def check(loop: PolicyRun | None, summary: pd.DataFrame, seed: int, noise) -> Checked:
    """What the policy's run measured after the sweep, judged: adaptive against the best static
    configuration per level, the bursty trace, the forecast written before it and the reconstruction."""
    if loop is None:
        return Checked()
    check_summary, adaptive = None, pd.DataFrame()
    if len(loop.check.records):
        check_summary = serving_stats.summarise_sweep(loop.check.records, loop.check.runs, seed=seed, noise=noise)
        adaptive = serving_stats.adaptive_check(check_summary, records=loop.check.records, seed=seed, noise=noise)
    if not len(loop.trace.records):
        return Checked(check_summary=check_summary, adaptive=adaptive)
    trace = serving_stats.trace_check(loop.trace.records, seed=seed, noise=noise)
    forecast = trace_prediction.trace_prediction_table(loop.forecast, trace) if len(loop.forecast) else pd.DataFrame()
    rebuilt = trace_prediction.predict_trace(summary, loop.trace.runs, loop.policy)  # diagnostic
    return Checked(check_summary=check_summary, adaptive=adaptive, trace=trace, forecast=forecast,
                   reconstruction=trace_prediction.trace_prediction_table(rebuilt, trace))


def record_tables(rec: Recorder, tables: dict[str, pd.DataFrame | None]) -> None:
    """Each table this run has, as ``<stem>.<name>.csv``; an empty one is not written."""
    for name, table in tables.items():
        if table is not None and len(table):
            rec.table(name, table)


def chart_if(ready: bool, chart, *args):
    """``chart(*args)`` where this run has what it plots, else None."""
    return chart(*args) if ready else None


def run(params: Params) -> ServingStudy:
    """The serving study at ``params`` (the module docstring's steps), every table and value recorded
    under ``params.output_dir`` as ``params.run_name``."""
    started = time.perf_counter()
    rec = Recorder(params.output_dir, params.run_name)
    ready = prepare(params, rec)
    sweep, loop = run_sweeps(params, ready, rec)
    noise = noise_of(sweep, loop, ready.configs, params.engine, params.endpoint)
    rec.value(keys.LAUNCH_NOISE, noise.record() if noise is not None else None)  # what every CI below is widened by
    summary = serving_stats.summarise_sweep(sweep.records, sweep.runs, slo_tpot_ms=params.slo_tpot_ms,
                                              seed=params.seed, noise=noise)
    record_tables(rec, {"probe": sweep.probe})
    rec.table("summary", summary)
    speedups = "speedup_tpot" in summary
    crossings = serving_stats.crossover(summary, "speedup_tpot") if speedups else summary.iloc[:0]
    record_tables(rec, {"crossover": crossings})
    sweep_report = rec.record(text.sweep_text(summary, crossings, sweep.probe))
    open_loop = None if ready.steps_batch else rec.record(text.open_loop_note())
    validation = validate(params, sweep, summary, ready.steps_batch)
    record_tables(rec, {"prediction": validation})
    prediction = rec.record(text.prediction_text(validation)) if len(validation) else None
    decision = loop.decision if loop is not None else serving_decision.decide(
        summary, sweep.records, params.seed, engine=params.engine, configs=ready.configs)
    record_tables(rec, {"policy": decision.policy.frame()})
    policy_report = rec.record(text.policy_text(decision)) if ready.steps_batch else None
    checked = check(loop, summary, params.seed, noise)
    decision = serving_decision.with_trace(decision, checked.trace)  # what the trace supports, beside the launch
    if checked.check_summary is not None:
        rec.table("check_summary", checked.check_summary)
    record_tables(rec, {"adaptive": checked.adaptive, "trace": checked.trace,
                        "trace_forecast_check": checked.forecast, "trace_reconstruction": checked.reconstruction})
    traced = loop is not None and len(loop.trace.records) > 0
    adaptive_report = rec.record(text.adaptive_text(checked.adaptive, checked.trace, loop, decision))
    forecast_report = rec.record(text.trace_forecast_text(checked.forecast, checked.reconstruction)) if traced \
        else None
    verdict, _ = text.launch_verdict(decision, checked.trace)
    rec.value(keys.LAUNCH_KIND, decision.kind)  # none, static, schedule or per_load: what the decision launches
    rec.value(keys.LAUNCH_LINE, decision.launch_line)  # what to paste: "" for no speculation
    rec.value(keys.MINUTES, round((time.perf_counter() - started) / 60, 2))
    rec.value(keys.LOAD_AVERAGE_END, round(os.getloadavg()[0], 1))
    trace_error = trace_prediction.trace_median_error(checked.forecast) if len(checked.forecast) else float("nan")
    conclusion = rec.record(text.serving_conclusion(crossings, validation, verdict, ready.machine, sweep.stopped,
                                                    trace_error))
    noise_note = noise.text() if noise is not None else ""
    return ServingStudy(
        intro=ready.notes, machine=ready.machine, sweep=sweep, run=loop,
        sweep_notes=note_lines(sweep.stopped, *sweep.screened.values(), noise_note), noise=noise,
        summary=summary, summary_table=charts.display_table(summary), crossings=crossings, sweep_report=sweep_report,
        tpot_chart=chart_if(speedups, charts.speedup_chart, summary, "speedup_tpot"),
        throughput_chart=chart_if(speedups, charts.speedup_chart, summary, "speedup_output_throughput"),
        latency_chart=chart_if(len(summary) > 0, charts.latency_throughput_chart, summary),
        position_chart=chart_if(len(summary) > 0, charts.position_chart, summary),
        open_loop_note=open_loop, validation=validation, prediction_report=prediction,
        prediction_chart=chart_if(len(validation) > 0, charts.prediction_chart, validation),
        decision=decision, policy_report=policy_report, check_summary=checked.check_summary,
        check_table=None if checked.check_summary is None else charts.display_table(checked.check_summary),
        adaptive=checked.adaptive, trace=checked.trace, forecast=checked.forecast,
        reconstruction=checked.reconstruction, adaptive_report=adaptive_report, forecast_report=forecast_report,
        verdict=verdict, conclusion=conclusion)
