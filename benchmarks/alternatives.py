"""Alternatives to speculation: notebook 07's measured table and tax split, copied into benchmarks/README.md.

    python benchmarks/alternatives.py [RUN_DIR] [--no-write]

RUN_DIR is a finished ``specnb run`` folder holding ``07_alternatives.*`` (default: the newest
``outputs/*`` that has one). The notebook is where everything is measured (every method interleaved
on the same prompts, the per-engine forward grid, the bandwidth floor, batching); this script only
copies its recorded figures, with the run's machine, date and commit, between the ``alternatives``
markers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
from predictor import publish  # benchmarks/predictor.py

from specnb.app.parameters import declared_defaults

STEM = "07_alternatives"


def methods_table(summary: pd.DataFrame) -> str:
    rows = []
    for r in summary.sort_values("speedup", ascending=False).itertuples():
        fidelity = (f"{r.identical_prompts}/{r.prompts} prompts identical, {r.prefix_share:.0%} of tokens before the "
                    "first divergence")
        rows.append({"method": r.method, "lossless": "yes" if r.lossless else "no", "tok/s": f"{r.tok_s:.1f}",
                     "speedup [95% CI]": f"{r.speedup:.2f}x [{r.speedup_lo:.2f}–{r.speedup_hi:.2f}]",
                     "tokens per verifier forward": f"{r.tokens_per_forward:.2f}", "fidelity": fidelity})
    return pd.DataFrame(rows).to_markdown(index=False)


def tax_table(fits: pd.DataFrame, summary: pd.DataFrame) -> str:
    alone = summary[summary["speculation"].fillna("") == ""]
    tok_s = {f"{r.engine} · {r.precision}": r.tok_s for r in alone.itertuples()}
    rows = [{"engine": r.engine, "t0 (ms)": f"{r.t0_ms:.1f}", "per token (ms)": f"{r.ms_per_token:.2f}",
             "R²": f"{r.r2:.2f}", "t(1) (ms)": f"{r.t1_ms:.1f}", "t(2) ÷ t(1)": f"{r.t2_over_t1:.2f}",
             "MB per step": f"{r.step_mb:.0f}", "floor (tok/s)": f"{r.floor_tok_s:.0f}",
             "verifier-only ÷ floor": f"{tok_s[r.engine] / r.floor_tok_s:.0%}" if r.engine in tok_s else "—"}
            for r in fits.itertuples()]
    return pd.DataFrame(rows).to_markdown(index=False)


def render(run: Path) -> str:
    record = json.loads((run / f"{STEM}.summary.json").read_text())
    env, res = record["environment"], record["results"]
    params = declared_defaults(run / f"{STEM}.ipynb") | record["parameters"]  # the summary holds what was passed
    summary = pd.read_csv(run / f"{STEM}.summary.csv")
    fits = pd.read_csv(run / f"{STEM}.tax_fits.csv")
    batching = pd.read_csv(run / f"{STEM}.batching.csv")
    prompts = summary["prompts"].max()
    lines = [
        f"Machine: {env['cpu']} ({env['cpu_count']} cores), {env['gpu'] or 'no GPU'}, torch "
        f"{env['packages']['torch']}; {env['time_utc'][:10]}; commit {str(env['git_commit'])[:7]}; notebook 07 "
        f"defaults{' (smoke)' if params.get('smoke') else ''}, run `{run.name}`, {res.get('minutes', '?')} min.",
        f"Verifier `{params['verifier']}`, {prompts} prompts × {params['repeats']} repeat(s), "
        f"{params['max_new_tokens']} new tokens, greedy, batch 1; every method interleaved prompt by prompt; speedup "
        "over PyTorch eager fp32 verifier-only on the same prompts, CI from resampling prompts.",
        "",
        methods_table(summary),
        "",
        f"Tax split (one forward of n tokens, all logits kept, on a {params['context_len']}-token cache, fit "
        f"t = t0 + k·n over n in {params['tax_tokens']}); memory-bandwidth floor from a matrix-vector product measured "
        f"in the same run: {res.get('bandwidth_gbs', '?')} GB/s.",
        "",
        tax_table(fits, summary),
        "",
        "Batching (verifier-only, PyTorch eager fp32, same prompts): "
        + "; ".join(f"batch {int(r.batch_size)} {r.throughput_tok_s:.1f} tok/s ({r.throughput_x:.2f}x), latency "
                    f"{r.latency_x:.2f}x" for r in batching.itertuples()) + ".",
    ]
    if "framework_share_of_eager_step" in res:
        lines += ["", f"Framework share of an eager 1-token forward (eager minus llama.cpp at F32, same bytes): "
                      f"{res['framework_share_of_eager_step']:.0%}."]
    return "\n".join(lines)


def main(argv=None) -> int:
    return publish(render, "alternatives", STEM, argv)


if __name__ == "__main__":
    sys.exit(main())
