"""What notebook 08 says: the sweep, the crossover and its CI, the step arithmetic, the serving
predictor's error, the verdict (what to launch, how sure, what it is tied with) and the conclusion —
every sentence rendered from the ``Verdict`` and the summary's CIs, none deciding anything itself."""

from __future__ import annotations

import math

import pandas as pd

from specnb.app import serving_keys as keys
from specnb.app.text.cell_report import Report
from specnb.app.text.common import bullets
from specnb.core.intervals import interval_text, speedup_text
from specnb.measure.serving_load import SHAPES, level_text, shape_of
from specnb.predict.serving_model import acceptance_of, median_error, step_cost, step_ms, verify_ms
from specnb.predict.serving_verdict import Verdict, unmeasured_batches
from specnb.serve.engines import AA_TWIN_CONFIG, BASELINE_CONFIG, engine_named


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
        if not row.get("ci_excludes_1_lowest", True) and not row.get("ci_excludes_1_top", True):
            return (f"{name} is above 1 at every level measured by its point estimates, but shows no measurable "
                    f"difference at {row['min_level']:g} or at {top} (its 95% CIs hold 1)")
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
    """Why an open-loop sweep has no prediction and policy (``serving_model.require_steps``)."""
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


def verdict_line(verdict: Verdict) -> str:
    """The one answer a report gives, first in its conclusion and the same in the policy section: what
    to launch for the load measured, how sure (``Verdict.sure``), what it is tied with and what it
    rests on; "" where there was nothing to decide. Rendered from ``verdict`` only."""
    if not verdict.kind:
        return ""
    loads = f"{min(verdict.levels):g}–{max(verdict.levels):g} concurrent"
    what = verdict.name()
    paste = f" (`{verdict.line}`)" if verdict.line and verdict.kind != "per_load" else ""
    if verdict.kind == "per_load":
        paste = f" — {engine_named(verdict.engine).label} fixes speculation per launch, one server per load range: " \
                f"{verdict.line}"
    why = verdict_why(verdict)
    tied = f"; {verdict.tied_text()}" if verdict.tied else ""
    sure = {"decided": "", "tie": " (a tie within the noise: the simplest kept)",
            "inconclusive": f" — **inconclusive**: a tie that the launch noise's own uncertainty decides (it rests "
                            f"on {verdict.noise.pairs} A/A pair(s)); with the noise known another launch would win, "
                            f"so more pairs in the store would decide it (each sweep with a twin adds one); this run "
                            f"resolves {verdict.mde:.0%} (minimum detectable effect)"}
    sure = sure[verdict.sure]
    trace = f"; {verdict.trace}" if verdict.trace else ""
    return f"**verdict**: launch **{what}**{paste} for {loads}{sure} — {why}{tied}{trace}"


def verdict_why(verdict: Verdict) -> str:
    """What the launch rests on, in the summary's CIs: where it pays (or, for no speculation, that
    nothing paid beyond the noise, or what the best lost to), and the noise the band counts."""
    chosen, levels = verdict.chosen, verdict.levels
    pays = []
    for i, level in enumerate(levels):
        k = chosen.ks[i]
        if k and not math.isnan(chosen.log_speedup[i]):
            half = verdict.noise.band(chosen.var[i], True)
            x = chosen.log_speedup[i]
            pays.append(f"{chosen.configs[i]} {speedup_text(math.exp(x), math.exp(x - half), math.exp(x + half))} at "
                        f"{level:g}")
        elif chosen.kind == "schedule":
            pays.append(f"k = 0 at {level:g} ({math.exp(chosen.log_speedup[i]):.2f}x, the engine's own k = 0 price)")
    noise = verdict.noise_text or "launch-to-launch noise not measured"
    band = f"simultaneous 95% CIs over every configuration and level (c = {verdict.noise.critical:.2f}; {noise})"
    if verdict.kind == "none":
        beaten = [f"{name} (beaten at {levels[i]:g} by {by})" for name, (by, i) in verdict.beaten.items()
                  if name != BASELINE_CONFIG]
        lost = f"; {', '.join(beaten)}" if beaten else ""
        return f"no speculative launch beat it beyond the noise at its worst level{lost}; {band}"
    return f"TPOT speedup over spec-off: {', '.join(pays)}; {band}"


