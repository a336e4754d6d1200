"""The serving study: notebook 08 run twice with different seeds and otherwise the same settings, and
the two runs compared — does the verdict hold up?

    python benchmarks/serving_study.py [--engine vllm] [--concurrency 1,4,16] [--speculation ngram:4,ngram:12]
                                       [--n-prompts 16] [--tokens 16] [--rounds 3] [--turnovers 3]
                                       [--seeds 0,1] [--section serving-study] [--out DIR]

``--speculation default`` runs the engine's own default configurations (what ``make demo`` runs).

Each seed is one ``specnb run 08`` (the notebook measures everything: drawn lengths, steady windows,
the engine's batch, the noise-aware policy, the adaptive launch, the bursty trace and its prediction);
this script reads the two runs' tables and checks issue 40's targets: the same policy (the same k at
every level) and the same launch line, every configuration's per-level speedups agreeing within their
CIs, and the trace forecast's median error. Raw tables stay in the run folders; the comparison goes
to ``benchmarks/results/<section>.csv`` and between the README's ``<section>`` markers (``serving-study``
unless ``--section`` names another), with each configuration's crossover per seed.
A bad argument is one line and exit 2; Ctrl-C keeps every finished run's folder.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from specnb.app import serving_keys as keys
from specnb.app.runner import write_marked_section

HERE = Path(__file__).parent
STEM = "08_serving"


def run_args(args, seed: int, out: Path) -> list[str]:
    """``specnb run 08`` with the study's settings and one seed."""
    params = {"engine": args.engine, "seed": seed, "rounds": args.rounds, "n_prompts": args.n_prompts,
              "max_new_tokens": args.tokens, "turnovers": args.turnovers,
              "concurrency": [int(c) for c in args.concurrency.split(",")]}
    if args.speculation != "default":  # "default": the engine's own (n-gram k 4 and its EAGLE-3 head)
        params["speculation"] = [s for s in args.speculation.split(",") if s]
    flags = [x for k, v in params.items() for x in ("-p", k, json.dumps(v) if not isinstance(v, str) else v)]
    return [sys.executable, "-m", "specnb", "run", "08", *flags, "--out", str(out)]


def read_run(folder: Path) -> dict:
    """The tables one run wrote: its summary (static sweep), policy and results."""
    stem = folder / STEM
    crossover = Path(f"{stem}.crossover.csv")
    return {"summary": pd.read_csv(f"{stem}.summary.csv"), "policy": pd.read_csv(f"{stem}.policy.csv"),
            "results": json.loads(Path(f"{stem}.results.json").read_text()),
            "crossover": pd.read_csv(crossover) if crossover.is_file() else pd.DataFrame()}


def crossover_lines(seed: int, run: dict) -> list[str]:
    """Per configuration of one run: where its TPOT speedup crosses 1 for good, with the CI the bounds'
    own crossings give (``serving_stats.crossover``), and its verdict."""
    table = run["crossover"]
    lines = []
    for row in table.to_dict("records"):
        at = "no crossing" if pd.isna(row["crossover"]) else f"crosses 1 at {row['crossover']:.3g}"
        lo, hi = row.get("crossover_lo"), row.get("crossover_hi")
        ci = "" if pd.isna(row["crossover"]) else \
            f" [CI {'none' if pd.isna(lo) else f'{lo:.3g}'}–{'above the top level' if pd.isna(hi) else f'{hi:.3g}'}]"
        top = "its CI excludes 1 there" if row.get("ci_excludes_1_top") else \
            "no measurable difference there (CI holds 1)"
        lines.append(f"- seed {seed}, {row['config']}: {row['verdict']} by the point estimates, {at}{ci}; at the top "
                     f"level, {top} (levels {row['min_level']:g}–{row['max_level']:g})")
    return lines


