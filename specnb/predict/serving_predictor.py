"""Speculation under serving load, predicted from the engine's own step cost, and the policy that follows.

The model (one engine step serves every running sequence at once):

- Spec-off at concurrency b: each step runs one forward over b tokens, so its TPOT *is* the engine's
  cost of a forward with b tokens in the batch, t(b). The spec-off sweep measures t at every level;
  between levels t is interpolated linearly in tokens, beyond them extended along the last segment.
- A speculative configuration at concurrency b: each sequence's step verifies 1 + d tokens (d = draft
  tokens per step, from the counters) and yields τ' = generated tokens ÷ steps (steps = generated −
  accepted; τ' ≤ τ because steps without a draft count too). So
  TPOT(b) = (v(b) + δ(b)) ÷ τ', with δ the speculative step's cost beyond its verification — a draft
  model's forwards, and for any method the proposer's and rejection sampler's own work (an n-gram
  step on a 2-core AMD EPYC: 1–4 ms beyond a 28–30 ms verification on vLLM, 1–2 ms beyond 8 ms on
  llama-server) — calibrated at the first level and scaled like the verifier's step,
  δ(b) = δ(b₀)·t(b)/t(b₀).
- The verification step v(b): with the engine's forward probe f(n) (one forward of n prompt tokens,
  the same matrix shapes as a step over n sequences: timed by llama.cpp itself, or on vLLM by the
  client as a one-token completion), spec-off's measured step plus the extra tokens' cost,
  v(b) = t(b) + f(b·(1 + d)) − f(b); this reaches past the levels measured, and it keeps out of the
  extra tokens' price what spec-off's TPOT carries besides the forward (other requests' prefills,
  which grow with the load when outputs are short). Without a probe (SGLang, an endpoint),
  v(b) = t(b·(1 + d)) from the spec-off curve.
- Acceptance (d, τ') is taken at the calibration level only; the other levels are predictions, and
  ``validate_serving`` reports the median error there against the measured TPOT speedup.
  ``validate_held_out`` cross-fits on prompts (two folds with the same mix of categories, from
  llama.cpp's per-request draft counts, or from vLLM's counters over runs that held one fold's
  prompts only): every level, on prompts the predictor never saw.

Why speedup falls with load: t grows with the tokens in the batch once the machine stops being
memory-bound, and speculation multiplies those tokens by 1 + d while dividing steps only by τ'.

The policy (``serving_policy``): per concurrency level the configuration (of those measured) with the
best TPOT speedup above 1 whose lower 95% bound is at least ``POLICY_FLOOR``, else none — as vLLM's
``num_speculative_tokens_per_batch_size`` and as llama-server flags. A policy is held against the
best static configuration at each level, so it follows the best point estimate; the floor keeps out
one whose interval admits a loss of more than 5%. A vLLM server runs one method, and a schedule's
k = 0 range is not spec-off for any method: the step still goes through the speculative path (the
proposer is called, a draft model's or head's first forward runs, the scheduler and sampler take
their speculative branches). ``zero_range_speedup`` prices it at the method's own step cost δ(b),
which is what an all-zero schedule measured against spec-off (``benchmarks/vllm_k0.py``);
``launch_policy`` drafts instead at a level where the method's measured speedup beats that.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable

import numpy as np
import pandas as pd

from specnb.core.errors import ParameterError

BASELINE_CONFIG = "spec-off"
POLICY_FLOOR = 0.95  # the lowest lower 95% bound of a TPOT speedup the policy will run


def closed_loop_levels(frame: pd.DataFrame) -> None:
    """Refuse a table keyed by request rate: b here is sequences in a step, which a rate is not."""
    if "concurrency" not in frame.columns:
        raise ParameterError("the serving predictor and policy price a step by the requests in it, so they need "
                             "closed-loop concurrency levels; this sweep ran Poisson arrivals (requests/s): "
                             "rerun with rates = [] for them")


def step_cost(summary: pd.DataFrame, baseline: str = BASELINE_CONFIG) -> pd.DataFrame:
    """The engine's step time t(b) in ms against tokens in the batch b, from spec-off's mean TPOT."""
    closed_loop_levels(summary)
    base = summary[summary["config"] == baseline].sort_values("concurrency")
    if base.empty:
        raise ParameterError(f"no {baseline!r} rows to price a step from")
    return pd.DataFrame({"tokens": base["concurrency"].astype(float), "step_ms": base["mean_tpot_ms"]})


def step_ms(cost: pd.DataFrame, tokens: float) -> float:
    """t(tokens): linear between measured points, the last segment extended beyond them."""
    x, y = cost["tokens"].to_numpy(float), cost["step_ms"].to_numpy(float)
    if len(x) == 1 or tokens <= x[-1]:
        return float(np.interp(tokens, x, y))
    slope = (y[-1] - y[-2]) / (x[-1] - x[-2])
    return float(y[-1] + slope * (tokens - x[-1]))


def acceptance_of(row) -> tuple[float, float]:
    """(draft tokens per step d, generated tokens per step τ') from a summary row's counters."""
    steps = row["tokens_predicted"] - row["spec_decode_accepted_tokens"]
    if steps <= 0:
        return 0.0, 1.0
    return row["spec_decode_draft_tokens"] / steps, row["tokens_predicted"] / steps


def verify_ms(cost: pd.DataFrame, probe: pd.DataFrame | None, b: float, d: float) -> float:
    """A speculative step's verification at b sequences with d draft tokens each: with a forward
    probe, spec-off's measured step plus what the probe says the extra b·d tokens cost; without one,
    the spec-off curve read at b·(1 + d) tokens."""
    if probe is None or probe.empty:
        return step_ms(cost, b * (1 + d))
    forward = pd.DataFrame({"tokens": probe["tokens"], "step_ms": probe["forward_ms"]})
    return step_ms(cost, b) + step_ms(forward, b * (1 + d)) - step_ms(forward, b)


def predict_serving(summary: pd.DataFrame, config: str, levels, baseline: str = BASELINE_CONFIG,
                    probe: pd.DataFrame | None = None) -> pd.DataFrame:
    """Predicted TPOT and TPOT speedup of ``config`` at each of ``levels``, calibrated at its lowest
    level; ``probe``: the engine's forward cost against tokens (``specnb.measure.serving_sweep.probe_forward``)."""
    cost = step_cost(summary, baseline)
    rows = summary[summary["config"] == config].sort_values("concurrency")
    if rows.empty:
        raise ParameterError(f"no rows for configuration {config!r}")
    calib = rows.iloc[0]
    d, tau = acceptance_of(calib)
    b0 = float(calib["concurrency"])
    delta0 = max(0.0, calib["mean_tpot_ms"] * tau - verify_ms(cost, probe, b0, d))
    out = []
    for b in levels:
        delta = delta0 * step_ms(cost, b) / step_ms(cost, b0)
        tpot = (verify_ms(cost, probe, b, d) + delta) / tau
        out.append({"config": config, "concurrency": b, "draft_per_step": d, "tokens_per_step": tau,
                    "draft_ms": delta, "predicted_tpot_ms": tpot,
                    "predicted_speedup_tpot": step_ms(cost, b) / tpot, "calibrated_at": b0})
    return pd.DataFrame(out)


def validate_serving(summary: pd.DataFrame, configs: Iterable[str], baseline: str = BASELINE_CONFIG,
                     probe: pd.DataFrame | None = None) -> pd.DataFrame:
    """Predicted against measured TPOT speedup at every measured level of each of ``configs`` (names);
    ``calibration`` marks the level each was calibrated on."""
    frames = []
    for config in configs:
        levels = sorted(summary.loc[summary["config"] == config, "concurrency"])
        pred = predict_serving(summary, config, levels, baseline, probe)
        measured = summary[summary["config"] == config][["concurrency", "speedup_tpot"]]
        frame = pred.merge(measured, on="concurrency")
        frame["error"] = (frame["predicted_speedup_tpot"] - frame["speedup_tpot"]).abs() / frame["speedup_tpot"]
        frame["calibration"] = frame["concurrency"] == frame["calibrated_at"]
        frame["prompts"] = "same"
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def request_summary(records: pd.DataFrame) -> pd.DataFrame:
    """Per (configuration, level), the predictor's inputs from per-request fields alone: mean TPOT and
    llama.cpp's per-request draft counts (``draft_n``, ``draft_n_accepted``) in the counters' names,
    so any subset of prompts can calibrate."""
    ok = records[records["success"]]
    grouped = ok.groupby(["config", "concurrency"], sort=False)
    return pd.DataFrame({"mean_tpot_ms": grouped["tpot"].mean() * 1e3,
                         "tokens_predicted": grouped["output_tokens"].sum().astype(float),
                         "spec_decode_draft_tokens": grouped["draft_n"].sum().astype(float),
                         "spec_decode_accepted_tokens": grouped["draft_n_accepted"].sum().astype(float)}).reset_index()


def folds(records: pd.DataFrame) -> pd.Series:
    """0 or 1 per request: prompts alternate between the two folds within each category, so both
    folds hold the same mix (acceptance depends on the kind of prompt far more than on the load)."""
    key = records["prompt_id"] if "prompt_id" in records else records["prompt_index"].astype(str)
    firsts = records.assign(_key=key).drop_duplicates("_key")
    rank = firsts.groupby("category", sort=False).cumcount() % 2
    return key.map(dict(zip(firsts["_key"], rank)))


COUNTER_COLUMNS = ("tokens_predicted", "spec_decode_draft_tokens", "spec_decode_accepted_tokens")


def counter_summary(records: pd.DataFrame, runs: pd.DataFrame, in_fold: pd.Series) -> pd.DataFrame:
    """``request_summary`` for an engine that counts drafts per run, not per request (vLLM): mean TPOT
    from the fold's requests, the counters summed over the runs whose every request is in the fold (a
    run's counters cannot be split by request). A speculative configuration's level without such a
    run is left out, so it is calibrated at its lowest level that has one; spec-off keeps every level
    (only its TPOT prices a step)."""
    keys = ["config", "concurrency", "round", "chunk"]
    whole = records.assign(_in=in_fold.to_numpy()).groupby(keys, as_index=False)["_in"].all()
    inside = runs.merge(whole[whole["_in"]][keys], on=keys)
    counted = inside.groupby(["config", "concurrency"], as_index=False)[list(COUNTER_COLUMNS)].sum()
    ok = records[in_fold & records["success"]]
    tpot = (ok.groupby(["config", "concurrency"], as_index=False)["tpot"].mean()
            .assign(mean_tpot_ms=lambda f: f["tpot"] * 1e3).drop(columns="tpot"))
    frame = tpot.merge(counted, on=["config", "concurrency"], how="left")
    return frame[(frame["config"] == BASELINE_CONFIG) | frame["tokens_predicted"].notna()].reset_index(drop=True)


def per_request_counts(records: pd.DataFrame) -> bool:
    """Whether requests carry their own draft counts (llama.cpp's ``timings``)."""
    return records.get("draft_n", pd.Series(dtype=float)).fillna(0).sum() > 0


def validate_held_out(records: pd.DataFrame, configs: Iterable[str], baseline: str = BASELINE_CONFIG,
                      n_boot: int = 500, seed: int = 0, probe: pd.DataFrame | None = None,
                      runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Two-fold cross-fit on prompts: calibrate on one fold (``folds``), predict the TPOT speedup at
    every level and compare with the one measured on the other fold, then the other way round —
    every prediction is for prompts the predictor never saw (``calibration`` False everywhere).
    Acceptance comes from per-request draft counts (llama.cpp) or, given the sweep's ``runs``, from
    the engine's counters of runs that held one fold's prompts only (``counter_summary``; vLLM);
    empty with neither."""
    from specnb.measure.serving_summary import decode_timed, paired_requests, row_rng, speedup_ci

    closed_loop_levels(records)
    by_request = per_request_counts(records)
    if not by_request and (runs is None or runs.empty or "chunk" not in records or "chunk" not in runs):
        return pd.DataFrame()
    fold = folds(records)
    frames = []
    for calibrate_on in (0, 1):
        calibration = request_summary(records[fold == calibrate_on]) if by_request else \
            counter_summary(records, runs, fold == calibrate_on)
        held = decode_timed(records[fold != calibrate_on])
        for config in configs:
            levels = sorted(held.loc[held["config"] == config, "concurrency"].unique())
            if not levels or config not in set(calibration["config"]):
                continue  # a fold without this configuration's prompts (fewer prompts than two per category)
            pred = predict_serving(calibration, config, levels, baseline, probe)
            measured = []
            for level in levels:
                paired = paired_requests(held, config, level, baseline)
                rng = row_rng(seed, config, level)  # a row's CI whatever rows come before it
                point, lo, hi = speedup_ci(paired, "decode_tokens", "decode_s", rng, n_boot) if len(paired) else \
                    (math.nan,) * 3
                measured.append({"concurrency": level, "speedup_tpot": point, "speedup_tpot_lo": lo,
                                 "speedup_tpot_hi": hi})
            frame = pred.merge(pd.DataFrame(measured), on="concurrency")
            frame["error"] = (frame["predicted_speedup_tpot"] - frame["speedup_tpot"]).abs() / frame["speedup_tpot"]
            frame["calibration"] = False
            frame["prompts"] = "held out"
            frame["fold"] = 1 - calibrate_on
            frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def median_error(validation: pd.DataFrame) -> float:
    """Median relative error of the predicted TPOT speedup over the levels not calibrated on."""
    held = validation[~validation["calibration"]] if len(validation) else validation
    return float(held["error"].median()) if len(held) else math.nan


def serving_policy(summary: pd.DataFrame, draft_lengths: dict[str, int], baseline: str = BASELINE_CONFIG
                   ) -> pd.DataFrame:
    """Per measured level: the configuration to run (the best TPOT speedup above 1 whose lower CI
    bound is at least ``POLICY_FLOOR``, else spec-off), its draft length k (0 for spec-off) and the
    speedup it stands on."""
    closed_loop_levels(summary)
    rows = []
    for level, group in summary[summary["config"] != baseline].groupby("concurrency"):
        paying = group[(group["speedup_tpot"] > 1.0) & (group["speedup_tpot_lo"] >= POLICY_FLOOR)]
        if paying.empty:
            rows.append({"concurrency": level, "config": baseline, "k": 0, "speedup_tpot": 1.0})
            continue
        best = paying.sort_values("speedup_tpot").iloc[-1]
        rows.append({"concurrency": level, "config": best["config"], "k": draft_lengths.get(best["config"], 0),
                     "speedup_tpot": float(best["speedup_tpot"])})
    return pd.DataFrame(rows)


def zero_range_speedup(summary: pd.DataFrame, base: str, levels, baseline: str = BASELINE_CONFIG) -> pd.Series:
    """Per level, the TPOT speedup over spec-off of a launch built on configuration ``base`` where its
    schedule says k = 0: the step is spec-off's plus ``base``'s own cost beyond verification δ(b)
    (``predict_serving``'s ``draft_ms``, calibrated at its lowest level), since vLLM still takes the
    speculative path at k = 0 — for n-gram as for a head, whose first forward is only part of it."""
    cost = step_cost(summary, baseline)
    own = predict_serving(summary, base, list(levels), baseline).set_index("concurrency")["draft_ms"]
    return pd.Series({b: step_ms(cost, b) / (step_ms(cost, b) + own[b]) for b in levels}, name="zero_range_speedup")


def launch_policy(summary: pd.DataFrame, family: dict[str, int], baseline: str = BASELINE_CONFIG) -> pd.DataFrame:
    """One vLLM launch's schedule over ``family`` (one method's configurations and their k, the
    launch built on the one with the largest k): ``serving_policy``'s choice per level, except where
    it says k = 0 and the family's best measured configuration there is faster than the launch's k = 0
    range (``zero_range_speedup``) — there the launch drafts with that configuration's k, unless its
    lower bound admits a loss of more than 5% against that range (``POLICY_FLOOR``, as against
    spec-off in ``serving_policy``)."""
    base = max(family, key=family.get)
    policy = serving_policy(summary[summary["config"].isin([baseline, *family])], family, baseline)
    zero = zero_range_speedup(summary, base, policy["concurrency"], baseline)
    own = summary[summary["config"].isin(list(family))]
    rows = []
    for row in policy.to_dict("records"):
        here = own[own["concurrency"] == row["concurrency"]].sort_values("speedup_tpot")
        best = here.iloc[-1] if len(here) else None
        z = zero[row["concurrency"]]
        if row["k"] == 0 and best is not None and best["speedup_tpot"] > z and \
                best["speedup_tpot_lo"] >= POLICY_FLOOR * z:
            row = row | {"config": best["config"], "k": family[best["config"]],
                         "speedup_tpot": float(best["speedup_tpot"])}
        rows.append(row)
    return pd.DataFrame(rows)


def adaptive_expected(summary: pd.DataFrame, policy: pd.DataFrame, base: str,
                      baseline: str = BASELINE_CONFIG) -> pd.Series:
    """The TPOT speedup one launch of ``policy``'s schedule, built on configuration ``base``, should
    reach per level: the chosen configuration's measured one where it drafts, ``zero_range_speedup``
    where k = 0."""
    levels = policy.sort_values("concurrency")
    zero = zero_range_speedup(summary, base, list(levels["concurrency"]), baseline)
    return pd.Series({row["concurrency"]: float(row["speedup_tpot"] if row["k"] > 0 else zero[row["concurrency"]])
                      for row in levels.to_dict("records")}, name="expected_speedup_tpot")


def policy_ranges(policy: pd.DataFrame, max_batch: int = 4096) -> list[list[int]]:
    """[[first, last, k], ...] over batch sizes: each measured level's k holds up to the next level − 1,
    the last level's to ``max_batch`` (vLLM's ``num_speculative_tokens_per_batch_size`` shape)."""
    levels = policy.sort_values("concurrency")
    ranges = []
    starts = [int(x) for x in levels["concurrency"]]
    for i, (start, k) in enumerate(zip(starts, levels["k"])):
        end = starts[i + 1] - 1 if i + 1 < len(starts) else max_batch
        if ranges and ranges[-1][2] == int(k):
            ranges[-1][1] = end
        else:
            ranges.append([start, end, int(k)])
    return ranges


def speculative_config(policy: pd.DataFrame, method: str, model: str = "") -> dict:
    """vLLM's ``--speculative-config`` for the policy, its ranges as ``num_speculative_tokens_per_batch_size``
    and ``num_speculative_tokens`` their largest k; {} where no level speculates, since vLLM then runs
    best with no speculative config at all (a schedule of zeros still loads and calls the proposer).
    One range drafting at every batch size is a static launch, no schedule: vLLM's dynamic path cost
    2.5% against the static one at the same k (an EAGLE-3 trace, benchmarks/README.md)."""
    ranges = policy_ranges(policy)
    k_max = max((k for *_, k in ranges), default=0)
    if not k_max:
        return {}
    config = {"method": method, "num_speculative_tokens": k_max}
    if len(ranges) > 1:
        config["num_speculative_tokens_per_batch_size"] = ranges
    return config | ({"model": model} if model else {})


def vllm_config(policy: pd.DataFrame, method: str, model: str = "") -> str:
    """``speculative_config`` as the JSON a vLLM user pastes; "" where no level speculates (no
    ``--speculative-config``)."""
    config = speculative_config(policy, method, model)
    return json.dumps(config) if config else ""


def llama_server_flags(policy: pd.DataFrame, flags: dict[str, str]) -> list[str]:
    """One llama-server command-line tail per range (llama-server fixes its speculation per launch);
    ``flags``: each configuration's speculation flags as it was launched."""
    lines = []
    by_k = policy.drop_duplicates("k", keep="first").set_index("k")
    ranges = policy_ranges(policy)
    for i, (start, end, k) in enumerate(ranges):
        span = f"{start} or more" if i == len(ranges) - 1 else f"{start}" if start == end else f"{start}–{end}"
        what = "no --spec-type (spec-off)" if k == 0 else flags.get(by_k.loc[k, "config"], f"--spec-draft-n-max {k}")
        lines.append(f"{span} concurrent: {what}")
    return lines


def policy_switch(policy: pd.DataFrame) -> float:
    """The load where the policy stops speculating: the geometric mean of its last level that drafts
    and the next one, which does not; where it drafts at every level, the load where its k first falls
    (a schedule of k alone, e.g. 4 at low load and 1 above); NaN where neither happens (it never
    drafts, or drafts one k throughout)."""
    levels = policy.sort_values("concurrency")
    at, ks = levels["concurrency"].to_numpy(float), levels["k"].to_numpy()
    falls = [i for i in range(1, len(ks)) if ks[i] < ks[i - 1]]
    i = next((i for i in falls if ks[i] == 0), falls[0] if falls and ks.all() else None)
    return math.nan if i is None else float(math.sqrt(at[i - 1] * at[i]))
