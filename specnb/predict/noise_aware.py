"""A policy that knows its noise: per level the configuration to run, from every round of a sweep.

Why: one figure per level is one draw of a noisy measurement, and the best of several noisy estimates
favours whichever was lucky; a policy that follows it flips between passes. As vLLM's proposed
``tune_speculative_k`` (PR #49163): the median over >= 3 rounds of each configuration's paired TPOT
speedup, its spread (relative MAD, ``serving_sweep.relative_mad``), a measurement whose spread is
above 0.1 rejected, and a difference within the noise (the larger spread, at least 1%) a tie that goes
to the cheaper configuration — spec-off, then smaller k, a model-drafting one after a free one at the
same k. The per-round figures pair each request with spec-off's on the same prompt in the same round
(``serving_sweep.round_speedups``).

Each level carries the engine's measured batch (``serving_sweep.batch_of``: ``mean_batch``, else the
level): vLLM looks k up by the scheduler's batch, and the load, not acceptance, decides whether
speculation pays (vllm#26504). ``serving_policy`` turns the table into ranges over that batch
(``batch_ranges``) and runs this rule whenever it is given records from enough rounds.
"""

from __future__ import annotations

import math

import pandas as pd

from specnb.core.errors import ParameterError
from specnb.measure.serving_load import shape_of
from specnb.measure.serving_sweep import batch_of, relative_mad, round_speedups
from specnb.predict.policy_record import Policy, policy_of
from specnb.predict.serving_model import require_steps
from specnb.serve.engines import BASELINE_CONFIG, NOT_CANDIDATES

MIN_ROUNDS = 3  # rounds a median and a spread are taken over (vLLM PR #49163: the median of >= 3 runs)
NOISY_MAD = 0.1  # a measurement whose relative MAD over rounds is above this is too noisy to act on
TIE = 0.01  # the smallest difference that is not a tie, whatever the spreads say


def round_figures(records: pd.DataFrame, baseline: str = BASELINE_CONFIG) -> pd.DataFrame:
    """Per static configuration and level: the median over rounds of its per-round TPOT speedup
    (``serving_sweep.round_speedups``), their spread (``relative_mad``) and how many rounds. An
    adaptive launch measured beside them (a check pass) is the policy's outcome, and spec-off's A/A
    twin its launch noise: neither is a candidate (``NOT_CANDIDATES``)."""
    column = shape_of(records).column
    per_round = round_speedups(records[records["success"] & ~records["config"].isin(NOT_CANDIDATES)], baseline)
    rows = [{"config": config, column: level, "median_speedup": float(group["speedup_tpot"].median()),
             "spread": relative_mad(group["speedup_tpot"]), "rounds": len(group)}
            for (config, level), group in per_round.groupby(["config", column], sort=True)]
    return pd.DataFrame(rows, columns=["config", column, "median_speedup", "spread", "rounds"])


def identities(records: pd.DataFrame, summary: pd.DataFrame | None, lengths: dict[str, int] | None
               ) -> dict[str, tuple[int, bool]]:
    """Each configuration's (k, uses_model), from ``lengths`` first, else the summary's or the
    records' own columns: what orders configurations by cost (``cheapness``)."""
    table = summary if summary is not None and "k" in summary else records
    ks = dict(zip(table["config"], table["k"])) if "k" in table else {}
    models = dict(zip(table["config"], table["uses_model"])) if "uses_model" in table else {}
    ks |= lengths or {}
    return {c: (int(ks.get(c) or 0), bool(models.get(c, False))) for c in set(records["config"])}


def cheapness(config: str, identity: dict[str, tuple[int, bool]], baseline: str = BASELINE_CONFIG) -> tuple:
    """Sort key, cheapest first: spec-off, then smaller k, then at the same k a free proposer (n-gram)
    before one that runs a model (a draft model, a head): what a tie goes to."""
    k, uses_model = identity.get(config, (0, False))
    return (config != baseline, k, uses_model, config)


