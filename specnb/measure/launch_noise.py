"""Launch-to-launch noise: how far two launches of one configuration differ, and simultaneous CIs that count it.

Why: a serving speedup is a ratio of two servers, each its own launch. Two launches of the same
configuration are not equally fast (two identical vLLM n-gram launches differed by 5%, with a
request-level CI that excluded 1): whatever a launch fixes for its life (memory placement, graphs
captured, clocks, the threads' cores) scales every request it serves, at every level. A bootstrap
over requests, or over prompts, never sees it, since every request of a launch shares it. Left out,
an A/A pair "pays" or "loses".

The model. A launch pair's offset is shared by every level it serves, so the unit of evidence is the
pair, not the (level, launch) cell: an A/A pair (spec-off and its twin, ``AA_TWIN_CONFIG``) gives per
level its log TPOT speedup d_l and the bootstrap's variance v_l of it (``AaPair``). sigma, the sd of
log(speedup) between two launches of one configuration, is estimated from P pairs as
s² = mean_p ū_p², ū_p = mean_l d_l (about 0, not the pairs' mean; the pair's own sampling is not
subtracted, so s² is conservative by mean(v)/levels), with P degrees of freedom (``noise_from``).

The CIs a summary reports are simultaneous over the family a verdict reads (``critical``): every
row of a family is a contrast of two launches X over Y; with each launch's offset a ~ N(0, s²/2)
(averaged over the launch numbers a configuration's records carry), sampling e ~ N(0, v_row) and the
estimate's own spread s*² = s²·χ²_P/P, T = (a_X − a_Y + e) / sqrt(v_row + s*²·(1/2L_X + 1/2L_Y));
c is the 95% quantile of max |T| over the family's rows, simulated (``DRAWS`` draws, fixed seed).
A row's CI is point·exp(∓c·sqrt(se_side² + s²·(1/2L_X + 1/2L_Y))), se_side each side's bootstrap
se in log, so a skewed interval stays skewed (``widened``). "Pays" or "loses" read off any row of the
family is then false for at most 5% of studies, over all its configurations and levels together.
With no pair measured (P = 0) there is no launch term and the text says "launch-to-launch noise not
measured": such a CI is about the prompts only, never "beyond the noise".

The store (``save_pairs``, ``stored_pairs``): one JSON file per ``NoiseKey`` (machine, engine, engine
version, threads; an endpoint's engine and host) under ``$SPECNB_LAUNCH_NOISE``, else the specnb
cache's ``launch-noise/``, holding every pair measured there with its date and id (a pair is added
once, however many callers save it). It keeps growing; ``wants_twin`` says when a sweep adds a pair.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime, timedelta, timezone
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from specnb.core.devices import cpu_name, gpu_name
from specnb.core.errors import ParameterError
from specnb.measure.load_shapes import shape_of
from specnb.models.cache import cache_dir
from specnb.serve.speculation import AA_TWIN_CONFIG, BASELINE_CONFIG

Z95 = 1.959964  # the 95% two-sided normal quantile the bootstrap intervals are read with
LEVEL = 0.95  # the family-wise confidence of a family's CIs
DRAWS = 20_000  # simulated studies behind one critical value
MIN_PAIRS = 3  # a sweep adds the A/A twin while the store holds fewer pairs ...
FRESH_DAYS = 7  # ... or none measured in this many days
NOT_MEASURED = "launch-to-launch noise not measured"


@dataclass(frozen=True, kw_only=True)
class AaPair:
    """One A/A launch pair as stored: per level its log TPOT speedup ``d`` (twin over spec-off) and the
    bootstrap's variance ``v`` of it; ``id`` tells the same pair saved twice apart; ``date`` UTC ISO."""

    id: str
    date: str
    levels: list[float]
    d: list[float]
    v: list[float]


