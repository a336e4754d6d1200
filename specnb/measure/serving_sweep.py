"""Load on an OpenAI-compatible serving engine: one record per request, counters per run, interleaved.

The engine is any server with ``/v1/chat/completions`` streaming: llama.cpp's ``llama-server`` or vLLM,
started by ``specnb.engine.servers``, or a running vLLM or SGLang server (``-p endpoint``). Every
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
request runs at the level, and is ``steady`` by construction — ``load_shapes.steady_flags`` checks
it. Fillers (own prompts from the pool, own lengths, ``filler`` True, never steady) are kept in the
requests table and never paired or summarised. While a run is sent, the engine's own running batch
is sampled from its ``/metrics`` (``serving_steady``): each run keeps its samples and the mean of the
busy ones inside the steady window.

- **Load** (``specnb.measure.serving_load``): closed loop or Poisson arrivals, streamed, one record
  per request with ``vllm bench serve``'s names.
- **Counters**: the engine's Prometheus spec-decode counters (``llamacpp:`` or ``vllm:``, same
  names) are scraped before and after each run and differenced; llama.cpp adds a slot's counts when
  its request finishes, and every request of a run has finished when it is scraped. SGLang has no
  such counters, only two gauges (``sglang:spec_accept_length``, ``sglang:spec_accept_rate``: the
  averages over its scheduler's last logging window, every ``--decode-log-interval`` decode steps,
  40 by default). A gauge cannot be differenced: it is read after each run and kept as the run's
  ``spec_accept_*_gauge``, the tail of that run (a run shorter than one window still shows the
  window before it); the summary falls back on it only where no request returned countable
  acceptance (``specnb.measure.acceptance.counter_rates``).

Summaries, speedups with CIs and the crossover are in ``specnb.measure.serving_summary``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from specnb.core.errors import SpecnbError
from specnb.measure.serving_load import RequestRecord, Target, run_async, send_closed
from specnb.measure.serving_steady import send_sampled


class EndpointError(SpecnbError, RuntimeError):
    """An endpoint is unreachable or does not speak the OpenAI API; the message says which and why."""


@dataclass(kw_only=True)
class Counters:
    """Spec-decode counters of one scrape (or the difference of two)."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    accepted_per_pos: list[float] = field(default_factory=list)
    n_decode: float = 0.0  # llama.cpp: llama_decode() calls of the verifier
    tokens_predicted: float = 0.0
    accept_rate_gauge: float = float("nan")  # SGLang's gauges: read as they are, never differenced
    accept_length_gauge: float = float("nan")

    def minus(self, before: Counters) -> Counters:
        """The counters' difference since ``before``; the gauges as they are now."""
        n = max(len(self.accepted_per_pos), len(before.accepted_per_pos))
        pad = lambda v: list(v) + [0.0] * (n - len(v))  # noqa: E731
        return Counters(**{k: getattr(self, k) - getattr(before, k) for k in
                           ("drafts", "draft_tokens", "accepted", "n_decode", "tokens_predicted")},
                        accepted_per_pos=[a - b for a, b in zip(pad(self.accepted_per_pos),
                                                                pad(before.accepted_per_pos))],
                        accept_rate_gauge=self.accept_rate_gauge, accept_length_gauge=self.accept_length_gauge)


COUNTER_NAMES = {"spec_decode_num_drafts_total": "drafts", "spec_decode_num_draft_tokens_total": "draft_tokens",
                 "spec_decode_num_accepted_tokens_total": "accepted", "n_decode_total": "n_decode",
                 "tokens_predicted_total": "tokens_predicted", "generation_tokens_total": "tokens_predicted"}
GAUGE_NAMES = {"spec_accept_rate": "accept_rate_gauge", "spec_accept_length": "accept_length_gauge"}  # sglang:


def metric_line() -> re.Pattern:
    """A Prometheus sample of any registered engine's prefix: (name, labels, value)."""
    from specnb.engine.engines.seam import engines

    prefixes = "|".join(sorted({re.escape(e.metrics_prefix) for e in engines().values()}))
    return re.compile(rf"^(?:{prefixes}):(\w+?)(?:\{{([^}}]*)\}})?\s+([-+0-9.eE]+|NaN)\s*$")


