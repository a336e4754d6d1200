"""The serving verdict: from a sweep's summary, the one launch to make for the load it measured, and
what it rests on — one record (``Verdict``) that notebook 08, its report page, results.json and the
policy check read, and nothing else decides.

**Candidates.** Every launch one server could be given (``price``): no speculation; each static
configuration measured; each method family's schedule — per level its member that pays there beyond
the noise (the smallest k, unless a larger one beats it beyond the noise), else k = 0 — where that
differs from every static one. Each is priced per level as a log TPOT speedup over spec-off with the
summary's own variances: a configuration's row (its sampling variance, and its launch against
spec-off's), spec-off 0, a schedule's k = 0 range at the engine's own k = 0 price
(``ServingEngine.zero_range``: on vLLM the step still takes the speculative path, 0.90–0.98x of
spec-off measured; an engine that fixes speculation per launch runs spec-off itself there).

**The rule** (``choose``), vLLM's proposed k tuner's (PR #49163, closed unmerged): a candidate is
beaten when a candidate with a better worst level is faster at the candidate's own worst level (its
largest shortfall from the best static configuration there) beyond the noise — the difference of
the two prices with its band: c·sqrt(v_a + v_b + sigma²), c the summary's simultaneous critical value
(family-wise 95% over every configuration and level against spec-off: ``serving_stats``), sigma the
launch-to-launch noise where the two rest on different launches, and at least ``TIE``. Candidates not
beaten are tied, and a tie goes to the simplest: spec-off, then a static configuration by smaller k
(a free proposer before one that runs a model), then a schedule. A schedule's k never rises with the
load unless a measurement beyond the noise says so (a larger k replaces a smaller one only where it
beats it beyond the noise).

**How sure** (``Verdict.sure``): "decided" where no candidate ahead of the launch by point is within
the noise; "tie" where the launch is the simplest of a tie whose others are ahead by point but not
beyond the noise; "inconclusive" where it is the simplest of a tie that the same rule, with the launch
noise taken as known, would break for another launch: the tie is then the noise estimate's (its
launch pairs leave sigma uncertain), not the engine's, and more pairs in the store would decide it.
The launch line is the simplest either way; the verdict says what it is tied with and what would
resolve it (``min_detectable``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from specnb.core.errors import ParameterError
from specnb.core.intervals import speedup_text
from specnb.measure import serving_stats
from specnb.measure.serving_load import shape_of
from specnb.measure.serving_stats import LaunchNoise, best_static, draft_lengths
from specnb.serve.engines import ADAPTIVE_CONFIG, BASELINE_CONFIG, NOT_CANDIDATES, Launch, engine_named

TIE = 0.01  # the smallest speedup difference that is not a tie, whatever the noise (PR #49163's 1%)
Z95, Z_POWER = 1.959964, 1.644854  # two-sided 95%, one-sided 95% power
BATCH_ONE = 1.5  # a level whose measured batch is at most this is the schedule's batch-1 anchor
MAX_BATCH = 4096  # the last range of a launch runs to this batch size
KNOWN_PAIRS = 10**6  # launch pairs that make sigma's own uncertainty vanish from a critical value
SCHEDULE_FORMAT = "vllm"  # the engine whose --speculative-config a per-batch-size schedule is pasted in
KINDS = ("none", "static", "schedule")  # simplest first


# ------------------------------------------------------------------ what a launch runs per level


@dataclass(frozen=True, kw_only=True)
class PolicyLevel:
    """One measured level of a launch: its load (``concurrency``) and the engine's measured ``batch``
    there, the configuration run and its k (0: none), its TPOT speedup over spec-off with the CI it
    was priced with, and the batch its range starts at (``cut``, NaN on the first level)."""

    concurrency: float
    batch: float = math.nan
    config: str = BASELINE_CONFIG
    k: int = 0
    speedup_tpot: float = 1.0
    speedup_tpot_lo: float = math.nan
    speedup_tpot_hi: float = math.nan
    cut: float = math.nan

    def load(self, keyed_on: str) -> float:
        return self.batch if keyed_on == "batch" and not math.isnan(self.batch) else self.concurrency


COLUMNS = ("concurrency", "batch", "config", "k", "speedup_tpot", "speedup_tpot_lo", "speedup_tpot_hi", "cut")


@dataclass(frozen=True, kw_only=True)
class Policy:
    """A launch per level, in the order of the load: ``levels``; ``keyed_on``: "batch" (its ranges over
    the engine's measured batch, what vLLM looks k up by) or "concurrency" (no batch measured);
    ``zero_speedup``: what a k = 0 range costs against spec-off on the engine launched (the trace
    forecast reads it)."""

    levels: tuple[PolicyLevel, ...]
    keyed_on: str = "batch"
    zero_speedup: float = 1.0

    def __len__(self) -> int:
        return len(self.levels)

    def by_load(self) -> list[PolicyLevel]:
        return sorted(self.levels, key=lambda level: level.load(self.keyed_on))

    def drafts(self) -> bool:
        return any(level.k > 0 for level in self.levels)

    def frame(self) -> pd.DataFrame:
        """One row per level (what ``<run>.policy.csv`` holds)."""
        return pd.DataFrame([{c: getattr(level, c) for c in COLUMNS} for level in self.levels], columns=list(COLUMNS))


def cut_between(a: float, b: float) -> float:
    """Where a range starting at load ``b`` begins after one at load ``a``: the geometric mean of the two
    loads rounded to whole batches. Nothing between two measured loads says where the faster choice
    changes, and a cut read off noisy speedups (interpolated where they cross) moved run to run and
    with it the launch line; rounded loads keep it where the measurements put the levels."""
    lo, hi = max(round(a), 1), max(round(b), 1)
    return math.sqrt(lo * hi)


def level_spans(policy: Policy, max_batch: int = MAX_BATCH) -> list[tuple[int, int, int, str]]:
    """(first, last, k, config) per level over batch sizes: each level's from its ``cut`` (where none
    is given, ``cut_between`` the two loads) to the next one's − 1, the first from 1
    (keyed on the batch) or its own load (keyed on the concurrency), the last to ``max_batch``."""
    key, levels = policy.keyed_on, policy.by_load()
    loads = [level.load(key) for level in levels]
    cuts = [c if not math.isnan(c) else cut_between(a, b)
            for a, b, c in zip(loads[:-1], loads[1:], [level.cut for level in levels[1:]])]
    cuts = [math.ceil(c - 1e-9) for c in cuts]
    starts = [1 if key == "batch" else int(loads[0]), *cuts]
    ends = [c - 1 for c in cuts] + [max_batch]
    return [(lo, hi, int(level.k), level.config) for lo, hi, level in zip(starts, ends, levels) if lo <= hi]


def merged(spans: list[tuple[int, int, int, str]]) -> list[list[int]]:
    """[first, last, k] ranges, adjacent spans with the same k joined."""
    ranges: list[list[int]] = []
    for lo, hi, k, _ in spans:
        if ranges and ranges[-1][2] == k:
            ranges[-1][1] = hi
        else:
            ranges.append([lo, hi, k])
    return ranges


def policy_ranges(policy: Policy, max_batch: int = MAX_BATCH) -> list[list[int]]:
    """[[first, last, k], ...] over batch sizes: vLLM's ``num_speculative_tokens_per_batch_size`` shape."""
    return merged(level_spans(policy, max_batch))