@dataclass(frozen=True, kw_only=True)
class LaunchNoise:
    """sigma: the sd of log(speedup) between two launches of one configuration (s); ``pairs``: the
    independent A/A launch pairs it rests on (P, its degrees of freedom; 0: not measured);
    ``first``/``last``: their dates; ``source``: where they come from (a store, a twin URL, a sweep);
    ``sampling_var``: the pairs' mean sampling variance of ū (Σ_l v_l ÷ levels²), which s² includes."""

    sigma: float
    pairs: int
    source: str
    first: str = ""
    last: str = ""
    sampling_var: float = 0.0

    def record(self) -> dict:
        """What a run's results keep of it (``launch_noise`` in ``<run_name>.results.json``)."""
        return asdict(self)

    def text(self) -> str:
        """One line a notebook prints: what every CI carries for launch noise, and what it rests on."""
        if not self.pairs:
            return f"{NOT_MEASURED} ({self.source}): every CI is about the prompts only"
        dates = self.first[:10] if self.first[:10] == self.last[:10] else f"{self.first[:10]}–{self.last[:10]}"
        return (f"launch noise σ = {self.sigma:.3f} in log speedup from {self.pairs} A/A launch pair(s) measured "
                f"{dates} ({self.source}); CIs simultaneous over each table's configurations and levels")


def noise_from(pairs: list[AaPair], source: str) -> LaunchNoise:
    """s from independent pairs: s² = mean over pairs of (mean over the pair's levels of d)², P = pairs."""
    pairs = [p for p in pairs if p.d]
    if not pairs:
        return LaunchNoise(sigma=0.0, pairs=0, source=source)
    means = [float(np.mean(p.d)) for p in pairs]
    sampling = [float(np.sum(p.v)) / len(p.v) ** 2 for p in pairs]
    dates = sorted(p.date for p in pairs)
    return LaunchNoise(sigma=math.sqrt(float(np.mean(np.square(means)))), pairs=len(means), source=source,
                       first=dates[0], last=dates[-1], sampling_var=float(np.mean(sampling)))


# ------------------------------------------------------------------ simultaneous CIs


def boot_se(point: float, bound: float) -> float:
    """One side's bootstrap standard error in log space: |log(bound ÷ point)| ÷ 1.96."""
    return abs(math.log(bound / point)) / Z95


def log_var(point: float, lo: float, hi: float) -> float:
    """The bootstrap's variance of a log speedup, from its 95% CI: the mean of the two sides' se, squared
    (NaN where there is no interval)."""
    if not all(x > 0 for x in (point, lo, hi)):
        return math.nan
    return ((boot_se(point, lo) + boot_se(point, hi)) / 2) ** 2


def launch_share(launches_x: float, launches_y: float) -> float:
    """The share of s² a contrast of X over Y carries: each side's offset has variance s²/2 ÷ its launches."""
    return 0.5 / max(launches_x, 1) + 0.5 / max(launches_y, 1)


def critical(rows: pd.DataFrame, noise: LaunchNoise | None, level: float = LEVEL, draws: int = DRAWS,
             seed: int = 0) -> float:
    """The family's critical value c: the ``level`` quantile of max |T| over ``rows`` (columns ``config``,
    ``over``: the two launches a row contrasts; ``log_var``: its bootstrap variance; ``launches``: launch
    numbers per side), T as in the module docstring. Rows without a variance (no interval) are no part
    of the family; none left: 1.96."""
    rows = rows[rows["log_var"].notna()]
    if rows.empty:
        return Z95
    rng = np.random.default_rng(seed)
    s2, pairs = (noise.sigma ** 2, noise.pairs) if noise is not None and noise.pairs else (0.0, 0)
    names = sorted(set(rows["config"]) | set(rows["over"]))
    index = {name: i for i, name in enumerate(names)}
    launches = rows["launches"].to_numpy(float) if "launches" in rows else np.ones(len(rows))
    x, y = rows["config"].map(index).to_numpy(), rows["over"].map(index).to_numpy()
    share = np.array([launch_share(n, n) for n in launches])  # [R]
    var = rows["log_var"].to_numpy(float)  # [R]
    # σ² as the P pairs leave it: s²·P/χ²_P less their own sampling (v alone when nothing is measured)
    floor = noise.sampling_var if pairs else 0.0
    true = np.maximum(s2 * pairs / rng.chisquare(pairs, size=(draws, 1)) - floor, 0.0) if pairs \
        else np.zeros((draws, 1))  # [D, 1]
    offsets = rng.standard_normal((draws, len(names))) * np.sqrt(true / 2)  # [D, N], one launch each
    launch = (offsets[:, x] - offsets[:, y]) / np.sqrt(launches)  # [D, R]: averaged over the row's launches
    sampling = rng.standard_normal((draws, len(rows))) * np.sqrt(var)  # [D, R]
    t = (launch + sampling) / np.sqrt(var + s2 * share)  # [D, R]
    return float(np.quantile(np.abs(t).max(axis=1), level))


