"""Predictor validation: notebook 06's held-out grid, summarised into benchmarks/README.md; or one
held-out check per embedded draft kind, measured here.

    python benchmarks/predictor.py [RUN_DIR] [--no-write]
    python benchmarks/predictor.py --held-out [--calibration 6] [--prompts 8] [--repeats 2] [--no-write]

RUN_DIR is a finished ``specnb run`` folder holding ``06_decision_framework.*`` (default: the newest
``outputs/*`` that has one). The notebook is where the validation is measured (calibrate on some
prompts, then predict and measure a γ × draft × batch grid on others); this script only copies its
recorded figures, with the run's machine, date and commit, between the ``predictor`` markers.

``--held-out``: loads the verifier and one draft of every embedded kind (``HELD_OUT_DRAFTS``) once
(kernels auto), calibrates a profile on ``--calibration`` prompts, predicts every draft at γ 1..6,
then measures each at γ 1 and at its recommended γ (its best predicted one when none is
recommended) on ``--prompts`` other prompts (``split_prompts``: disjoint, the same category mix),
interleaved with verifier-only, batch 1, greedy. Per point: predicted and measured speedup with
the measured 95% CI (``specnb.predict.validate.grid_table``), the error, and what one step's
verification costs in one-token steps as the profile priced it and as the run's stage timers
measured it, with the paths each side ran. Writes the ``predictor-held-out`` section.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pandas as pd
from engine import add_tag_argument, tagged, write_readme_section  # benchmarks/engine.py

STEM = "06_decision_framework"
ROOT = Path(__file__).resolve().parent.parent


def fail(message: str) -> None:
    """A one-line error and exit code 2, as for any bad input."""
    print(message, file=sys.stderr)
    sys.exit(2)


def find_run(argv: list[str], stem: str = STEM) -> Path:
    """The run folder named on the command line, else the newest outputs/* that holds ``stem``'s summary."""
    if argv:
        if not (Path(argv[0]) / f"{stem}.summary.json").exists():
            fail(f"{argv[0]}: no {stem}.summary.json there (a `specnb run` output folder is expected)")
        return Path(argv[0])
    runs = sorted((p.parent for p in (ROOT / "outputs").glob(f"*/{stem}.summary.json")), key=lambda p: p.name)
    if not runs:
        fail(f"no outputs/*/{stem}.summary.json: run `specnb run {stem[:2]}` first")
    return runs[-1]


def copy_arguments(argv=None) -> argparse.Namespace:
    """The command line of a script that copies a notebook run's figures: the run folder, ``--no-write``."""
    ap = argparse.ArgumentParser(description="copy a finished notebook run's figures into benchmarks/README.md")
    ap.add_argument("run_dir", nargs="?", help="a finished `specnb run` folder (default: the newest outputs/*)")
    ap.add_argument("--no-write", action="store_true", help="print only; leave the README alone")
    return ap.parse_args(sys.argv[1:] if argv is None else argv)


def publish(render, section: str, stem: str = STEM, argv=None, write: bool = True) -> int:
    """Render a notebook run's section, print it and (``write``) put it between its README markers;
    ``argv``: None reads the command line (``copy_arguments``), a list holds just the run folder."""
    if argv is None:
        args = copy_arguments()
        argv, write = ([args.run_dir] if args.run_dir else []), not args.no_write
    markdown = render(find_run(argv, stem))
    print(markdown)
    if write:
        write_readme_section(markdown, name=section)
    return 0