def policy_switch(policy: Policy) -> float:
    """The load where the launch stops speculating (where its range after its last drafting level
    starts) or, drafting everywhere, where its k first falls; NaN where neither happens."""
    levels, key = policy.by_load(), policy.keyed_on
    ks = [level.k for level in levels]
    falls = [i for i in range(1, len(ks)) if ks[i] < ks[i - 1]]
    i = next((i for i in falls if ks[i] == 0), falls[0] if falls and all(ks) else None)
    if i is None:
        return math.nan
    cut = levels[i].cut
    return float(cut if not math.isnan(cut) else cut_between(levels[i - 1].load(key), levels[i].load(key)))


def unmeasured_batches(policy: Policy) -> str:
    """One line under a schedule: the batch sizes between the measured ones (each takes the k of the
    span it falls in) and the largest measured batch, above which the last choice holds unmeasured."""
    batches = sorted(level.load(policy.keyed_on) for level in policy.levels)
    measured, top = {round(b) for b in batches}, max(1, round(batches[-1]))
    gaps = [b for b in range(1, top + 1) if b not in measured]
    runs: list[list[int]] = []
    for b in gaps:
        if runs and runs[-1][1] == b - 1:
            runs[-1][1] = b
        else:
            runs.append([b, b])
    spans = ", ".join(f"{lo}" if lo == hi else f"{lo}–{hi}" for lo, hi in runs)
    return ((f"batch sizes {spans} were never measured (each takes its span's k); " if spans else "")
            + f"not measured above a batch of {batches[-1]:.3g}: the last measured choice holds from there to "
              f"{MAX_BATCH}")