def widened(point: float, lo: float, hi: float, term: float, c: float = Z95) -> tuple[float, float]:
    """(lo, hi) read at critical value ``c`` with the launch ``term`` (sd in log) added: each side's
    half-width in log space c·sqrt(se² + term²), se that side's bootstrap one (``boot_se``), so a
    skewed interval stays skewed; NaN stays NaN."""
    if any(not (x > 0) for x in (point, lo, hi)):
        return lo, hi
    side = lambda bound: c * math.hypot(boot_se(point, bound), term)  # noqa: E731
    return point * math.exp(-side(lo)), point * math.exp(side(hi))


def simultaneous(rows: pd.DataFrame, noise: LaunchNoise | None, metrics: tuple[str, ...] = ("speedup_tpot",),
                 seed: int = 0) -> pd.DataFrame:
    """``rows`` (one family: ``config``, ``over``, ``launches`` and each metric's raw bootstrap
    ``metric``, ``metric_lo``, ``metric_hi``) with every metric's CI made simultaneous over the family
    (``critical`` from the first metric's variances, the same c for the others: they are read together)
    and the columns a chooser compares two rows with: ``tpot_log_var`` (the first metric's bootstrap
    variance of its log), ``launch_sigma`` (s), ``launch_pairs`` (P), ``launches`` and ``critical`` (c)."""
    rows = rows.copy()
    first = metrics[0]
    rows["tpot_log_var"] = [log_var(p, lo, hi) for p, lo, hi in
                            zip(rows[first], rows[f"{first}_lo"], rows[f"{first}_hi"])]
    if "launches" not in rows:
        rows["launches"] = 1
    c = critical(rows.rename(columns={"tpot_log_var": "log_var"}), noise, seed=seed)
    s = noise.sigma if noise is not None and noise.pairs else 0.0
    for metric in metrics:
        bounds = [widened(p, lo, hi, s * math.sqrt(launch_share(n, n)), c) for p, lo, hi, n in
                  zip(rows[metric], rows[f"{metric}_lo"], rows[f"{metric}_hi"], rows["launches"])]
        rows[f"{metric}_lo"], rows[f"{metric}_hi"] = [b[0] for b in bounds], [b[1] for b in bounds]
    rows["launch_sigma"], rows["launch_pairs"] = s, noise.pairs if noise is not None else 0
    rows["critical"] = c
    return rows


def launches_in(paired: pd.DataFrame) -> int:
    """Independent launch pairs a paired table spans: its distinct ``launch`` numbers (a sweep that
    relaunches each round numbers them), 1 where records carry none (one launch per configuration)."""
    return max(int(paired["launch"].nunique()), 1) if "launch" in paired else 1


# ------------------------------------------------------------------ an A/A pair from a sweep's records


