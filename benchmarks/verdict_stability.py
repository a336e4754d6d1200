"""Does notebook 08's launch line hold? The serving pipeline run many times over on a known truth, in virtual time.

    python benchmarks/verdict_stability.py [--truth FILE.json ...] [--sweeps N] [--states 0,3,10] [--stores K]
                                           [--seed S] [--json]
    python benchmarks/verdict_stability.py --aa [--truth FILE.json] [--sweeps N] [--pairs 1,3] [--json]

A **truth** is plain JSON a user can write: the levels (closed-loop concurrencies), ``launch_sigma`` (the sd
of one launch's log speed: two launches of one configuration differ by √2 of it), ``acceptance_spread``
(each prompt's acceptance shifted in logit by its own draw of this sd), ``rounds``, ``prompts`` and, per
configuration (``FAMILY:K``), its true TPOT speedup over spec-off at every level; optional
``max_new_tokens``, ``turnovers``, ``length_range_ratio`` (notebook 08's demo on vLLM by default: 16, 2,
0.5) and ``acceptance`` (0.7 per position) and ``zero_range_speedup`` (what a schedule's k = 0 range runs at
against spec-off: 1.0, the simulated engine's; vLLM's is 0.90–0.98). Three ship in ``benchmarks/truths/``:
speculation pays at the lowest level and loses at the top (``pays_then_loses``: n-gram k 4 1.40x then 0.75x,
k 2 1.15x then 0.80x), a near tie (``near_tie``: within 1% at both levels), a loss everywhere (``loses``).

**The engine** is the simulated one (``specnb.serve.simulated``) behind a virtual-time target
(``measure.serving_virtual.VirtualEngine``): each configuration one launch, its speed scaled by
exp(N(0, launch_sigma)) from a seed of its own. Each configuration's step at each level carries a
speculation cost calibrated so that its noise-free TPOT speedup, as the summary pools it, is the truth
(``calibrate``: the decode time of a speculative request is linear in that cost, so two noise-free
sweeps per seed give it exactly, averaged over ``CALIBRATION_SEEDS``; ``calibration_error`` reports how
close a fresh seed lands).

**The pipeline** is the real one: ``serving_stats.with_twin`` (the store decides whether spec-off's A/A
twin runs), ``serving_sweep.run_sweep`` (levels, rounds, pieces, fillers, screening), then
``app.serving_study.judge`` — the launch noise, the summary and the ``Verdict``, exactly as notebook 08
makes them. The forward probe, the schedule's check and the bursty trace are not run (the launch line is
decided before them, and they do not change it).

**Store states**: empty (the twin runs), or 3 or 10 earlier A/A pairs of the same truth, each pair a
sweep of spec-off and its twin through ``noise_for`` into a store of its own (``SPECNB_LAUNCH_NOISE``
in a temporary folder). Each sweep gets a store of its own unless ``--stores K`` reuses K of them.

**The right line** comes from the truth by the package's own rule without noise (``right_plan``:
``serving_verdict.price`` and ``choose`` on a noise-free summary of the truth): every launch one server
could be given — spec-off, each configuration, each family's schedule — scored by its worst level
against the best static one there; true speedups within ``TIE`` (2%) count as ties, and a tie goes to
the simplest (spec-off, then by smaller k, then a schedule). A sweep has the right line where its
launch drafts at exactly the levels that one does, and says so without "inconclusive". Printed per
truth and state: the share of sweeps with the modal launch line (what a user pastes), with the modal
plan (the configuration per level), with the right line, saying "inconclusive" (the launch is the
simplest of a tie that the noise estimate's own uncertainty decides), the minimum detectable effect
with launch σ alone and known (``min_detectable_effect``) and the median of each run's own
(``Verdict.mde``: its band, with the prompts' sampling and σ as uncertain as its pairs leave it).

``--aa``: the A/A calibration. A new A/A pair (spec-off and its twin, the truth's levels) summarised
against the launch noise stored from 1 and from 3 earlier pairs (``stored_noise``), and against the
figure the pipeline itself uses (``noise_for``: the new pair pooled into the store); the share of
sweeps whose twin's 95% CI holds 1 at every level (the target: 95%).

Ctrl-C prints what is done; a bad argument or truth file is one line and exit 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from specnb.app.serving_study import Params, judge, load_shapes
from specnb.core.devices import cpu_name
from specnb.core.errors import ParameterError
from specnb.core.paths import git_commit
from specnb.measure import serving_stats
from specnb.measure.prompts import select_prompts
from specnb.measure.serving_load import Lengths, Target
from specnb.measure.serving_stats import decode_timed, paired_requests, summarise_sweep
from specnb.measure.serving_sweep import SweepHooks, SweepSettings, VirtualEngine, run_sweep
from specnb.predict.serving_verdict import Noise, choose, price
from specnb.serve.engines import AA_TWIN_CONFIG, BASELINE_CONFIG, engine_named, parse_entry
from specnb.serve.simulated import FAMILIES, SimCost, launched_cost

HERE = Path(__file__).parent
TRUTHS = HERE / "truths"
ENGINE = "simulated"
TIE = 0.02  # true speedups closer than this (relative) are a tie in the right line's derivation
Z_ALPHA, Z_POWER = 1.959964, 1.644854  # two-sided 95%, one-sided 95% power
CALIBRATION_SEEDS = tuple(range(9001, 9017))  # 16 draws of the lengths: the truth is their mean
BASE_COST = SimCost(fixed_ms=10.0, per_token_ms=0.5)  # a step: 10 ms + 0.5 ms per token in the batch
DEMO = {"max_new_tokens": 16, "turnovers": 2, "length_range_ratio": 0.5}  # runner.py's trims for 08 on vLLM


OPTIONAL = ("max_new_tokens", "turnovers", "length_range_ratio", "acceptance", "zero_range_speedup")


class TruthError(ValueError):
    """A truth file or argument this script cannot use; the message says what to fix."""


@dataclass(frozen=True, kw_only=True)
class Truth:
    """What the virtual engine is made to be (see the module docstring)."""

    name: str
    levels: tuple[int, ...]
    launch_sigma: float
    acceptance_spread: float
    rounds: int
    prompts: int
    speedup: dict[str, tuple[float, ...]]
    max_new_tokens: int = DEMO["max_new_tokens"]
    turnovers: int = DEMO["turnovers"]
    length_range_ratio: float = DEMO["length_range_ratio"]
    acceptance: float = 0.7
    zero_range_speedup: float = 1.0


def read_truth(path: Path) -> Truth:
    """A truth file, checked: every configuration a ``FAMILY:K`` entry with one speedup per level."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise TruthError(f"cannot read truth {path}: {err}") from None
    known = {"levels", "launch_sigma", "acceptance_spread", "rounds", "prompts", "speedup", *OPTIONAL}
    if not isinstance(raw, dict) or set(raw) - known or not {"levels", "launch_sigma", "speedup"} <= set(raw):
        raise TruthError(f"truth {path} must be a JSON object with levels, launch_sigma and speedup (optional: "
                         f"{', '.join(sorted(known - {'levels', 'launch_sigma', 'speedup'}))})")
    try:
        levels = tuple(int(x) for x in raw["levels"])
        speedup = {str(k): tuple(float(x) for x in v) for k, v in dict(raw["speedup"]).items()}
        truth = Truth(name=Path(path).stem, levels=levels, launch_sigma=float(raw["launch_sigma"]),
                      acceptance_spread=float(raw.get("acceptance_spread", 0.0)), rounds=int(raw.get("rounds", 3)),
                      prompts=int(raw.get("prompts", 8)), speedup=speedup,
                      **{k: type(getattr(Truth, k))(raw[k]) for k in OPTIONAL if k in raw})
    except (TypeError, ValueError) as err:
        raise TruthError(f"truth {path}: {err}") from None
    if not levels or sorted(set(levels)) != list(levels) or levels[0] < 1:
        raise TruthError(f"truth {path}: levels must be increasing whole numbers >= 1, got {raw['levels']}")
    for entry, values in speedup.items():
        try:
            parse_entry(entry, FAMILIES)
        except ParameterError as err:
            raise TruthError(f"truth {path}: {err}") from None
        if len(values) != len(levels) or not all(v > 0 for v in values):
            raise TruthError(f"truth {path}: {entry} needs {len(levels)} positive speedups (one per level)")
    if truth.launch_sigma < 0 or truth.acceptance_spread < 0 or truth.rounds < 1 or truth.prompts < 1:
        raise TruthError(f"truth {path}: launch_sigma and acceptance_spread must be >= 0, rounds and prompts >= 1")
    return truth


