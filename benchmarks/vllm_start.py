"""vLLM on the CPU: what each launch setting does to start time and to single-request TPOT.

    python benchmarks/vllm_start.py [--settings eager,compiled,...] [--out benchmarks/results/vllm_start.csv]

Each setting starts one vLLM (spec-off, the embedded verifier's HF folder) from specnb's own
``VllmServer``, timed from launch to ``/health`` with the process group's own socket; then
``REQUESTS`` single requests (closed loop at concurrency 1, greedy, ``TOKENS`` tokens, end-of-sequence
ignored) give its TPOT, and the server is stopped before the next starts (one ~2.5 GB server at a
time). The reference setting (``eager``, specnb's default) runs first and last, so a machine whose
load drifted during the run shows it. Rows: setting, round, start_s, median TPOT; the table in
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
from specnb.engine.vllm_server import VllmConfig, VllmServer
from specnb.measure.serving_load import Target, closed_loop, run_async
from specnb.models.embedded import embedded_verifier_path

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
}


def launch(name: str, overrides: dict, round_index: int) -> dict:
    config = replace(VllmConfig(name=name, model=str(embedded_verifier_path()), max_num_seqs=4), **overrides)
    started = time.monotonic()
    with VllmServer(config, timeout_s=900) as server:
        start_s = time.monotonic() - started
        target = Target(name=name, url=server.url, engine="vllm", model=server.model)
        run_async(closed_loop(target, [PROMPT], 1, 4))  # warm-up
        done, _ = run_async(closed_loop(target, [PROMPT] * REQUESTS, 1, TOKENS, True))
    tpots = [d.tpot for d in done if d.success]
    return {"setting": name, "round": round_index, "start_s": round(start_s, 1),
            "median_tpot_ms": round(1000 * pd.Series(tpots).median(), 1), "requests": len(tpots),
            "load_average": round(os.getloadavg()[0], 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "vllm_start.csv"))
    args = parser.parse_args(argv)
    names = [n for n in args.settings.split(",") if n]
    order = ["eager", *[n for n in names if n != "eager"], "eager"]
    rows = []
    for i, name in enumerate(order):
        rows.append(launch(name, SETTINGS[name], i))
        print(json.dumps(rows[-1]), flush=True)
        pd.DataFrame(rows).assign(cpu=cpu_name(), commit=git_commit() or "",
                                  date=time.strftime("%Y-%m-%d")).to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
