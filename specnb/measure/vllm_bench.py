"""vLLM's own load client, ``vllm bench serve``, against a server our sweep measured: the check of our
client (``specnb.measure.serving_load``) on the same server, prompts and concurrency.

vLLM bench runs in vLLM's environment, as ``vllm bench serve`` (``command``: the environment's
``vllm`` command line up to its arguments, e.g. ``specnb.engine.vllm_build.command("bench",
"serve")``; its ``custom`` dataset needs pandas there).
The prompts go as its ``custom`` dataset (a JSONL of ``prompt``), unshuffled, without its chat
template (our client sends each prompt as one user message and the server applies the template, as
``openai-chat`` does), greedy, ``--ignore-eos`` at our ``max_tokens``; ``--save-result
--save-detailed`` keeps the per-request lists that ``serving_summary.from_vllm_bench`` reads into the
sweep's tables.

Where the two clients' timings differ by design: vLLM bench's latency ends at the last content chunk
and ours at the end of the stream (the usage chunk after it); both take TTFT at the first content
chunk and TPOT = (latency − TTFT) ÷ (output tokens − 1).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd

from specnb.core.errors import SpecnbError
from specnb.measure.serving_load import Target

ERROR_LINE = re.compile(r"^[\w.]*(Error|Exception): ")  # a Python exception's last line
CHECKED = {"ttft": "ttft", "tpot": "tpot"}  # metric -> record column, compared by their medians


class BenchFailed(SpecnbError, RuntimeError):
    """``vllm bench serve`` exited with an error or wrote no result; the message has its last line."""


def write_dataset(prompts: list[str], path: Path) -> Path:
    """The prompts as vLLM bench's ``custom`` dataset: one ``{"prompt": ...}`` per line."""
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    return path


def bench_args(target: Target, dataset: Path, n_prompts: int, concurrency: int, max_tokens: int, result: Path,
               tokenizer: str) -> list[str]:
    """``vllm bench serve``'s arguments for one closed-loop level: every prompt once, ``concurrency``
    in flight, as our client sends them (see the module docstring)."""
    return ["--backend", "openai-chat", "--base-url", target.url, "--endpoint", "/v1/chat/completions",
            "--model", target.model, "--tokenizer", tokenizer, "--dataset-name", "custom",
            "--dataset-path", str(dataset), "--disable-shuffle", "--skip-chat-template",
            "--custom-output-len", str(max_tokens), "--num-prompts", str(n_prompts), "--ignore-eos",
            "--temperature", "0", "--request-rate", "inf", "--max-concurrency", str(concurrency),
            "--num-warmups", "0", "--percentile-metrics", "ttft,tpot,itl,e2el", "--disable-tqdm",
            "--save-result", "--save-detailed", "--result-dir", str(result.parent),
            "--result-filename", result.name]


def run_bench(command: list[str], target: Target, prompts: list[str], concurrency: int, max_tokens: int,
              folder: Path, tokenizer: str, timeout_s: float = 900.0) -> dict:
    """Run ``vllm bench serve`` (``command``, see the module docstring) on ``target`` and return the
    result JSON it saved; one line with its exception (or its last output line) when it fails."""
    folder.mkdir(parents=True, exist_ok=True)
    dataset = write_dataset(prompts, folder / f"prompts-c{concurrency}.jsonl")
    result = folder / f"vllm-bench-c{concurrency}.json"
    result.unlink(missing_ok=True)
    argv = [*command, *bench_args(target, dataset, len(prompts), concurrency, max_tokens, result, tokenizer)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as err:
        raise BenchFailed(f"vllm bench serve ran past {timeout_s:.0f} s at concurrency {concurrency}; "
                          "give it fewer prompts or tokens") from err
    if done.returncode or not result.exists():
        lines = [x.strip() for x in (done.stderr + "\n" + done.stdout).splitlines() if x.strip()]
        causes = [x for x in lines if ERROR_LINE.match(x)]
        last = causes[-1] if causes else (lines[-1] if lines else "no output")
        raise BenchFailed(f"vllm bench serve failed at concurrency {concurrency} (exit {done.returncode}): {last}")
    return json.loads(result.read_text())


def client_check(ours: pd.DataFrame, theirs: pd.DataFrame, tolerance: float = 0.10) -> pd.DataFrame:
    """Median TTFT and TPOT (ms) of our client's requests against vLLM bench's on the same server and
    level: one row per metric with their ratio and whether it is within ``tolerance``."""
    rows = []
    for metric, column in CHECKED.items():
        a = float(np.median(ours.loc[ours["success"], column].dropna())) * 1e3
        b = float(np.median(theirs.loc[theirs["success"], column].dropna())) * 1e3
        rows.append({"metric": f"median_{metric}_ms", "specnb": a, "vllm_bench": b, "ratio": a / b,
                     "within": abs(a / b - 1.0) <= tolerance})
    return pd.DataFrame(rows)