def parse_counters(text: str) -> Counters:
    """Counters from Prometheus text; series with several label sets (vLLM's per-model) are summed,
    gauges averaged. SGLang's gauges read 0 on a server that never speculated: taken as absent."""
    found, per_pos, gauges, pattern = Counters(), {}, {}, metric_line()
    for line in text.splitlines():
        match = pattern.match(line.strip())
        if not match:
            continue
        name, labels, value = match.group(1), match.group(2) or "", float(match.group(3))
        if name == "spec_decode_num_accepted_tokens_per_pos_total":
            position = int(re.search(r'position="(\d+)"', labels).group(1))
            per_pos[position] = per_pos.get(position, 0.0) + value
        elif name in COUNTER_NAMES:
            setattr(found, COUNTER_NAMES[name], getattr(found, COUNTER_NAMES[name]) + value)
        elif name in GAUGE_NAMES:
            gauges.setdefault(GAUGE_NAMES[name], []).append(value)
    found.accepted_per_pos = [per_pos.get(i, 0.0) for i in range(max(per_pos) + 1)] if per_pos else []
    if np.mean(gauges.get("accept_length_gauge", [0.0])) > 0:  # speculating: τ ≥ 1
        for attr, values in gauges.items():
            setattr(found, attr, float(np.mean(values)))
    return found


def scrape(target: Target, timeout_s: float = 10.0) -> Counters:
    """The target's spec-decode counters now (zeros when it exposes no ``/metrics``)."""
    import httpx

    try:
        response = httpx.get(f"{target.url}/metrics", timeout=timeout_s)
    except httpx.HTTPError as err:
        raise EndpointError(f"{target.name}: cannot read {target.url}/metrics: {err}") from err
    return parse_counters(response.text) if response.status_code == 200 else Counters()


def check_target(target: Target, timeout_s: float = 10.0) -> Target:
    """Fail with one line unless ``target`` answers ``/v1/models`` like an OpenAI server; fills in
    ``model`` with the first model it serves when none was given."""
    import httpx

    try:
        response = httpx.get(f"{target.url}/v1/models", timeout=timeout_s)
        models = [m["id"] for m in response.json()["data"]]
    except httpx.HTTPError as err:
        raise EndpointError(f"{target.name}: {target.url} is unreachable ({err}); start the server or fix "
                            "-p endpoint") from err
    except (ValueError, KeyError, TypeError) as err:
        raise EndpointError(f"{target.name}: {target.url}/v1/models is not an OpenAI-compatible answer "
                            f"(HTTP {response.status_code})") from err
    return Target(url=target.url, engine=target.engine, model=target.model or (models[0] if models else ""),
                  speculation=target.speculation)


