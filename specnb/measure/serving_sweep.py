"""Load on an OpenAI-compatible serving engine: one record per request, counters per run, interleaved.

The engine is any server with ``/v1/chat/completions`` streaming: llama.cpp's ``llama-server`` or vLLM,
started by ``specnb.serve.processes``, or a running vLLM or SGLang server (``-p endpoint``). Every
speculation configuration is its own server (a *target*); the sweep runs each level on every target,
on the same prompts and output lengths, alternating run by run in an order rotated piece by piece, so
a slow spell of a shared machine does not land on one configuration (as ``specnb.measure.runs``
interleaves candidates).

**How a level is formed, and why** (issue 40: a closed loop of equal requests measured its own
lockstep, not the engine; issue 44: levels measured different prompts): each target is first warmed
at the level's own concurrency (``warm_up``: that many 4-token requests, not recorded). A round of a
level measures every prompt, cycled in whole cycles to at least turnovers·concurrency
(``Closed.requests_for``), in an order rotated round by round; each request asks a length drawn over
[L/2, 3L/2] per (prompt, cycle, round) and generates it (``ignore_eos``), so every configuration
generates the same tokens and requests pair exactly on (round, prompt, cycle), while slots finish at
different times and never start in lockstep. The round is sent in runs of at least turnovers·c
measured requests (``Closed.pieces``), each run a closed loop that opens with c filler requests and
sends fillers while any measured request is in flight (``serving_load.ClosedFeed``): every measured
request runs at the level, and is ``steady`` by construction — ``serving_load.steady_flags`` checks
it. Fillers (own prompts from the pool, own lengths, ``filler`` True, never steady) are kept in the
requests table and never paired or summarised. While a run is sent, the engine's own running batch
is sampled from its ``/metrics`` (``serving_load.send_sampled``): each run keeps its samples and the
mean of the busy ones inside the steady window.

- **Load** (``specnb.measure.serving_load``): its shape, closed loop or Poisson arrivals, streamed,
  one record per request with ``vllm bench serve``'s names.
- **Counters**: the engine's Prometheus spec-decode counters (``llamacpp:`` or ``vllm:``, same
  names) are scraped before and after each run and differenced; llama.cpp adds a slot's counts when
  its request finishes, and every request of a run has finished when it is scraped. SGLang has no
  such counters, only two gauges (``sglang:spec_accept_length``, ``sglang:spec_accept_rate``: the
  averages over its scheduler's last logging window, every ``--decode-log-interval`` decode steps,
  40 by default). A gauge cannot be differenced: it is read after each run and kept as the run's
  ``spec_accept_*_gauge``, the tail of that run (a run shorter than one window still shows the
  window before it); the summary falls back on it only where no request returned countable
  acceptance (``specnb.measure.acceptance.counter_rates``).
- **Per batch**, what a schedule keyed on the engine's own batch is made of. The engine's own batch
  (``batch_of``): vLLM looks k up by the scheduler's running batch, not by the client's concurrency,
  and it is the load, not acceptance, that says whether speculation pays (vllm#26504). Over a run the
  engine's gauge gives [t_s, batch] samples (a run row's ``batch_trace``): the seconds held at each
  batch (``occupancy``) and their time average (``mean_batch``, what a summary row's ``mean_batch``
  is).
- **Virtual time** (``VirtualEngine``): the serving verdict (sweep, A/A twin, summary, launch noise,
  policy, chooser) can only be judged for stability over hundreds of sweeps on known truths, and over
  HTTP the simulated engine runs in real time (``simulated_http`` sleeps every step). A ``Target``
  whose ``virtual`` is a ``VirtualEngine`` is sent by this module's own code (levels, rounds, pieces,
  fillers, rotation, screening), and answers its three calls — a run (``serving_load.send_sampled``),
  the counters (``serving_load.scrape``) and a warm-up (``warm_up``) — from a ``sim_engine.SimEngine``
  driven by ``sim_engine.drive_closed`` with the run's own ``ClosedFeed``: the same ``RequestRecord``
  rows (seconds of virtual time), the counters parsed from the same Prometheus text the HTTP server
  serves (``simulated_http.metrics_text`` → ``parse_counters``), the running batch sampled every
  ``BATCH_EVERY_S`` as the real sampler reads its gauge. A prompt's length and key are the HTTP
  server's (``simulated_http.prompt_of``), so a prompt accepts the same way on either face. One
  ``VirtualEngine`` is one launch: every run on it shares its launch factor
  (``SimCost.launch_factor``), its clock and its counters. ``level_costs`` prices a level's runs with
  a cost of their own (a truth given per level, as ``benchmarks/verdict_stability.py`` calibrates it);
  every other level runs on ``cost``. Closed loops only: an open-loop trace is not simulated here.

Summaries, speedups with CIs and the crossover are in ``specnb.measure.serving_stats``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import pandas as pd

from specnb.core.errors import ParameterError
from specnb.measure.serving_load import (
    BATCH_EVERY_S,
    ClosedFeed,
    Counters,
    EndpointError,
    RequestRecord,
    Requests,
    Run,
    Target,
    parse_counters,
    probe_forward,
    probe_tokens,
    probed_target,
    reachable,
    run_async,
    scrape,
    send_closed,
    send_sampled,
    shape_of,
)
from specnb.measure.serving_stats import (
    LaunchNoise,
    NoiseKey,
    aa_pairs,
    noise_from,
    store_source,
    stored_pairs,
    summarise_sweep,
)
from specnb.serve.engines import AA_TWIN_CONFIG, Speculation
from specnb.serve.processes import Launches, ServerFailed
from specnb.serve.simulated import SimCost, SimEngine, drive_closed, metrics_text, prompt_of, token_text


@dataclass(kw_only=True)
class Sweep:
    """A sweep's raw data: ``records`` (one row per request), ``runs`` (one row per target, level
    and round, with differenced counters), ``stopped``: one line when it ended early, ``probe``:
    the engine's forward cost against tokens in the batch (``probe_forward``), when measured, and
    ``screened``: each configuration left out of the levels above the lowest, with one line saying why
    (``screen_out``)."""

    records: pd.DataFrame
    runs: pd.DataFrame
    stopped: str = ""
    probe: pd.DataFrame = field(default_factory=pd.DataFrame)
    screened: dict[str, str] = field(default_factory=dict)  # configuration: why it left the sweep


def level_order(names: list[str], level_index: int, round_index: int) -> list[str]:
    """Targets in the order they run at one level and round: rotated by both."""
    shift = (level_index + round_index) % max(len(names), 1)
    return names[shift:] + names[:shift]


def warm_up(targets: list[Target], prompts: list[str], concurrency: int, max_tokens: int = 4) -> None:
    """``concurrency`` short requests to each target, that many at once, not recorded: its first
    measured run then pays no one-time cost of the level (a first batch of that size, its buffers);
    a virtual target's engine runs them in virtual time (``Target.virtual``)."""
    texts = [prompts[i % len(prompts)] for i in range(concurrency)]
    for target in targets:
        if target.virtual is not None:
            target.virtual.warm(texts, concurrency, [max_tokens] * concurrency)
        else:
            run_async(send_closed(target, texts, concurrency, [max_tokens] * concurrency))