# ------------------------------------------------------------------ candidates, priced from the summary


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One launch priced per level (the summary's levels, ascending): ``log_speedup`` its log TPOT
    speedup over spec-off (NaN: not measured there, a configuration screened out after the lowest
    level), ``var`` that price's sampling variance, ``launch`` the configuration whose launch (against
    spec-off's) it rests on ("" for spec-off and a k = 0 range: no launch of the sweep's); ``configs``
    and ``ks``: what it runs at each level."""

    name: str
    kind: str
    family: str = ""
    k: int = 0
    uses_model: bool = False
    configs: tuple[str, ...] = ()
    ks: tuple[int, ...] = ()
    log_speedup: tuple[float, ...] = ()
    var: tuple[float, ...] = ()
    launch: tuple[str, ...] = ()
    shortfall: tuple[float, ...] = ()  # per level: log speedup less the best static configuration's there

    def simplicity(self) -> tuple:
        """Sort key, simplest first: spec-off, static by smaller k (a free proposer first), a schedule."""
        return KINDS.index(self.kind), self.k, self.uses_model, self.name

    def speedups(self) -> list[float]:
        return [math.exp(x) for x in self.log_speedup]


@dataclass(frozen=True, kw_only=True)
class Noise:
    """What a comparison's band is made of: the summary's simultaneous critical value (``critical``),
    the launch-to-launch sigma (log; 0 where not measured) and the launch pairs it rests on; and
    ``critical_known``, the same family's c with sigma taken as exact, which says whether a tie is the
    engine's or only the noise estimate's (``choose``)."""

    critical: float = Z95
    sigma: float = 0.0
    pairs: int = 0
    critical_known: float = math.nan  # the family's c were sigma known exactly (its pairs' own uncertainty left out)

    def band(self, var: float, launches_differ: bool) -> float:
        return self.critical * math.sqrt(max(var, 0.0) + (self.sigma ** 2 if launches_differ else 0.0))


def noise_of(summary: pd.DataFrame) -> Noise:
    """The band the summary's rows were judged with (``serving_stats``: ``critical``, ``launch_sigma``,
    ``launch_pairs``), and the same family's critical value with sigma known (``critical_known``); a
    summary without them (a vLLM bench file) reads as sampling at 95%, no launch term."""
    rows = speculative_rows(summary)
    first = lambda name, default: float(rows[name].dropna().iloc[0]) if name in rows and rows[name].notna().any() \
        else default  # noqa: E731
    noise = Noise(critical=first("critical", Z95), sigma=first("launch_sigma", 0.0),
                  pairs=int(first("launch_pairs", 0)))
    if not noise.pairs or "tpot_log_var" not in rows:
        return noise
    family = rows.assign(over=BASELINE_CONFIG, log_var=rows["tpot_log_var"])
    known = LaunchNoise(sigma=noise.sigma, pairs=KNOWN_PAIRS, source="sigma taken as known")
    return replace(noise, critical_known=serving_stats.critical(family, known))


def speculative_rows(summary: pd.DataFrame, baseline: str = BASELINE_CONFIG) -> pd.DataFrame:
    return summary[~summary["config"].isin([baseline, *NOT_CANDIDATES])]


def families(summary: pd.DataFrame) -> dict[str, str]:
    """Each speculative static configuration's method family (vLLM's words: ngram, eagle3, ...)."""
    rows = speculative_rows(summary)
    return dict(zip(rows["config"], rows["family"])) if "family" in rows else {c: "ngram" for c in rows["config"]}


def log_var(row) -> float:
    """A row's sampling variance of its log TPOT speedup: ``tpot_log_var`` where the summary has it,
    else read back from its CI at the row's critical value (a table without one: 95%)."""
    if not pd.isna(row.get("tpot_log_var", math.nan)):
        return float(row["tpot_log_var"])
    lo, hi = row.get("speedup_tpot_lo", math.nan), row.get("speedup_tpot_hi", math.nan)
    c = row.get("critical", Z95)
    c = Z95 if pd.isna(c) else float(c)
    return (math.log(hi / lo) / (2 * c)) ** 2 if lo > 0 and hi > 0 else 0.0