# ------------------------------------------------------------------ the right line, without noise


def truth_summary(truth: Truth) -> pd.DataFrame:
    """The truth as a noise-free summary: spec-off and each configuration's true TPOT speedup per
    level, no sampling variance, no launch noise — what the package's own rule prices."""
    names = {c.name: entry for c, entry in zip(configs_for(truth)[1:], truth.speedup)}
    rows = [{"config": BASELINE_CONFIG, "k": 0, "family": "none", "uses_model": False, "concurrency": lv,
             "speedup_tpot": 1.0, "mean_batch": float(lv)} for lv in truth.levels]
    for name, entry in names.items():
        family, k = parse_entry(entry, FAMILIES)
        rows += [{"config": name, "k": k, "family": family, "uses_model": False, "concurrency": lv,
                  "speedup_tpot": x, "speedup_tpot_lo": x, "speedup_tpot_hi": x, "tpot_log_var": 0.0,
                  "launch_sigma": 0.0, "launch_pairs": 0, "critical": 0.0, "mean_batch": float(lv)}
                 for lv, x in zip(truth.levels, truth.speedup[entry])]
    return pd.DataFrame(rows)


def right_plan(truth: Truth) -> dict:
    """The right launch: the package's own rule (``serving_verdict.price`` and ``choose``) on the
    truth without noise, differences under ``TIE`` counted as ties; the levels where it drafts and what
    it is tied with."""
    with zero_range(truth):
        candidates = price(truth_summary(truth), ENGINE, Noise(critical=0.0, sigma=0.0), tie=TIE)
    choice = choose(candidates, Noise(critical=0.0, sigma=0.0), tie=TIE)
    chosen = choice.chosen
    return {"candidate": chosen.name, "drafts": [bool(k) for k in chosen.ks],
            "tied": [c.name for c in choice.tied], "score": round(math.exp(choice.score[chosen.name]), 4)}