def length_keys(ids: list[str], cycles: list[int]) -> list[str]:
    """What each request's output length is drawn by: its prompt, and the cycle for a prompt sent
    again in the round (the same prompt then asks another length, so cycled copies do not finish
    together)."""
    return [pid if cycle == 0 else f"{pid}#{cycle}" for pid, cycle in zip(ids, cycles)]


def cycles_of(rows: list) -> list[int]:
    """Per request, how many times its prompt (row or id) was sent before it in the round: its cycle."""
    seen: dict[int, int] = {}
    cycles = []
    for row in rows:
        cycles.append(seen.get(row, 0))
        seen[row] = cycles[-1] + 1
    return cycles


def request_lengths(load, prompts: pd.DataFrame, round_index: int, seed: int) -> list[int]:
    """Output tokens each of ``load``'s measured requests asks in one round (its prompts as
    ``requests_for`` orders them, drawn by prompt and cycle, ``length_keys``): what a sweep sends, and
    what a trace forecast draws before it is sent."""
    rows = load.requests_for(len(prompts), round_index)
    ids = [str(prompts.iloc[row].get("id", row)) for row in rows]
    return load.lengths.draw(length_keys(ids, cycles_of(ids)), round_index, seed)


@dataclass(frozen=True, kw_only=True)
class SweepSettings:
    """How a sweep runs, set once by its caller and the same at every level: ``rounds`` per level, the
    ``seed`` of lengths and resamples, ``ignore_eos`` (every configuration generates the asked length),
    ``warmup`` (``warm_up`` before each level), ``progress`` (a line per run), ``probe_max_tokens``
    (``probe_forward`` up to that many tokens first; 0: none), ``screen`` (``screen_out``), ``moe``
    (the verifier is a mixture of experts: a configuration screened at the lowest level is measured
    at the top level all the same, since there loss need not grow with the batch) and ``noise_key``
    (the launch-noise store the screen reads, ``serving_stats.noise_key``; None: the twin's pair alone)."""

    rounds: int = 1
    seed: int = 0
    ignore_eos: bool = True
    warmup: bool = True
    progress: bool = False
    probe_max_tokens: int = 0
    screen: bool = True
    moe: bool = False
    noise_key: NoiseKey | None = None