def zero_price(engine: str, family: str) -> tuple[float, float]:
    """(log speedup, variance) of a k = 0 range on ``engine`` for ``family``: the engine's measured
    k = 0 price with its CI (``ServingEngine.zero_range``), spec-off's own (0, 0) where it has none."""
    point, lo, hi = getattr(engine_named(engine), "zero_range", {}).get(family, (1.0, 1.0, 1.0))
    return math.log(point), (math.log(hi / lo) / (2 * Z95)) ** 2


def price(summary: pd.DataFrame, engine: str, noise: Noise | None = None, tie: float = TIE) -> list[Candidate]:
    """Every candidate launch (the module docstring), priced per level of spec-off's."""
    column = shape_of(summary).column
    levels = sorted(summary.loc[summary["config"] == BASELINE_CONFIG, column].unique())
    n, noise = len(levels), noise_of(summary) if noise is None else noise
    lengths, family_of = draft_lengths(summary), families(summary)
    models = dict(zip(summary["config"], summary["uses_model"])) if "uses_model" in summary else {}
    rows = summary.set_index(["config", column])
    out = [Candidate(name=BASELINE_CONFIG, kind="none", configs=(BASELINE_CONFIG,) * n, ks=(0,) * n,
                     log_speedup=(0.0,) * n, var=(0.0,) * n, launch=("",) * n)]
    for config, k in sorted(lengths.items(), key=lambda item: (item[1], item[0])):
        here = [rows.loc[(config, level)] if (config, level) in rows.index else None for level in levels]
        out.append(Candidate(
            name=config, kind="static", family=family_of.get(config, "ngram"), k=k,
            uses_model=bool(models.get(config, False)), configs=(config,) * n, ks=(k,) * n,
            log_speedup=tuple(math.log(r["speedup_tpot"]) if r is not None and r["speedup_tpot"] > 0 else math.nan
                              for r in here),
            var=tuple(log_var(r) if r is not None else math.nan for r in here), launch=(config,) * n))
    statics = {c.name: c for c in out[1:]}
    for family in sorted(set(family_of[c] for c in lengths)):
        members = [statics[c] for c in statics if family_of[c] == family]  # by k, ascending
        plan = [schedule_pick(members, i, noise, tie) for i in range(n)]
        zero_log, zero_var = zero_price(engine, family)
        configs = tuple(m.name if m else BASELINE_CONFIG for m in plan)
        if len(set(configs)) < 2:  # one range: that static configuration, or spec-off
            continue
        out.append(Candidate(
            name=f"{family} schedule", kind="schedule", family=family, k=max(m.k for m in plan if m),
            uses_model=any(m.uses_model for m in plan if m), configs=configs, ks=tuple(m.k if m else 0 for m in plan),
            log_speedup=tuple(m.log_speedup[i] if m else zero_log for i, m in enumerate(plan)),
            var=tuple(m.var[i] if m else zero_var for i, m in enumerate(plan)),
            launch=tuple(m.name if m else "" for m in plan)))
    best = best_static(summary).set_index(column)["speedup_tpot"].reindex(levels)  # spec-off where none beats it
    return [replace(c, shortfall=tuple(x - math.log(b) for x, b in zip(c.log_speedup, best))) for c in out]


