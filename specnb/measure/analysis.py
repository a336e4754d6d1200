"""Tables derived from run records (``specnb.measure.runs``) for the notebooks and benchmarks.

Gamma sweep (notebook 03): per-token α, Leviathan predictions with FLOPs and wall-clock c, what one
step costs in verifier-only tokens against what it yields, win/lose verdicts. Batch size (05): the
cost of ragged acceptance. Draft-size tradeoff (04, benchmarks/drafts.py): one row per draft with
c, α and its spread, best γ and speedup, and simulated short benchmark runs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from specnb.core.errors import ParameterError
from specnb.core.intervals import rank, verdict
from specnb.core.theory import break_even_c, expected_speedup, tokens_per_step_from_profile
from specnb.decode.timing import BOOKKEEPING, stage_columns
from specnb.measure.acceptance import profile_from_records, supported_rates, token_alpha_by_draft
from specnb.measure.runs import BASELINE, KERNEL_COLUMNS, paired_speedup, per_prompt, summarise


def wall_clock_costs(records: pd.DataFrame, baseline: str = BASELINE) -> pd.DataFrame:
    """Per draft candidate, what drafting and verifying really cost in the runs: draft ms per
    drafted token, verify ms per verification step, and c by wall clock = draft ms per drafted
    token ÷ the baseline's verify ms per (one-token) step. Works for prompt lookup too."""
    records = pd.DataFrame(records)
    base = records[records["candidate"] == baseline]
    base_steps = (base["verifier_forwards"] - 1).sum()  # the prefill forward is timed as prefill
    verifier_step_ms = base["verify_ms"].sum() / base_steps if base_steps else float("nan")
    rows = []
    for name, group in records[records["candidate"] != baseline].groupby("candidate", sort=False):
        drafted, steps = group["drafted"].sum(), group["steps"].sum()
        draft_ms = group["draft_ms"].sum() / drafted if drafted else float("nan")
        rows.append({"candidate": name, "draft": group["draft"].iloc[0], "gamma": int(group["gamma"].iloc[0]),
                     "draft_ms_per_drafted_token": draft_ms,
                     "verify_ms_per_step": group["verify_ms"].sum() / steps if steps else float("nan"),
                     "baseline_verify_ms_per_step": verifier_step_ms, "c_wall": draft_ms / verifier_step_ms})
    return pd.DataFrame(rows)


def with_verdicts(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` (a speedup with its 95% CI per row) with the ``verdict`` their CI gives
    (``specnb.core.intervals.verdict``: wins, inconclusive, loses)."""
    return rows.assign(verdict=[verdict(s, lo, hi) for s, lo, hi in
                                rows[["speedup", "speedup_lo", "speedup_hi"]].itertuples(index=False)])


def ranked(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` best first: those that win before the inconclusive before those that lose, each by
    speedup. "Best" is the first row: chosen among the winners, never a higher point estimate whose
    CI holds 1x over one that wins."""
    rows = with_verdicts(rows)
    order = rows.assign(_rank=rows["verdict"].map(rank)).sort_values(["_rank", "speedup"], ascending=[True, False],
                                                                      kind="stable")
    return order.drop(columns="_rank")


def best_per_draft(summary: pd.DataFrame) -> pd.DataFrame:
    """Each draft's row at its best measured γ per batch size (``ranked``: among the γs that win,
    the fastest), with its ``verdict``."""
    drafts = ranked(summary[summary["gamma"] > 0])
    return drafts.drop_duplicates(["draft", "batch_size"]).sort_index().reset_index(drop=True)


def simulate_runs(rows: pd.DataFrame, run_size: int, n_runs: int = 1000, seed: int = 0) -> pd.DataFrame:
    """What short benchmark runs of ``run_size`` prompts would report: draw that many measured
    per-prompt records (``per_prompt`` plus accepted/drafted/tokens/wall columns) without
    replacement, per candidate, and compute each run's α and speedup as ratios of sums."""
    rng = np.random.default_rng(seed)
    out = []
    for name, group in rows.groupby("candidate", sort=False):
        values = group[["accepted", "drafted", "new_tokens", "wall_ms", "new_tokens_base", "wall_ms_base"]].to_numpy()
        size = min(run_size, len(values))
        for run in range(n_runs):
            totals = values[rng.choice(len(values), size=size, replace=False)].sum(axis=0)
            out.append({"candidate": name, "draft": group["draft"].iloc[0], "run": run, "prompts": size,
                        "alpha": totals[0] / totals[1] if totals[1] else float("nan"),
                        "speedup": float(paired_speedup(totals[2:]))})
    return pd.DataFrame(out)


