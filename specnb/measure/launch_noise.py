"""Launch-to-launch noise: how far two launches of one configuration differ, and speedup CIs that count it.

Why: a serving speedup is a ratio of two servers, each its own launch. Two launches of the same
configuration are not equally fast (two identical vLLM n-gram launches differed by 5%, with a
request-level CI that excluded 1): whatever a launch fixes for its life (memory placement, graphs
captured, clocks, the threads' cores) scales every request it serves. A bootstrap over requests, or
over prompts, never sees it, since every request of a launch shares it. Left out, an A/A pair
"pays" or "loses".

- ``LaunchNoise``: ``sigma``, the sd of log(speedup) between two launches of one configuration (an
  A/A pair: spec-off and its twin, ``AA_TWIN_CONFIG``), what it rests on, where it comes from.
- ``widened``: a bootstrap CI with the launch term added in log space, side by side:
  half-width = 1.96·sqrt(se_boot² + sigma²), se_boot = that side's bootstrap half-width ÷ 1.96.
  Independent launch pairs pooled in one figure (a sweep that relaunches each round) divide sigma
  by √n (``LaunchNoise.term``). sigma 0 leaves the interval as it was. The summaries
  (``serving_summary``) take a ``LaunchNoise`` and ask it to ``widen`` each CI; this module reads
  their pairs for ``aa_noise``, so it is the one that imports the other.
- ``aa_noise``: sigma from an A/A pair's records, conservatively (see there).
- ``save_noise`` / ``stored_noise``: per engine and machine, under the specnb cache
  (``$SPECNB_CACHE`` or ``~/.cache/specnb``) in ``launch-noise/<engine>-<machine key>.json``; a
  saved figure pools with the one already there, so evidence accumulates sweep by sweep.
- ``with_twin``: a sweep's configurations with spec-off's twin added while the stored noise for the
  engine on this machine rests on fewer than ``MIN_PAIRS`` launch pairs; ``noise_for`` after the sweep:
  the twin's pair measured, pooled, saved, and the figure to summarise with.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pandas as pd

from specnb.core.errors import ParameterError
from specnb.serve.engines import AA_TWIN_CONFIG, BASELINE_CONFIG

Z95 = 1.959964  # the 95% two-sided normal quantile the bootstrap intervals are read with
CONFIDENCE = 0.8  # sigma is the one-sided upper bound at this confidence, not the point estimate
MIN_PAIRS = 3  # launch pairs a stored sigma needs before a sweep stops adding the A/A twin


@dataclass(frozen=True, kw_only=True)
class LaunchNoise:
    """sigma: the sd of log(speedup) between two launches of one configuration, as added to a
    speedup's CI (two launches: the configuration's and the baseline's). ``pairs``: independent
    launch pairs it rests on (its degrees of freedom); ``cells``: A/A speedups, one per (level,
    round); ``mean_square``: their mean squared log; ``sampling_var``: the bootstrap's mean variance
    of one; ``confidence``: of the upper bound sigma is; ``source``: one line saying where it comes from."""

    sigma: float
    source: str
    pairs: int = 0
    cells: int = 0
    mean_square: float = 0.0
    sampling_var: float = 0.0
    confidence: float = CONFIDENCE

    def record(self) -> dict:
        """What a run's results keep of it (``launch_noise`` in ``<run_name>.results.json``)."""
        return asdict(self)

    def text(self) -> str:
        """One line a notebook prints: how much every CI is widened by, and on what it rests."""
        return f"launch noise σ = {self.sigma:.3f} in log speedup ({self.source})"

    def term(self, paired: pd.DataFrame) -> float:
        """The launch term of one speedup pooled over ``paired``: sigma ÷ √(launch pairs it spans, ``launches_in``)."""
        return self.sigma / math.sqrt(launches_in(paired))

    def widen(self, point: float, lo: float, hi: float, paired: pd.DataFrame) -> tuple[float, float]:
        """A bootstrap CI of a speedup over ``paired`` with this launch term added (``widened``): what
        ``serving_summary.speedup_ci`` asks of the noise it is given."""
        return widened(point, lo, hi, self.term(paired))


def chi2_quantile(p: float, df: int) -> float:
    """The p-quantile of a chi-square with ``df`` degrees of freedom: exact for df 1 (a squared
    normal), Wilson–Hilferty's cube above, within a few percent from df 2 (no scipy needed)."""
    z = NormalDist().inv_cdf(p)
    if df == 1:
        return NormalDist().inv_cdf((1 + p) / 2) ** 2
    c = 2 / (9 * df)
    return df * max(1 - c + z * math.sqrt(c), 0.0) ** 3


