"""Over one bursty trace: what a vLLM schedule (``num_speculative_tokens_per_batch_size``) costs, and
where the cost comes from.

    python benchmarks/vllm_trace.py [--schedule "[[1,3,4],[4,15,0],[16,4096,1]]"] [--rate 1.14]
                                    [--prompts 16] [--repeats 2] [--tokens 16] [--rounds 4]
                                    [--burstiness 0.25] [--out benchmarks/results/vllm_trace.csv]

Notebook 08's closed loop launches its policy as ``adaptive`` and holds it against every static
configuration over one trace; on a machine where the per-level check passes, the trace can still be
lost. Four n-gram launches on the same trace tell the causes apart: spec-off; static n-gram at the
schedule's largest k; the same k through vLLM's dynamic path (``[[1, max_num_seqs, k]]``: the one range
drafts exactly what the static launch does, so any difference is the path); the schedule itself. Each
runs every round's trace on its own (``run_sweep``'s Poisson mode with gamma gaps, targets rotated per
round), so rounds give the drift between them. Rows: the sweep summary of the trace's one level
(``summarise_sweep``: per configuration, mean TPOT and the paired TPOT speedup over spec-off with its 95%
CI), with cpu, commit and date.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

from specnb.core.devices import cpu_name
from specnb.core.errors import ParameterError
from specnb.core.paths import git_commit
from specnb.measure.prompts import select_prompts
from specnb.measure.serving_load import Lengths, Open
from specnb.measure.serving_stats import summarise_sweep
from specnb.measure.serving_sweep import SweepSettings, sweep_servers
from specnb.serve.vllm import ENGINE as VLLM
from specnb.serve.vllm import check_schedule


def trace_configs(schedule: list[tuple[int, int, int]], max_num_seqs: int) -> list:
    """spec-off, static n-gram at the schedule's largest k, that k on vLLM's dynamic path, the schedule."""
    k = max(r[2] for r in schedule)
    off, static = VLLM.configs("smollm2-135m", "f32", [f"ngram:{k}"], max_num_seqs)
    dynamic = replace(static, entry="ngram dynamic", schedule=[(1, max_num_seqs, k)])
    scheduled = replace(static, adaptive=True, schedule=list(schedule))
    return [off, static, dynamic, scheduled]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedule", default="[[1, 3, 4], [4, 15, 0], [16, 4096, 1]]",
                        help="the schedule under test, vLLM's [[lo, hi, k], ...]")
    parser.add_argument("--rate", type=float, default=1.14, help="mean arrival rate, requests/s")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2, help="passes over the prompts in one trace")
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--burstiness", type=float, default=0.25, help="gamma shape of the gaps (1: Poisson)")
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "vllm_trace.csv"))
    args = parser.parse_args(argv)
    try:  # vLLM's rules, as every launch checks them; no cap on k: the launches draft its largest k
        schedule = check_schedule(json.loads(args.schedule), k=sys.maxsize)
    except (ValueError, ParameterError) as error:
        parser.error(f"--schedule {args.schedule!r}: {error}")
    if not max(k for *_, k in schedule):
        parser.error(f"--schedule {args.schedule!r} drafts at no batch size: give some k > 0")
    started = time.monotonic()
    configs = trace_configs(schedule, args.max_num_seqs)
    prompts = pd.concat([select_prompts("all", args.prompts)] * args.repeats, ignore_index=True)
    load = Open(rate=args.rate, burstiness=args.burstiness, lengths=Lengths(tokens=args.tokens))
    sweep = sweep_servers(configs, prompts, [load], SweepSettings(rounds=args.rounds, progress=True))
    if sweep.stopped:
        print("note:", sweep.stopped)
    table = summarise_sweep(sweep.records, sweep.runs)  # one level, the rate: each one's speedup over spec-off
    ok = sweep.records[sweep.records["success"]]
    by_round = (ok.groupby(["round", "config"])["tpot"].mean().unstack() * 1e3).round(1)
    print(table[["config", "mean_tpot_ms", "speedup_tpot", "speedup_tpot_lo", "speedup_tpot_hi"]].round(3)
          .to_string(index=False))
    print("mean TPOT (ms) per round:\n" + by_round.to_string())
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    table.assign(schedule=json.dumps(schedule), rate=args.rate, rounds=args.rounds, cpu=cpu_name(),
                 commit=git_commit() or "", date=time.strftime("%Y-%m-%d"),
                 minutes=round((time.monotonic() - started) / 60, 1)).to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