def aa_pairs(records: pd.DataFrame, n_boot: int = 200, seed: int = 0, now: datetime | None = None
             ) -> list[AaPair]:
    """The A/A pairs of a sweep's records: spec-off and its twin are one configuration launched twice,
    so every log TPOT speedup d of the twin over spec-off is noise. One pair per launch number (a sweep
    that relaunches each round measures a pair per round), with per level d — the rounds that ran on
    that pair pooled, as a configuration's CI pools them — and the bootstrap's variance v of it
    (prompts resampled with their rounds, ``serving_summary.speedup_ci``). Its id hashes the pair's
    requests, so the same sweep saved twice is one pair."""
    from specnb.measure.serving_summary import (  # it reads this module's CIs: a real cycle
        decode_timed,
        paired_requests,
        row_rng,
        speedup_ci,
    )

    names = set(records["config"]) if "config" in records else set()
    if not {AA_TWIN_CONFIG, BASELINE_CONFIG} <= names:
        raise ParameterError(f"an A/A pair needs records of both {AA_TWIN_CONFIG!r} and {BASELINE_CONFIG!r}, got "
                             f"{sorted(names)}: sweep with launch_noise.with_twin(configs) to launch spec-off twice")
    timed, column = decode_timed(records), shape_of(records).column
    cells: dict = {}  # launch -> [(level, d, v, requests)]
    for level in sorted(timed.loc[timed["config"] == AA_TWIN_CONFIG, column].unique()):
        paired = paired_requests(timed, AA_TWIN_CONFIG, level, BASELINE_CONFIG)
        by_launch = paired.groupby("launch", sort=True) if "launch" in paired else [(0, paired)]
        for launch, cell in by_launch:
            rng = row_rng(seed, f"{AA_TWIN_CONFIG} over {BASELINE_CONFIG} launch {launch}", level)
            point, lo, hi = speedup_ci(cell, "decode_tokens", "decode_s", rng, n_boot)
            if point > 0:
                v = log_var(point, lo, hi)
                times = np.append(cell[["decode_s", "decode_s_base"]].to_numpy(float).ravel(), [float(level), launch])
                cells.setdefault(int(launch), []).append((float(level), math.log(point), 0.0 if math.isnan(v) else v,
                                                          times))
    if not cells:
        raise ParameterError(f"{AA_TWIN_CONFIG!r} and {BASELINE_CONFIG!r} share no successful request: "
                             "no A/A speedup to read")
    date = (now or datetime.now(timezone.utc)).isoformat(timespec="seconds")
    out = []
    for _, rows in sorted(cells.items()):
        digest = hashlib.sha1(np.concatenate([r[3] for r in rows]).round(9).tobytes()).hexdigest()[:16]
        out.append(AaPair(id=digest, date=date, levels=[r[0] for r in rows], d=[r[1] for r in rows],
                          v=[r[2] for r in rows]))
    return out


# ------------------------------------------------------------------ the store


@dataclass(frozen=True, kw_only=True)
class NoiseKey:
    """What launch noise is measured for: a machine (CPU model and cores, and the GPU torch sees; an
    endpoint's host), an engine, its version and its threads (0: the engine's default)."""

    machine: str
    engine: str
    version: str = ""
    threads: int = 0

    def slug(self) -> str:
        text = f"{self.engine} {self.version} {self.threads}t {self.machine}".lower()
        return re.sub(r"[^a-z0-9.]+", "-", text).strip("-")


@cache
def machine_name() -> str:
    """This machine for launch noise: the CPU model, its cores and the GPU torch sees (if any)."""
    gpu = gpu_name()  # imports torch (deferred there): once per process
    return f"{cpu_name()} {os.cpu_count()}c" + (f" {gpu}" if gpu else "")


def noise_key(configs: list) -> NoiseKey:
    """The store a sweep of ``configs`` (one engine's, spec-off first) reads and adds to: this machine,
    ``config.engine``'s name and ``version``, the configurations' threads."""
    first = configs[0]
    engine = first.engine
    return NoiseKey(machine=machine_name(), engine=engine.name, version=str(getattr(engine, "version", "") or ""),
                    threads=int(getattr(first, "threads", 0) or 0))


def endpoint_key(engine: str, host: str) -> NoiseKey:
    """The store of an endpoint's launch noise: its engine on its host (not this client's machine)."""
    return NoiseKey(machine=f"endpoint {host}", engine=engine)