def schedule_pick(members: list[Candidate], i: int, noise: Noise, tie: float = TIE) -> Candidate | None:
    """A family's choice at level ``i``: of the members that pay there (their CI against spec-off
    above 1 + ``tie``), the smallest k, replaced by a larger k only where it beats it beyond the
    noise; None (k = 0) where none pays."""
    paying = [m for m in members if not math.isnan(m.log_speedup[i])
              and m.log_speedup[i] - noise.band(m.var[i], True) > math.log1p(tie)]
    pick = paying[0] if paying else None
    for m in paying[1:]:
        if difference(m, pick, i, noise)[1] > math.log1p(tie):
            pick = m
    return pick


# ------------------------------------------------------------------ the rule


def difference(b: Candidate, a: Candidate, i: int, noise: Noise) -> tuple[float, float, float]:
    """(point, lo, hi) of ``b``'s log advantage over ``a`` at level ``i``: the difference of their
    prices, its band from both variances and, where they rest on different launches, the launch term."""
    point = b.log_speedup[i] - a.log_speedup[i]
    if b.launch[i] == a.launch[i] and b.configs[i] == a.configs[i]:  # one measurement: no difference to test
        return point, point, point
    half = noise.band(b.var[i] + a.var[i], b.launch[i] != a.launch[i])
    return point, point - half, point + half


@dataclass(frozen=True, kw_only=True)
class Choice:
    """The rule's outcome: the launch (``chosen``), the others not beaten (``tied``), each beaten one
    with what beat it and where (``beaten``: name → (by, level index)), each candidate's ``score`` (its
    worst shortfall from the best static configuration, log) and how sure it is (``sure``)."""

    chosen: Candidate
    tied: tuple[Candidate, ...]
    beaten: dict[str, tuple[str, int]]
    score: dict[str, float]
    sure: str


def choose(candidates: list[Candidate], noise: Noise, tie: float = TIE, known: Candidate | None = None) -> Choice:
    """The launch by the module docstring's rule. With ``noise`` of critical value 0 and sigma 0 it is
    the rule on true speedups: differences under ``tie`` are ties (what ``benchmarks/verdict_stability.py``
    derives the right line with). How sure: "inconclusive" where ``known`` — the launch the same rule
    makes with the launch noise known (``Noise.critical_known``: candidates priced again with it) — is
    another: the launch is then the noise estimate's, not the engine's, and more launch pairs would
    decide it; else "tie" where a tied candidate is ahead by point, else "decided"."""
    chosen, others, beaten, score = rule(candidates, noise, tie)
    ahead = any(score[c.name] > score[chosen.name] + math.log1p(tie) for c in others)
    sure = "inconclusive" if known is not None and known.name != chosen.name else "tie" if ahead else "decided"
    return Choice(chosen=chosen, tied=tuple(others), beaten=beaten, score=score, sure=sure)


def with_noise_known(summary: pd.DataFrame, engine: str, noise: Noise, tie: float = TIE) -> Candidate | None:
    """The launch the rule makes with the launch noise taken as known (every candidate priced again at
    ``critical_known``); None where that is no narrower than the band itself."""
    if not noise.critical_known < noise.critical:
        return None
    known = replace(noise, critical=noise.critical_known)
    return rule(price(summary, engine, known, tie), known, tie)[0]


def rule(candidates: list[Candidate], noise: Noise, tie: float = TIE) -> tuple[Candidate, list, dict, dict]:
    """(the launch, the others tied with it, each beaten one with what beat it and where, each one's
    score): a candidate is beaten where one with a better worst level is faster at its worst level
    beyond the noise; the simplest of those not beaten is the launch."""
    score = {c.name: float(np.nanmin(c.shortfall)) for c in candidates}
    worst = {c.name: int(np.nanargmin(c.shortfall)) for c in candidates}
    beaten: dict[str, tuple[str, int]] = {}
    for a in candidates:
        i = worst[a.name]
        for b in sorted(candidates, key=lambda c: -score[c.name]):
            if score[b.name] > score[a.name] and not math.isnan(b.log_speedup[i]) \
                    and difference(b, a, i, noise)[1] > math.log1p(tie):
                beaten[a.name] = (b.name, i)
                break
    tied = [c for c in candidates if c.name not in beaten]
    chosen = min(tied, key=Candidate.simplicity)
    return chosen, [c for c in tied if c is not chosen], beaten, score