def render(run: Path) -> str:
    summary = json.loads((run / f"{STEM}.summary.json").read_text())
    res, env, params = summary["results"], summary["environment"], summary["parameters"]
    table = pd.read_csv(run / f"{STEM}.validation.csv")
    checks = pd.read_csv(run / f"{STEM}.recommendation_check.csv")
    checks["recommended"] = checks["recommended"].fillna("none: verifier-only")
    ok = lambda cond: "met" if cond else "**missed**"  # noqa: E731
    # runs before the CI-based verdicts recorded only met or missed
    verdict = {"met": "met", "missed": "**missed**", "inconclusive": "inconclusive at this budget"}
    error_status = verdict[res.get("validation_error_verdict",
                                   "met" if res["validation_target_error_met"] else "missed")]
    choice_status = verdict[res.get("validation_recommendation_verdict",
                                    "met" if res["validation_target_recommendation_met"] else "missed")]
    per_draft = (table.assign(abs_error=table["error"].abs(), abs_flops=table["flops_error"].abs())
                 .groupby("draft")[["abs_error", "abs_flops"]].median())
    lines = [
        f"Machine: {env['cpu']} ({env['cpu_count']} cores), {env['gpu'] or 'no GPU'}, torch "
        f"{env['packages']['torch']}; "
        f"{env['time_utc'][:10]}; commit {str(env['git_commit'])[:7]}; notebook 06 defaults"
        f"{' (smoke)' if params.get('smoke') else ''}, run `{run.name}`.",
        f"Grid: {res['validation_grid_points']} held-out points (γ × draft × batch), validation prompts never seen "
        "by calibration.",
        "",
        "| measure | value | target | status |",
        "|---|---|---|---|",
        f"| median \\|predicted − measured\\| ÷ measured speedup, specnb predictor | "
        f"{100 * res['validation_median_abs_error']:.1f}% "
        f"| ≤ 10% | {error_status} |",
        f"| same, Leviathan with FLOPs c | {100 * res['validation_flops_leviathan_median_abs_error']:.1f}% | predictor "
        f"clearly better | "
        f"{ok(res['validation_median_abs_error'] < res['validation_flops_leviathan_median_abs_error'])} |",
        f"| same, Leviathan with wall-clock c | {100 * res['validation_wallclock_leviathan_median_abs_error']:.1f}% | "
        "— | — |",
        f"| recommendation's measured speedup within 5% of the best measured | "
        f"{res['validation_recommendations_within_5pct']} "
        f"(worst {100 * res['validation_recommendation_worst_ratio']:.1f}% of best) | all | "
        f"{choice_status} |",
        f"| measured speedup inside the predicted 10–90% band | {100 * res['validation_within_band']:.0f}% | — | — |",
    ]
    if "validation_within_ci" in res:
        lines += [
            f"| median \\|error\\| beyond the measured 95% CI | {100 * res['validation_median_error_beyond_ci']:.1f}% "
            "| ≤ 10% for a miss | — |",
            f"| predictions inside the measured 95% CI | {100 * res['validation_within_ci']:.0f}% | — | — |",
            f"| median CI half-width; points with the runs a ±5% CI needs | "
            f"±{100 * res['validation_median_ci_half_width']:.0f}%; {res['validation_points_sized']} | ±5% | — |",
            f"| recommendations wrong beyond the CIs | {res['validation_recommendations_wrong']} | none | — |",
        ]
    lines += [
        "",
        f"Replay check (calibration's speculative run vs its replayed acceptance traces, steps identical): "
        f"{res.get('replay_identical', 'not recorded')}.",
        "",
        "Median absolute error per draft (predictor / FLOPs-c Leviathan): "
        + ", ".join(f"{d} {100 * r.abs_error:.0f}% / {100 * r.abs_flops:.0f}%" for d, r in per_draft.iterrows()) + ".",
        "",
        "Recommendations checked:",
        "",
        checks.round(3).to_markdown(index=False),
    ]
    return "\n".join(lines)


HELD_OUT_DRAFTS = {"smollm2-draft-xs": "distilled", "smollm2-draft-s": "distilled", "smollm2-draft-m": "distilled",
                   "smollm2-exit-24": "early exit", "prompt-lookup": "prompt lookup", "smollm2-eagle": "EAGLE head",
                   "smollm2-medusa": "Medusa head"}
PREDICTED_GAMMAS = range(1, 7)


def held_out(args) -> tuple[pd.DataFrame, dict]:
    """Calibrate on some prompts, measure on others: the table (one row per draft and γ) and context."""
    from specnb.decode.pairs import load_drafts
    from specnb.measure import analysis, runs
    from specnb.measure.prompts import split_prompts
    from specnb.predict.calibrate import CalibrationSettings, calibrate
    from specnb.predict.predictor import predict
    from specnb.predict.validate import grid_table

    started = time.time()
    pair, models = load_drafts("smollm2-135m", list(args.drafts))
    calibration, validation = split_prompts("all", args.calibration, args.prompts)
    settings = CalibrationSettings(gamma=max(PREDICTED_GAMMAS), max_new_tokens=args.max_new_tokens, progress=True)
    profile, _ = calibrate(loaded=(pair, models), prompts=calibration, settings=settings)
    calibrated_s = time.time() - started
    chosen = {}
    for name in models:
        p = predict(profile, name, PREDICTED_GAMMAS)
        chosen[name] = sorted({1, p.recommended_gamma or p.best_gamma}), p.recommended_gamma
    candidates = [runs.Candidate(name=runs.BASELINE, draft=None, draft_name=None, gamma=0)] + [
        runs.Candidate(name=f"{name} γ={g}", draft=models[name], draft_name=name, gamma=g)
        for name, (gammas, _) in chosen.items() for g in gammas]
    records = runs.run_interleaved(pair, validation, candidates, repeats=args.repeats,
                                   max_new_tokens=args.max_new_tokens)
    table = grid_table(profile, pair, models, records, {1: validation}, args.max_new_tokens)
    steps = analysis.measured_steps(records).set_index(["draft", "gamma"])
    summary = runs.summarise(records).set_index(["draft", "gamma"])
    one = float(profile.verifier_decode.forward_ms(1))
    table["kind"] = table["draft"].map(HELD_OUT_DRAFTS).fillna("")
    table["recommended"] = [g == chosen[d][1] for d, g in zip(table["draft"], table["gamma"])]
    table["priced_verify_cost"] = [float(profile.verifier_decode.forward_ms(g + 1)) / one for g in table["gamma"]]
    table["measured_verify_cost"] = [steps.loc[(d, g), "verify_cost"] for d, g in zip(table["draft"], table["gamma"])]
    for column in runs.KERNEL_COLUMNS:
        table[column] = [summary.loc[(d, g), column] for d, g in zip(table["draft"], table["gamma"])]
    context = {"calibration": ",".join(calibration["id"]), "validation": ",".join(validation["id"]),
               "calibrated_min": calibrated_s / 60, "minutes": (time.time() - started) / 60,
               "kernels": pair.kernels, "records": records}
    return table, context


