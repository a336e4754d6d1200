"""Predictor validation: notebook 06's held-out grid, summarised into benchmarks/README.md.

    python benchmarks/predictor.py [RUN_DIR]

RUN_DIR is a finished ``specnb run`` folder holding ``06_decision_framework.*`` (default: the newest
``outputs/*`` that has one). The notebook is where the validation is measured (calibrate on some
prompts, then predict and measure a γ × draft × batch grid on others); this script only copies its
recorded figures, with the run's machine, date and commit, between the ``predictor`` markers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
from engine import write_readme_section  # benchmarks/engine.py

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


def publish(render, section: str, stem: str = STEM, argv=None) -> int:
    """Render a notebook run's section, print it and write it between its README markers."""
    markdown = render(find_run(sys.argv[1:] if argv is None else argv, stem))
    print(markdown)
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


def main(argv=None) -> int:
    return publish(render, "predictor", argv=argv)


if __name__ == "__main__":
    sys.exit(main())
