"""What notebook 08 says: the sweep, the crossover and its CI, the step arithmetic, the serving
predictor's error, the policy (vLLM's and llama-server's forms) and the conclusion."""

from __future__ import annotations

import math

import pandas as pd

from specnb.app import serving_keys as keys
from specnb.app.text.cell_report import Report
from specnb.app.text.common import bullets
from specnb.core.intervals import interval_text, speedup_text
from specnb.measure.load_shapes import SHAPES, level_text, shape_of
from specnb.predict.serving_decision import ServingDecision, adaptive_ran, final_launch
from specnb.predict.serving_policy import batch_ranges
from specnb.predict.serving_predictor import median_error, step_cost, step_ms
from specnb.serve.engines import engine_named
from specnb.serve.speculation import AA_TWIN_CONFIG, ADAPTIVE_CONFIG, BASELINE_CONFIG


def fmt_ci(row, metric: str) -> str:
    lo, hi = row[f"{metric}_lo"], row[f"{metric}_hi"]
    return speedup_text(row[metric], None if pd.isna(lo) else lo, hi)


def crossover_line(row) -> str:
    """One configuration's crossover, in the unit of the sweep's levels (``row["level"]``). It "pays"
    or "loses" only where the 95% CI lies above or below 1 (``ci_excludes_1_*``, ``dip_ci_below_1``;
    a row without them reads as clear); a CI that holds 1 is "no measurable difference"."""
    shape = SHAPES[row.get("load", "closed")]
    unit, load = shape.unit, shape.axis
    name, top = f"**{row['config']}**", f"{row['max_level']:g} {unit}"
    noise = "no measurable difference at {} (its 95% CI holds 1)".format
    if row["verdict"] == "never pays":
        return (f"{name} does not pay even at the lowest level" if row.get("ci_excludes_1_lowest", True) else
                f"{name} does not pay at any level measured; " + noise(f"{row['min_level']:g} {unit}, the lowest"))
    if row["verdict"] == "pays at every level measured":
        return (f"{name} still pays at {top} (the most measured)" if row.get("ci_excludes_1_top", True) else
                f"{name} is above 1 at every level measured, but shows " + noise(f"{top}, the most measured"))
    if row["verdict"].startswith("loses between"):
        stretch = (f"at {row['loses_from']:g} {unit}" if row["loses_from"] == row["loses_to"] else
                   f"between {row['loses_from']:g} and {row['loses_to']:g} {unit}")
        dip = (f"loses {stretch}" if row.get("dip_ci_below_1", True) else
               f"dips below 1 {stretch}, no measurable difference there (95% CIs hold 1)")
        return f"{name} {dip}; " + (f"pays again at {top}" if row.get("ci_excludes_1_top", True) else noise(top))
    lo = f"≤ {row['min_level']:g}" if row["crossover_lo"] <= row["min_level"] else f"{row['crossover_lo']:.1f}"
    hi = f"beyond {row['max_level']:g}" if pd.isna(row["crossover_hi"]) else f"{row['crossover_hi']:.1f}"
    still = "" if row.get("ci_excludes_1_top", True) else "; " + noise(top)
    return (f"{name} stops paying at about {row['crossover']:.1f} {unit} (95% CI {lo}–{hi}; "
            f"interpolated in log {load} between the levels measured){still}")


def step_arithmetic(summary: pd.DataFrame, config: str, probe: pd.DataFrame | None = None) -> str:
    """Why a configuration does (not) pay at its lowest level, in the engine's own numbers."""
    from specnb.predict.serving_predictor import acceptance_of, verify_ms

    row = summary[summary["config"] == config].sort_values("concurrency").iloc[0]
    cost = step_cost(summary)
    b = float(row["concurrency"])
    d, tau = acceptance_of(row)
    t1, tv = step_ms(cost, b), verify_ms(cost, probe, b, d)
    source = "spec-off's step plus the forward probe" if probe is not None and len(probe) else "the spec-off curve"
    return (f"at {b:.0f} concurrent, a spec-off step costs {t1:.1f} ms for 1 token per request; {config} verifies "
            f"1 + {d:.2f} tokens per request per step (≈ {tv:.1f} ms from {source}) and yields {tau:.2f} tokens "
            f"per step (steps without a draft included): {tv / tau:.1f} ms per token before drafting, measured TPOT "
            f"{row['mean_tpot_ms']:.1f} ms against {t1:.1f} ms")