@dataclass(frozen=True, kw_only=True)
class SweepHooks:
    """What a sweep calls out to: ``down(name)`` ("" while a target's server is up, else how it went
    down), ``on_run(sweep)`` after every run, ``relaunch(n)`` for fresh servers, launch ``n``."""

    down: Callable[[str], str] | None = None
    on_run: Callable[[Sweep], None] | None = None
    relaunch: Callable[[int], list[Target]] | None = None


@dataclass(kw_only=True)
class SweepState:
    """What a sweep has measured so far and how it runs and reports it: the tables grow run by run;
    with ``hooks.relaunch``, fresh servers each round (``relaunched``)."""

    settings: SweepSettings
    hooks: SweepHooks
    records: list = field(default_factory=list)
    runs: list = field(default_factory=list)
    probe: pd.DataFrame = field(default_factory=pd.DataFrame)
    launch: int = 0
    screened: dict[str, str] = field(default_factory=dict)  # configuration: why it left the sweep

    def sweep(self) -> Sweep:
        return Sweep(records=pd.DataFrame(self.records), runs=pd.DataFrame(self.runs), probe=self.probe,
                     screened=dict(self.screened))

    def relaunched(self, prompts: pd.DataFrame, load) -> list[Target]:
        """Fresh servers, launch number ``launch`` (their records carry it), warmed at ``load``."""
        self.launch += 1
        targets = self.hooks.relaunch(self.launch)
        if self.settings.warmup:
            warm_up(targets, list(prompts["prompt"]), load.warm_concurrency)
        return targets


def run_sweep(targets: list[Target], prompts: pd.DataFrame, loads: list, settings: SweepSettings = SweepSettings(),
              hooks: SweepHooks = SweepHooks()) -> Sweep:
    """Every load (``specnb.measure.serving_load``: a closed loop at a concurrency, open-loop arrivals at a rate, ...)
    on every target, same prompts and output lengths, targets alternating piece by piece (the shape's
    ``pieces``) in an order rotated per piece, level and round (``SweepSettings``: how; ``SweepHooks``: what it
    calls out to); with ``warmup``, each target warmed before each level at its concurrency (``warm_up``).
    ``down(name)``: "" while a target's server is up, else how it went down (default: "" while it answers
    ``/v1/models``), asked when a run had failed requests or its counters could not be read; a server that is
    down ends the sweep: finished levels are kept, the level it died in is marked ``partial`` and ``stopped``
    says so in one line. ``on_run`` sees the sweep so far after every run (to save it as it grows).
    ``probe_max_tokens``: first probe the first probe-able target's forward cost up to that many tokens in the
    batch (``probe_forward``). ``relaunch(n)``: fresh servers as targets, launch ``n``, before every round but
    the first: each (level, round) on a launch of its own, so rounds sample launch noise
    (``measure.serving_stats``); a failed relaunch ends the sweep. With ``screen``, a speculative configuration
    that loses at the lowest level (``screen_out``) is left out of the levels after it; ``screened`` says which
    and why."""
    prompts = prompts.reset_index(drop=True)
    by_name = {t.name: t for t in targets}
    down = hooks.down or (lambda name: "" if reachable(by_name[name]) else "it stopped answering /v1/models")
    relaunch, seed = hooks.relaunch, settings.seed
    probed = probed_target(targets) if settings.probe_max_tokens else None
    state = SweepState(settings=settings, hooks=replace(hooks, down=down),
                       probe=probe_forward(probed, probe_tokens(settings.probe_max_tokens), seed=seed) if probed
                       else pd.DataFrame())
    lowest, top = min(load.level for load in loads), max(load.level for load in loads)
    for li, load in enumerate(loads):
        try:
            if li and relaunch:
                targets = state.relaunched(prompts, load)  # warmed there
            rejoin = settings.moe and load.level == top  # a mixture of experts: the top level is measured whole
            live = [t for t in targets if rejoin or t.name not in state.screened]
            if settings.warmup and not (li and relaunch):
                warm_up(live, list(prompts["prompt"]), load.warm_concurrency)
            why = run_level(state, live, prompts, load, li)
        except ServerFailed as err:  # a relaunch that did not come up
            why = f"relaunch {state.launch} failed at {load.text()} ({err})"
        if why:
            return stop(state.sweep(), load, why)
        if settings.screen and load.level == lowest and li < len(loads) - 1:
            state.screened |= screen_out(state.sweep(), load, live, seed, noise_key=settings.noise_key)
    return state.sweep()