def noise_path(key: NoiseKey) -> Path:
    """``$SPECNB_LAUNCH_NOISE`` (a test suite's own folder: its simulated launches are not this
    machine's), else ``launch-noise/`` in specnb's cache; one file per key."""
    folder = os.environ.get("SPECNB_LAUNCH_NOISE") or cache_dir() / "launch-noise"
    return Path(folder) / f"{key.slug()}.json"


def stored_pairs(key: NoiseKey) -> list[AaPair]:
    """The pairs stored for ``key`` ([]: none yet, or unreadable)."""
    try:
        saved = json.loads(noise_path(key).read_text())
        names = {f.name for f in fields(AaPair)}
        return [AaPair(**{k: v for k, v in pair.items() if k in names}) for pair in saved["pairs"]]
    except (OSError, ValueError, TypeError, KeyError):
        return []


def save_pairs(key: NoiseKey, pairs: list[AaPair]) -> list[AaPair]:
    """Add ``pairs`` to ``key``'s store, each once (by id); every pair stored after."""
    stored = stored_pairs(key)
    known = {p.id for p in stored}
    stored += [p for p in pairs if p.id not in known and not known.add(p.id)]
    path = noise_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps({"key": asdict(key), "pairs": [asdict(p) for p in stored]}, indent=1))
    partial.replace(path)  # never seen half-written
    return stored


def store_source(key: NoiseKey) -> str:
    """How a text names the store: what it is keyed on."""
    version = f" {key.version}" if key.version else ""
    threads = f", {key.threads} threads" if key.threads else ""
    return f"stored for {key.engine}{version}{threads} on {key.machine}"


def stored_noise(key: NoiseKey) -> LaunchNoise:
    """The launch noise of ``key``'s stored pairs (P = 0: none yet)."""
    return noise_from(stored_pairs(key), store_source(key))


# ------------------------------------------------------------------ how a sweep gets its A/A pair


def twin_of(config):
    """``config`` (spec-off) launched a second time, named ``AA_TWIN_CONFIG``: the same engine settings."""
    names = {f.name for f in fields(config)}
    if "aa_twin" in names:  # a launch configuration whose speculation is derived from its flags
        return replace(config, aa_twin=True)
    return replace(config, speculation=replace(config.speculation, aa_twin=True))  # one that holds it


def wants_twin(key: NoiseKey, now: datetime | None = None) -> bool:
    """Whether a sweep should measure an A/A pair: the store holds fewer than ``MIN_PAIRS`` pairs, or
    none from the last ``FRESH_DAYS`` days (a machine's noise drifts with its updates and load)."""
    pairs = stored_pairs(key)
    since = (now or datetime.now(timezone.utc)) - timedelta(days=FRESH_DAYS)
    return len(pairs) < MIN_PAIRS or not any(datetime.fromisoformat(p.date) >= since for p in pairs)


def with_twin(configs: list, aa_twin: bool = False, now: datetime | None = None) -> list:
    """``configs`` (spec-off first, as every engine's ``configs`` gives them) with spec-off's twin last
    when ``aa_twin`` asks or ``wants_twin`` says so; as they are otherwise."""
    if not configs or configs[0].name != BASELINE_CONFIG:
        raise ParameterError(f"the first configuration must be {BASELINE_CONFIG!r} to have an A/A twin, got "
                             f"{configs[0].name if configs else 'none'!r}")
    if any(c.name == AA_TWIN_CONFIG for c in configs) or not (aa_twin or wants_twin(noise_key(configs), now)):
        return list(configs)
    return [*configs, twin_of(configs[0])]


def noise_for(records: pd.DataFrame, key: NoiseKey, n_boot: int = 200, seed: int = 0) -> LaunchNoise:
    """The launch noise to summarise a sweep with: the stored pairs, plus the sweep's own where its
    records hold the A/A twin (added to the store once, whoever asks first)."""
    if "config" in records and AA_TWIN_CONFIG in set(records["config"]):
        pairs = save_pairs(key, aa_pairs(records, n_boot=n_boot, seed=seed))
        return noise_from(pairs, store_source(key) + ", this sweep's twin included")
    return stored_noise(key)