def short_run_spread(runs: pd.DataFrame) -> pd.DataFrame:
    """Per draft, what ``simulate_runs`` says short runs would report: the 5th and 95th percentile of
    α and of speedup, and the share of runs that would call the draft faster."""
    return runs.groupby("draft", sort=False).agg(
        alpha_p05=("alpha", lambda a: a.quantile(0.05)), alpha_p95=("alpha", lambda a: a.quantile(0.95)),
        speedup_p05=("speedup", lambda s: s.quantile(0.05)), speedup_p95=("speedup", lambda s: s.quantile(0.95)),
        share_faster=("speedup", lambda s: (s > 1).mean()))


def profile_best_gamma(predicted: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """Wall-clock ``profile_speedups`` per draft and γ (rows: drafts in ``table`` order), with the γ the
    profile predicts best next to the best measured γ."""
    wall = predicted[predicted["c_kind"] == "wall clock"]
    best = wall.loc[wall.groupby("draft", sort=False)["speedup"].idxmax()].set_index("draft")
    return wall.pivot(index="draft", columns="gamma", values="speedup").loc[table["draft"]].assign(
        profile_best_gamma=best["gamma"], measured_best_gamma=table.set_index("draft")["best_gamma"])


def leviathan_predictions(summary: pd.DataFrame, flops_c: dict[str, float], wall: pd.DataFrame,
                          alpha: str = "alpha") -> pd.DataFrame:
    """Speedup Leviathan et al.'s formula predicts for every measured (draft, γ) from its measured α
    (the summary column ``alpha``; pass ``"alpha_token"`` after merging
    ``specnb.measure.acceptance.token_alpha_by_candidate``),
    once with the FLOPs c (``flops_c``: draft name -> c) and once with the wall-clock c of
    ``wall_clock_costs`` (tidy: candidate, draft, gamma, batch_size, alpha, c, kind, source, speedup).

    Both readings assume verifying γ + 1 tokens costs one one-token forward and that bookkeeping is
    free; the gap between them and the measured speedup is what those assumptions miss.
    """
    wall_c = pd.DataFrame(wall).set_index("candidate")["c_wall"].to_dict() if len(wall) else {}
    columns = ["candidate", "draft", "gamma", "batch_size", "alpha", "c", "kind", "source", "speedup"]
    rows = []
    for r in summary[summary["gamma"] > 0].rename(columns={alpha: "alpha_used"}).itertuples():
        if not np.isfinite(r.alpha_used):
            continue  # nothing was drafted (a lookup that never matched): α is undefined
        a = min(float(r.alpha_used), 0.999)  # the formula diverges at α = 1
        for kind, c in (("FLOPs c", flops_c.get(r.draft)), ("wall-clock c", wall_c.get(r.candidate))):
            if c is None or not np.isfinite(c) or c < 0:
                continue
            rows.append({"candidate": r.candidate, "draft": r.draft, "gamma": int(r.gamma),
                         "batch_size": int(r.batch_size), "alpha": float(r.alpha_used), "c": float(c), "kind": kind,
                         "source": f"{r.draft} (Leviathan, {kind})",
                         "speedup": float(expected_speedup(a, int(r.gamma), float(c)))})
    return pd.DataFrame(rows, columns=columns)


def measured_steps(records: pd.DataFrame, baseline: str = BASELINE) -> pd.DataFrame:
    """One decoding step's economics per speculative candidate and batch size (prefill excluded).

    A step = one verifier forward. Columns: ms drafting, verifying and on bookkeeping (accept +
    rollback + other) per step; ``tokens_per_step`` it yields (all rows, after the prefill's first
    token); ``baseline_ms_per_token`` of verifier-only decoding at the same batch size; the step's
    parts in units of that time (``draft_cost``, ``verify_cost``, ``overhead_cost``, summing to
    ``break_even_tokens``: what a step must yield to tie) and ``decode_speedup``. A γ wins decoding
    exactly when ``tokens_per_step > break_even_tokens``: the reason a γ wins or loses, in numbers.
    """
    records = pd.DataFrame(records)
    if baseline not in set(records["candidate"]):
        raise ParameterError(f"baseline {baseline!r} not among the candidates {sorted(set(records['candidate']))}")

    def totals(group: pd.DataFrame) -> dict:
        return {"steps": int((group["verifier_forwards"] - 1).sum()),  # the prefill forward is not a step
                "tokens": float((group["new_tokens"] - group["batch_size"]).clip(lower=0).sum()),
                "draft": group["draft_ms"].sum(), "verify": group["verify_ms"].sum(),
                "overhead": group[stage_columns(BOOKKEEPING)].sum().sum()}

    rows = []
    for (name, batch_size), group in records.groupby(["candidate", "batch_size"], sort=False):
        if name == baseline:
            continue
        base = totals(records[(records["candidate"] == baseline) & (records["batch_size"] == batch_size)])
        t = totals(group)
        base_ms = (base["verify"] + base["overhead"]) / base["tokens"] if base["tokens"] else float("nan")
        per_step = {k: t[k] / t["steps"] if t["steps"] else float("nan") for k in ("draft", "verify", "overhead")}
        step_ms = sum(per_step.values())
        tokens_per_step = t["tokens"] / t["steps"] if t["steps"] else float("nan")
        rows.append({"candidate": name, "draft": group["draft"].iloc[0], "gamma": int(group["gamma"].iloc[0]),
                     "batch_size": int(batch_size), "steps": t["steps"], "tokens_per_step": tokens_per_step,
                     "draft_ms_per_step": per_step["draft"], "verify_ms_per_step": per_step["verify"],
                     "overhead_ms_per_step": per_step["overhead"], "step_ms": step_ms,
                     "baseline_ms_per_token": base_ms,
                     "draft_cost": per_step["draft"] / base_ms, "verify_cost": per_step["verify"] / base_ms,
                     "overhead_cost": per_step["overhead"] / base_ms, "break_even_tokens": step_ms / base_ms,
                     "decode_speedup": tokens_per_step * base_ms / step_ms if step_ms else float("nan")})
    return pd.DataFrame(rows)


def gamma_verdicts(summary: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per speculative candidate: its summary and step arithmetic (``measured_steps``) and its
    ``verdict`` (wins / loses by the 95% CI of the measured speedup, ``inconclusive`` when it spans
    1x; the point estimate decides when there is no CI). ``specnb.app.text.nb03_gamma.gamma_reason``
    says why, in a sentence."""
    merged = summary[summary["gamma"] > 0].merge(
        steps.drop(columns=["draft", "gamma"]), on=["candidate", "batch_size"], how="left"
    )
    return with_verdicts(merged)


def ragged_summary(records: pd.DataFrame) -> pd.DataFrame:
    """What batching cost per candidate and batch size (``ragged_costs`` summed over records).

    ``masked_slot_share`` = cache slots kept but masked ÷ slots appended for live rows (accepted +
    1 per row-step, plus the masked ones); ``idle_row_share`` = row-steps computed for rows that had
    finished ÷ all row-steps (batch size × verifier forwards after prefill). Verifier-only records
    carry no per-step counts; their live row-steps are their tokens after the first.
    """
    records = pd.DataFrame(records)
    rows = []
    for (name, batch_size), g in records.groupby(["candidate", "batch_size"], sort=False):
        row_steps = int(((g["verifier_forwards"] - 1) * g["batch_size"]).sum())
        speculative = int(g["gamma"].iloc[0]) > 0
        live = int(g["steps"].sum()) if speculative else int((g["new_tokens"] - g["batch_size"]).clip(lower=0).sum())
        idle = int(g["idle_row_steps"].sum()) if speculative else row_steps - live
        ragged = int(g["ragged_slots"].sum())
        slots = ragged + int(g["accepted"].sum()) + live
        rows.append(
            {
                "candidate": name,
                "draft": g["draft"].iloc[0],
                "gamma": int(g["gamma"].iloc[0]),
                "batch_size": int(batch_size),
                "ragged_slots": ragged,
                "idle_row_steps": idle,
                "row_steps": row_steps,
                "new_tokens": int(g["new_tokens"].sum()),
                "masked_slot_share": ragged / slots if slots else 0.0,
                "idle_row_share": idle / row_steps if row_steps else 0.0,
                "ragged_slots_per_token": ragged / g["new_tokens"].sum() if g["new_tokens"].sum() else 0.0,
            }
        )
    return pd.DataFrame(rows)


def draft_wall_c(records: pd.DataFrame, baseline: str = BASELINE) -> pd.DataFrame:
    """Per draft, pooled over its γs: draft ms per drafted token, and c by wall clock = that ÷ the
    baseline's verify ms per one-token step (as ``wall_clock_costs``, which is per candidate)."""
    costs = wall_clock_costs(records, baseline)
    records = pd.DataFrame(records)
    drafts = records[records["candidate"] != baseline].groupby("draft", sort=False)[["draft_ms", "drafted"]].sum()
    drafts["draft_ms_per_drafted_token"] = drafts["draft_ms"] / drafts["drafted"].where(drafts["drafted"] > 0)
    verifier_step_ms = float(costs["baseline_verify_ms_per_step"].iloc[0]) if len(costs) else float("nan")
    drafts["verifier_step_ms"] = verifier_step_ms
    drafts["c_wall"] = drafts["draft_ms_per_drafted_token"] / verifier_step_ms
    return drafts[["draft_ms_per_drafted_token", "verifier_step_ms", "c_wall"]].reset_index()


def prompt_alpha_spread(rows: pd.DataFrame) -> pd.DataFrame:
    """Per candidate: α (accepted ÷ drafted) of each prompt batch, repeats pooled, summarised as
    mean, standard deviation, min and max across prompts (``rows`` from ``per_prompt``)."""
    per = rows.groupby(["candidate", "prompt_ids"], sort=False)[["accepted", "drafted"]].sum()
    per["alpha"] = per["accepted"] / per["drafted"].where(per["drafted"] > 0)
    spread = per.groupby("candidate", sort=False)["alpha"].agg(["mean", "std", "min", "max", "count"])
    return spread.rename(columns=lambda c: f"alpha_prompt_{c}" if c != "count" else "n_prompts").reset_index()


def draft_table(records: pd.DataFrame, flops: pd.DataFrame, summary: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per draft (batch size 1): size (params, FLOPs/token, c by FLOPs from ``flops_table``),
    cost here (c by wall clock, pooled over γs), acceptance (α = accepted ÷ drafted at the best γ,
    its spread across prompts, and the per-token α), the best measured γ with its speedup and 95%
    CI, the break-even c at that (α per token, γ) and a verdict. Sorted by FLOPs/token, largest first."""
    records = pd.DataFrame(records)
    records = records[records["batch_size"] == records["batch_size"].min()]
    summary = summarise(records) if summary is None else summary[summary["batch_size"] == records["batch_size"].min()]
    best = best_per_draft(summary)[
        ["draft", "candidate", "gamma", "alpha", "tau", "tok_s", "speedup", "speedup_lo", "speedup_hi",
         *[c for c in KERNEL_COLUMNS if c in summary]]
    ].rename(columns={"gamma": "best_gamma"})
    spread = prompt_alpha_spread(per_prompt(records))
    sizes = flops.set_index("model")[["params", "flops_per_token", "c_flops"]]
    table = (
        best.merge(spread, on="candidate", how="left")
        .merge(token_alpha_by_draft(records)[["draft", "alpha_token"]], on="draft", how="left")
        .merge(draft_wall_c(records), on="draft", how="left")
        .merge(sizes, left_on="draft", right_index=True, how="left")
    )
    alpha = table["alpha_token"].clip(upper=0.999).fillna(0.0).to_numpy()
    gamma = table["best_gamma"].to_numpy()
    table["break_even_c"] = break_even_c(alpha, gamma)
    table = with_verdicts(table)
    columns = [
        "draft",
        "params",
        "flops_per_token",
        "c_flops",
        "c_wall",
        "draft_ms_per_drafted_token",
        "verifier_step_ms",
        "alpha",
        "alpha_prompt_mean",
        "alpha_prompt_std",
        "alpha_prompt_min",
        "alpha_prompt_max",
        "n_prompts",
        "alpha_token",
        "best_gamma",
        "tau",
        "tok_s",
        "speedup",
        "speedup_lo",
        "speedup_hi",
        "break_even_c",
        "verdict",
        "candidate",
        *[c for c in KERNEL_COLUMNS if c in table],
    ]
    return table[columns].sort_values("flops_per_token", ascending=False, kind="stable").reset_index(drop=True)


def c_alpha_points(table: pd.DataFrame) -> pd.DataFrame:
    """Tidy points for ``specnb.app.charts.measured.c_alpha_chart``: each draft at (per-token α, c) once with c by FLOPs
    and once by wall clock (column ``c_kind``)."""
    base = table.assign(alpha=table["alpha_token"], best_speedup=table["speedup"])
    keep = ["draft", "alpha", "best_speedup", "best_gamma", "verdict"]
    return pd.concat(
        [
            base[keep].assign(c=table["c_flops"], c_kind="FLOPs"),
            base[keep].assign(c=table["c_wall"], c_kind="wall clock"),
        ],
        ignore_index=True,
    )


def profile_speedups(records: pd.DataFrame, table: pd.DataFrame, max_gamma: int | None = None) -> pd.DataFrame:
    """Leviathan speedup per γ from each draft's measured per-position acceptance (at its largest
    γ) and its c by FLOPs and by wall clock: τ(a_1..a_γ) ÷ (γc + 1). Shows where the best γ would
    lie; like Leviathan it prices verifying γ + 1 tokens as one forward, so it is an upper bound.
    A position reached fewer than ``acceptance.MIN_EVENTS`` times, and one past the measured γ (``extrapolated``),
    takes the pooled per-token α of the well-reached positions (``acceptance.supported_rates``)."""
    rows = []
    for r in table.itertuples():
        profile = profile_from_records(records, r.draft)
        for gamma in range(1, (max_gamma or profile.gamma) + 1):
            a = supported_rates(profile, gamma)
            extrapolated = gamma > profile.gamma
            tau = float(tokens_per_step_from_profile(a))
            for kind, c in (("FLOPs", r.c_flops), ("wall clock", r.c_wall)):
                rows.append(
                    {
                        "draft": r.draft,
                        "gamma": gamma,
                        "c_kind": kind,
                        "c": c,
                        "tau": tau,
                        "speedup": tau / (gamma * c + 1.0),
                        "extrapolated": extrapolated,
                    }
                )
    return pd.DataFrame(rows)