def reachable(target: Target, timeout_s: float = 5.0) -> bool:
    """Whether the target still answers ``/v1/models`` (how a sweep on an endpoint tells a dead server)."""
    import httpx

    try:
        return httpx.get(f"{target.url}/v1/models", timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


@dataclass(kw_only=True)
class Sweep:
    """A sweep's raw data: ``records`` (one row per request), ``runs`` (one row per target, level
    and round, with differenced counters), ``stopped``: one line when it ended early, and ``probe``:
    the engine's forward cost against tokens in the batch (``probe_forward``), when measured."""

    records: pd.DataFrame
    runs: pd.DataFrame
    stopped: str = ""
    probe: pd.DataFrame = field(default_factory=pd.DataFrame)


def probe_tokens(max_tokens: int) -> list[int]:
    """1, 2, 3, 4, 6, 8, 12, ... up to the first size at or above ``max_tokens``."""
    sizes, n = [1, 2, 3], 4
    while sizes[-1] < max_tokens:
        sizes += [n, n * 3 // 2]
        n *= 2
    return [x for i, x in enumerate(sizes) if i == 0 or sizes[i - 1] < max_tokens]


def probe_forward(target: Target, sizes: list[int], repeats: int = 3, seed: int = 0,
                  clock: Callable[[], float] = time.perf_counter) -> pd.DataFrame:
    """The engine's cost of one forward with n tokens in the batch, for n in ``sizes``: a prompt of n
    random token ids evaluated in one batch, the same matrix shapes as one decode step over n
    sequences, timed as the target's engine can (``ServingEngine.probe``: llama.cpp times it itself, vLLM by
    the client). Sizes interleaved, ``repeats`` each; median ms. ``clock``: seconds (a test passes its own)."""
    import httpx

    from specnb.engine.engines.seam import engine_named

    probe = engine_named(target.engine).probe
    rng = np.random.default_rng(seed)
    rows = []
    with httpx.Client(timeout=120.0) as client:
        for r in range(repeats):
            for n in sizes[r % len(sizes):] + sizes[:r % len(sizes)]:
                timed = probe(client, target, rng.integers(1000, 20000, size=n).tolist(), clock)
                if timed is not None:
                    rows.append({"tokens": timed[0], "forward_ms": timed[1]})
    frame = pd.DataFrame(rows, columns=["tokens", "forward_ms"])
    return frame.groupby("tokens", as_index=False)["forward_ms"].median()


def probed_target(targets: list[Target]) -> Target | None:
    """The first target whose engine can time a forward (None: none can)."""
    from specnb.engine.engines.seam import engine_named

    return next((t for t in targets if engine_named(t.engine).probe is not None), None)


def level_order(names: list[str], level_index: int, round_index: int) -> list[str]:
    """Targets in the order they run at one level and round: rotated by both."""
    shift = (level_index + round_index) % max(len(names), 1)
    return names[shift:] + names[:shift]


def warm_up(targets: list[Target], prompts: list[str], concurrency: int, max_tokens: int = 4) -> None:
    """``concurrency`` short requests to each target, that many at once, not recorded: its first
    measured run then pays no one-time cost of the level (a first batch of that size, its buffers)."""
    texts = [prompts[i % len(prompts)] for i in range(concurrency)]
    for target in targets:
        run_async(send_closed(target, texts, concurrency, [max_tokens] * concurrency))


def length_keys(ids: list[str], cycles: list[int]) -> list[str]:
    """What each request's output length is drawn by: its prompt, and the cycle for a prompt sent
    again in the round (the same prompt then asks another length, so cycled copies do not finish
    together)."""
    return [pid if cycle == 0 else f"{pid}#{cycle}" for pid, cycle in zip(ids, cycles)]


def cycles_of(rows: list[int]) -> list[int]:
    """Per request, how many times its prompt was sent before it in the round: its cycle."""
    seen: dict[int, int] = {}
    cycles = []
    for row in rows:
        cycles.append(seen.get(row, 0))
        seen[row] = cycles[-1] + 1
    return cycles


@dataclass(kw_only=True)
class SweepState:
    """What a sweep has measured so far and how it reports it: the tables grow run by run."""

    records: list = field(default_factory=list)
    runs: list = field(default_factory=list)
    probe: pd.DataFrame = field(default_factory=pd.DataFrame)

    def sweep(self) -> Sweep:
        return Sweep(records=pd.DataFrame(self.records), runs=pd.DataFrame(self.runs), probe=self.probe)


def run_sweep(targets: list[Target], prompts: pd.DataFrame, loads: list, *, rounds: int = 1, seed: int = 0,
              ignore_eos: bool = True, warmup: bool = True, down: Callable[[str], str] | None = None,
              on_run: Callable[[Sweep], None] | None = None, progress: bool = False,
              probe_max_tokens: int = 0) -> Sweep:
    """Every load (``specnb.measure.load_shapes``: a closed loop at a concurrency, open-loop arrivals
    at a rate, ...) on every target, same prompts and output lengths, targets alternating piece by
    piece (the shape's ``pieces``) in an order rotated per piece, level and round; with ``warmup``,
    each target warmed before each level at its concurrency (``warm_up``). ``down(name)``: ""
    while a target's server is up, else how it went down (default: "" while it answers
    ``/v1/models``), asked when a run had failed requests or its counters could not be read; a server
    that is down ends the sweep: finished levels are kept, the level it died in is marked ``partial``
    and ``stopped`` says so in one line. ``on_run`` sees the sweep so far after every run (to save it
    as it grows). ``probe_max_tokens``: first probe the first probe-able target's forward cost up to
    that many tokens in the batch (``probe_forward``)."""
    prompts = prompts.reset_index(drop=True)
    by_name = {t.name: t for t in targets}
    down = down or (lambda name: "" if reachable(by_name[name]) else "it stopped answering /v1/models")
    probed = probed_target(targets) if probe_max_tokens else None
    state = SweepState(probe=probe_forward(probed, probe_tokens(probe_max_tokens), seed=seed) if probed
                       else pd.DataFrame())
    for li, load in enumerate(loads):
        if warmup:
            warm_up(targets, list(prompts["prompt"]), load.warm_concurrency)
        why = run_level(state, targets, prompts, load, li, rounds=rounds, seed=seed, ignore_eos=ignore_eos,
                        down=down, on_run=on_run, progress=progress)
        if why:
            return stop(state.sweep(), load, why)
    return state.sweep()


def run_level(state: SweepState, targets: list[Target], prompts: pd.DataFrame, load, li: int, *, rounds: int,
              seed: int, ignore_eos: bool, down, on_run, progress: bool) -> str:
    """One load's rounds on every target (see ``run_sweep``); "" or why the sweep stops here. Each
    round sends the load's prompts (``requests_for``: rows, rotated per round) in pieces, each a run
    with its fillers (``fillers_for``, lengths from their own stream); records carry the prompt's
    row (``prompt_index``), its ``cycle`` and ``position`` in the round, and whether it is a filler."""
    texts = list(prompts["prompt"])
    ids = [str(prompts.iloc[i].get("id", i)) for i in range(len(prompts))]
    by_name = {t.name: t for t in targets}
    for r in range(rounds):
        rows = load.requests_for(len(prompts), r)
        cycles = cycles_of(rows)
        max_tokens = load.lengths.draw(length_keys([ids[row] for row in rows], cycles), r, seed)
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
                run = send_sampled(target, load, [texts[rows[i]] for i in part], [max_tokens[i] for i in part],
                                   ignore_eos, r, fillers=([texts[row] for row in extra], extra_tokens))
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
                if progress:
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
    return {"engine": target.engine, **target.speculation.columns(), **load.columns(),
            "prompt_index": index, "prompt_id": str(meta.get("id", index % len(prompts))),
            "category": meta.get("category", ""), "partial": False, **row}


def run_row(target: Target, load, duration: float, done: list[RequestRecord], counters: Counters,
            partial: bool) -> dict:
    """One run: its counters, or (SGLang, no counters) the draft and accepted tokens its requests
    returned; the verification steps requests returned and their output tokens; the gauges."""
    ok = [d for d in done if d.success]
    verified = [d for d in ok if d.spec_verify_ct]
    per_request = not counters.draft_tokens and not counters.drafts  # the engine counted nothing itself
    return {"engine": target.engine, **target.speculation.columns(), **load.columns(),
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


def sweep_servers(configs, prompts: pd.DataFrame, loads: list, **settings) -> Sweep:
    """Start one server per configuration (each its engine's: ``ServingEngine.server``), run
    ``run_sweep`` on them (a server that dies ends it, saying how it died and its last log line, see
    there), and stop every server however the sweep ends (Ctrl-C included). A speculative
    configuration the engine refuses to start is left out and named in ``stopped`` with the engine's
    own line; the others are measured."""
    from specnb.engine.servers import servers

    with servers(configs, keep_going=True) as running:
        sweep = run_sweep(targets_of(configs, running.servers), prompts, loads,
                          down=lambda name: running.servers[name].exit_note(), **settings)
    skipped = "; ".join(f"{name} left out: {line}" for name, line in running.failed.items())
    sweep.stopped = "; ".join(filter(None, [skipped, sweep.stopped]))
    return sweep


def targets_of(configs: list, servers: dict) -> list[Target]:
    """The running servers as targets, each with its configuration's engine and speculation."""
    by_name = {c.name: c for c in configs}
    return [Target(url=server.url, engine=by_name[name].engine, model=getattr(server, "model", ""),
                   speculation=by_name[name].speculation) for name, server in servers.items()]