def identical_share(group: pd.DataFrame) -> float:
    """The share of a configuration's requests, over every level, whose greedy text is spec-off's on
    the same prompt: measured, never assumed (CPU kernels may round differently across batch shapes)."""
    paired = float(group["paired_requests"].sum())
    return float(group["identical_outputs"].sum()) / paired if paired else math.nan


def identical_line(group: pd.DataFrame) -> str:
    return (f"{int(group['identical_outputs'].sum())}/{int(group['paired_requests'].sum())} outputs identical to "
            f"spec-off over every level ({identical_share(group):.0%})")


def sweep_text(summary: pd.DataFrame, crossings: pd.DataFrame, probe: pd.DataFrame | None = None) -> Report:
    if "speedup_tpot" not in summary:
        return Report("No spec-off configuration to compare with: the tables show each configuration alone.", {})
    lines, values, shape = [], {}, shape_of(summary)
    column = shape.column
    judged = summary[~summary["config"].isin([BASELINE_CONFIG, AA_TWIN_CONFIG])]  # the twin measures noise
    for config, group in judged.groupby("config", sort=False):
        group = group.sort_values(column)
        first, last = group.iloc[0], group.iloc[-1]
        tpot = f"{fmt_ci(first, 'speedup_tpot')} at {level_text(shape, first[column])}"
        throughput = fmt_ci(first, "speedup_output_throughput")
        if len(group) > 1:  # one level: screened out after the lowest (serving_sweep.screen_out)
            tpot += f", {fmt_ci(last, 'speedup_tpot')} at {level_text(shape, last[column])}"
            throughput += f" → {fmt_ci(last, 'speedup_output_throughput')}"
        lines.append(f"**{config}**: α {first['alpha']:.2f}, τ {first['tau']:.2f}; TPOT speedup {tpot}; output "
                     f"throughput {throughput}; {identical_line(group)}")
        values[keys.config_key(config, keys.IDENTICAL_SHARE)] = identical_share(group)
        values[keys.config_key(config, keys.SPEEDUP_FIRST)] = float(first["speedup_tpot"])
        values[keys.config_key(config, keys.SPEEDUP_LAST)] = float(last["speedup_tpot"])
    for row in crossings.to_dict("records"):
        lines.append(crossover_line(row))
        values[keys.config_key(row["config"], keys.CROSSOVER)] = row["crossover"]
        if row["verdict"] == "never pays" and shape.steps_batch:  # a step's sequences: closed loop only
            lines.append("step arithmetic: " + step_arithmetic(summary, row["config"], probe))
    return Report(bullets(lines), values)


def open_loop_note() -> Report:
    """Why an open-loop sweep has no prediction and policy (``serving_predictor.require_steps``)."""
    return Report("The serving predictor and the policy price an engine step by the requests in it, so they need "
                  "closed-loop concurrency levels; this sweep ran Poisson arrivals (requests/s), so they are left "
                  "out: run with `rates = []` for them.", {})


def prediction_text(validation: pd.DataFrame) -> Report:
    error = median_error(validation)
    if math.isnan(error):
        return Report("Too few levels to validate the serving predictor (it needs two or more).", {})
    worst = validation[~validation["calibration"]].sort_values("error").iloc[-1]
    held_out = (validation["prompts"] == "held out").all()
    where = ("on held-out prompts at every level (two folds of prompts with the same mix of categories, each "
             "predicted from the other)" if held_out else "over the levels it was not calibrated on, same prompts")
    return Report(bullets([
        f"median error of the predicted TPOT speedup {where}: **{error:.1%}** (target ≤ 15%); worst "
        f"{worst['error']:.1%} ({worst['config']} at {worst['concurrency']})",
        "calibrated on each configuration's lowest level (its acceptance, and what its step costs beyond the "
        "verification: a draft model's forwards, the proposer's and sampler's work), with the spec-off TPOT "
        "curve as the engine's step cost and, where the engine was probed, its forward cost against tokens for "
        "the extra draft tokens"]),
        {"serving_predictor_median_error": error, "serving_predictor_prompts": "held out" if held_out else "same"})