def min_detectable(noise: Noise, var: float) -> float:
    """The smallest true speedup difference against spec-off found with 95% power at this run's
    band: (c + z_.95)·sqrt(sigma² + v), as a ratio − 1 (``var``: a typical row's sampling variance)."""
    return math.exp((noise.critical + Z_POWER) * math.sqrt(noise.sigma ** 2 + var)) - 1.0


# ------------------------------------------------------------------ the record


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """What to launch for the load a sweep measured, and what it rests on.

    ``kind``: "none" (no speculation), "static", "schedule" (one server whose k changes with the
    batch), "per_load" (an engine that fixes speculation per launch, a schedule as one server per load
    range) or "" (nothing to decide: no speculative configuration against spec-off on closed-loop
    levels). ``chosen``: the candidate (``Candidate``); ``tied``: the others within the noise;
    ``candidates``: every one priced; ``beaten``: why each other lost; ``sure``: "decided", "tie" or
    "inconclusive" (the module docstring). ``policy``: what the launch runs per level; ``launch``: the
    ``Launch`` engines print; ``line``: what a user pastes ("" for no speculation; results.json's
    ``launch_line``); ``server``: the configuration launched for a schedule's check (None: no schedule,
    or an engine that cannot run one as one server); ``switch``: the load the bursty trace keeps in
    flight on spec-off; ``noise``: the band; ``noise_text``: where the launch noise comes from;
    ``mde``: the smallest difference this run finds with 95% power; ``screened``: configurations
    measured at the lowest level only, with the CI that screened them; ``trace``: one line on what the
    bursty trace said of the launch ("" before or without it)."""

    engine: str
    kind: str = ""
    chosen: Candidate | None = None
    tied: tuple[Candidate, ...] = ()
    candidates: tuple[Candidate, ...] = ()
    beaten: dict = field(default_factory=dict)
    score: dict = field(default_factory=dict)
    sure: str = ""
    levels: tuple[float, ...] = ()
    policy: Policy = field(default_factory=lambda: Policy(levels=()))
    launch: Launch | None = None
    line: str = ""
    server: object | None = None
    switch: float = math.nan
    noise: Noise = field(default_factory=Noise)
    noise_text: str = ""
    mde: float = math.nan
    screened: dict = field(default_factory=dict)
    trace: str = ""

    @property
    def config(self) -> str:
        """The configuration launched: spec-off, a static one's name, or ``adaptive`` for a schedule."""
        if self.chosen is None or self.kind in ("", "none"):
            return BASELINE_CONFIG
        return self.chosen.name if self.kind == "static" else ADAPTIVE_CONFIG

    @property
    def checked(self) -> bool:
        """Whether the launch runs as its own server and is measured again (a schedule on an engine that runs one)."""
        return self.kind == "schedule" and self.server is not None

    def name(self) -> str:
        """The launch in a few words: "no speculation", "ngram k=4 at every load", "the ngram schedule"."""
        if self.kind in ("", "none"):
            return "no speculation"
        if self.kind == "static":
            return f"{self.chosen.name} at every load"
        return f"the {self.chosen.family} schedule ({schedule_words(self.chosen, self.levels)})"

    def tied_text(self) -> str:
        """What the launch is tied with, in words ("" where nothing is)."""
        if not self.tied:
            return ""
        names = [t.name for t in self.tied]
        return (" and ".join(names) if len(names) < 3 else ", ".join(names[:-1]) + " and " + names[-1]) + \
            (" is" if len(names) == 1 else " are") + " within the noise"

    def record(self) -> dict:
        """What results.json keeps of it."""
        return {"launch": self.name(), "kind": self.kind, "line": self.line, "sure": self.sure,
                "tied": [t.name for t in self.tied], "config": self.config,
                "critical": round(self.noise.critical, 3), "launch_sigma": round(self.noise.sigma, 4),
                "launch_pairs": self.noise.pairs, "min_detectable_effect": round(self.mde, 4)}