def screen_out(sweep: Sweep, load, targets: list[Target], seed: int, n_boot: int = 1000,
               noise_key: NoiseKey | None = None) -> dict[str, str]:
    """The static speculative configurations whose TPOT speedup's CI lies below 1 at ``load`` (the lowest
    level), each with one line that keeps the point and the CI that screened it: they lose at the lowest
    load, and on a dense verifier speculation only loses more as the batch grows (verifying k + 1 tokens a
    sequence costs more of a fuller step), so their higher levels would be time spent on a known answer
    (``SweepSettings.moe`` brings them back at the top level). The CI is the summary's own
    (``summarise_sweep`` with its seed and resamples): simultaneous over every speculative configuration
    at that level, with the launch noise counted (``level_noise``), so the screen's family-wise false rate
    is at most 5% over the configurations it screens (the family holds them and any schedule beside them:
    conservative). Spec-off is never screened, nor a configuration with a schedule (``adaptive``: its k
    changes with the batch, so its lowest level does not speak for the others); neither is anything where
    no spec-off ran at that level."""
    at = lambda table: table[table[load.column] == load.level]  # noqa: E731
    noise = level_noise(at(sweep.records), noise_key)
    summary = summarise_sweep(at(sweep.records), at(sweep.runs), seed=seed, n_boot=n_boot, noise=noise)
    if "speedup_tpot_hi" not in summary:
        return {}
    static = {t.name for t in targets if t.speculation.speculative and not t.speculation.schedule
              and not t.speculation.adaptive}
    losing = summary[summary["config"].isin(static) & (summary["speedup_tpot_hi"] < 1.0)]
    family = int((summary["ci"] == "simultaneous").sum())
    return {row.config: f"{row.config} measured at {load.text()} only: TPOT speedup {row.speedup_tpot:.2f}x [95% CI "
                        f"{row.speedup_tpot_lo:.2f}–{row.speedup_tpot_hi:.2f}, simultaneous over {family} "
                        f"configuration(s), {launch_words(noise)}] there, a loss at the lowest load, which on a dense "
                        "verifier only grows with the batch" for row in losing.itertuples()}


def launch_words(noise: LaunchNoise) -> str:
    """What a screened line says of the launch noise its CI carries."""
    return f"launch noise from {noise.pairs} A/A pair(s)" if noise.pairs else "launch noise not measured"


def level_noise(records: pd.DataFrame, noise_key: NoiseKey | None) -> LaunchNoise:
    """The launch noise a screen judges a level with: the pairs stored under ``noise_key`` and, where the
    twin ran at that level, its pair there (not stored: the sweep's own pair is stored once, from every
    level, by ``serving_stats.noise_for``); neither: P = 0, not measured."""
    pairs = stored_pairs(noise_key) if noise_key is not None else []
    twin = AA_TWIN_CONFIG in set(records["config"])
    known = {p.id for p in pairs}
    own = [p for p in aa_pairs(records) if p.id not in known] if twin else []
    source = store_source(noise_key) if noise_key is not None else "no store"
    return noise_from(pairs + own, source + (", this level's twin included" if own else ""))


