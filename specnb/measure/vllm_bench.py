"""vLLM's own load client, ``vllm bench serve``, against a server our sweep measured: the check of our
client (``specnb.measure.serving_load``) on the same server, prompts and concurrency.

vLLM bench runs in vLLM's environment, as ``vllm bench serve`` (``command``: the environment's
``vllm`` command line up to its arguments, e.g. ``specnb.native.vllm_build.command("bench",
"serve")``; its ``custom`` dataset needs pandas there).
The prompts go as its ``custom`` dataset (a JSONL of ``prompt``), unshuffled, without its chat
template (our client sends each prompt as one user message and the server applies the template, as
``openai-chat`` does), greedy, ``--ignore-eos`` at our ``max_tokens``; ``--save-result
--save-detailed`` keeps the per-request lists that ``from_vllm_bench`` reads into the
sweep's tables.

Where the two clients' timings differ by design: vLLM bench's latency ends at the last content chunk
and ours at the end of the stream (the usage chunk after it); both take TTFT at the first content
chunk and TPOT = (latency − TTFT) ÷ (output tokens − 1).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from specnb.core.errors import ParameterError, SpecnbError
from specnb.measure.serving_load import Closed, Open, Target

ERROR_LINE = re.compile(r"^[\w.]*(Error|Exception): ")  # a Python exception's last line
CHECKED = {"ttft": "ttft", "tpot": "tpot"}  # metric -> record column, compared by their medians


class BenchFailed(SpecnbError, RuntimeError):
    """``vllm bench serve`` exited with an error or wrote no result; the message has its last line."""


def write_dataset(prompts: list[str], path: Path) -> Path:
    """The prompts as vLLM bench's ``custom`` dataset: one ``{"prompt": ...}`` per line."""
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    return path


@dataclass(frozen=True, kw_only=True)
class VllmBench:
    """How ``vllm bench serve`` is run: ``command``, the environment's ``vllm`` command line up to its
    arguments; ``tokenizer``, the model's folder it counts tokens with; ``timeout_s`` per level."""

    command: list[str]
    tokenizer: str
    timeout_s: float = 900.0


@dataclass(frozen=True, kw_only=True)
class BenchLevel:
    """One closed-loop level as vLLM bench sends it: ``n_prompts`` prompts, each once, ``concurrency``
    in flight, each asking ``max_tokens``."""

    n_prompts: int
    concurrency: int
    max_tokens: int


def bench_args(target: Target, tokenizer: str, dataset: Path, result: Path, level: BenchLevel) -> list[str]:
    """``vllm bench serve``'s arguments for one closed-loop level: every prompt once, ``concurrency``
    in flight, as our client sends them (see the module docstring)."""
    n_prompts, concurrency, max_tokens = level.n_prompts, level.concurrency, level.max_tokens
    return ["--backend", "openai-chat", "--base-url", target.url, "--endpoint", "/v1/chat/completions",
            "--model", target.model, "--tokenizer", tokenizer, "--dataset-name", "custom",
            "--dataset-path", str(dataset), "--disable-shuffle", "--skip-chat-template",
            "--custom-output-len", str(max_tokens), "--num-prompts", str(n_prompts), "--ignore-eos",
            "--temperature", "0", "--request-rate", "inf", "--max-concurrency", str(concurrency),
            "--num-warmups", "0", "--percentile-metrics", "ttft,tpot,itl,e2el", "--disable-tqdm",
            "--save-result", "--save-detailed", "--result-dir", str(result.parent),
            "--result-filename", result.name]


def run_bench(bench: VllmBench, target: Target, prompts: list[str], concurrency: int, max_tokens: int,
              folder: Path) -> dict:
    """Run ``vllm bench serve`` (``bench``, see the module docstring) on ``target`` and return the
    result JSON it saved; one line with its exception (or its last output line) when it fails."""
    folder.mkdir(parents=True, exist_ok=True)
    dataset = write_dataset(prompts, folder / f"prompts-c{concurrency}.jsonl")
    result = folder / f"vllm-bench-c{concurrency}.json"
    result.unlink(missing_ok=True)
    level = BenchLevel(n_prompts=len(prompts), concurrency=concurrency, max_tokens=max_tokens)
    argv = [*bench.command, *bench_args(target, bench.tokenizer, dataset, result, level)]
    timeout_s = bench.timeout_s
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