def schedule_words(candidate: Candidate, levels: tuple[float, ...]) -> str:
    return ", ".join(f"{c if k else 'k = 0'} at {level:g}" for c, k, level in zip(candidate.configs, candidate.ks,
                                                                                  levels))


def model_of(configs, names: list[str]) -> str:
    """The ``model`` a pasted launch names: the draft-model or head folder of the configuration it runs
    most ("" for a method that drafts without one)."""
    folders = {c.name: str(c.draft) for c in configs if getattr(c, "draft", None) and c.name in names}
    return folders[max(sorted(folders), key=names.count)] if folders else ""


def plan_policy(chosen: Candidate, summary: pd.DataFrame, levels: list[float], zero_speedup: float) -> Policy:
    """The launch per level as a ``Policy`` keyed on the engine's measured batch (the configuration's
    ``mean_batch`` there, else spec-off's); its ranges change k halfway in log between two levels'
    rounded batches (``cut_between``)."""
    column = shape_of(summary).column
    has_batch = "mean_batch" in summary and summary["mean_batch"].notna().any()
    batch = dict(zip(zip(summary["config"], summary[column]), summary["mean_batch"])) if has_batch else {}
    rows = summary.set_index(["config", column])
    out = []
    for i, level in enumerate(levels):
        config, k = chosen.configs[i], chosen.ks[i]
        lo = hi = math.nan
        if k and (config, level) in rows.index:
            lo, hi = float(rows.loc[(config, level), "speedup_tpot_lo"]), float(rows.loc[(config, level),
                                                                                         "speedup_tpot_hi"])
        b = batch.get((config, level), batch.get((BASELINE_CONFIG, level), float(level)))
        out.append(PolicyLevel(concurrency=float(level), batch=float(b) if not pd.isna(b) else float(level),
                               config=config, k=int(k), speedup_tpot=math.exp(chosen.log_speedup[i]) if k else
                               (zero_speedup if chosen.kind == "schedule" else 1.0),
                               speedup_tpot_lo=lo, speedup_tpot_hi=hi))
    return Policy(levels=tuple(out), keyed_on="batch" if has_batch else "concurrency", zero_speedup=zero_speedup)


def require_anchor(policy: Policy) -> None:
    """A schedule over the batch needs a batch-1 anchor (PR #49163: below the smallest measured batch
    nothing says what pays)."""
    if policy.keyed_on == "batch" and not 0 < min(level.batch for level in policy.levels) <= BATCH_ONE:
        smallest = min(level.batch for level in policy.levels)
        raise ParameterError(f"a schedule needs a batch-1 anchor: a level whose measured batch is at most {BATCH_ONE} "
                             f"(the smallest here: {smallest:.3g}); sweep concurrency 1 as well")