@contextlib.contextmanager
def zero_range(truth: Truth):
    """The simulated engine priced with the truth's k = 0 range (``zero_range_speedup``) while inside."""
    engine = engine_named(ENGINE)
    z = truth.zero_range_speedup
    families = {parse_entry(e, FAMILIES)[0] for e in truth.speedup}
    old = engine.__dict__.get("zero_range")
    engine.zero_range = {f: (z, z, z) for f in families}
    try:
        yield
    finally:
        if old is None:
            del engine.zero_range
        else:
            engine.zero_range = old


def min_detectable_effect(truth: Truth) -> dict:
    """The smallest true difference found with 95% power at 95% confidence by one launch per
    configuration with sigma known and prompts' sampling left out: (z_.975 + z_.95)·σ·√2 in log speedup."""
    log = (Z_ALPHA + Z_POWER) * truth.launch_sigma * math.sqrt(2.0)
    return {"formula": "(1.96 + 1.645) * launch_sigma * sqrt(2), one launch per configuration, sigma known",
            "log_speedup": round(log, 4), "ratio": round(math.exp(log) - 1.0, 4)}


# ------------------------------------------------------------------ the virtual engine on a truth


def configs_for(truth: Truth) -> list:
    """spec-off and one simulated configuration per truth entry, as the engine builds them."""
    return engine_named(ENGINE).configs(ENGINE, "", list(truth.speedup), max(truth.levels))


def base_cost(truth: Truth, sigma: float) -> SimCost:
    return replace(BASE_COST, acceptance=(truth.acceptance,), max_num_seqs=max(truth.levels),
                   prompt_acceptance_spread=truth.acceptance_spread, launch_jitter=sigma)