def policy_text(decision: ServingDecision) -> Report:
    """The decision's policy per level, then its one launch as one ``--speculative-config`` (vLLM's form,
    the one a per-batch-size schedule is pasted in; one method per server: of every launch priced, the
    one closest to the best static configuration at its worst level, ``serving_launch.choose_launch``,
    with the ``model`` folder of a head or draft model) and, for an engine whose speculation is fixed
    per launch, its own lines per load range (``decision.lines``). Renders ``decision`` only."""
    policy = decision.policy
    if not decision.kind:
        return Report("No speculative configuration to choose from.", {})
    launch, family = decision.launch_json, decision.launch.family
    if not launch:
        launch_part = f"vLLM: no `--speculative-config` ({decision.why_not}, so launch vLLM without speculation)"
    elif len(decision.launch.ranges) > 1:
        launch_part = f"vLLM (`--speculative-config`, {family}, the ranges as measured here):\n\n```\n{launch}\n```"
    else:
        launch_part = (f"vLLM (`--speculative-config`, {decision.launch.by_k[decision.launch.ranges[0][2]]} at every "
                       f"load: a schedule of one range is that static configuration):\n\n```\n{launch}\n```")
    label = engine_named(decision.engine).label
    body = (bullets([policy_level(r) for r in policy.frame().to_dict("records")])
            + (f"\n\nOver the engine's batch: {batch_ranges(policy).text()}." if policy.keyed_on == "batch" else "")
            + f"\n\n{launch_part}" + candidates_text(decision.candidates)
            + (f"\n\n{label} (speculation is fixed per launch: pick by the load you expect):\n\n"
               + bullets(list(decision.lines)) if decision.lines else ""))
    return Report(body, {keys.POLICY_VLLM: launch or "no --speculative-config",
                         "policy_llama_server": list(decision.lines)})


def candidates_text(candidates: pd.DataFrame) -> str:
    """Every launch priced, chosen first: its speedup over the best static configuration at its worst
    level and on average (``serving_launch.rank_launches``)."""
    if candidates.empty:
        return ""
    each = ", ".join(f"{r['candidate']} {r['worst']:.2f} (mean over levels {r['mean']:.2f})"
                     for r in candidates.to_dict("records"))
    return (f"\n\nEach launch as a share of the best static configuration's speedup, at its worst level: {each} — "
            f"{candidates['candidate'].iloc[0]} chosen.")


def policy_level(row: dict) -> str:
    """One level of the policy: what runs there and what it rests on (the median over rounds with its
    spread and the engine's batch, for the noise-aware rule; the summary's speedup otherwise)."""
    head = f"{row['concurrency']:g} concurrent: {row['config']} (k = {row['k']}"
    if pd.isna(row.get("median_speedup", math.nan)):
        return head + f", TPOT {row['speedup_tpot']:.2f}x)"
    tie = f"; tie with {row['tie_with']}, the cheaper kept" if row.get("tie_with") else ""
    noisy = "; too noisy to prefer a costlier one (relative MAD > 0.1)" if row.get("noisy") else ""
    return (head + f", median TPOT {row['median_speedup']:.2f}x over {int(row['rounds'])} rounds, spread "
            f"{row['spread']:.1%}; engine's batch {row['batch']:.1f}{tie}{noisy})")


def serving_conclusion(crossings: pd.DataFrame, validation: pd.DataFrame, verdict: str, machine: str,
                       note: str = "", trace_error: float = math.nan) -> Report:
    """The report's end: the one verdict first (``launch_verdict``: what to launch for the load
    measured, and what it rests on), then each configuration's pays / loses / no measurable difference
    (``crossover_line``, by its CIs), the predictors' errors, the machine, what was left out. A sweep
    without spec-off has no crossings, no validation and no trace: only the machine and the note."""
    lines = [verdict] if verdict else []
    lines += [crossover_line(row) for row in crossings.to_dict("records")]
    error = median_error(validation) if len(validation) else math.nan
    if not math.isnan(error):
        lines.append(f"the serving predictor's median error per level: {error:.1%}")
    if not math.isnan(trace_error):
        lines.append(f"the trace's speedups forecast from the per-load figures before it was sent: median error "
                     f"{trace_error:.1%}")
    lines.append(f"machine: {machine}")
    if note:
        lines.append(note)
    return Report(bullets(lines), {keys.MACHINE: machine, keys.VERDICT: verdict})