def decide(summary: pd.DataFrame, *, engine: str = "vllm", configs=(), noise_text: str = "",
           screened: dict | None = None) -> Verdict:
    """The verdict from a sweep's ``summary`` (its CIs the decision's: ``serving_stats``), on ``engine``
    with the launched ``configs`` (their folders and launch lines; none at an endpoint). Nothing to
    decide (kind "") without a speculative configuration measured against spec-off on closed-loop levels."""
    configs, screened = tuple(configs), dict(screened or {})
    if not draft_lengths(summary) or "speedup_tpot" not in summary or not shape_of(summary).steps_batch:
        return Verdict(engine=engine, noise_text=noise_text, screened=screened)
    column = shape_of(summary).column
    levels = sorted(float(x) for x in summary.loc[summary["config"] == BASELINE_CONFIG, column].unique())
    served, noise = engine_named(engine), noise_of(summary)
    candidates = price(summary, engine, noise)
    choice = choose(candidates, noise, known=with_noise_known(summary, engine, noise))
    chosen = choice.chosen
    zero = math.exp(zero_price(engine, chosen.family)[0]) if chosen.kind == "schedule" else 1.0
    policy = plan_policy(chosen, summary, levels, zero)
    rows = speculative_rows(summary)
    mde = min_detectable(noise, float(np.nanmedian([log_var(r) for r in rows.to_dict("records")])) if len(rows)
                         else 0.0)
    common = dict(engine=engine, chosen=chosen, tied=choice.tied, candidates=tuple(candidates), beaten=choice.beaten,
                  score=choice.score, sure=choice.sure, levels=tuple(levels), policy=policy, noise=noise,
                  noise_text=noise_text, mde=mde, screened=screened)
    if chosen.kind == "none":
        return Verdict(kind="none", **common)
    draft = model_of(configs, list(chosen.configs))
    if not draft and any(c.uses_model for c in candidates if c.family == chosen.family) and not configs:
        draft = f"<the {chosen.family} model's folder>"  # an endpoint's: only its operator knows the folder
    if chosen.kind == "static":
        launch = Launch(ranges=((1, MAX_BATCH, chosen.k),), by_k={chosen.k: chosen.name}, family=chosen.family,
                        draft=draft)
        server = next((c for c in configs if c.name == chosen.name), None)
        line = server.engine.launch_text(server) if server is not None else \
            engine_named(SCHEDULE_FORMAT).launch_json(launch)
        return Verdict(kind="static", launch=launch, line=line, server=server if served.schedules else None,
                       **common)
    require_anchor(policy)
    by_k = {int(level.k): level.config for level in sorted(policy.levels, key=lambda lv: -lv.concurrency)}
    launch = Launch(ranges=tuple(tuple(r) for r in policy_ranges(policy)), by_k=by_k, family=chosen.family,
                    draft=draft)
    switch = policy_switch(policy)
    if not served.schedules and served.launched:  # one server per load range
        lines = served.policy_lines(launch, list(configs))
        return Verdict(kind="per_load", launch=launch, line="; ".join(lines), switch=switch, **common)
    members = [c for c in configs if getattr(c, "speculative", False) and c.speculation.family == chosen.family]
    server = None
    if served.schedules and members:
        base = max(members, key=lambda c: c.draft_length)
        server = base.engine.scheduled(base, chosen.k, policy_ranges(policy))
    line = server.engine.launch_text(server) if server is not None else \
        engine_named(SCHEDULE_FORMAT).launch_json(launch)
    return Verdict(kind="schedule", launch=launch, line=line, server=server, switch=switch, **common)


def with_trace(verdict: Verdict, trace: pd.DataFrame) -> Verdict:
    """``verdict`` with one line on what the bursty trace measured of its launch (``serving_stats.trace_check``'s
    table): the launch's paired TPOT speedup over spec-off there, and any configuration faster than it
    beyond the noise. The launch line stays the sweep's: the trace checks it, it does not decide again."""
    if trace is None or trace.empty or not verdict.kind:
        return verdict
    name = verdict.config
    if name == ADAPTIVE_CONFIG and "adaptive_speedup_tpot" in trace:
        base = trace[trace["config"] == BASELINE_CONFIG]
        if base.empty:
            return verdict
        row = base.iloc[0]
        own = (row["adaptive_speedup_tpot"], row["adaptive_speedup_tpot_lo"], row["adaptive_speedup_tpot_hi"])
        faster = [r["config"] for r in trace.to_dict("records") if r["adaptive_speedup_tpot_hi"] < 1.0]
    else:
        rows = trace.set_index("config")
        if name not in rows.index and name != BASELINE_CONFIG:
            return verdict
        own = (1.0, 1.0, 1.0) if name == BASELINE_CONFIG else tuple(
            rows.loc[name, c] for c in ("speedup_tpot", "speedup_tpot_lo", "speedup_tpot_hi"))
        best, best_row = trace["best"].iloc[0], rows.loc[name] if name in rows.index else None
        faster = [best] if best != name and best_row is not None and best_row["speedup_over_best_hi"] < 1.0 else []
    what = "spec-off itself" if name == BASELINE_CONFIG else f"{speedup_text(*own)} over spec-off"
    tail = (f"; {', '.join(faster)} ran faster there beyond the noise — a load that stays bursty like this trace "
            "may want it" if faster else "; nothing ran faster beyond the noise")
    return replace(verdict, trace=f"over the bursty trace the launch measured {what}{tail}")