def targets_for(configs: list, truth: Truth, costs: dict, seed: int, sigma: float) -> list[Target]:
    """One virtual launch per configuration, each its own launch seed (from ``seed``), each level's
    runs on its calibrated cost (``costs``: (configuration, level) → draft_per_token_ms)."""
    base = replace(base_cost(truth, sigma), launch_seed=seed)
    out = []
    for c in configs:
        launch = launched_cost(base, c.name, 1)
        levels = {lv: replace(launch, draft_per_token_ms=costs[(c.name, lv)])
                  for lv in truth.levels if (c.name, lv) in costs}
        out.append(Target(url=f"virtual://{c.name}", engine=ENGINE, model="simulated", speculation=c.speculation,
                          virtual=VirtualEngine(launch, c.speculation, level_costs=levels)))
    return out


def run_virtual(truth: Truth, configs: list, costs: dict, seed: int, sigma: float, screen: bool = True):
    """One sweep of ``configs`` at the truth's settings, seed ``seed``, through ``run_sweep``."""
    lengths = Lengths(tokens=truth.max_new_tokens, range_ratio=truth.length_range_ratio)
    loads = load_shapes(list(truth.levels), [], lengths, seed=seed, turnovers=truth.turnovers)
    settings = SweepSettings(rounds=truth.rounds, seed=seed, screen=screen, probe_max_tokens=0)
    prompts = select_prompts("all", truth.prompts)
    return run_sweep(targets_for(configs, truth, costs, seed, sigma), prompts, loads, settings,
                     SweepHooks(down=lambda name: ""))


def decode_totals(records, name: str, level) -> tuple[float, float, float, float]:
    """(tokens, seconds, spec-off's tokens, seconds) over the paired steady requests, as the summary pools them."""
    paired = paired_requests(decode_timed(records), name, level, BASELINE_CONFIG)
    return tuple(float(paired[c].sum()) for c in ("decode_tokens", "decode_s", "decode_tokens_base", "decode_s_base"))


def calibrate(truth: Truth, seeds=CALIBRATION_SEEDS) -> dict:
    """(configuration, level) → draft_per_token_ms that makes its noise-free TPOT speedup the truth.
    The cost sits on drafted tokens (d · k · sequences a step), so a k = 0 step costs what spec-off's
    does and the speculative path's own overhead is 0, as the right line prices a schedule's k = 0
    range. A request's decode time is linear in d (which requests share a step does not depend on
    how long steps take), so two noise-free sweeps (d = 0, 1 ms) per seed give it, pooled over ``seeds``:
    the truth is the expected speedup over the lengths' draws."""
    configs = configs_for(truth)
    names = {c.name: entry for c, entry in zip(configs[1:], truth.speedup)}
    sums: dict = {}
    for seed in seeds:
        for d in (0.0, 1.0):
            costs = {(n, lv): d for n in names for lv in truth.levels}
            records = run_virtual(truth, configs, costs, seed, 0.0, screen=False).records
            for n in names:
                for lv in truth.levels:
                    tok, s, tok_b, s_b = decode_totals(records, n, lv)
                    got = sums.setdefault((n, lv), {"tok": 0.0, "tok_b": 0.0, "s_b": 0.0, 0.0: 0.0, 1.0: 0.0})
                    got[d] += s
                    if d == 0.0:
                        got["tok"], got["tok_b"], got["s_b"] = got["tok"] + tok, got["tok_b"] + tok_b, got["s_b"] + s_b
    out = {}
    for (n, lv), got in sums.items():
        want = truth.speedup[names[n]][truth.levels.index(lv)]
        seconds = got["tok"] * got["s_b"] / (got["tok_b"] * want)  # the decode seconds that speedup needs
        d = (seconds - got[0.0]) / (got[1.0] - got[0.0])
        if BASE_COST.fixed_ms + d * parse_entry(names[n], FAMILIES)[1] * lv <= 0:  # a full step would cost nothing
            raise TruthError(f"truth {truth.name}: {names[n]} at {lv} asks {want:g}x, more than acceptance "
                             f"{truth.acceptance:g} can give; raise acceptance in the truth")
        out[(n, lv)] = d
    return out


