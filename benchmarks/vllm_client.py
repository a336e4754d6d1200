"""Our load client against vLLM's own (`vllm bench serve`) on the same vLLM server, prompts and concurrency.

    python benchmarks/vllm_client.py --endpoint "spec-off=http://127.0.0.1:P1,ngram k=4=http://127.0.0.1:P2" \
        --tokenizer HF_FOLDER [--levels 1,4] [--prompts 16] [--tokens 32] \
        [--rounds 2] [--out DIR] [--fixture tests/fixtures/vllm_bench_ngram.json]

For every round, level and server, in an order rotated per round: our closed loop
(``serving_load.send_closed``) then ``vllm bench serve`` (``specnb.measure.serving_stats``), the same
prompts once each, greedy, end-of-sequence ignored. Prints median TTFT and TPOT of both clients per
server and level and pooled over rounds (``serving_stats.client_check``), and the bench file read into
the sweep's tables (``from_vllm_bench``). ``--fixture`` keeps the first bench file of the first
speculative server, the home folder in its paths written ``~``, as a test fixture.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd

from specnb.app.serving_study import endpoint_targets
from specnb.measure.prompts import select_prompts
from specnb.measure.serving_load import Closed, Lengths, check_target, run_async, send_closed
from specnb.measure.serving_stats import VllmBench, client_check, from_vllm_bench, latency_stats, run_bench
from specnb.measure.serving_sweep import request_row


def fixture(result: dict) -> dict:
    """A bench file as vLLM wrote it, the home folder in its model paths written ``~``."""
    home = str(Path.home())
    return {k: v.replace(home, "~") if isinstance(v, str) else v for k, v in result.items()}


def bench_command() -> list[str]:
    from specnb.native import vllm_build

    return vllm_build.command("bench", "serve")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--vllm-command", default="", help="JSON list: `vllm bench serve` up to its arguments "
                        "(default: the vLLM environment make setup installed)")
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--levels", default="1,4")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default="outputs/vllm-client")
    parser.add_argument("--fixture", default="")
    args = parser.parse_args()
    out = Path(args.out)
    command = json.loads(args.vllm_command) if args.vllm_command else bench_command()
    bench = VllmBench(command=command, tokenizer=args.tokenizer)
    targets = [check_target(t) for t in endpoint_targets(args.endpoint, "vllm")]
    prompts = select_prompts("all", args.prompts)
    texts = list(prompts["prompt"])
    ours, theirs, kept = [], [], False
    for r in range(args.rounds):
        for level in [int(x) for x in args.levels.split(",")]:
            order = targets[r % len(targets):] + targets[:r % len(targets)]
            for target in order:
                t0 = time.perf_counter()
                done, _ = run_async(send_closed(target, texts, level, [args.tokens] * len(texts)))
                load = Closed(concurrency=level, lengths=Lengths(tokens=args.tokens, range_ratio=0.0))  # as sent
                ours += [request_row(d, target, load, i, prompts) | {"round": r} for i, d in enumerate(done)]
                result = run_bench(bench, target, texts, level, args.tokens, out / f"{target.name}-r{r}")
                records, _ = from_vllm_bench(result, target.name)
                theirs.append(records.assign(round=r))
                print(f"{target.name} at {level}: both clients in {time.perf_counter() - t0:.0f} s")
                if args.fixture and not kept and target.name != "spec-off":
                    Path(args.fixture).write_text(json.dumps(fixture(result), indent=1) + "\n")
                    kept = True
    ours, theirs = pd.DataFrame(ours), pd.concat(theirs, ignore_index=True)
    rows = []
    for (config, level), group in ours.groupby(["config", "concurrency"], sort=False):
        bench = theirs[(theirs["config"] == config) & (theirs["concurrency"] == level)]
        for row in client_check(group, bench).to_dict("records"):
            rows.append({"config": config, "concurrency": level, **row})
        stats = latency_stats(bench[bench["success"]])
        print(f"{config} at {level}: vLLM bench's own median TPOT {stats['median_tpot_ms']:.1f} ms, "
              f"TTFT {stats['median_ttft_ms']:.1f} ms")
    table = pd.DataFrame(rows)
    out.mkdir(parents=True, exist_ok=True)
    ours.to_csv(out / "ours.csv", index=False)
    theirs.to_csv(out / "vllm_bench.csv", index=False)
    table.to_csv(out / "client_check.csv", index=False)
    print(table.to_markdown(index=False, floatfmt=".3f"))
    pooled = [{"metric": r["metric"], "specnb": r["specnb"], "vllm_bench": r["vllm_bench"]} for r in rows]
    print(pd.DataFrame(pooled).groupby("metric").median().assign(ratio=lambda f: f["specnb"] / f["vllm_bench"]))


if __name__ == "__main__":
    main()