def bound_sigma(mean_square: float, sampling_var: float, pairs: int, confidence: float = CONFIDENCE) -> float:
    """sqrt(max(0, upper bound of E[d²] − the bootstrap's variance)): E[d²]'s one-sided ``confidence``
    bound treats pairs·mean_square ÷ E[d²] as chi-square with ``pairs`` degrees of freedom."""
    if pairs < 1:
        return math.nan
    upper = pairs * mean_square / max(chi2_quantile(1 - confidence, pairs), 1e-12)
    return math.sqrt(max(upper - sampling_var, 0.0))


def boot_se(point: float, bound: float) -> float:
    """One side's bootstrap standard error in log space: |log(bound ÷ point)| ÷ 1.96."""
    return abs(math.log(bound / point)) / Z95


def widened(point: float, lo: float, hi: float, sigma: float) -> tuple[float, float]:
    """(lo, hi) with the launch term: each side's half-width in log space 1.96·sqrt(se² + sigma²),
    se that side's bootstrap one (``boot_se``), so a skewed interval stays skewed; NaN stays NaN."""
    if not sigma or any(not (x > 0) for x in (point, lo, hi)):
        return lo, hi
    side = lambda bound: Z95 * math.hypot(boot_se(point, bound), sigma)  # noqa: E731
    return point * math.exp(-side(lo)), point * math.exp(side(hi))


def launches_in(paired: pd.DataFrame) -> int:
    """Independent launch pairs a paired table spans: its distinct ``launch`` numbers (a sweep that
    relaunches each round numbers them), 1 where records carry none (one launch per configuration)."""
    return max(int(paired["launch"].nunique()), 1) if "launch" in paired else 1


# ------------------------------------------------------------------ calibration from an A/A pair


def aa_noise(records: pd.DataFrame, a: str = AA_TWIN_CONFIG, b: str = BASELINE_CONFIG, n_boot: int = 200,
             seed: int = 0, confidence: float = CONFIDENCE) -> LaunchNoise:
    """sigma from an A/A pair: ``a`` and ``b`` are one configuration launched twice (spec-off and its
    twin), so every log TPOT speedup d of a over b is noise, launch and sampling. One d per (level,
    launch): the speedup a configuration's CI is about, pooled over the rounds that ran on that launch
    pair (every round where a sweep does not relaunch, one round where it relaunches each round), with
    its bootstrap variance v (prompts resampled with their rounds, ``speedup_ci``). A run-to-run
    wobble that flips sign from round to round (a slow spell of a shared machine) mostly averages out
    of a pooled speedup, as it does out of the configuration's own; reading one d per round instead
    charged every CI with it in full.

    Conservative three ways: (1) the mean of d² about 0, not the variance about their mean, so an
    offset one launch gives every level counts in full; (2) E[d²]'s one-sided ``confidence`` upper
    bound (chi-square, one degree of freedom per cell: levels of one launch pair share its offset,
    which (1) already charges); (3) the mean v subtracted from that bound, not before it is taken.
    Floored at 0."""
    from specnb.measure.serving_load import shape_of
    from specnb.measure.serving_summary import decode_timed, paired_requests, row_rng, speedup_ci

    names = set(records["config"]) if "config" in records else set()
    if not {a, b} <= names:
        raise ParameterError(f"an A/A pair needs records of both {a!r} and {b!r}, got {sorted(names)}: "
                             "sweep with launch_noise.with_twin(configs) to launch spec-off twice")
    timed, column = decode_timed(records), shape_of(records).column
    squares, variances, launches = [], [], set()
    for level in sorted(timed.loc[timed["config"] == a, column].unique()):
        paired = paired_requests(timed, a, level, b)
        by_launch = paired.groupby("launch", sort=True) if "launch" in paired else [(0, paired)]
        for launch, cell in by_launch:
            rng = row_rng(seed, f"{a} over {b} launch {launch}", level)
            point, lo, hi = speedup_ci(cell, "decode_tokens", "decode_s", rng, n_boot)
            if not point > 0:
                continue
            se = (boot_se(point, lo) + boot_se(point, hi)) / 2 if lo > 0 and hi > 0 else 0.0
            squares.append(math.log(point) ** 2)
            variances.append(se ** 2)
            launches.add(int(cell["launch"].iloc[0]) if "launch" in cell else 0)
    if not squares:
        raise ParameterError(f"{a!r} and {b!r} share no successful request: no A/A speedup to read")
    pairs, mean_square, sampling_var = len(launches), float(np.mean(squares)), float(np.mean(variances))
    sigma = bound_sigma(mean_square, sampling_var, len(squares), confidence)
    source = (f"{pairs} A/A launch pair(s) of {a} and {b}, {len(squares)} level-launch cell(s), "
              f"{confidence:.0%} upper bound")
    return LaunchNoise(sigma=sigma, source=source, pairs=pairs, cells=len(squares), mean_square=mean_square,
                       sampling_var=sampling_var, confidence=confidence)


