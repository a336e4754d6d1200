"""Notebook 08's parameters turned into what it runs: the engine (``specnb.serve``: its
launch configurations, its note when missing, its machine line), the loads (``load_shapes``
records), endpoint targets, and the saver that keeps every finished run on disk. Every parameter is
checked here, before any server starts, and a bad one is a ``ParameterError`` naming the parameter
and what it accepts. Nothing here asks which engine it holds: the engine's module says."""

from __future__ import annotations

import os

from specnb.app import serving_keys as keys
from specnb.core.errors import ParameterError
from specnb.measure.load_shapes import Closed, Lengths, Open
from specnb.measure.serving_load import Target
from specnb.serve.engines import engine_named, engines
from specnb.serve.speculation import AA_TWIN_CONFIG, BASELINE_CONFIG, FREE_FAMILIES, Speculation

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
    """Rounds are a whole number ≥ 1; where a policy is asked (closed-loop levels with speculation), at
    least 3: its noise is the spread over rounds (``serving_policy``, vLLM's proposed tuner: the median
    of ≥ 3 runs)."""
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
        raise ParameterError(f"rounds must be a whole number >= 1, got {rounds!r}")
    if policy and rounds < 3:
        raise ParameterError(f"rounds must be >= 3 where a policy is asked (its noise is the spread over rounds), got "
                             f"{rounds}; use rates for open-loop runs or leave speculation out for one round")
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
    from specnb.core.devices import cpu_name

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
    """What an endpoint's label says it drafts: "" or "spec-off" nothing; ``spec-off-aa`` nothing, on a
    second server of spec-off's settings (its A/A twin: the launch noise of that endpoint); ``TYPE:K``
    the family TYPE (vLLM's words: ngram, suffix, eagle3, draft_model, mtp, ...) at k = K — what the
    user said, read once into the configuration's record."""
    if label in ("", BASELINE_CONFIG):
        return Speculation()
    if label == AA_TWIN_CONFIG:
        return Speculation(aa_twin=True)
    family, _, k = label.rpartition(":")
    if not family or not k.isdigit() or int(k) < 1:
        raise ParameterError(f"endpoint configuration {label!r} must be spec-off, {AA_TWIN_CONFIG} (a second spec-off "
                             "server: the launch noise) or TYPE:K with K >= 1 (e.g. ngram:4, eagle3:3), as in "
                             "spec-off=URL,ngram:4=URL")
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


def phase_savers(rec, commit: str | None):
    """``policy_run.run_policy``'s ``on_run``: one ``saver`` per phase."""
    return lambda phase: saver(rec, commit, phase)


def forecast_saver(rec):
    """``policy_run.run_policy``'s ``on_forecast``: the trace's forecast written (a table, and each
    configuration's forecast speedup, mean batch and clamped share in ``results.json``) before the
    trace is sent, so what was forecast cannot have read any of it."""
    def save(forecast) -> None:
        rec.table(keys.TRACE_FORECAST, forecast)
        rec.value(keys.TRACE_FORECAST, {r["config"]: {"speedup_tpot": round(float(r["predicted_speedup_tpot"]), 4),
                                                   "mean_batch": round(float(r["trace_mean_batch"]), 2),
                                                   "clamped_share": round(float(r["clamped_share"]), 3)}
                                     for r in forecast.to_dict("records")})
    return save
