"""vLLM on the CPU: what each launch setting does to start time and to TPOT.

    python benchmarks/vllm_start.py [--settings eager,compiled,...] [--levels 1,4,8]
                                    [--out benchmarks/results/vllm_start.csv]

Each setting starts one vLLM (spec-off, the embedded verifier's HF folder) from specnb's own
``VllmServer``, timed from launch to ``/health`` with the process group's own socket; then at each
level c (``--levels``, default 1) ``REQUESTS``·c requests c at a time (closed loop, greedy, ``TOKENS``
tokens, end-of-sequence ignored) give its median TPOT — does a setting that wins one request win
under load — and the server is stopped before the next starts (one ~2.5 GB server at a time). The
reference setting (``eager``, specnb's default) runs first and last, so a machine whose load drifted
during the run shows it. Rows: setting, round, concurrency, start_s, median TPOT; the table in
benchmarks/README.md (*vLLM on the CPU*) is copied from them with machine, date and commit.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

from specnb.core.devices import cpu_name
from specnb.core.paths import git_commit
from specnb.measure.serving_load import Target, run_async, send_closed
from specnb.models.embedded import embedded_verifier_path
from specnb.serve.vllm import VllmConfig, VllmServer

REQUESTS, TOKENS = 6, 48
PROMPT = "Write a short paragraph about rivers and the towns built beside them."
# name -> what changes from specnb's default launch (eager, preloads, vLLM's own binding: one bound thread on 2 cores).
# Commit 64951c7 ran these with a reference of two unbound threads ("2-threads" here, then named "eager").
SETTINGS = {
    "eager": {},
    "compiled": {"eager": False, "threads": 2},  # vLLM's default -O2: torch.compile (Dynamo once + Inductor)
    "no-preload": {"preload": False, "threads": 2},  # vLLM preloads torch's libgomp itself, no tcmalloc
    "2-threads": {"threads": 2},  # unbound
    "1-thread": {"threads": 1},  # unbound
    # one process: the engine core in the API server's (no V1 multiprocessing) and the worker in the engine core's
    # (the "uni" executor), so vLLM is imported once, not three times; OpenMP threads unbound (binding would pin the
    # API server's own thread too)
    "one-process": {"threads": 1, "env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"},
                    "extra": ["--distributed-executor-backend", "uni"]},
    "one-process-2": {"threads": 2, "env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"},
                      "extra": ["--distributed-executor-backend", "uni"]},
}


def launch(name: str, overrides: dict, round_index: int, levels: list[int]) -> list[dict]:
    config = replace(VllmConfig(model=str(embedded_verifier_path()), max_num_seqs=max(4, *levels)),
                     **overrides)
    started = time.monotonic()
    rows = []
    with VllmServer(config, timeout_s=900) as server:
        start_s = time.monotonic() - started
        target = Target(url=server.url, engine="vllm", model=server.model)
        run_async(send_closed(target, [PROMPT], 1, [4]))  # warm-up
        for level in levels:
            n = REQUESTS * level
            done, _ = run_async(send_closed(target, [PROMPT] * n, level, [TOKENS] * n))
            tpots = [d.tpot for d in done if d.success]
            rows.append({"setting": name, "round": round_index, "concurrency": level, "start_s": round(start_s, 1),
                         "median_tpot_ms": round(1000 * pd.Series(tpots).median(), 1), "requests": len(tpots),
                         "load_average": round(os.getloadavg()[0], 1)})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--levels", default="1", help="concurrency levels, comma-separated")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "vllm_start.csv"))
    args = parser.parse_args(argv)
    names = [n for n in args.settings.split(",") if n]
    order = ["eager", *[n for n in names if n != "eager"], "eager"]
    rows = []
    levels = [int(c) for c in args.levels.split(",") if c]
    for i, name in enumerate(order):
        rows += launch(name, SETTINGS[name], i, levels)
        print("\n".join(json.dumps(row) for row in rows[-len(levels):]), flush=True)
        pd.DataFrame(rows).assign(cpu=cpu_name(), commit=git_commit() or "",
                                  date=time.strftime("%Y-%m-%d")).to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