def pooled(old: LaunchNoise, new: LaunchNoise) -> LaunchNoise:
    """Two calibrations as one: pairs add, the mean square and sampling variance weighted by cells,
    sigma bounded again over the pooled pairs (at the newer one's confidence)."""
    cells = old.cells + new.cells
    weight = lambda x, y: (old.cells * x + new.cells * y) / cells  # noqa: E731
    mean_square, sampling_var = weight(old.mean_square, new.mean_square), weight(old.sampling_var, new.sampling_var)
    pairs = old.pairs + new.pairs
    return LaunchNoise(sigma=bound_sigma(mean_square, sampling_var, cells, new.confidence),
                       source=f"{pairs} A/A launch pairs pooled over sweeps, {cells} level-launch cells, "
                              f"{new.confidence:.0%} upper bound",
                       pairs=pairs, cells=cells, mean_square=mean_square, sampling_var=sampling_var,
                       confidence=new.confidence)


# ------------------------------------------------------------------ stored per engine and machine


def machine_key() -> str:
    """This machine for launch noise: the CPU model (``core.devices.cpu_name``) and its core count, slugged."""
    from specnb.core.devices import cpu_name

    return re.sub(r"[^a-z0-9]+", "-", f"{cpu_name()} {os.cpu_count()}c".lower()).strip("-")


def noise_path(engine: str) -> Path:
    """``$SPECNB_LAUNCH_NOISE`` (a test suite's own folder: its simulated launches are not this
    machine's), else ``launch-noise/`` in specnb's cache, one file per engine and machine."""
    from specnb.models.cache import cache_dir

    safe = re.sub(r"[^A-Za-z0-9.]+", "-", engine)
    folder = os.environ.get("SPECNB_LAUNCH_NOISE") or cache_dir() / "launch-noise"
    return Path(folder) / f"{safe}-{machine_key()}.json"


def stored_noise(engine: str) -> LaunchNoise | None:
    """The launch noise saved for ``engine`` on this machine (None: none yet, or unreadable)."""
    path = noise_path(engine)
    try:
        saved = json.loads(path.read_text())
        return LaunchNoise(**{f.name: saved[f.name] for f in fields(LaunchNoise) if f.name in saved})
    except (OSError, ValueError, TypeError):
        return None


def save_noise(noise: LaunchNoise, engine: str, pool: bool = True) -> LaunchNoise:
    """Save ``noise`` for ``engine`` on this machine, pooled with what is stored (``pool``); what was saved."""
    old = stored_noise(engine) if pool else None
    noise = pooled(old, noise) if old is not None and old.cells else noise
    path = noise_path(engine)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(asdict(noise), indent=1))
    partial.replace(path)  # never seen half-written
    return noise


# ------------------------------------------------------------------ how a sweep gets its A/A pair


def twin_of(config):
    """``config`` (spec-off) launched a second time, named ``AA_TWIN_CONFIG``: the same engine settings."""
    names = {f.name for f in fields(config)}
    if "aa_twin" in names:  # a launch configuration whose speculation is derived from its flags
        return replace(config, aa_twin=True)
    return replace(config, speculation=replace(config.speculation, aa_twin=True))  # one that holds it


def wants_twin(engine: str, min_pairs: int = MIN_PAIRS) -> bool:
    """Whether a sweep on ``engine`` should measure an A/A pair: the stored noise on this machine
    rests on fewer than ``min_pairs`` launch pairs (or there is none)."""
    noise = stored_noise(engine)
    return noise is None or noise.pairs < min_pairs


def with_twin(configs: list, min_pairs: int = MIN_PAIRS) -> list:
    """``configs`` (spec-off first, as every engine's ``configs`` gives them) with spec-off's twin
    last while ``wants_twin`` says so; as they are otherwise."""
    if not configs or configs[0].name != BASELINE_CONFIG:
        raise ParameterError(f"the first configuration must be {BASELINE_CONFIG!r} to have an A/A twin, got "
                             f"{configs[0].name if configs else 'none'!r}")
    if any(c.name == AA_TWIN_CONFIG for c in configs) or not wants_twin(configs[0].engine.name, min_pairs):
        return list(configs)
    return [*configs, twin_of(configs[0])]


def noise_for(records: pd.DataFrame, engine: str, n_boot: int = 200, seed: int = 0) -> LaunchNoise | None:
    """The launch noise to summarise a sweep with: where its records hold the A/A pair, that pair's
    (``aa_noise``) pooled into the store and saved; the stored figure otherwise (None: none yet)."""
    if "config" in records and AA_TWIN_CONFIG in set(records["config"]):
        return save_noise(aa_noise(records, n_boot=n_boot, seed=seed), engine)
    return stored_noise(engine)
