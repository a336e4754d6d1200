"""Speculation under serving load: notebook 08's recorded figures, copied into benchmarks/README.md.

    python benchmarks/serving.py [RUN_DIR] [--no-write]

RUN_DIR is a finished ``specnb run`` folder holding ``08_serving.*`` (default: the newest
``outputs/*`` that has one); a run on vLLM goes between the ``serving-vllm`` markers, any other
between the ``serving`` ones. The notebook measures everything (llama-server per configuration, the
concurrency sweep, counters, speedups with CIs, the crossover, the serving predictor, the policy);
this script only copies its figures, with the run's machine, date and commit, between the
``serving`` markers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
from engine import write_readme_section  # benchmarks/engine.py
from predictor import copy_arguments, find_run  # benchmarks/predictor.py

from specnb.app.text.nb08_serving import crossover_line
from specnb.measure.serving_load import shape_of

STEM = "08_serving"


def ci(row, metric: str) -> str:
    if pd.isna(row.get(metric)) or row["config"] == "spec-off":
        return "—"
    return f"{row[metric]:.2f}x [{row[f'{metric}_lo']:.2f}–{row[f'{metric}_hi']:.2f}]"


def sweep_table(summary: pd.DataFrame) -> str:
    """The speculative configurations per level: the engine's batch and the TPOT speedup with its CI
    (the whole summary stays in the run folder's ``.summary.csv``)."""
    shape = shape_of(summary)
    column = shape.column
    batch = lambda r: "—" if pd.isna(r.get("mean_batch")) else f"{r['mean_batch']:.1f}"  # noqa: E731
    rows = [{"config": r["config"], shape.unit: r[column], "engine's batch": batch(r),
             "α": "—" if pd.isna(r["alpha"]) else f"{r['alpha']:.2f}", "TPOT speedup [95% CI]": ci(r, "speedup_tpot")}
            for r in summary[summary["config"] != "spec-off"].sort_values(["config", column]).to_dict("records")]
    return pd.DataFrame(rows).to_markdown(index=False)


def noise_text(noise: dict | None) -> str:
    """What a run's CIs were widened by (``launch_noise`` in its results), as a clause."""
    if not noise:
        return ", no launch noise measured"
    return f", with launch noise σ {noise['sigma']:.3f} from {noise.get('pairs', '?')} A/A pair(s) ({noise['source']})"


def render(run: Path, stem: str = STEM) -> str:
    record = json.loads((run / f"{stem}.summary.json").read_text())
    env, res = record["environment"], record["results"]
    used = res.get("settings") or {}  # what the notebook ran with (smoke and demo trims included)
    summary = pd.read_csv(run / f"{stem}.summary.csv")
    lines = [
        f"{env['cpu']} ({env['cpu_count']} cores), {env['time_utc'][:10]}, commit {str(env['git_commit'])[:7]}, run "
        f"`{run.name}`, {res.get('minutes', '?')} min; {res.get('machine', '')}.",
        f"{used.get('prompts', '?')} prompts × {used.get('rounds', '?')} rounds, {used.get('max_new_tokens', '?')} "
        f"tokens on average (range ratio {used.get('length_range_ratio', '?')}), {used.get('load', '?')} loop at "
        f"{used.get('levels', '?')}, {used.get('turnovers', '?')} turnovers; speedups over spec-off on steady "
        f"requests, CIs resampling prompts with their rounds, simultaneous over configurations and levels"
        f"{noise_text(res.get('launch_noise'))}.",
        "",
        sweep_table(summary),
    ]
    if res.get("verdict"):
        lines += ["", f"Verdict: {res['verdict'].removeprefix('**verdict**: ')}"]
    crossover = run / f"{stem}.crossover.csv"
    if crossover.is_file():
        # each configuration's pays / loses / no measurable difference, as notebook 08 says it: by its CIs
        lines += [""] + [f"- {crossover_line(r)}" for r in pd.read_csv(crossover).to_dict("records")]
    if "serving_predictor_median_error" in res:
        where = ("on held-out prompts at every level (two-fold cross-fit)" if res.get("serving_predictor_prompts")
                 == "held out" else "over the levels it was not calibrated on")
        lines += ["", f"Serving predictor: median error {res['serving_predictor_median_error']:.1%} {where} "
                      "(target ≤ 15%)."]
    if "trace_forecast_median_error" in res:
        error, rebuilt = res["trace_forecast_median_error"], res.get("trace_reconstruction_median_error", float("nan"))
        lines += ["", f"Trace forecast from the per-load figures before it was sent: median error {error:.1%} "
                      f"(target ≤ 10%); reconstructed from the batches it held (a diagnostic): {rebuilt:.1%}."]
    return "\n".join(lines)


def section(run: Path) -> str:
    """The README markers a run's figures go between: ``serving-vllm`` for a run on vLLM, else ``serving``."""
    settings = json.loads((run / f"{STEM}.summary.json").read_text())["results"].get("settings") or {}
    return "serving-vllm" if settings.get("engine") == "vllm" else "serving"


def main(argv=None) -> int:
    args = copy_arguments(argv)
    run = find_run([args.run_dir] if args.run_dir else [], STEM)
    markdown = render(run)
    print(markdown)
    if not args.no_write:
        write_readme_section(markdown, name=section(run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
