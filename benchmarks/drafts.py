"""Draft benchmarks: every draft's size, cost ratio c, acceptance and best measured speedup.

    python benchmarks/drafts.py [--verifier smollm2-135m] [--drafts a,b,...] [--gammas 1,3] [--prompts 16]
                                [--max-new-tokens 32] [--quick]

The table the drafts issue asks for, per draft: parameters, FLOPs per token, c by FLOPs, c by wall clock on this
machine, α on the prompt set (pooled, and mean/spread across prompts), the best measured γ and the speedup there
with a 95% bootstrap CI over prompts. It is notebook 04's analysis (``specnb.measure.analysis.draft_table``) on more
prompts (round-robin over every category) and longer generations; verifier-only and every (draft, γ) run interleaved per
prompt, so machine drift hits all of them alike. Cost: every (draft, γ) generates the same tokens as the verifier
alone, and weak drafts are slower than it, so with 7 drafts at 2 γs a run takes over 20 times as long as generating
with the verifier alone; the defaults are sized for about 15 minutes with the embedded verifier on 2 CPU cores.

A full run writes benchmarks/results/drafts.json (environment, configuration, table), the raw records to
benchmarks/results/drafts_records.csv, and the section between the ``drafts`` markers of benchmarks/README.md.
``--quick`` (2 prompts, 12 tokens, γ in 1 and 2: for checking the script) writes to benchmarks/results/quick/ and
leaves the README alone; ``--no-write`` only prints.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from specnb.app.defaults import notebook_drafts
from specnb.app.runner import describe_environment, write_marked_section
from specnb.decode.kinds.by_name import flops_table
from specnb.decode.pairs import load_drafts
from specnb.measure import analysis, runs
from specnb.measure.prompts import select_prompts

HERE = Path(__file__).parent
QUICK = {"prompts": 2, "max_new_tokens": 12, "gammas": [1, 2]}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--verifier", default="smollm2-135m")
    p.add_argument(
        "--drafts",
        default=None,
        help="comma-separated; default for the embedded verifier: its distilled drafts, early exits and prompt lookup",
    )
    p.add_argument("--gammas", default="1,3", help="comma-separated γ values measured per draft")
    p.add_argument("--prompts", type=int, default=16, help="prompts, round-robin over every category")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--device", default="auto")
    p.add_argument("--quick", action="store_true", help="tiny run to check the script; results go to results/quick/")
    p.add_argument("--no-write", action="store_true", help="print only; do not touch README/results")
    p.add_argument("--tag", default="", help="a CPU kind's own README section and results (e.g. xeon)")
    args = p.parse_args(argv)
    args.gammas = [int(g) for g in str(args.gammas).split(",") if g.strip()]
    args.drafts = [d.strip() for d in args.drafts.split(",") if d.strip()] if args.drafts else None
    if args.quick:
        args.prompts, args.max_new_tokens, args.gammas = QUICK["prompts"], QUICK["max_new_tokens"], QUICK["gammas"]
    return args


def measure(args) -> dict:
    """Load, run interleaved, tabulate: the records and the per-draft table."""
    names = notebook_drafts(args.verifier, drafts=args.drafts)
    pair, loaded = load_drafts(args.verifier, names, device=args.device)
    prompts = select_prompts("all", args.prompts)
    records = runs.run_interleaved(pair, prompts, runs.make_candidates(loaded, args.gammas), repeats=args.repeats,
                                   max_new_tokens=args.max_new_tokens)
    flops = flops_table(args.verifier, list(loaded))
    summary = runs.summarise(records)
    return {
        "records": records,
        "summary": summary,
        "flops": flops,
        "table": analysis.draft_table(records, flops, summary),
        "device": str(pair.device),
        "dtype": str(pair.dtype),
        "kernels": pair.kernels,
        "categories": sorted(set(prompts["category"])),
    }


def human(n: float, unit: str = "") -> str:
    """135000000 -> 135M (params), 2.7e8 -> 270M (FLOPs)."""
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= size:
            return f"{n / size:.3g}{suffix}{unit}"
    return f"{n:.3g}{unit}"


def kernels_cell(row) -> str:
    """"onednn / onednn / default": the paths verifier-only's verifier, the speculative run's verifier
    and its draft ran ("—" for a draft without layers; "?" for records from before they were kept)."""
    return " / ".join(getattr(row, c, "") or ("—" if c == "draft_kernels" else "?") for c in runs.KERNEL_COLUMNS)


def table_lines(table) -> list[str]:
    """The draft table as Markdown lines (header included), one row per draft of ``analysis.draft_table``."""
    lines = [
        "| draft | params | FLOPs/token | c (FLOPs) | c (wall clock) | α at best γ | α across prompts: mean ± sd "
        "[min–max] | α per token | best γ (or tree) | speedup at best γ [95% CI] | verdict | kernels: baseline / "
        "verifier / draft |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table.itertuples():
        best = r.candidate.split()[-1] if "tree=" in r.candidate else r.best_gamma  # a tree's shape, not its depth
        lines.append(
            f"| `{r.draft}` | {human(r.params)} | {human(r.flops_per_token)} | {r.c_flops:.3f} | {r.c_wall:.3f} | "
            f"{r.alpha:.3f} | {r.alpha_prompt_mean:.2f} ± {r.alpha_prompt_std:.2f} [{r.alpha_prompt_min:.2f}–"
            f"{r.alpha_prompt_max:.2f}] | {r.alpha_token:.3f} | {best} | {r.speedup:.2f}x "
            f"[{r.speedup_lo:.2f}–{r.speedup_hi:.2f}] | {r.verdict} | {kernels_cell(r)} |"
        )
    return lines


def render_markdown(result: dict) -> str:
    env, cfg, table, summary = result["environment"], result["config"], result["table"], result["summary"]
    verifier = result["flops"].iloc[0]
    base = summary[summary["candidate"] == runs.BASELINE].iloc[0]
    lines = [
        f"Machine: {env['cpu']} ({env['cpu_count']} cores), {env['gpu'] or 'no GPU'}, device {result['device']} "
        f"({result['dtype']}), torch {env['packages']['torch']}, transformers {env['packages']['transformers']}; "
        f"{env['time_utc'][:10]}; commit {str(env['git_commit'])[:7]}.",
        f"Verifier `{cfg['verifier']}` ({human(verifier['params'])} parameters, {human(verifier['flops_per_token'])} "
        f"FLOPs/token): {base['tok_s']:.1f} tok/s verifier-only. {base['prompts']} prompts round-robin over "
        f"{len(result['categories'])} categories × {cfg['repeats']} repeat(s), {cfg['max_new_tokens']} new tokens, "
        f"greedy, batch 1; γ in {cfg['gammas']}; {result['seconds'] / 60:.1f} min.",
        "",
        *table_lines(table),
    ]
    lines += [
        "",
        "c (FLOPs): the draft's ÷ the verifier's FLOPs per token (2 × multiply-accumulates, from the configs). "
        "c (wall clock): draft ms per drafted token ÷ verifier-only ms per decoding step, both from these runs, pooled "
        "over γ. α: accepted ÷ drafted tokens; α per token: accepted ÷ draft positions reached (every earlier one "
        "accepted), the α of Leviathan et al., whose break-even c at γ = 1 it equals. Speedup: tok/s ÷ verifier-only "
        "tok/s on the same prompts, prefill included; CI from resampling prompts. Raw records: "
        "`results/drafts_records.csv`.",
    ]
    return "\n".join(lines)


def write_readme_section(markdown: str, name: str = "drafts") -> None:
    write_marked_section(HERE / "README.md", name, markdown)


def write_results(result: dict, markdown: str, quick: bool, tag: str = "") -> Path:
    """JSON (environment, configuration, table) and raw records; the README only for full runs.
    ``tag``: a CPU kind's own files and section, beside another's."""
    folder = HERE / "results" / ("quick" if quick else "")
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"drafts_{tag}" if tag else "drafts"
    result["records"].to_csv(folder / f"{stem}_records.csv", index=False)
    keep = {k: result[k] for k in ("config", "environment", "device", "dtype", "kernels", "categories", "seconds")}
    keep.update(
        table=result["table"].to_dict(orient="records"),
        summary=result["summary"].to_dict(orient="records"),
        flops=result["flops"].to_dict(orient="records"),
        markdown=markdown,
    )
    (folder / f"{stem}.json").write_text(json.dumps(keep, indent=1, default=str))
    if not quick:
        write_readme_section(markdown, name=stem.replace("_", "-"))
    return folder


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.manual_seed(0)
    started = time.time()
    result = measure(args)
    result.update(config=vars(args), environment=describe_environment(), seconds=time.time() - started)
    markdown = render_markdown(result)
    print(markdown)
    if not args.no_write:
        folder = write_results(result, markdown, args.quick, args.tag)
        print(f"\nwrote {folder.relative_to(HERE.parent)}/" + ("" if args.quick else " and benchmarks/README.md"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