def noise_free_speedups(truth: Truth, costs: dict, seed: int) -> dict:
    """Each (entry, level)'s TPOT speedup in one noise-free sweep at ``seed``, pooled as the summary pools it."""
    configs = configs_for(truth)
    records = run_virtual(truth, configs, costs, seed, 0.0, screen=False).records
    out = {}
    for c, entry in zip(configs[1:], truth.speedup):
        for lv in truth.levels:
            tok, s, tok_b, s_b = decode_totals(records, c.name, lv)
            out[(entry, lv)] = (tok / s) / (tok_b / s_b)
    return out


def calibration_error(truth: Truth, costs: dict, seeds=range(77, 85)) -> float:
    """The largest |mean noise-free speedup ÷ truth − 1| over ``seeds`` the calibration never saw
    (one seed alone scatters by its lengths' draws, about 2% at the demo's 8 prompts of 16 tokens)."""
    got = [noise_free_speedups(truth, costs, seed) for seed in seeds]
    return max((abs(sum(g[key] for g in got) / len(got) / truth.speedup[key[0]][truth.levels.index(key[1])] - 1.0)
                for key in got[0]), default=0.0)


# ------------------------------------------------------------------ one sweep through the pipeline


@dataclass(frozen=True, kw_only=True)
class Outcome:
    line: str  # the launch line a user pastes ("" for no speculation)
    plan: str  # the configuration the launch runs per level
    drafts: tuple[bool, ...]
    inconclusive: bool
    mde: float  # the verdict's own minimum detectable effect: its band, sampling and launch noise


def decide_once(truth: Truth, costs: dict, seed: int) -> Outcome:
    """One study on the virtual engine with the store as it is: the twin where the store asks for it,
    the sweep, then ``serving_study.judge`` — the noise, the summary and the verdict, as notebook 08 makes them."""
    configs = serving_stats.with_twin(configs_for(truth))  # the store decides whether the twin runs
    sweep = run_virtual(truth, configs, costs, seed, truth.launch_sigma)
    with zero_range(truth):
        _, _, verdict = judge(sweep, Params(engine=ENGINE, seed=seed), configs)
    drafts = tuple(bool(level.k) for level in verdict.policy.levels) if verdict.kind else (False,) * len(truth.levels)
    plan = ", ".join(f"{lv:g}: {level.config}" for lv, level in zip(truth.levels, verdict.policy.levels))
    return Outcome(line=verdict.line, plan=plan, drafts=drafts, inconclusive=verdict.sure == "inconclusive",
                   mde=verdict.mde)


def aa_sweep(truth: Truth, seed: int):
    """A sweep of spec-off and its twin only (an A/A pair), at the truth's settings."""
    configs = configs_for(truth)[:1]
    return run_virtual(truth, [*configs, serving_stats.twin_of(configs[0])], {}, seed, truth.launch_sigma)


def fill_store(truth: Truth, pairs: int, seed: int) -> None:
    """``pairs`` earlier A/A pairs of the truth added to the store ``SPECNB_LAUNCH_NOISE`` names."""
    key = serving_stats.noise_key(configs_for(truth))
    for i in range(pairs):
        serving_stats.noise_for(aa_sweep(truth, seed * 1000 + 500 + i).records, key)


FILLED: dict = {}  # (the A/A pair's settings, pairs, store) → the store's file, filled once per process