# The fields ``vllm bench serve --save-result --save-detailed`` writes, as in vLLM's
# vllm/benchmarks/serve.py: ``benchmark()``'s result dict (duration, completed, failed, totals; the
# per-request lists input_lens, output_lens, ttfts, itls, latencies, start_times, generated_texts,
# errors; spec_decode_num_drafts, _draft_tokens, _accepted_tokens and
# _per_position_acceptance_rates, the counters differenced around the run) merged into
# ``main_async``'s result_json (request_rate, a number or "inf"; burstiness; max_concurrency, a number
# or null). Without --save-detailed, input_lens, output_lens, start_times, ttfts, itls, generated_texts
# and errors are deleted before saving.
VLLM_LISTS = ("ttfts", "itls", "latencies", "output_lens", "input_lens", "errors")


def vllm_level(result: dict) -> dict:
    """The load columns of a vLLM bench run (``serving_load``): a finite ``request_rate`` is open-loop
    arrivals at that rate (capped or not by ``max_concurrency``); otherwise the concurrency cap, or
    every request at once when there is none."""
    rate = result.get("request_rate", "inf")
    if rate not in (None, "inf") and math.isfinite(float(rate)):
        return {"load": Open.name, Open.column: float(rate), "burstiness": float(result.get("burstiness", 1.0))}
    return {"load": Closed.name, Closed.column: float(result.get("max_concurrency") or len(result["latencies"]))}


def from_vllm_bench(result: dict, config: str, engine: str = "vllm") -> tuple[pd.DataFrame, pd.DataFrame]:
    """(records, runs) from the JSON ``vllm bench serve --save-result --save-detailed`` writes: its
    per-request lists become rows, its spec-decode figures the run's counters (per position: its
    rates × drafts). A file saved without --save-detailed has no per-request lists: ParameterError."""
    missing = [name for name in VLLM_LISTS if name not in result]
    if missing:
        raise ParameterError(f"the vLLM bench result has no {', '.join(missing)}: save it with "
                             "`vllm bench serve --save-result --save-detailed`")
    n = len(result["latencies"])
    load = vllm_level(result)
    errors = [str(e or "") for e in result["errors"]]
    records = pd.DataFrame({
        "engine": engine, "config": config, **load, "round": 0, "prompt_index": range(n),
        "category": "", "partial": False,
        "success": [not e and bool(k) for e, k in zip(errors, result["output_lens"])],
        "error": errors, "prompt_len": result["input_lens"], "output_tokens": result["output_lens"],
        "ttft": result["ttfts"], "itl": result["itls"], "latency": result["latencies"],
        "start_time": result.get("start_times", [0.0] * n), "generated_text": result.get("generated_texts", [""] * n)})
    records["tpot"] = (records["latency"] - records["ttft"]) / (records["output_tokens"] - 1).where(
        records["output_tokens"] > 1)
    drafts = float(result.get("spec_decode_num_drafts", 0) or 0)
    per_pos = [rate * drafts for rate in result.get("spec_decode_per_position_acceptance_rates") or []]
    runs = pd.DataFrame([{"engine": engine, "config": config, **load, "round": 0,
                          "duration": result["duration"], "completed": result["completed"],
                          "failed": result.get("failed", n - result["completed"]),
                          "total_output_tokens": result["total_output_tokens"], "partial": False,
                          "spec_decode_num_drafts": drafts,
                          "spec_decode_draft_tokens": float(result.get("spec_decode_draft_tokens", 0) or 0),
                          "spec_decode_accepted_tokens": float(result.get("spec_decode_accepted_tokens", 0) or 0),
                          "accepted_per_pos": json.dumps(per_pos), "n_decode": 0.0,
                          "tokens_predicted": float(result["total_output_tokens"])}])
    return records, runs
