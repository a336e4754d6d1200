"""What a k = 0 range of vLLM's dynamic schedule costs against spec-off, per method.

    python benchmarks/vllm_k0.py [--levels 1,8,32] [--prompts 16] [--tokens 16] [--rounds 2]
                                 [--methods ngram,eagle3] [--out benchmarks/results/vllm_k0.csv]

The verdict launches one vLLM with ``num_speculative_tokens_per_batch_size``; where a range says k = 0,
vLLM still takes its speculative path, and the verdict prices that range at the engine's own k = 0 figure
(``ServingEngine.zero_range``, copied from this script's rows). This measures it, and prints that price
beside: spec-off, each method's static configuration, and the same method launched with an all-zero
schedule (``[[1, max_num_seqs, 0]]``, which drafts nothing at any batch size), all started at once by
specnb and swept side by side on the same prompts (``sweep_servers``: targets alternating piece by piece,
the order rotated). The all-zero server's TPOT speedup over spec-off, with its 95% CI, is the k = 0 cost. Rows:
the sweep summary (per configuration and level), with cpu, commit and date; the table in
benchmarks/README.md (*vLLM under serving load*) is copied from them.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

from specnb.core.devices import cpu_name
from specnb.core.paths import git_commit
from specnb.measure.prompts import select_prompts
from specnb.measure.serving_load import Closed, Lengths
from specnb.measure.serving_stats import summarise_sweep
from specnb.measure.serving_sweep import SweepSettings, sweep_servers
from specnb.serve.vllm import ENGINE as VLLM

DEFAULT_K = {"ngram": 4, "suffix": 8, "eagle3": 3}


def k0_configs(methods: list[str], max_num_seqs: int) -> list:
    """spec-off, then per method its static configuration and its all-zero-schedule twin ("METHOD k0 k=K")."""
    static = VLLM.configs("smollm2-135m", "f32", [f"{m}:{DEFAULT_K.get(m, 3)}" for m in methods], max_num_seqs)
    zero = [replace(c, entry=f"{c.method} k0", schedule=[(1, max_num_seqs, 0)]) for c in static[1:]]
    return [*static, *zero]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="1,8,32", help="concurrency levels, comma-separated")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--methods", default="ngram,eagle3")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "vllm_k0.csv"))
    args = parser.parse_args(argv)
    levels = [int(c) for c in args.levels.split(",") if c]
    configs = k0_configs([m for m in args.methods.split(",") if m], max(8, *levels))
    started = time.monotonic()
    loads = [Closed(concurrency=c, lengths=Lengths(tokens=args.tokens)) for c in levels]
    sweep = sweep_servers(configs, select_prompts("all", args.prompts), loads,
                          SweepSettings(rounds=args.rounds, progress=True))
    if sweep.stopped:
        print("note:", sweep.stopped)
    summary = summarise_sweep(sweep.records, sweep.runs)
    columns = ["config", "concurrency", "mean_tpot_ms", "speedup_tpot", "speedup_tpot_lo", "speedup_tpot_hi"]
    print(summary[[c for c in columns if c in summary]].to_string(index=False))
    for config in [c for c in configs if c.speculative and not c.schedule and c.name in set(summary["config"])]:
        if config.method in VLLM.zero_range:
            point, lo, hi = VLLM.zero_range[config.method]
            print(f"{config.name}: the verdict prices a k = 0 range at {point:.2f}x [{lo:.2f}–{hi:.2f}] of spec-off")
    summary.assign(cpu=cpu_name(), commit=git_commit() or "", date=time.strftime("%Y-%m-%d"),
                   minutes=round((time.monotonic() - started) / 60, 1)).to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