class Stores:
    """Stores of launch noise, each in a temporary folder: ``use(pairs, i)`` points
    ``SPECNB_LAUNCH_NOISE`` at a fresh folder holding store ``i`` of ``pairs`` earlier pairs (``reuse``:
    at most that many distinct stores per state, each filled once; 0: every ``i`` its own). A store
    depends only on what an A/A pair runs, so truths that differ only in their speedups share it."""

    def __init__(self, truth: Truth, reuse: int = 0):
        self.truth, self.reuse, self.root = truth, reuse, tempfile.TemporaryDirectory(prefix="verdict-stability-")
        self.count = 0

    def use(self, pairs: int, i: int) -> None:
        self.count += 1
        folder = Path(self.root.name) / str(self.count)
        folder.mkdir()
        os.environ["SPECNB_LAUNCH_NOISE"] = str(folder)
        if not pairs:
            return
        store = i % self.reuse if self.reuse else i
        t = self.truth
        key = (t.levels, t.launch_sigma, t.acceptance_spread, t.rounds, t.prompts, t.max_new_tokens, t.turnovers,
               t.length_range_ratio, t.acceptance, pairs, store)
        path = serving_stats.noise_path(serving_stats.noise_key(configs_for(t)))
        if key not in FILLED:
            fill_store(self.truth, pairs, seed=10_000 * pairs + store)
            FILLED[key] = path.read_text()
        path.write_text(FILLED[key])


# ------------------------------------------------------------------ shares


@dataclass
class Tally:
    """Outcomes of one truth at one store state, and the share of each kind."""

    right: tuple[bool, ...]
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0

    def shares(self) -> dict:
        n = len(self.outcomes)
        if not n:
            return {"sweeps": 0}
        line, line_n = Counter(o.line for o in self.outcomes).most_common(1)[0]
        plan, plan_n = Counter(o.plan for o in self.outcomes).most_common(1)[0]
        right = sum(o.drafts == self.right and not o.inconclusive for o in self.outcomes)
        inconclusive = sum(o.inconclusive for o in self.outcomes)
        return {"sweeps": n, "modal_line": line, "modal_line_share": line_n / n, "modal_plan": plan,
                "modal_plan_share": plan_n / n, "right_share": right / n, "inconclusive_share": inconclusive / n,
                "wrong_share": (n - right - inconclusive) / n, "seconds_per_sweep": round(self.seconds / n, 3),
                "run_mde_median": round(float(np.nanmedian([o.mde for o in self.outcomes])), 4)}


WORKER: dict = {}  # each process's truths, calibrated costs and stores (``start_worker``)


def start_worker(truths: list[Truth], costs: list[dict], reuse: int) -> None:
    """A process's state: Ctrl-C is the parent's to handle (it keeps what finished and stops the rest)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    WORKER.update(truths=truths, costs=costs, stores=[Stores(t, reuse) for t in truths])


def one_study(task: tuple[int, int, int]) -> tuple[tuple[int, int, int], Outcome, float]:
    """Task (truth, store pairs, seed): one study on a store of its own; its outcome and seconds."""
    t, pairs, seed = task
    WORKER["stores"][t].use(pairs, seed)
    started = time.perf_counter()
    outcome = decide_once(WORKER["truths"][t], WORKER["costs"][t], seed)
    return task, outcome, time.perf_counter() - started


def one_aa(task: tuple[int, int, int]) -> tuple[tuple[int, int, int], dict, float]:
    """Task (truth, earlier pairs, seed): a new A/A pair; whether its twin reads "no difference" at every
    level through the summaries' own simultaneous CI (``serving_stats.simultaneous``, the twin's levels
    its family), against the stored noise and against the pipeline's own figure (``noise_for``: the new
    pair added to the store — a twin judged by a noise measured from itself, which the summary never
    does: it reports the twin's row raw)."""
    t, pairs, seed = task
    truth = WORKER["truths"][t]
    WORKER["stores"][t].use(pairs, seed)
    started = time.perf_counter()
    sweep = aa_sweep(truth, seed)
    key = serving_stats.noise_key(configs_for(truth))
    summary = summarise_sweep(sweep.records, sweep.runs, seed=seed)
    twin = summary[summary["config"] == AA_TWIN_CONFIG].assign(over=BASELINE_CONFIG)
    held = {}
    stored, pooled = serving_stats.stored_noise(key), serving_stats.noise_for(sweep.records, key)
    for how, noise in (("stored", stored), ("pooled", pooled)):
        rows = serving_stats.simultaneous(twin, noise, seed=seed)
        held[how] = bool(((rows["speedup_tpot_lo"] <= 1.0) & (rows["speedup_tpot_hi"] >= 1.0)).all())
    return task, held, time.perf_counter() - started