def policy_text(verdict: Verdict) -> Report:
    """The verdict's launch per level, its ranges over the engine's batch, its ``--speculative-config``
    (vLLM's form, what a per-batch-size schedule is pasted in), every candidate priced, and the same
    verdict line the conclusion opens with. Renders ``verdict`` only."""
    if not verdict.kind:
        return Report("No speculative configuration to choose from.", {})
    policy, launch = verdict.policy, verdict.launch
    lines = [policy_level(row) for row in policy.frame().to_dict("records")]
    body = bullets(lines)
    if verdict.kind in ("schedule", "per_load"):
        body += f"\n\nOver the engine's batch: {unmeasured_batches(policy)}."
    # on vLLM the line is the launched server's own --speculative-config (its n-gram window included): that one
    vllm = verdict.line if verdict.engine == "vllm" and verdict.kind in ("static", "schedule") else \
        engine_named("vllm").launch_json(launch) if launch is not None else ""
    if verdict.kind == "none":
        body += "\n\nvLLM: no `--speculative-config`."
    elif verdict.line and verdict.kind != "per_load":
        body += f"\n\nTo launch (`--speculative-config`):\n\n```\n{verdict.line}\n```"
    body += "\n\n" + candidates_text(verdict) + "\n\n" + verdict_line(verdict)
    return Report(body, {keys.POLICY_VLLM: vllm or "no --speculative-config",
                         "policy_llama_server": verdict.line.split("; ") if verdict.kind == "per_load" else []})


def candidate_table(verdict: Verdict) -> pd.DataFrame:
    """Every launch priced, one row per candidate and level: its TPOT speedup over spec-off, whether
    it is the launch, tied with it, or beaten (by what, at which level) — ``<run>.candidates.csv``."""
    rows = []
    for c in verdict.candidates:
        state = "launch" if c is verdict.chosen else "tied" if c in verdict.tied else "beaten"
        by, at = verdict.beaten.get(c.name, ("", -1))
        for i, level in enumerate(verdict.levels):
            rows.append({"candidate": c.name, "kind": c.kind, "concurrency": level, "config": c.configs[i],
                         "k": c.ks[i], "speedup_tpot": math.exp(c.log_speedup[i]), "log_var": c.var[i],
                         "worst_shortfall": math.exp(verdict.score[c.name]), "state": state, "beaten_by": by,
                         "beaten_at": verdict.levels[at] if at >= 0 else math.nan})
    return pd.DataFrame(rows)


def candidates_text(verdict: Verdict) -> str:
    """Each candidate at its worst level as a share of the best static configuration there, and how it fared."""
    def fate(c) -> str:
        if c is verdict.chosen:
            return "the launch"
        if c in verdict.tied:
            return "within the noise"
        by, i = verdict.beaten[c.name]
        return f"beaten by {by} at {verdict.levels[i]:g} beyond the noise"
    each = "; ".join(f"{c.name} {math.exp(verdict.score[c.name]):.2f} ({fate(c)})" for c in verdict.candidates)
    return ("Every launch one server could be given, as a share of the best static configuration's speedup at its "
            f"worst level: {each}. A candidate is beaten only where one with a better worst level is faster there "
            "beyond the noise; a tie goes to the simplest (spec-off, then a static configuration by smaller k, then a "
            "schedule).")


def policy_level(row: dict) -> str:
    """One level of the launch: what runs there and the CI it was judged on."""
    head = f"{row['concurrency']:g} concurrent (engine's batch {row['batch']:.1f}): "
    if not row["k"]:
        return head + (f"k = 0 ({row['speedup_tpot']:.2f}x of spec-off: the engine's own k = 0 price)"
                       if row["speedup_tpot"] != 1.0 else "spec-off")
    ci = speedup_text(row["speedup_tpot"], row["speedup_tpot_lo"], row["speedup_tpot_hi"]) \
        if not pd.isna(row["speedup_tpot_lo"]) else f"{row['speedup_tpot']:.2f}x"
    return head + f"{row['config']} (k = {row['k']}), TPOT speedup {ci}"