def launch_verdict(decision: ServingDecision, trace: pd.DataFrame | None = None) -> tuple[str, str]:
    """The one answer a report gives, as (line, value): what to launch for the load this run measured
    (``serving_decision.final_launch``) and what that rests on. Judged over the bursty trace, with
    paired CIs and ties going to the simplest configuration (``trace_launch``; ``trace``:
    ``serving_stats.trace_check``'s table); otherwise the decision's launch. ``value``: what a user
    pastes ("" for no speculation)."""
    final = final_launch(decision, trace)
    value = final.line
    if final.basis == "trace":
        return "**verdict**: " + trace_launch(decision, trace).removeprefix("launch for load like this trace: ") + \
            " — judged over the bursty trace (paired 95% CIs; a tie goes to the simplest)", value
    if not final.basis:
        return "", ""
    loads = f"{final.low:g}–{final.high:g} concurrent"
    if final.basis == "none":
        why = "no configuration beat spec-off beyond the noise at any level measured" if not final.drafted \
            else decision.why_not
        return f"**verdict**: launch without speculation for {loads} — {why}", value
    if final.basis == "static":
        why = ("of every launch, the closest to the best static configuration at its worst level "
               f"({decision.candidates['worst'].iloc[0]:.2f} of it)" if len(decision.candidates) else
               "the policy chose it at each level")
        return (f"**verdict**: launch **{final.config}**" + (f" (`{value}`)" if value else "")
                + f" at every load measured ({loads}): {why}"), value
    if final.basis == "schedule":
        return (f"**verdict**: launch the schedule `--speculative-config '{value}'` for {loads} (not checked as one "
                "server here: no bursty trace ran)"), value
    return (f"**verdict**: {engine_named(decision.engine).label} fixes speculation per launch, so pick by the load "
            "you expect: " + value), value


def trace_launch(decision: ServingDecision, trace: pd.DataFrame) -> str:
    """What the trace supports launching (``decision.trace_pick``, ``serving_decision.with_trace``), as
    one line with what it rests on: the adaptive schedule only where its 95% CI against every static
    configuration lies above 1; otherwise the simplest configuration inside the noise of the fastest,
    as its ``--speculative-config`` (``decision.trace_json``)."""
    pick, ran = decision.trace_pick, adaptive_ran(trace)
    if pick == ADAPTIVE_CONFIG:
        return ("launch for load like this trace: the adaptive line above (faster than every static configuration, "
                "each 95% CI above 1)" if trace["beats"].all() else
                "launch for load like this trace: the adaptive line above (the fastest over the trace)")
    row, best = trace.set_index("config").loc[pick], trace["best"].iloc[0]
    what = f"`--speculative-config '{decision.trace_json}'`" if decision.trace_json else "no `--speculative-config`"
    why = ("the fastest over the trace" if pick == best else
           f"the simplest inside the noise of the fastest, {best} ({fmt_ci(row, 'speedup_over_best')} of its speed)")
    schedule = (f" (adaptive ran {fmt_ci(row, 'adaptive_speedup_tpot')} of its speed), so the schedule is not the "
                "line to paste for it" if ran else "")
    return (f"launch for load like this trace: **{pick}**, {what} — {why}{schedule}; a load that stays at one level "
            "reads the table per level")