def run_tasks(tasks: list, work, init_args: tuple, jobs: int):
    """(results, interrupted): ``work`` on every task, in ``jobs`` processes (1: this one), with a
    progress bar; Ctrl-C (or SIGTERM) keeps every result finished and drops the rest."""
    results, bar = [], tqdm(total=len(tasks), desc="sweeps", file=sys.stderr, mininterval=5.0)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a timeout stops it as Ctrl-C does
    try:
        if jobs == 1:
            start_worker(*init_args)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            for task in tasks:
                results.append(work(task))
                bar.update()
        else:
            with ProcessPoolExecutor(jobs, initializer=start_worker, initargs=init_args) as pool:
                futures = [pool.submit(work, task) for task in tasks]
                try:
                    for future in as_completed(futures):
                        results.append(future.result())
                        bar.update()
                except KeyboardInterrupt:
                    pool.shutdown(wait=True, cancel_futures=True)
                    raise
    except KeyboardInterrupt:
        bar.close()
        return results, True
    bar.close()
    return results, False


def stability(truths: list[Truth], sweeps: int, states: list[int], reuse: int, seed: int, jobs: int) -> dict:
    """Every truth at every store state, ``sweeps`` studies each (seeds ``seed`` onward)."""
    costs = [calibrate(t) for t in truths]
    # seed-major: a run stopped early holds every truth and state alike
    tasks = [(t, pairs, seed + i) for i in range(sweeps) for t in range(len(truths)) for pairs in states]
    results, interrupted = run_tasks(tasks, one_study, (truths, costs, reuse), jobs)
    report = {"truths": {}, "interrupted": interrupted, "jobs": jobs,
              "stores": f"{reuse} per state, reused" if reuse else "one per sweep"}
    for t, truth in enumerate(truths):
        right = right_plan(truth)
        tallies = {pairs: Tally(right=tuple(right["drafts"])) for pairs in states}
        for (ti, pairs, _), outcome, seconds in sorted(results, key=lambda r: r[0]):
            if ti == t:
                tallies[pairs].outcomes.append(outcome)
                tallies[pairs].seconds += seconds
        report["truths"][truth.name] = {
            "right": right, "min_detectable_effect": min_detectable_effect(truth),
            "calibration_error": round(calibration_error(truth, costs[t]), 4),
            "states": {str(pairs): tally.shares() for pairs, tally in tallies.items()}}
    return report


def aa_calibration(truth: Truth, sweeps: int, pair_states: list[int], reuse: int, seed: int, jobs: int) -> dict:
    """The share of new A/A pairs whose twin's CI holds 1 at every level (``one_aa``), per number of
    earlier pairs in the store."""
    tasks = [(0, pairs, seed + i) for i in range(sweeps) for pairs in pair_states]
    results, interrupted = run_tasks(tasks, one_aa, ([truth], [{}], reuse), jobs)
    report = {"truth": truth.name, "levels": list(truth.levels), "states": {}, "interrupted": interrupted,
              "jobs": jobs, "stores": f"{reuse} per state, reused" if reuse else "one per sweep"}
    for pairs in pair_states:
        mine = [(held, seconds) for (_, p, _), held, seconds in results if p == pairs]
        n = len(mine)
        report["states"][str(pairs)] = {"sweeps": n, **({
            "no_difference_share_stored": sum(h["stored"] for h, _ in mine) / n,
            "no_difference_share_pooled": sum(h["pooled"] for h, _ in mine) / n,
            "seconds_per_sweep": round(sum(s for _, s in mine) / n, 3)} if n else {})}
    return report


# ------------------------------------------------------------------ output


def header() -> dict:
    """What a run names before it starts: the machine, the code (the commit it started on) and the command."""
    return {"cpu": cpu_name(), "cores": os.cpu_count(), "commit": git_commit()[:7],
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "command": " ".join(["python", f"benchmarks/{Path(sys.argv[0]).name}", *sys.argv[1:]]), "tie": TIE,
            "bootstrap": "the pipeline's defaults (summary 1000 resamples, A/A noise 200)"}