def serving_conclusion(crossings: pd.DataFrame, validation: pd.DataFrame, verdict: Verdict, machine: str,
                       note: str = "", trace_error: float = math.nan) -> Report:
    """The report's end: the one verdict first (``verdict_line``), then each configuration's pays / loses
    / no measurable difference (``crossover_line``, by its CIs), the minimum detectable effect, the
    predictors' errors, the machine, what was left out."""
    line = verdict_line(verdict)
    lines = [line] if line else []
    lines += [crossover_line(row) for row in crossings.to_dict("records")]
    if verdict.kind and not math.isnan(verdict.mde):
        lines.append(f"this run's minimum detectable effect: {verdict.mde:.0%} (the smallest true speedup difference "
                     "it finds with 95% power at its band, which holds the prompts' sampling and the launch noise: "
                     "more prompts or tokens shrink the first, more launch pairs in the store or more launches per "
                     "configuration the second)")
    error = median_error(validation) if len(validation) else math.nan
    if not math.isnan(error):
        lines.append(f"the serving predictor's median error per level: {error:.1%}")
    if not math.isnan(trace_error):
        lines.append(f"the trace's speedups forecast from the per-load figures before it was sent: median error "
                     f"{trace_error:.1%}")
    lines.append(f"machine: {machine}")
    if note:
        lines.append(note)
    return Report(bullets(lines), {keys.MACHINE: machine, keys.VERDICT: line})


def adaptive_text(check: pd.DataFrame, trace: pd.DataFrame, measured, verdict: Verdict | None = None) -> Report:
    """The launch checked (``serving_study.Measured``): a schedule as its own server, its TPOT speedup
    against the best static configuration per level (target ≥ 0.95x of it); over the bursty trace,
    every configuration that ran and what the trace said of the launch (``verdict.trace``)."""
    if measured is None or measured.verdict is None or not measured.verdict.kind or \
            (measured.check is None and measured.trace is None and not measured.note):
        return Report("The launch is checked as its own server where notebook 08 starts an engine that changes k with "
                      "the batch (vLLM, the simulated engine) on closed-loop levels.", {})
    verdict = verdict or measured.verdict
    if measured.adaptive is None:
        lines, values = [f"no `adaptive` launch: {measured.note}"], {"adaptive": "none"}
    else:
        spec = measured.adaptive.engine.launch_text(measured.adaptive)  # as launched: a head's or draft's folder
        lines = [f"launched as `{spec}`, measured again at every level beside spec-off and the static configurations"]
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
    if len(trace):
        each = ", ".join(f"{r['config']} {r['mean_tpot_ms']:.1f} ms" + (
            "" if r["config"] == BASELINE_CONFIG else f" ({fmt_ci(r, 'speedup_tpot')} over spec-off)")
            for r in trace.to_dict("records"))
        ran = "adaptive_mean_tpot_ms" in trace and trace["adaptive_mean_tpot_ms"].notna().any()
        own = f"adaptive {trace['adaptive_mean_tpot_ms'].iloc[0]:.1f} ms, " if ran else ""
        lines.append(f"bursty trace at {measured.rate:.2f} requests/s on average: mean TPOT {own}{each}")
    if verdict.trace:
        lines.append(verdict.trace)
    if measured.note and measured.adaptive is not None:
        lines.append(f"note: {measured.note}")
    return Report(bullets(lines) if len(lines) > 1 else f"No `adaptive` launch: {measured.note}.", values)


def trace_forecast_text(forecast: pd.DataFrame, reconstruction: pd.DataFrame) -> Report:
    """Each configuration's trace speedup as forecast before the trace was sent (the per-load figures
    through the trace's own seeded arrivals: ``serving_model.predict_trace`` on a planned trace) against what the trace
    measured, and the median error (target ≤ 10%); then, as a diagnostic, the same TPOT(b) read over
    the batches the trace itself held (the same predictor on a sampled trace: a reconstruction, not a forecast).
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