def choose_level(figures: list[dict], identity: dict[str, tuple[int, bool]], baseline: str = BASELINE_CONFIG,
                 pays: dict[str, bool] | None = None) -> dict:
    """One level's choice among ``figures`` (``round_figures`` rows there), walked cheapest first: a
    costlier configuration replaces the incumbent only when its median beats the incumbent's by more
    than the noise (the larger of the two spreads, at least ``TIE``); within it, a tie, kept by the
    incumbent and named in ``tie_with``. A measurement from fewer than ``MIN_ROUNDS`` rounds or with a
    spread above ``NOISY_MAD`` cannot replace anything, and flags the level ``noisy``. ``pays``: per
    configuration, whether its pooled 95% CI over spec-off lies above 1 — three rounds can agree
    closely on a gain the requests' own spread does not support, and the project says a configuration
    pays only where its CI does: one that does not cannot replace spec-off (a tie with it)."""
    incumbent = {"config": baseline, "median_speedup": 1.0, "spread": 0.0, "rounds": math.nan}  # its own: 1.00x
    ties, noisy = [], False
    for row in sorted(figures, key=lambda r: cheapness(r["config"], identity, baseline)):
        if row["rounds"] < MIN_ROUNDS or not row["spread"] <= NOISY_MAD:
            noisy = True
            continue
        margin = max(row["spread"], incumbent["spread"], TIE)
        gain = row["median_speedup"] / incumbent["median_speedup"] - 1.0
        unproven = incumbent["config"] == baseline and not (pays or {}).get(row["config"], True)
        if gain > margin and not unproven:
            incumbent, ties = row, []
        elif abs(gain) <= margin or gain > margin:  # within the noise, or a gain whose CI holds 1
            ties.append(row["config"])
    return {"config": incumbent["config"], "k": identity.get(incumbent["config"], (0, False))[0],
            "median_speedup": incumbent["median_speedup"], "spread": incumbent["spread"],
            "rounds": incumbent["rounds"], "noisy": noisy, "tie_with": ", ".join(ties)}


def noise_aware_policy(records: pd.DataFrame, summary: pd.DataFrame | None = None,
                       lengths: dict[str, int] | None = None, baseline: str = BASELINE_CONFIG) -> Policy:
    """Per level the configuration to run, from every round of the sweep (``records``, at least
    ``MIN_ROUNDS`` rounds): the median over rounds of each configuration's paired TPOT speedup, its
    spread, and ``choose_level``'s rule — vLLM's proposed ``tune_speculative_k`` (PR #49163): median
    of >= 3 runs, relative MAD above 0.1 rejected, a difference within the noise (>= 1%) a tie to the
    cheaper configuration.

    Keyed on the engine's batch (``Policy.keyed_on``). Its table's columns: ``concurrency``, ``batch``
    (the chosen configuration's measured ``mean_batch`` there from ``summary``, else spec-off's, else
    the level: ``serving_sweep.batch_of``), ``config``, ``k``,
    ``median_speedup`` (and the same as ``speedup_tpot``, what ``choose_launch`` and the text read),
    ``spread``, ``rounds``, ``noisy`` (a measurement there was too noisy to act on, so the cheaper
    choice stands) and ``tie_with`` (the costlier configurations it tied with, or "")."""
    require_steps(records)
    rounds = set(records.loc[records["success"], "round"])
    if len(rounds) < MIN_ROUNDS:
        raise ParameterError(f"a noise-aware policy needs at least {MIN_ROUNDS} rounds (a median and a spread per "
                             f"level), the records hold {len(rounds)}: sweep again with rounds >= {MIN_ROUNDS}")
    column = shape_of(records).column
    figures = round_figures(records, baseline)
    identity = identities(records, summary, lengths)
    batches = level_batches(summary, column)
    levels = sorted(records.loc[records["config"] == baseline, column].unique())
    rows = []
    for level in levels:
        here = figures[figures[column] == level].to_dict("records")
        row = choose_level(here, identity, baseline, paying(summary, column, level))
        batch = batches.get((row["config"], level), batches.get((baseline, level), float(level)))
        rows.append({column: level, "batch": batch, **row, "speedup_tpot": row["median_speedup"]}
                    | ({"rounds": len(rounds)} if row["config"] == baseline else {}))
    return policy_of(pd.DataFrame(rows), "batch")


def paying(summary: pd.DataFrame | None, column: str, level) -> dict[str, bool] | None:
    """Per configuration at ``level``: whether its pooled TPOT speedup's 95% CI lies above 1 (None
    without a summary carrying CIs: the rounds alone decide)."""
    if summary is None or "speedup_tpot_lo" not in summary:
        return None
    here = summary[summary[column] == level]
    return {c: bool(lo > 1.0) for c, lo in zip(here["config"], here["speedup_tpot_lo"])}


def level_batches(summary: pd.DataFrame | None, column: str) -> dict[tuple[str, float], float]:
    """(configuration, level) → its measured batch (``batch_of``); empty without a summary."""
    if summary is None or summary.empty:
        return {}
    return dict(zip(zip(summary["config"], summary[column]), batch_of(summary)))