def print_stability(report: dict) -> None:
    print(f"{report['cpu']} ({report['cores']} cores), commit {report['commit']}, {report['date']}, "
          f"{report['minutes']} min{' — INTERRUPTED: partial' if report['interrupted'] else ''}")
    print(f"right line: the truth's tie rule without noise, true speedups within {TIE:.0%} counted as ties")
    for name, entry in report["truths"].items():
        right, mde = entry["right"], entry["min_detectable_effect"]
        print(f"\n{name}: right = {right['candidate']} (drafts at {right['drafts']}; tied: {right['tied'] or 'none'}); "
              f"noise-free calibration error {entry['calibration_error']:.2%}; minimum detectable effect "
              f"{mde['ratio']:.1%} ({mde['formula']})")
        print("| store pairs | sweeps | modal line | modal plan | right | inconclusive | wrong | run's MDE (median) "
              "| s/sweep |")
        print("|---|---|---|---|---|---|---|---|---|")
        for pairs, s in entry["states"].items():
            if s["sweeps"]:
                print(f"| {pairs} | {s['sweeps']} | {s['modal_line_share']:.1%} `{s['modal_line'] or 'none'}` | "
                      f"{s['modal_plan_share']:.1%} ({s['modal_plan']}) | {s['right_share']:.1%} | "
                      f"{s['inconclusive_share']:.1%} | {s['wrong_share']:.1%} | {s['run_mde_median']:.0%} | "
                      f"{s['seconds_per_sweep']} |")


def print_aa(report: dict) -> None:
    print(f"{report['cpu']} ({report['cores']} cores), commit {report['commit']}, {report['date']}, "
          f"{report['minutes']} min{' — INTERRUPTED: partial' if report['interrupted'] else ''}")
    print(f"A/A pair at levels {report['levels']} ({report['truth']}): share reading 'no difference' at every level")
    print("| earlier pairs | sweeps | against the stored σ | against σ with the new pair pooled in |")
    print("|---|---|---|---|")
    for pairs, s in report["states"].items():
        if s["sweeps"]:
            print(f"| {pairs} | {s['sweeps']} | {s['no_difference_share_stored']:.1%} | "
                  f"{s['no_difference_share_pooled']:.1%} |")


def counts(text: str, what: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise TruthError(f"{what} must be whole numbers separated by commas, got {text!r}") from None
    if not values or any(v < 0 for v in values):
        raise TruthError(f"{what} must be whole numbers >= 0, got {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--truth", action="append", type=Path, help="a truth file (repeat for more); default: "
                        "the three in benchmarks/truths (with --aa: aa_four_levels.json)")
    parser.add_argument("--sweeps", type=int, default=200)
    parser.add_argument("--states", default="0,3,10", help="earlier A/A pairs in the store, per state")
    parser.add_argument("--stores", type=int, default=0, help="distinct stores per state (0: one per sweep)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--aa", action="store_true", help="the A/A calibration instead")
    parser.add_argument("--pairs", default="1,3", help="with --aa: earlier pairs in the store, per state")
    parser.add_argument("--jobs", type=int, default=1, help="processes (each sweep is independent)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    started, named = time.perf_counter(), header()
    try:
        if args.sweeps < 1 or args.stores < 0 or args.jobs < 1:
            raise TruthError(f"--sweeps and --jobs must be >= 1 and --stores >= 0, got {args.sweeps}, {args.jobs} "
                             f"and {args.stores}")
        default = [TRUTHS / "aa_four_levels.json"] if args.aa else sorted(TRUTHS.glob("[!a]*.json"))
        truths = [read_truth(p) for p in (args.truth or default)]
        if args.aa:
            report = aa_calibration(truths[0], args.sweeps, counts(args.pairs, "--pairs"), args.stores, args.seed,
                                    args.jobs)
        else:
            report = stability(truths, args.sweeps, counts(args.states, "--states"), args.stores, args.seed,
                               args.jobs)
    except TruthError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    report = named | {"minutes": round((time.perf_counter() - started) / 60, 2)} | report
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        (print_aa if args.aa else print_stability)(report)
    return 130 if report["interrupted"] else 0


if __name__ == "__main__":
    sys.exit(main())
