"""Notebook 08's serving study as one call: ``run(params)`` checks the notebook's parameters, runs the
sweep, judges it once (the launch noise, the summary, the ``Verdict``: ``judge``), launches and checks
what the verdict says where the engine runs it as one server, and returns a ``ServingStudy`` holding
what the notebook shows. Every table and value is recorded as it goes (a ``Recorder``: an interrupted
study keeps what it measured); the notebook only displays parts (``show`` skips one this run has not).

The steps, in order:

1. **Prepare**: every parameter checked before any server starts (the loads, the engine, its
   configurations with spec-off's A/A twin where the launch-noise store asks for it, endpoint targets).
2. **Sweep** the configurations at every level (``serving_sweep``): an endpoint's servers, one server per
   configuration, or — on an engine that changes k with the batch (``ServingEngine.schedules``: vLLM,
   the simulated engine) on closed-loop levels — the servers kept running for steps 4 and 5.
3. **Judge**, once (``judge``): the launch noise (the twin's pair added to the store once, or the
   store's), the summary with its simultaneous CIs, and the ``Verdict`` (``serving_verdict.decide``).
4. **Check** (a schedule only): the schedule launched as its own server (``adaptive``) and every level
   measured again beside the static configurations (``serving_stats.adaptive_check``).
5. **Trace**: one bursty open-loop run (gamma gaps) at the rate that keeps the verdict's switch load in
   flight on spec-off, every configuration running; its speedups forecast from the sweep's figures
   just before it is sent (``serving_model``), so the forecast is on record first. The trace checks the
   launch (``serving_verdict.with_trace``): it does not decide again.

Every server is stopped however the study ends.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import dataclass, field, fields, replace
from urllib.parse import urlsplit

import pandas as pd

from specnb.app import serving_keys as keys
from specnb.app.charts import load_curves as charts
from specnb.app.recorder import Recorder
from specnb.app.text import nb08_serving as text
from specnb.app.text.cell_report import Report
from specnb.core.devices import cpu_name
from specnb.core.errors import ParameterError
from specnb.core.paths import git_commit
from specnb.measure import serving_load, serving_stats, serving_sweep
from specnb.measure.prompts import select_prompts
from specnb.measure.serving_load import Closed, Lengths, Open, Target
from specnb.measure.serving_sweep import Sweep, SweepHooks, SweepSettings, run_sweep, targets_of
from specnb.predict import serving_model as predict
from specnb.predict import serving_verdict
from specnb.predict.serving_verdict import Verdict
from specnb.serve.engines import AA_TWIN_CONFIG, BASELINE_CONFIG, FREE_FAMILIES, Speculation, engine_named, engines
from specnb.serve.processes import servers

SMOKE = {"n_prompts": 4, "max_new_tokens": 12, "concurrency": [1, 2], "rounds": 3, "turnovers": 1}
TRACE_BURSTINESS = 0.25  # the bursty trace's gamma shape (1: Poisson; lower: burstier)
TRACE_REPEATS = 2  # the trace sends the prompts this many times over


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
    screen: bool = True
    aa_twin: bool = False
    moe: bool = False
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


# ---------------------------------------------------------------- checks before anything starts
def check_engine(engine: str, endpoint: str = ""):
    """The registered engine named ``engine``; one that notebook 08 cannot start needs an endpoint."""
    found = engine_named(engine)
    if not endpoint and not found.launched:
        started = " or ".join(name for name, e in engines().items() if e.launched)
        raise ParameterError(f"engine {engine!r} runs only as an endpoint here: pass -p endpoint URL, or use engine "
                             f"{started}")
    return found


def check_levels(levels, name: str = "concurrency") -> list:
    """Concurrency levels are whole numbers ≥ 1, rates numbers > 0; at least one of them."""
    values = list(levels) if isinstance(levels, (list, tuple)) else None
    if not values:
        raise ParameterError(f"{name} must be a non-empty list, e.g. [1, 2, 4, 8], got {levels!r}")
    for value in values:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
        if name == "concurrency":
            ok = ok and float(value).is_integer() and value >= 1
        if not ok:
            accepted = "whole numbers >= 1 (requests in flight)" if name == "concurrency" else "numbers > 0 (req/s)"
            raise ParameterError(f"{name} levels must be {accepted}, got {value!r} in {values!r}")
    return [int(v) for v in values] if name == "concurrency" else values


def check_rounds(rounds, policy: bool) -> int:
    """Rounds are a whole number ≥ 1; where a verdict is asked (closed-loop levels with speculation), at
    least 3, as vLLM's proposed k tuner asks (the median of ≥ 3 runs): each level's CI resamples
    prompts with their rounds, and one round leaves a slow spell of a shared machine on one configuration."""
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
        raise ParameterError(f"rounds must be a whole number >= 1, got {rounds!r}")
    if policy and rounds < 3:
        raise ParameterError(f"rounds must be >= 3 where a verdict is asked (a slow spell must not land on one run), "
                             f"got {rounds}; use rates for open-loop runs or leave speculation out for one round")
    return rounds


def load_shapes(concurrency, rates, lengths: Lengths, *, burstiness: float = 1.0, seed: int = 0,
                turnovers: int = 3) -> list:
    """The loads a sweep runs: a closed loop at each concurrency, or open-loop arrivals at each rate
    when ``rates`` is not empty; every request's output length by the same rule (``Lengths``: drawn
    over [L/2, 3L/2] unless told, checked here; against a launch's context, ``launch_context``, by
    the caller); a closed loop's slots turn over ``turnovers`` times in each run's steady window
    (``Closed``)."""
    lengths = lengths.check()
    if rates:
        if not isinstance(burstiness, (int, float)) or burstiness <= 0:
            raise ParameterError(f"burstiness must be above 0 (1: Poisson arrivals, below 1: bursts), got "
                                 f"{burstiness!r}")
        return [Open(rate=r, burstiness=burstiness, lengths=lengths, seed=seed) for r in check_levels(rates, "rates")]
    return [Closed(concurrency=c, lengths=lengths, seed=seed, turnovers=turnovers) for c in check_levels(concurrency)]


def launch_context(engine: str, endpoint: str = "") -> int | None:
    """The tokens one request may hold in what notebook 08 launches of ``engine`` (None at an
    endpoint, whose launch is someone else's)."""
    return None if endpoint else engine_named(engine).context


def serving_speculation(engine: str, speculation, smoke: bool = False, verifier: str = "") -> list[str]:
    """The speculation entries to run: the ones given, or (None) the engine's default — its n-gram at
    k = 4 (3 in a smoke run) and, where the verifier has an EAGLE-3 head the engine loads, the head
    beside it, so the sweep shows where a drafting model stops paying next to a free n-gram."""
    if speculation is None:
        return engine_named(engine).default_entries(smoke, verifier)
    if not isinstance(speculation, (list, tuple)) or not all(isinstance(s, str) for s in speculation):
        raise ParameterError(f"speculation must be a list of TYPE:K or DRAFT:K entries, e.g. [\"ngram:4\"], got "
                             f"{speculation!r}")
    return list(speculation)


def speculation_note(engine: str, speculation, smoke: bool, verifier: str) -> str:
    """"" unless the default speculation left the EAGLE-3 head out: then why, in one line."""
    return engine_named(engine).default_note(smoke, verifier) if speculation is None else ""


def launch_configs(engine: str, verifier: str, precision: str, speculation: list[str], concurrency: list,
                   threads: int = 0) -> list:
    """The configurations notebook 08 starts itself: spec-off first, then one per ``speculation`` entry."""
    return engine_named(engine).configs(verifier, precision, speculation, int(max(concurrency)), threads)


def missing_note(engine: str) -> str | None:
    """None when the engine notebook 08 starts is here, else one line saying why it is not."""
    return engine_named(engine).missing()


def machine_line(engine: str, configs: list, endpoint: str = "") -> str:
    """What ran where: the CPU's name and the engine (with its threads when launched here)."""
    if endpoint or not configs:
        return f"{cpu_name()}, {engine} (a running server at the endpoint)"
    return engine_named(engine).machine(configs)


def endpoint_targets(endpoint: str, engine: str) -> list[Target]:
    """``URL`` (one configuration, spec-off) or ``spec-off=URL,TYPE:K=URL,...`` (one per configuration:
    TYPE a method family — ngram, suffix, eagle3, draft_model, mtp, ... — and K its draft length, so
    the configuration's record is what the user said, never parsed back out of a name). Non-loopback
    hosts are refused unless ``SPECNB_ALLOW_REMOTE=1``: only loopback by default."""
    check_engine(engine, endpoint)
    targets = []
    for part in (p.strip() for p in endpoint.split(",") if p.strip()):
        label, _, url = part.rpartition("=") if "=" in part.split("://")[0] else ("", "", part)
        url = url.rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise ParameterError(f"endpoint {url!r} must start with http:// or https://, e.g. http://127.0.0.1:8000")
        host = url.split("://", 1)[1].split("/")[0].rsplit(":", 1)[0].strip("[]")
        if host not in ("127.0.0.1", "localhost", "::1") and os.environ.get("SPECNB_ALLOW_REMOTE") != "1":
            raise ParameterError(f"endpoint host {host!r} is not loopback; set SPECNB_ALLOW_REMOTE=1 to measure it")
        targets.append(Target(url=url, engine=engine, speculation=endpoint_speculation(label)))
    if not targets:
        raise ParameterError("endpoint is empty; pass http://host:port or spec-off=URL,ngram:4=URL")
    names = [t.name for t in targets]
    if len(set(names)) < len(names) or BASELINE_CONFIG not in names:
        raise ParameterError(f"endpoint configurations must be distinct and include spec-off=URL, got {names}")
    return targets


def endpoint_speculation(label: str) -> Speculation:
    """What an endpoint's label says it drafts: "" or "spec-off" nothing; "spec-off-aa" nothing either, a
    second spec-off server (its A/A twin: the launch noise of this endpoint's launches); ``TYPE:K`` the family TYPE
    (vLLM's words: ngram, suffix, eagle3, draft_model, mtp, ...) at k = K — what the user said, read
    once into the configuration's record."""
    if label in ("", BASELINE_CONFIG):
        return Speculation()
    if label == AA_TWIN_CONFIG:  # spec-off launched a second time at its own URL: the endpoint's launch noise
        return Speculation(aa_twin=True)
    family, _, k = label.rpartition(":")
    if not family or not k.isdigit() or int(k) < 1:
        raise ParameterError(f"endpoint configuration {label!r} must be spec-off, spec-off-aa (spec-off's twin) or "
                             "TYPE:K with K >= 1 (e.g. ngram:4, "
                             "eagle3:3), as in spec-off=URL,ngram:4=URL")
    return Speculation(entry=family, k=int(k), method=family, family=family, uses_model=family not in FREE_FAMILIES)


def probe_max_tokens(concurrency, configs: list) -> int:
    """The largest verification batch the sweep can reach: the top level × (1 + the longest draft)."""
    return int(max(concurrency) * (1 + max([c.draft_length for c in configs if c.speculative] + [0])))


def saver(rec, commit: str | None, phase: str = ""):
    """A callback for ``run_sweep``'s ``on_run``: writes the per-request and per-run tables (with the
    commit) after every run, so an interrupted sweep keeps what it measured; a ``phase`` of the
    policy check other than its first sweep ("check", "trace") prefixes the tables' names."""
    def save(sweep) -> None:
        rec.table(keys.phase_table(phase, "requests"), sweep.records.assign(commit=commit or ""))
        rec.table(keys.phase_table(phase, "runs"), sweep.runs.assign(commit=commit or ""))
    return save


def forecast_saver(rec):
    """The trace's forecast written (a table, and each
    configuration's forecast speedup, mean batch and clamped share in ``results.json``) before the
    trace is sent, so what was forecast cannot have read any of it."""
    def save(forecast) -> None:
        rec.table(keys.TRACE_FORECAST, forecast)
        rec.value(keys.TRACE_FORECAST, {r["config"]: {"speedup_tpot": round(float(r["predicted_speedup_tpot"]), 4),
                                                   "mean_batch": round(float(r["trace_mean_batch"]), 2),
                                                   "clamped_share": round(float(r["clamped_share"]), 3)}
                                     for r in forecast.to_dict("records")})
    return save


# ---------------------------------------------------------------- what a run shows


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """What the parameters turn into before any server starts."""

    loads: list
    served: object
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


@dataclass(kw_only=True)
class Measured:
    """What a study measured and judged: the ``sweep``; judged once (``judge``): the launch ``noise``,
    the ``summary`` and the ``verdict``; then, where the engine ran it, the schedule's ``check`` pass
    and the bursty ``trace`` at ``rate`` requests/s with its ``forecast`` made before it; ``note``: why
    a part is missing, one line."""

    sweep: Sweep
    noise: object | None = None
    summary: pd.DataFrame = field(default_factory=pd.DataFrame)
    verdict: Verdict | None = None
    check: Sweep | None = None
    trace: Sweep | None = None
    rate: float = math.nan
    forecast: pd.DataFrame = field(default_factory=pd.DataFrame)
    note: str = ""

    @property
    def adaptive(self):
        """The schedule's server as launched (None: none was)."""
        return self.verdict.server if self.verdict is not None and self.verdict.checked and self.check else None


@dataclass(frozen=True, kw_only=True)
class ServingStudy:
    """What notebook 08 shows, section by section: ``intro``, the sweep (``measured``, ``sweep_notes``,
    ``summary`` and its ``summary_table``, ``crossings``, ``sweep_report`` and its charts), the
    prediction (``open_loop_note``, ``validation``, ``prediction_report``, ``prediction_chart``), the
    ``verdict`` and its ``policy_report``, the launch checked (``check_summary``, ``check_table``,
    ``adaptive``, ``trace``, ``forecast``, ``reconstruction``, ``adaptive_report``, ``forecast_report``)
    and the ``conclusion``. A part that this run has not is None (a report or chart) or empty (a table)."""

    intro: tuple[str, ...]
    machine: str
    measured: Measured
    sweep_notes: tuple[str, ...]
    summary: pd.DataFrame
    summary_table: pd.DataFrame | None
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
    verdict: Verdict
    policy_report: Report | None
    check_summary: pd.DataFrame | None
    check_table: pd.DataFrame | None
    adaptive: pd.DataFrame
    trace: pd.DataFrame
    forecast: pd.DataFrame
    reconstruction: pd.DataFrame
    adaptive_report: Report
    forecast_report: Report | None
    conclusion: Report


def show(*parts) -> None:
    """Each part this run has, in order: a line printed, anything else displayed; None skipped."""
    from IPython.display import display  # IPython only where a notebook shows parts

    for part in parts:
        if isinstance(part, str):
            print(part)
        elif part is not None:
            display(part)


def note_lines(*lines) -> tuple[str, ...]:
    return tuple(f"note: {line}" for line in lines if line)


def prepare(params: Params, rec: Recorder) -> Prepared:
    """Every parameter checked (a bad one is a ``ParameterError`` before any server starts), the
    engine's configurations with spec-off's A/A twin where the launch-noise store asks for one (or
    ``aa_twin``), and the settings recorded."""
    p = params
    lengths = Lengths(tokens=p.max_new_tokens, range_ratio=p.length_range_ratio)
    loads = load_shapes(p.concurrency, p.rates, lengths.check(launch_context(p.engine, p.endpoint)), seed=p.seed,
                        turnovers=p.turnovers)
    check_rounds(p.rounds, policy=not p.rates and (not p.endpoint or "," in p.endpoint))
    for name in ("screen", "aa_twin", "moe"):
        if not isinstance(getattr(p, name), bool):
            raise ParameterError(f"{name} must be True or False, got {getattr(p, name)!r}")
    served = check_engine(p.engine, p.endpoint)
    note = "" if p.endpoint else speculation_note(p.engine, p.speculation, p.smoke, p.verifier)
    speculation = serving_speculation(p.engine, p.speculation, p.smoke, p.verifier)
    chosen = select_prompts(p.prompts, p.n_prompts)
    configs = [] if p.endpoint else launch_configs(p.engine, p.verifier, p.precision, speculation,
                                                   check_levels(p.concurrency), p.threads)
    if configs:  # spec-off launched twice where the store asks (or aa_twin): the launch noise
        configs = serving_stats.with_twin(configs, aa_twin=p.aa_twin)
    absent = None if p.endpoint else missing_note(p.engine)  # no engine here: a note, and the study still ends
    trimmed = f"make demo trimmed this run for its budget: {p.trimmed}" if p.trimmed else ""
    machine = machine_line(p.engine, configs, p.endpoint)
    rec.value(keys.LOAD_AVERAGE_START, round(os.getloadavg()[0], 1))  # a busy machine slows every configuration alike
    shape, levels = type(loads[0]), [load.level for load in loads]
    rec.value(keys.SETTINGS, {"verifier": p.verifier, "precision": p.precision, "prompts": len(chosen),
                              "load": shape.name, "levels": levels, "rounds": p.rounds,
                              "max_new_tokens": p.max_new_tokens, "turnovers": p.turnovers,
                              "length_range_ratio": p.length_range_ratio, "engine": p.engine, "screen": p.screen,
                              "configs": [c.name for c in configs] or p.endpoint})
    line = (f"{machine}; {len(chosen)} prompts, {p.max_new_tokens} new tokens on average, greedy; {shape.name} loop "
            f"at {levels}, {p.rounds} rounds")
    return Prepared(loads=loads, served=served, prompts=chosen, configs=configs, absent=absent,
                    notes=(*note_lines(trimmed, note, absent), line), machine=machine)


def judge(sweep: Sweep, params: Params, configs: list) -> tuple[object | None, pd.DataFrame, Verdict]:
    """The sweep judged, once: the launch noise (``serving_stats.noise_for``: the stored pairs for this
    machine, engine, version and threads, plus the twin's pair where it ran, added to the store once; at
    an endpoint the store of that engine on its host plus a twin URL's pair), the summary every CI of
    which counts it, and the verdict from that summary."""
    engine = params.engine
    noise = serving_stats.noise_for(sweep.records, store_key(params, configs)) if len(sweep.records) else None
    summary = serving_stats.summarise_sweep(sweep.records, sweep.runs, slo_tpot_ms=params.slo_tpot_ms,
                                            seed=params.seed, noise=noise)
    verdict = serving_verdict.decide(summary, engine=engine, configs=[c for c in configs if c.name != AA_TWIN_CONFIG],
                                     noise_text=noise.text() if noise is not None else
                                     "launch-to-launch noise not measured", screened=sweep.screened)
    return noise, summary, verdict


def store_key(params: Params, configs: list) -> serving_stats.NoiseKey:
    """The launch-noise store a study reads and adds to: this machine, the engine, its version and the
    threads of what it launched; at an endpoint, that engine on spec-off's host (not this client's machine)."""
    if configs:
        return serving_stats.noise_key(configs)
    urls = {t.name: t.url for t in endpoint_targets(params.endpoint, params.engine)} if params.endpoint else {}
    return serving_stats.endpoint_key(params.engine, urlsplit(urls.get(BASELINE_CONFIG, "")).netloc or "none")


def start_servers(configs: list):
    """Start ``configs``' servers (a method the engine refuses is left out with its line); stops them on exit."""
    return servers(configs, keep_going=True)


def settings_of(params: Params, ready: Prepared) -> SweepSettings:
    return SweepSettings(rounds=params.rounds, seed=params.seed, progress=params.interactive, screen=params.screen,
                         moe=params.moe, noise_key=store_key(params, ready.configs),
                         probe_max_tokens=probe_max_tokens(ready.levels, ready.configs) if ready.steps_batch else 0)


def measure(params: Params, ready: Prepared, rec: Recorder, start=start_servers) -> Measured:
    """Steps 2–5 of the module docstring. ``start``: what starts servers (a test's fakes)."""
    settings, commit = settings_of(params, ready), git_commit()
    if params.endpoint:
        targets = [serving_load.check_target(t) for t in endpoint_targets(params.endpoint, params.engine)]
        sweep = run_sweep(targets, ready.prompts, ready.loads, settings, SweepHooks(on_run=saver(rec, commit)))
        return Measured(sweep=sweep, **dict(zip(("noise", "summary", "verdict"), judge(sweep, params, []))))
    if ready.absent:
        sweep = Sweep(records=pd.DataFrame(), runs=pd.DataFrame(), stopped=ready.absent)
        return Measured(sweep=sweep, verdict=Verdict(engine=params.engine))
    if not (ready.served.schedules and ready.steps_batch):
        sweep = serving_sweep.sweep_servers(ready.configs, ready.prompts, ready.loads, settings,
                                            relaunch=ready.served.relaunch_each_round,  # fresh each round
                                            on_run=saver(rec, commit))
        return Measured(sweep=sweep, **dict(zip(("noise", "summary", "verdict"),
                                                judge(sweep, params, ready.configs))))
    with start(ready.configs) as running:
        every = dict(running.servers)
        launched = [c for c in ready.configs if c.name in every]
        skipped = "; ".join(f"{name} left out: {line}" for name, line in running.failed.items())
        down = lambda name: every[name].exit_note()  # noqa: E731
        sweep = run_sweep(targets_of(launched, every), ready.prompts, ready.loads, settings,
                          SweepHooks(down=down, on_run=saver(rec, commit)))
        ended_early, sweep.stopped = sweep.stopped, "; ".join(filter(None, [skipped, sweep.stopped]))
        noise, summary, verdict = judge(sweep, params, launched)
        measured = Measured(sweep=sweep, noise=noise, summary=summary, verdict=verdict)
        if ended_early:
            return replace(measured, note="the sweep ended early")
        # the check and the trace run candidates: neither the twin (it measured noise) nor one screened out
        launched = [c for c in launched if c.name != AA_TWIN_CONFIG and c.name not in sweep.screened]
        again = replace(settings, probe_max_tokens=0)  # the sweep's forward probe serves every pass
        with contextlib.ExitStack() as stack:
            if verdict.checked:
                every |= stack.enter_context(start([verdict.server])).servers
                launched.append(verdict.server)
                measured.check = run_sweep(targets_of(launched, every), ready.prompts, ready.loads, again,
                                           SweepHooks(down=down, on_run=saver(rec, commit, "check")))
            if verdict.kind and len(launched) > 1 and not (measured.check and measured.check.stopped):
                measured = trace(measured, ready, again, launched, every, down, rec)
        why = "" if verdict.checked else unchecked_note(verdict)
        stopped = [s.stopped for s in (measured.check, measured.trace) if s is not None and s.stopped]
        return replace(measured, note="; ".join(filter(None, [why, *stopped])))


def trace(measured: Measured, ready: Prepared, settings: SweepSettings, launched: list, every: dict, down,
          rec: Recorder) -> Measured:
    """Step 5: the bursty trace at the rate that keeps the verdict's switch load in flight on spec-off
    (the top level where it never switches), forecast first and recorded before it is sent."""
    verdict, loads = measured.verdict, ready.loads
    switch = verdict.switch if not math.isnan(verdict.switch) else max(load.level for load in loads)
    rate = serving_stats.trace_rate(measured.summary, switch)
    load = Open(rate=rate, burstiness=TRACE_BURSTINESS, lengths=loads[0].lengths, seed=loads[0].seed)
    prompts = pd.concat([ready.prompts] * TRACE_REPEATS, ignore_index=True)
    planned = predict.plan_trace(load, prompts, settings.rounds, settings.seed)  # arrivals and lengths, as sent
    forecast = predict.predict_trace(measured.summary, planned, verdict.launch if verdict.checked else None,
                                     verdict.policy.zero_speedup)
    if len(forecast):
        forecast_saver(rec)(forecast)
    sweep = run_sweep(targets_of(launched, every), prompts, [load], settings,
                      SweepHooks(down=down, on_run=saver(rec, git_commit(), "trace")))
    return replace(measured, trace=sweep, rate=rate, forecast=forecast)


def unchecked_note(verdict: Verdict) -> str:
    """Why no schedule is launched beside the static configurations."""
    if verdict.kind == "static":
        return (f"the launch is {verdict.config} at every load, a static configuration measured as itself (one "
                "range, no schedule to check)")
    if verdict.kind == "none":
        return "the verdict is no speculation: no --speculative-config to launch"
    return "the engine has no launch of its own for the schedule"


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
    """Section 3's tables: the schedule measured again, the trace, its forecast and reconstruction."""

    check_summary: pd.DataFrame | None = None
    adaptive: pd.DataFrame = field(default_factory=pd.DataFrame)
    trace: pd.DataFrame = field(default_factory=pd.DataFrame)
    forecast: pd.DataFrame = field(default_factory=pd.DataFrame)
    reconstruction: pd.DataFrame = field(default_factory=pd.DataFrame)


def checked(measured: Measured, seed: int) -> Checked:
    """What ran after the sweep, judged: the schedule against the best static configuration per level,
    the bursty trace, the forecast written before it and the reconstruction."""
    noise, out = measured.noise, Checked()
    if measured.check is not None and len(measured.check.records):
        check_summary = serving_stats.summarise_sweep(measured.check.records, measured.check.runs, seed=seed,
                                                      noise=noise)
        out = replace(out, check_summary=check_summary, adaptive=serving_stats.adaptive_check(
            check_summary, records=measured.check.records, seed=seed, noise=noise))
    if measured.trace is None or not len(measured.trace.records):
        return out
    table = serving_stats.trace_check(measured.trace.records, seed=seed, noise=noise)
    forecast = predict.trace_prediction_table(measured.forecast, table) if len(measured.forecast) \
        else pd.DataFrame()
    verdict = measured.verdict
    launch = verdict.launch if measured.adaptive is not None else None
    rebuilt = predict.predict_trace(measured.summary, predict.SampledTrace(runs=measured.trace.runs), launch,
                                    verdict.policy.zero_speedup)  # diagnostic: the batches the trace held
    return replace(out, trace=table, forecast=forecast, reconstruction=predict.trace_prediction_table(rebuilt, table))


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
    measured = measure(params, ready, rec)
    sweep, noise, summary = measured.sweep, measured.noise, measured.summary
    rec.value(keys.LAUNCH_NOISE, noise.record() if noise is not None else None)  # what every CI below counts
    record_tables(rec, {"probe": sweep.probe, "summary": summary})
    speedups = "speedup_tpot" in summary
    crossings = serving_stats.crossover(summary, "speedup_tpot") if speedups else summary.iloc[:0]
    record_tables(rec, {"crossover": crossings})
    sweep_report = rec.record(text.sweep_text(summary, crossings, sweep.probe))
    open_loop = None if ready.steps_batch else rec.record(text.open_loop_note())
    validation = validate(params, sweep, summary, ready.steps_batch) if len(summary) else summary
    record_tables(rec, {"prediction": validation})
    prediction = rec.record(text.prediction_text(validation)) if len(validation) else None
    done = checked(measured, params.seed)
    verdict = serving_verdict.with_trace(measured.verdict, done.trace)  # what the trace said of the launch
    record_tables(rec, {"policy": verdict.policy.frame(), "candidates": text.candidate_table(verdict),
                        "check_summary": done.check_summary, "adaptive": done.adaptive, "trace": done.trace,
                        "trace_forecast_check": done.forecast, "trace_reconstruction": done.reconstruction})
    policy_report = rec.record(text.policy_text(verdict)) if ready.steps_batch else None
    traced = measured.trace is not None and len(measured.trace.records) > 0
    adaptive_report = rec.record(text.adaptive_text(done.adaptive, done.trace, measured, verdict))
    forecast_report = rec.record(text.trace_forecast_text(done.forecast, done.reconstruction)) if traced else None
    rec.value(keys.VERDICT_RECORD, verdict.record())  # the launch, how sure, what it rests on
    rec.value(keys.LAUNCH_LINE, verdict.line)  # what to paste: "" for no speculation
    rec.value(keys.MINUTES, round((time.perf_counter() - started) / 60, 2))
    rec.value(keys.LOAD_AVERAGE_END, round(os.getloadavg()[0], 1))
    trace_error = predict.trace_median_error(done.forecast) if len(done.forecast) else float("nan")
    conclusion = rec.record(text.serving_conclusion(crossings, validation, verdict, ready.machine, sweep.stopped,
                                                    trace_error))
    return ServingStudy(
        intro=ready.notes, machine=ready.machine, measured=measured,
        sweep_notes=note_lines(sweep.stopped, *sweep.screened.values(), verdict.noise_text if verdict.kind else ""),
        summary=summary, summary_table=charts.display_table(summary) if len(summary) else None,  # no engine: none
        crossings=crossings, sweep_report=sweep_report,
        tpot_chart=chart_if(speedups, charts.speedup_chart, summary, "speedup_tpot"),
        throughput_chart=chart_if(speedups, charts.speedup_chart, summary, "speedup_output_throughput"),
        latency_chart=chart_if(len(summary) > 0, charts.latency_throughput_chart, summary),
        position_chart=chart_if(len(summary) > 0, charts.position_chart, summary),
        open_loop_note=open_loop, validation=validation, prediction_report=prediction,
        prediction_chart=chart_if(len(validation) > 0, charts.prediction_chart, validation),
        verdict=verdict, policy_report=policy_report, check_summary=done.check_summary,
        check_table=None if done.check_summary is None else charts.display_table(done.check_summary),
        adaptive=done.adaptive, trace=done.trace, forecast=done.forecast, reconstruction=done.reconstruction,
        adaptive_report=adaptive_report, forecast_report=forecast_report, conclusion=conclusion)
