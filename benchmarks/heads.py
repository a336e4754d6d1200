"""The head drafts against their targets: chains, chains that stop when the head is unsure, static and
dynamic trees, with the default settings (or named kernel paths).

    python benchmarks/heads.py [--prompts 8] [--max-new-tokens 48] [--batch-size 1] [--kernels auto ...]
                               [--compare FOLDER ...] [--no-write]

For the embedded verifier, on prompts round-robin over every category, greedy: verifier-only,
``smollm2-eagle`` at several γ, with a confidence threshold, on a static and on EAGLE-2's dynamic
tree, ``smollm2-medusa`` on a chain and a tree, and prompt lookup for reference, all interleaved
prompt by prompt; once per ``--kernels`` path (default: ``auto``, what a user gets: each model's
linear layers on whichever of MKL and prepacked oneDNN ``specnb.models.kernels`` times faster).
Per candidate: per-token α, τ, tok/s and speedup with a 95%
CI over prompts; per category for the best EAGLE candidate; the step arithmetic (ms per verifier
step, from ``analysis.measured_steps``) that explains the speedup. Writes the ``heads`` section of
benchmarks/README.md and ``results/heads_records.csv``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd
import torch
from drafts import table_lines  # benchmarks/drafts.py
from engine import add_tag_argument, tagged, write_readme_section  # benchmarks/engine.py

from specnb.app.runner import describe_environment
from specnb.decode.kinds.by_name import flops_table
from specnb.decode.pairs import load_drafts
from specnb.decode.trees import DynamicTree
from specnb.measure import analysis, runs
from specnb.measure.acceptance import token_alpha
from specnb.measure.prompts import select_prompts
from specnb.models.kernels import describe_kernels

HERE = Path(__file__).resolve().parent
EAGLE, MEDUSA, LOOKUP = "smollm2-eagle", "smollm2-medusa", "prompt-lookup"


CONFIDENCE = 0.3  # the threshold the confidence candidates stop chains at


def candidates(drafts: dict, batch_size: int, compare: tuple[str, ...] = ()) -> list:
    trees = [(3, 2), DynamicTree(4)] if batch_size == 1 else [(3, 2)]
    found = runs.make_candidates({EAGLE: drafts[EAGLE]}, [2, 3, 4], trees=trees, confidences=(0.0, CONFIDENCE))
    for other in compare:  # another EAGLE head (a folder), on the same chains, side by side
        found += runs.make_candidates({other: drafts[other]}, [2, 3, 4], baseline=False)
    found += runs.make_candidates({MEDUSA: drafts[MEDUSA]}, [2], trees=[(3, 2)], baseline=False)
    return found + runs.make_candidates({LOOKUP: drafts[LOOKUP]}, [3], baseline=False)


def measure(kernels: str, prompts, max_new_tokens: int, batch_size: int,
            compare: tuple[str, ...] = ()) -> tuple[pd.DataFrame, dict]:
    torch.manual_seed(0)
    pair, drafts = load_drafts("smollm2-135m", [EAGLE, MEDUSA, LOOKUP, *compare], kernels=kernels)
    found = candidates(drafts, batch_size, compare)
    records = runs.run_interleaved(pair, prompts, found, max_new_tokens=max_new_tokens,
                                   batch_size=batch_size, progress=True)
    return records.assign(kernels=kernels), pair.kernels


def kernel_line(choices: dict) -> str:
    """What each model's linear layers ran on (``Pair.kernels``), one markdown line."""
    return "; ".join(describe_kernels(choices).splitlines()) + "."


