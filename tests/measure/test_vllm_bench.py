"""The vLLM bench cross-check without vLLM: its arguments, a stand-in interpreter that writes or fails
as vLLM bench does, and the comparison of medians."""

import json
import sys

import pandas as pd
import pytest
from helpers import spec

from specnb.measure.serving_load import Target
from specnb.measure.vllm_bench import (
    BenchFailed,
    BenchLevel,
    VllmBench,
    bench_args,
    client_check,
    run_bench,
    write_dataset,
)


def test_arguments_send_our_prompts_as_our_client_does(tmp_path):
    dataset = write_dataset(["a \"quoted\" prompt", "two"], tmp_path / "p.jsonl")
    assert [json.loads(line)["prompt"] for line in dataset.read_text().splitlines()] == ['a "quoted" prompt', "two"]
    target = Target(url="http://127.0.0.1:9", engine="vllm", model="m", speculation=spec("ngram", 4))
    args = bench_args(target, "/hf/folder", dataset, tmp_path / "r.json",
                      BenchLevel(n_prompts=2, concurrency=4, max_tokens=32))
    pairs = dict(zip(args, args[1:]))  # each flag to the word after it
    assert pairs["--max-concurrency"] == "4" and pairs["--custom-output-len"] == "32" and pairs["--num-prompts"] == "2"
    assert pairs["--request-rate"] == "inf" and pairs["--temperature"] == "0" and pairs["--backend"] == "openai-chat"
    flags = {"--save-result", "--save-detailed", "--ignore-eos", "--skip-chat-template", "--disable-shuffle"}
    assert flags <= set(args)
    assert pairs["--result-filename"] == "r.json" and pairs["--result-dir"] == str(tmp_path)


STAND_IN = """import json, sys
args = sys.argv[1:]
if "{fail}" == "yes":
    print("Traceback ...", file=sys.stderr); print("ConnectionError: cannot reach the server", file=sys.stderr)
    print("Namespace(backend='openai-chat', ...)")
    sys.exit(1)
folder, name = args[args.index("--result-dir") + 1], args[args.index("--result-filename") + 1]
json.dump({{"max_concurrency": int(args[args.index("--max-concurrency") + 1])}}, open(folder + "/" + name, "w"))
"""


def stand_in(tmp_path, fail: str) -> list[str]:
    """A command for run_bench that runs the stand-in above instead of ``vllm bench serve``."""
    script = tmp_path / "bench.py"
    script.write_text(STAND_IN.format(fail=fail))
    return [sys.executable, str(script)]


def test_run_bench_returns_the_file_vllm_bench_saved_or_one_line(tmp_path):
    target = Target(url="http://127.0.0.1:9", engine="vllm", model="m")
    bench = VllmBench(command=stand_in(tmp_path, "no"), tokenizer="tok")
    assert run_bench(bench, target, ["p"], 2, 8, tmp_path / "out") == {"max_concurrency": 2}
    with pytest.raises(BenchFailed, match=r"concurrency 2 \(exit 1\): ConnectionError: cannot reach the server$"):
        run_bench(VllmBench(command=stand_in(tmp_path, "yes"), tokenizer="tok"), target, ["p"], 2, 8, tmp_path / "out")


def test_client_check_compares_medians_within_ten_percent():
    ours = pd.DataFrame({"success": [True, True, True, False], "ttft": [0.10, 0.12, 0.30, None],
                         "tpot": [0.050, 0.060, 0.070, None]})
    theirs = pd.DataFrame({"success": [True] * 3, "ttft": [0.10, 0.10, 0.11], "tpot": [0.050, 0.055, 0.080]})
    check = client_check(ours, theirs).set_index("metric")
    assert check.loc["median_ttft_ms", "ratio"] == pytest.approx(1.2) and not check.loc["median_ttft_ms", "within"]
    assert check.loc["median_tpot_ms", "ratio"] == pytest.approx(60 / 55) and check.loc["median_tpot_ms", "within"]