def agreement(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Per (configuration, level) of both runs' summaries: each run's TPOT speedup with its CI and
    whether the two CIs overlap (the runs agree within their noise)."""
    keys = ["config", "concurrency"]
    cols = keys + ["mean_batch", "speedup_tpot", "speedup_tpot_lo", "speedup_tpot_hi"]
    pick = lambda s: s[s["config"] != "spec-off"][[c for c in cols if c in s]]  # noqa: E731
    both = pick(a).merge(pick(b), on=keys, suffixes=("_a", "_b"))
    both["agree"] = (both["speedup_tpot_lo_a"] <= both["speedup_tpot_hi_b"]) & \
        (both["speedup_tpot_lo_b"] <= both["speedup_tpot_hi_a"])
    return both


def same_policy(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """The same k at every level measured."""
    ka, kb = a.set_index("concurrency")["k"], b.set_index("concurrency")["k"]
    return ka.index.equals(kb.index) and bool((ka == kb).all())


def verdict_of(results: dict) -> str:
    """The verdict record's kind and how sure it is ("static, decided"), "?" where the run recorded none."""
    record = results.get(keys.VERDICT_RECORD) or {}
    return f"{record.get('kind') or 'nothing to decide'}, {record.get('sure') or '?'}" if record else "?"


def markdown(runs: dict[int, dict], table: pd.DataFrame, machine: str, minutes: float) -> str:
    (sa, ra), (sb, rb) = runs.items()
    res_a, res_b = ra["results"], rb["results"]
    policy = lambda r: ", ".join(f"{c:g}: k {k}" for c, k in zip(r["policy"]["concurrency"], r["policy"]["k"]))  # noqa: E731
    lines = [f"{machine}, {time.strftime('%Y-%m-%d')}, {minutes:.0f} min for both runs; seeds {sa} and {sb}.", "",
             f"- policy (k per level): seed {sa} {policy(ra)}; seed {sb} {policy(rb)} — "
             + ("**the same**" if same_policy(ra["policy"], rb["policy"]) else "**different**"),
             f"- launch line: seed {sa} `{res_a.get(keys.LAUNCH_LINE) or 'no speculation'}`; seed {sb} "
             f"`{res_b.get(keys.LAUNCH_LINE) or 'no speculation'}` — "
             + ("**the same**" if res_a.get(keys.LAUNCH_LINE) == res_b.get(keys.LAUNCH_LINE) else "**different**"),
             f"- per-level speedups agreeing within their CIs: {int(table['agree'].sum())} of {len(table)}",
             f"- verdict (kind, how sure): seed {sa} {verdict_of(res_a)}; seed {sb} {verdict_of(res_b)}",
             f"- launch noise σ: seed {sa} {(res_a.get(keys.LAUNCH_NOISE) or {}).get('sigma', float('nan')):.3f}, "
             f"seed {sb} {(res_b.get(keys.LAUNCH_NOISE) or {}).get('sigma', float('nan')):.3f} (log speedup)",
             *crossover_lines(sa, ra), *crossover_lines(sb, rb),
             f"- trace forecast's median error: {res_a.get(keys.TRACE_FORECAST_ERROR, float('nan')):.1%} / "
             f"{res_b.get(keys.TRACE_FORECAST_ERROR, float('nan')):.1%} (target ≤ 10%; made before the trace)",
             ""]
    shown = table.assign(**{f"seed {s}": [f"{x:.2f}x [{lo:.2f}–{hi:.2f}]" for x, lo, hi in zip(
        table[f"speedup_tpot_{t}"], table[f"speedup_tpot_lo_{t}"], table[f"speedup_tpot_hi_{t}"])]
        for s, t in zip((sa, sb), "ab")})
    return "\n".join(lines) + "\n" + shown[["config", "concurrency", f"seed {sa}", f"seed {sb}", "agree"]] \
        .to_markdown(index=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", default="vllm")
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--speculation", default="ngram:4,ngram:12")
    parser.add_argument("--n-prompts", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--turnovers", type=int, default=3)
    parser.add_argument("--section", default="serving-study", help="the README's marked section to rewrite")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--out", default=str(HERE.parent / "outputs" / "serving-study"))
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip().lstrip("-").isdigit()]
    if len(seeds) != 2 or seeds[0] == seeds[1]:
        parser.error(f"--seeds takes two different whole numbers, e.g. 0,1; got {args.seeds!r}")
    if args.rounds < 3:
        parser.error(f"--rounds must be >= 3 (the policy's noise is the spread over rounds), got {args.rounds}")
    started, runs = time.monotonic(), {}
    for seed in seeds:
        folder = Path(args.out) / f"seed-{seed}"
        try:
            done = subprocess.run(run_args(args, seed, folder))
        except KeyboardInterrupt:  # the run itself keeps what it finished (specnb run's own Ctrl-C handling)
            print(f"serving_study: interrupted during seed {seed}; finished runs are kept in {Path(args.out)}")
            return 130
        if done.returncode:
            print(f"serving_study: seed {seed}'s run failed (exit {done.returncode}); its folder is {folder}")
            return done.returncode
        runs[seed] = read_run(folder)
    a, b = (runs[s] for s in seeds)
    table = agreement(a["summary"], b["summary"])
    machine = a["results"].get(keys.MACHINE, "")
    table.assign(machine=machine, date=time.strftime("%Y-%m-%d")).to_csv(
        HERE / "results" / f"{args.section.replace('-', '_')}.csv", index=False)
    text = markdown(runs, table, machine, (time.monotonic() - started) / 60)
    print(text)
    write_marked_section(HERE / "README.md", args.section, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