def adaptive_text(check: pd.DataFrame, trace: pd.DataFrame, loop, decision: ServingDecision | None = None) -> Report:
    """The decision launched (``policy_run.PolicyRun``): a schedule as its own server, its TPOT
    speedup against the best static configuration per level (target ≥ 0.95x of it); over the bursty
    trace, every configuration that ran — adaptive's paired TPOT speedup against each static one
    (target: each 95% CI above 1), or the static ones' over spec-off where no schedule was launched —
    and what the trace supports launching (``trace_launch``; ``decision``: ``with_trace``'s, else the
    loop's)."""
    if loop is None:
        return Report("The policy is launched as its own server (`adaptive`) where notebook 08 starts an engine that "
                      "changes k with the batch (vLLM, the simulated engine) on closed-loop levels.", {})
    decision = decision or loop.decision
    if loop.adaptive is None:
        lines, values = [f"no `adaptive` launch: {loop.note}"], {"adaptive": "none"}
    else:
        spec = loop.adaptive.engine.launch_text(loop.adaptive)  # as launched: a head's or draft's folder included
        lines = [f"launched as `--speculative-config '{spec}'`, measured again at every level beside spec-off and the "
                 "static configurations"]
        values = {"adaptive": spec}
    for row in check.to_dict("records"):
        lines.append(f"{row['concurrency']:g} concurrent: adaptive {fmt_ci(row, 'speedup_tpot')} against "
                     f"{row['best_static']} {row['best_static_speedup_tpot']:.2f}x: {row['ratio']:.2f} of it"
                     + (f" [{interval_text(row['ratio_lo'], row['ratio_hi'])}]" if not math.isnan(row.get(
                         "ratio_lo", math.nan)) else "")
                     + f" ({'meets' if row['meets'] else 'misses'} ≥ 0.95)")
    if len(check):
        values["adaptive_meets_every_level"] = bool(check["meets"].all())
        values["adaptive_min_ratio"] = float(check["ratio"].min())
    if len(trace) and adaptive_ran(trace):
        others = ", ".join(f"{r['config']} {r['mean_tpot_ms']:.1f} ms (adaptive {r['adaptive_speedup_tpot']:.2f}x "
                           f"[{interval_text(r['adaptive_speedup_tpot_lo'], r['adaptive_speedup_tpot_hi'])}])"
                           for r in trace.to_dict("records"))
        lines.append(f"bursty trace at {loop.rate:.2f} requests/s on average: adaptive's mean TPOT "
                     f"{trace['adaptive_mean_tpot_ms'].iloc[0]:.1f} ms against {others}; "
                     + ("faster than every static configuration (each 95% CI above 1)" if trace["beats"].all()
                        else "not measurably faster than " + ", ".join(trace.loc[~trace["beats"], "config"])))
        values["adaptive_beats_every_static_on_trace"] = bool(trace["beats"].all())
    elif len(trace):
        each = ", ".join(f"{r['config']} {r['mean_tpot_ms']:.1f} ms" + (
            "" if r["config"] == BASELINE_CONFIG else f" ({fmt_ci(r, 'speedup_tpot')} over spec-off)")
            for r in trace.to_dict("records"))
        lines.append(f"bursty trace at {loop.rate:.2f} requests/s on average, the static configurations alone: mean "
                     f"TPOT {each}")
    if len(trace) and decision is not None and decision.trace_pick:
        lines.append(trace_launch(decision, trace))
        values[keys.LAUNCH_FOR_TRACE] = decision.trace_json
    if loop.note and loop.adaptive is not None:
        lines.append(f"note: {loop.note}")
    return Report(bullets(lines) if len(lines) > 1 else f"No `adaptive` launch: {loop.note}.", values)


def trace_forecast_text(forecast: pd.DataFrame, reconstruction: pd.DataFrame) -> Report:
    """Each configuration's trace speedup as forecast before the trace was sent (the per-load figures
    through the trace's own seeded arrivals: ``predict.trace_forecast``) against what the trace
    measured, and the median error (target ≤ 10%); then, as a diagnostic, the same TPOT(b) read over
    the batches the trace itself held (``predict.trace_prediction``: a reconstruction, not a forecast).
    Both tables are ``trace_prediction_table``'s."""
    values, lines = {}, []
    if forecast.empty:
        lines.append("No trace forecast: none was made before the trace (no spec-off figures to forecast from).")
    else:
        values[keys.TRACE_FORECAST_ERROR] = float(forecast["error"].median())
        lines += [f"{r['config']}: forecast {r['predicted_speedup_tpot']:.2f}x before the trace was sent, measured "
                  f"{speedup_text(r['measured_speedup_tpot'], r['measured_lo'], r['measured_hi'])} "
                  f"({r['error']:.1%} off" + (f"; {r['clamped_share']:.0%} of its decoding beyond the batches "
                                              "measured" if r.get("clamped_share", 0) > 0 else "") + ")"
                  for r in forecast.to_dict("records")]
        lines.append(f"median error of the forecast trace speedups: **{values[keys.TRACE_FORECAST_ERROR]:.1%}** "
                     "(target ≤ 10%)")
    if reconstruction.empty:
        lines.append("diagnostic: no reconstruction, the trace's runs carry no batch samples")
    else:
        values[keys.TRACE_RECONSTRUCTION_ERROR] = float(reconstruction["error"].median())
        lines.append("diagnostic — the same TPOT(b) read over the batches the trace itself held (a reconstruction "
                     f"after the fact, not a forecast): median error {values[keys.TRACE_RECONSTRUCTION_ERROR]:.1%}")
    return Report(bullets(lines), values)