def table(records: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per candidate its acceptance, speed and one decoding step's cost (``analysis.measured_steps``:
    prefill excluded; verifier-only's row shows its ms per token, i.e. per one-token step)."""
    summary = runs.summarise(records)
    steps = analysis.measured_steps(records).set_index("candidate")
    rows = []
    for r in summary.itertuples():
        step = steps.loc[r.candidate] if r.candidate in steps.index else None
        rows.append({"candidate": r.candidate, "per-token α": f"{r.alpha_token:.3f}" if r.gamma else "—",
                     "τ": f"{r.tau:.2f}", "tok/s": f"{r.tok_s:.1f}",
                     "speedup [95% CI]": f"{r.speedup:.2f}x [{r.speedup_lo:.2f}–{r.speedup_hi:.2f}]",
                     "verify ms per step": f"{step.verify_ms_per_step:.1f}" if step is not None else "—",
                     "draft ms per step": f"{step.draft_ms_per_step:.1f}" if step is not None else "—",
                     "step ms (all stages)": f"{step.step_ms:.1f}" if step is not None
                     else f"{steps['baseline_ms_per_token'].iloc[0]:.1f}",
                     "kernels: verifier / draft": f"{r.verifier_kernels} / {r.draft_kernels or '—'}"})
    return pd.DataFrame(rows), summary


def per_category(records: pd.DataFrame, candidate: str) -> str:
    group = records[records["candidate"] == candidate]
    parts = []
    for category, rows in group.groupby("categories"):
        tau = (rows["accepted"].sum() + rows["steps"].sum()) / rows["steps"].sum()
        parts.append(f"{category} α {token_alpha(rows):.2f} / τ {tau:.2f}")
    return ", ".join(parts)


def section(records: pd.DataFrame) -> list[str]:
    """Markdown lines for one kernel path's records: the candidates, the best EAGLE candidate per
    category, and the heads in the draft table's columns."""
    shown, summary = table(records)
    eagle = summary[summary["draft"] == EAGLE].sort_values("speedup").iloc[-1]
    heads = [EAGLE, MEDUSA, LOOKUP, *sorted(set(records["draft"].dropna()) - {EAGLE, MEDUSA, LOOKUP, ""})]
    drafts = analysis.draft_table(records, flops_table("smollm2-135m", heads), summary)
    return [f"**kernels = {records['kernels'].iloc[0]}, batch {records['batch_size'].iloc[0]}**", "",
            shown.to_markdown(index=False), "",
            f"Best EAGLE candidate ({eagle.candidate}) per category: {per_category(records, eagle.candidate)}.", "",
            "The same run in the draft table's columns (see *Draft family* above):", "", *table_lines(drafts), ""]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=8, help="prompts, round-robin over every category")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--batch-size", type=int, nargs="+", default=[1], help="batch sizes, each its own run")
    ap.add_argument("--kernels", nargs="+", default=["auto"], help="kernel paths, each its own run (default auto)")
    ap.add_argument("--compare", nargs="+", default=[], metavar="FOLDER",
                    help="other EAGLE head folders to run beside smollm2-eagle (chains at γ 2, 3, 4)")
    ap.add_argument("--no-write", action="store_true")
    add_tag_argument(ap)
    args = ap.parse_args(argv)
    started = time.time()
    prompts = select_prompts("all", args.prompts)
    env = describe_environment()
    measured = [measure(k, prompts, args.max_new_tokens, b, tuple(args.compare))
                for b in args.batch_size for k in args.kernels]
    frames = [records for records, _ in measured]
    sections = [line for records, choices in measured for line in [*section(records), kernel_line(choices), ""]]
    markdown = "\n".join([
        f"Machine: {env['cpu']} ({env['cpu_count']} cores), {env['gpu'] or 'no GPU'}, torch "
        f"{env['packages']['torch']}; {env['time_utc'][:10]}; commit {str(env['git_commit'])[:7]}; "
        f"{len(prompts)} prompts round-robin over every category, {args.max_new_tokens} new tokens, greedy, "
        f"batch {', '.join(map(str, args.batch_size))}, every candidate interleaved batch by batch; "
        f"{(time.time() - started) / 60:.1f} min "
        "(`benchmarks/heads.py`).", "", *sections]).rstrip()
    print(markdown)
    if not args.no_write:
        (HERE / "results").mkdir(exist_ok=True)
        pd.concat(frames).to_csv(HERE / "results" / f"{tagged('heads', args.tag)}_records.csv", index=False)
        write_readme_section(markdown, name=tagged("heads", args.tag, "-"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