def render_held_out(table: pd.DataFrame, context: dict, args) -> str:
    from specnb.app.runner import describe_environment
    from specnb.models.kernels import describe_kernels

    env = describe_environment()
    errors = table.assign(abs_error=table["error"].abs())
    worst = errors.groupby("kind", sort=False)["abs_error"].max()
    lines = [
        f"Machine: {env['cpu']} ({env['cpu_count']} cores), {env['gpu'] or 'no GPU'}, torch "
        f"{env['packages']['torch']}; {env['time_utc'][:10]}; commit {str(env['git_commit'])[:7]}; "
        f"`benchmarks/predictor.py --held-out` ({context['minutes']:.0f} min, calibration "
        f"{context['calibrated_min']:.0f} min).",
        f"Calibrated on {args.calibration} prompts ({context['calibration']}), measured on {args.prompts} others "
        f"({context['validation']}) × {args.repeats} repeat(s), {args.max_new_tokens} new tokens, batch 1, greedy, "
        "every candidate interleaved with verifier-only prompt by prompt; γ 1 and the recommended γ (the best "
        "predicted one, marked ✗, where none is recommended).",
        "",
        "| draft | kind | γ | predicted | measured [95% CI] | error | beyond CI | verify cost priced / measured | "
        "kernels: baseline / verifier / draft |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table.itertuples():
        mark = "" if r.gamma == 1 or r.recommended else " ✗"
        lines.append(
            f"| `{r.draft}` | {r.kind} | {r.gamma}{mark} | {r.predicted_speedup:.2f}x | {r.measured_speedup:.2f}x "
            f"[{r.measured_lo:.2f}–{r.measured_hi:.2f}] | {100 * r.error:+.1f}% | {100 * r.error_beyond_ci:.1f}% | "
            f"{r.priced_verify_cost:.2f} / {r.measured_verify_cost:.2f} | {r.baseline_kernels} / "
            f"{r.verifier_kernels} / {r.draft_kernels or '—'} |")
    lines += [
        "",
        "Worst |error| per kind: " + ", ".join(f"{k} {100 * v:.1f}%" for k, v in worst.items())
        + f"; over all points median {100 * errors['abs_error'].median():.1f}%, worst "
        f"{100 * errors['abs_error'].max():.1f}%. Verify cost: one step's verifier forward in units of a "
        "verifier-only step (the profile's forward ms at γ + 1 tokens ÷ at 1; the run's verify stage per "
        "step ÷ verifier-only's ms per token, `analysis.measured_steps`).",
        "",
        "; ".join(describe_kernels(context["kernels"]).splitlines()) + ".",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", nargs="?", help="a finished `specnb run` folder (default: the newest outputs/* "
                                               "with notebook 06's summary); not with --held-out")
    ap.add_argument("--held-out", action="store_true", help="measure one held-out check per embedded draft kind")
    ap.add_argument("--calibration", type=int, default=6, help="calibration prompts")
    ap.add_argument("--prompts", type=int, default=8, help="held-out prompts")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--drafts", nargs="+", default=list(HELD_OUT_DRAFTS))
    ap.add_argument("--no-write", action="store_true")
    add_tag_argument(ap)
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    if not args.held_out:
        return publish(render, "predictor", argv=[args.run_dir] if args.run_dir else [], write=not args.no_write)
    if args.run_dir:
        fail(f"{args.run_dir}: --held-out measures here, it reads no run folder")
    table, context = held_out(args)
    if not args.no_write:  # the raw results first: a run this long is not lost to a rendering error
        (ROOT / "benchmarks" / "results").mkdir(exist_ok=True)
        results = ROOT / "benchmarks" / "results"
        context["records"].to_csv(results / f"{tagged('predictor_held_out_records', args.tag)}.csv", index=False)
        table.to_csv(results / f"{tagged('predictor_held_out', args.tag)}.csv", index=False)
    markdown = render_held_out(table, context, args)
    print(markdown)
    if not args.no_write:
        write_readme_section(markdown, name=tagged("predictor-held-out", args.tag, "-"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