def run_level(state: SweepState, targets: list[Target], prompts: pd.DataFrame, load, li: int) -> str:
    """One load's rounds on every target (see ``run_sweep``); "" or why the sweep stops here. Each
    round sends the load's prompts (``requests_for``: rows, rotated per round) in pieces, each a run
    with its fillers (``fillers_for``, lengths from their own stream); records carry the prompt's
    row (``prompt_index``), its ``cycle`` and ``position`` in the round, and whether it is a filler."""
    texts = list(prompts["prompt"])
    ids = [str(prompts.iloc[i].get("id", i)) for i in range(len(prompts))]
    by_name = {t.name: t for t in targets}
    seed, down, on_run = state.settings.seed, state.hooks.down, state.hooks.on_run
    for r in range(state.settings.rounds):
        if r and state.hooks.relaunch:
            by_name = {t.name: t for t in state.relaunched(prompts, load)}
        rows = load.requests_for(len(prompts), r)
        cycles = cycles_of([ids[row] for row in rows])  # by prompt id: a prompt listed twice is sent twice
        max_tokens = request_lengths(load, prompts, r, seed)
        for c, part in enumerate(load.pieces(len(rows))):
            extra = load.fillers_for(len(prompts), r, len(part))
            extra_tokens = load.lengths.draw([f"{ids[row]}@{c}.{j}" for j, row in enumerate(extra)], r, seed,
                                             filler=True)
            for name in level_order(list(by_name), li, r + c):
                target = by_name[name]
                try:
                    before = scrape(target)
                except EndpointError as err:
                    return f"{name}'s server went down at {load.text()} ({down(name) or err})"
                asked = Requests(texts=[texts[rows[i]] for i in part], max_tokens=[max_tokens[i] for i in part])
                filled = Requests(texts=[texts[row] for row in extra], max_tokens=extra_tokens)
                run = send_sampled(target, load, asked, state.settings.ignore_eos, r, fillers=filled)
                done, duration = run.done, run.duration
                failed = [d for d in done if not d.success]
                why = down(name) if failed else ""
                try:
                    counters = Counters() if why else scrape(target).minus(before)
                except EndpointError as err:
                    counters, why = Counters(), down(name) or str(err)
                where, (steady, batch) = {"round": r, "chunk": c}, run.steady(load)
                measured = [request_row(d, target, load, rows[i], prompts)
                            | {"max_tokens": max_tokens[i], "steady": bool(s), "cycle": cycles[i], "position": i,
                               "filler": False} for i, d, s in zip(part, done, steady)]
                fill = [request_row(d, target, load, extra[j], prompts)
                        | {"max_tokens": extra_tokens[j], "steady": False, "cycle": -1, "position": j, "filler": True}
                        for j, d in enumerate(done[len(part):])]
                state.records += [row | where for row in measured + fill]
                state.runs.append(run_row(target, load, duration, done, counters, partial=bool(why)) | batch | where)
                if state.settings.progress:
                    print(f"{name} at {load.text()}: {len(done) - len(failed)}/{len(done)} ok, {duration:.1f} s")
                if on_run:
                    on_run(state.sweep())
                if why:
                    first = f"; first failed request: {failed[0].error}" if failed else ""
                    return f"{name}'s server went down at {load.text()} ({why}{first})"
    return ""


def stop(sweep: Sweep, load, why: str) -> Sweep:
    """End a sweep early: the level it stopped in is marked partial, ``stopped`` says why in one line."""
    if len(sweep.runs):
        for table in (sweep.runs, sweep.records):
            table.loc[table[load.column] == load.level, "partial"] = True
    sweep.stopped = " ".join(f"{why}; levels before it are kept, {load.text()} is marked partial".split())
    return sweep


def request_row(record: RequestRecord, target: Target, load, index: int, prompts: pd.DataFrame) -> dict:
    """One request as a table row: ``index`` is its prompt's row in ``prompts`` (``prompt_index``)."""
    row = asdict(record)
    row["itl"] = json.dumps([round(x, 6) for x in record.itl])
    meta = prompts.iloc[index % len(prompts)]
    return {"engine": target.engine, **target.speculation.columns(), **load.columns(), "launch": target.launch,
            "prompt_index": index, "prompt_id": str(meta.get("id", index % len(prompts))),
            "category": meta.get("category", ""), "partial": False, **row}


def run_row(target: Target, load, duration: float, done: list[RequestRecord], counters: Counters,
            partial: bool) -> dict:
    """One run: its counters, or (SGLang, no counters) the draft and accepted tokens its requests
    returned; the verification steps requests returned and their output tokens; the gauges."""
    ok = [d for d in done if d.success]
    verified = [d for d in ok if d.spec_verify_ct]
    per_request = not counters.draft_tokens and not counters.drafts  # the engine counted nothing itself
    return {"engine": target.engine, **target.speculation.columns(), **load.columns(), "launch": target.launch,
            "duration": duration, "completed": len(ok), "failed": len(done) - len(ok),
            "total_output_tokens": sum(d.output_tokens for d in ok), "partial": partial,
            "spec_decode_num_drafts": counters.drafts,
            "spec_decode_draft_tokens": float(sum(d.draft_n for d in ok)) if per_request else counters.draft_tokens,
            "spec_decode_accepted_tokens": float(sum(d.draft_n_accepted for d in ok)) if per_request
            else counters.accepted,
            "accepted_per_pos": json.dumps(counters.accepted_per_pos), "n_decode": counters.n_decode,
            "tokens_predicted": counters.tokens_predicted,
            "spec_verify_ct": float(sum(d.spec_verify_ct for d in verified)),
            "verified_output_tokens": float(sum(d.output_tokens for d in verified)),
            "spec_accept_rate_gauge": counters.accept_rate_gauge,
            "spec_accept_length_gauge": counters.accept_length_gauge}


def sweep_servers(configs, prompts: pd.DataFrame, loads: list, settings: SweepSettings = SweepSettings(), *,
                  relaunch: bool = False, on_run: Callable[[Sweep], None] | None = None) -> Sweep:
    """Start one server per configuration (each its engine's: ``ServingEngine.server``), run
    ``run_sweep`` on them (a server that dies ends it, saying how it died and its last log line, see
    there), and stop every server however the sweep ends (Ctrl-C included). A speculative
    configuration the engine refuses to start is left out and named in ``stopped`` with the engine's
    own line; the others are measured. ``relaunch``: every round but the first on fresh servers
    (``run_sweep``; ``ServingEngine.relaunch_each_round`` says where that is cheap)."""
    with Launches(configs) as launches:
        fresh = lambda n: targets_of(configs, launches.start().servers, n)  # noqa: E731
        hooks = SweepHooks(down=lambda name: launches.running.servers[name].exit_note(), on_run=on_run,
                           relaunch=fresh if relaunch else None)
        sweep = run_sweep(targets_of(configs, launches.running.servers), prompts, loads, settings, hooks)
    skipped = "; ".join(f"{name} left out: {line}" for name, line in launches.failed.items())
    sweep.stopped = "; ".join(filter(None, [skipped, sweep.stopped]))
    return sweep


def targets_of(configs: list, servers: dict, launch: int = 0) -> list[Target]:
    """The running servers of ``configs`` as targets (in their order; a server of no configuration given is not
    one), each with its configuration's engine and speculation, of launch ``launch``."""
    return [Target(url=servers[c.name].url, engine=c.engine.name, model=getattr(servers[c.name], "model", ""),
                   speculation=c.speculation, launch=launch) for c in configs if c.name in servers]


# ---------------------------------------------------------------------------- per round and per batch


def batch_of(frame: pd.DataFrame) -> pd.Series:
    """Each row's batch: the engine's measured running batch (``mean_batch``, sampled from its gauge)
    where the row has one, else its level (``concurrency``). vLLM looks k up by the scheduler's batch
    (``num_speculative_tokens_per_batch_size``), which is below the client's concurrency whenever
    requests wait on a prefill or a client's next send; a sweep from before ``mean_batch`` falls
    back to the level."""
    level = frame[shape_of(frame).column].astype(float)
    if "mean_batch" not in frame:
        return level.rename("batch")
    return frame["mean_batch"].astype(float).where(frame["mean_batch"].notna() & (frame["mean_batch"] > 0),
                                                   level).rename("batch")


def samples_of(batch_trace) -> np.ndarray:
    """[n, 2] (t_s, batch) from a run row's ``batch_trace`` (its JSON text, or the list itself)."""
    samples = json.loads(batch_trace) if isinstance(batch_trace, str) else batch_trace
    return np.asarray(samples, float).reshape(-1, 2)


def occupancy(batch_trace) -> pd.Series:
    """Seconds spent at each batch size (index: batch) over one trace: each gauge sample holds until
    the next; the last one closes the trace."""
    samples = samples_of(batch_trace)
    if len(samples) < 2:
        return pd.Series(dtype=float, name="seconds")
    dt = np.diff(samples[:, 0])  # [n - 1]
    return pd.Series(dt, index=samples[:-1, 1]).groupby(level=0).sum().rename("seconds")


def mean_batch(batch_trace) -> float:
    """The time-weighted mean of the running batch over a trace, idle spells included: what a gauge
    sampled through a run averages to (``mean_batch`` on a summary row)."""
    held = occupancy(batch_trace)
    return float((held.index * held).sum() / held.sum()) if held.sum() > 0 else math.nan


# ---------------------------------------------------------------------------- a target in virtual time


class VirtualEngine:
    """One launch of a simulated configuration, answering a sweep in virtual time (see the module docstring)."""

    def __init__(self, cost: SimCost, speculation: Speculation, model: str = "simulated",
                 level_costs: dict[float, SimCost] | None = None):
        self.cost, self.model, self.level_costs = cost, model, dict(level_costs or {})
        self.engine = SimEngine(cost, speculation)

    def counters(self) -> Counters:
        """The counters as a scrape of the HTTP server would read them now."""
        return parse_counters(metrics_text(self.engine, self.model))

    def requests(self, texts: list[str], max_tokens: list[int]) -> dict:
        """``texts`` as the HTTP server reads a chat request (its length in words and its key): ``drive_closed``'s
        ``prompt_lens``, ``output_lens`` and ``keys``."""
        read = [prompt_of({"messages": [{"role": "user", "content": t}]}, chat=True) for t in texts]
        return {"prompt_lens": [n for n, _ in read], "output_lens": list(max_tokens), "keys": [k for _, k in read]}

    def send(self, load, requests: Requests, ignore_eos: bool, round_index: int, fillers: Requests) -> Run:
        """One closed-loop run as ``send_sampled`` sends it: the measured requests, then the fillers
        ``ClosedFeed`` sent, with the duration and the batch samples, in virtual seconds from the run's start."""
        if not getattr(load, "steps_batch", False) or not ignore_eos:
            raise ParameterError("a virtual target runs closed loops with ignore_eos only (the trace is not simulated)")
        self.engine.cost = self.level_costs.get(load.level, self.cost)
        texts, tokens = requests.texts + fillers.texts, requests.max_tokens + fillers.max_tokens
        feed = ClosedFeed(len(requests.texts), len(fillers.texts), load.concurrency)
        sim = self.requests(texts, tokens)
        start_s = self.engine.now_ms / 1e3
        timeline = drive_closed(self.engine, concurrency=load.concurrency, feed=feed, **sim)
        rows, trace = timeline.records(), timeline.batch_trace
        done = [self.record(row, sim["keys"][i], start_s) for i, row in enumerate(rows)]
        duration = self.engine.now_ms / 1e3 - start_s
        return Run(done=done, duration=duration, samples=sampled(trace, start_s, duration))

    def warm(self, texts: list[str], concurrency: int, max_tokens: list[int]) -> None:
        """A warm-up run: sent and not recorded (the engine's clock and counters move on, as a server's do)."""
        sim = self.requests(texts, max_tokens)
        drive_closed(self.engine, concurrency=concurrency, **sim)

    def record(self, row: dict, key: int, start_s: float) -> RequestRecord:
        """A driver's record as the streaming client keeps it (its text the tokens the server streams)."""
        n = row["output_tokens"]
        return RequestRecord(success=True, prompt_len=row["prompt_len"], output_tokens=n, ttft=row["ttft"],
                             itl=row["itl"], latency=row["latency"], tpot=row["tpot"],
                             start_time=row["start_time"] - start_s,
                             generated_text="".join(token_text(key, i) for i in range(n)))


def sampled(trace: list, start_s: float, duration_s: float, every_s: float = BATCH_EVERY_S
            ) -> list[tuple[float, float]]:
    """The running batch every ``every_s`` from the run's start, as ``BatchSampler`` reads the gauge:
    at each instant the batch of the step then running (``trace``: [t_s, batch] at each step's start)."""
    if not trace:
        return []
    times = np.array([t for t, _ in trace], float) - start_s
    batches = [b for _, b in trace]
    at = np.arange(0.0, duration_s, every_s)
    return [(round(float(t), 4), float(batches[max(i, 0)])) for t, i in
            zip(at, np.searchsorted(times, at, side="right") - 1)]
