"""The portable llama.cpp build against native builds of the same source: does it run, and how fast.

    python benchmarks/llama_build.py --build BUILD_DIR [--build BUILD_DIR ...] [--prompts 6] [--tokens 48]

Each ``--build`` is a cmake build folder of the vendored llama.cpp (its ``bin/`` holds libllama.so);
the first is this project's (``.venv/llama.cpp/build``, what ``make setup`` made). Each build runs
in child processes of its own (``LLAMA_CPP_LIB_PATH`` points the binding at its libraries), so a
build that faults on this CPU is a row that says how it died, not a dead benchmark. Every model
generates greedily on the same prompts, interleaved prompt by prompt with the order rotated, and
tok/s is all generated tokens over all wall time (prefill included); the ratio to the first build
has a bootstrap CI over prompts. Whether a build compiled ggml's AMX kernels in is read off the
library itself (its AMX tile instructions, by ``objdump``), not from the cmake options.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd

from specnb.measure.prompts import select_prompts
from specnb.measure.runs import bootstrap_speedup, paired_speedup
from specnb.native.isolation import Child, EngineCrashed


def amx_instructions(build: Path) -> int:
    """AMX tile instructions in the build's ggml CPU library (0: AMX cannot run, whatever the options said)."""
    lib = next((build / "bin").glob("libggml-cpu.so*"))
    code = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(lib)], capture_output=True, text=True).stdout
    return sum(line.split("\t")[-1].startswith(("tileload", "tilezero", "tdp")) for line in code.splitlines())


def arch_flags(build: Path) -> str:
    cache = (build / "CMakeCache.txt").read_text()
    on = [line.split(":")[0].removeprefix("GGML_") for line in cache.splitlines()
          if line.startswith(("GGML_AVX", "GGML_AMX", "GGML_NATIVE", "GGML_FMA", "GGML_F16C", "GGML_BMI2"))
          and line.endswith("=ON")]
    extra = [line.split("=", 1)[1] for line in cache.splitlines() if line.startswith("CMAKE_C_FLAGS:") and "=-" in line]
    return " ".join(on + extra)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", type=Path, action="append", required=True)
    parser.add_argument("--precision", action="append", default=None, help="f32, q4_1 (default both)")
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    from specnb.decode.inputs import encode_prompts
    from specnb.models.gguf import embedded_gguf
    from specnb.models.load import load_tokenizer, locate
    from specnb.models.registry import EMBEDDED_VERIFIER

    tokenizer = load_tokenizer(locate(EMBEDDED_VERIFIER))
    prompts = select_prompts("all", args.prompts)
    ids = [encode_prompts(tokenizer, [p])[0][0].tolist() for p in prompts["prompt"]]
    rows, engines = [], {}
    for precision in args.precision or ["f32", "q4_1"]:
        path = embedded_gguf(EMBEDDED_VERIFIER, precision)
        for build in args.build:
            name = (build.resolve().as_posix(), precision)
            try:
                child = Child("specnb.native.llama_cpp:open_model", str(path), args.threads, 1024, None,
                              what=f"{build.name} {precision}", env={"LLAMA_CPP_LIB_PATH": str(build / "bin")})
                child.call("generate", ids[0], 4, ())  # warm-up, and where a faulting build dies
                engines[name] = child
            except (EngineCrashed, RuntimeError) as err:
                rows.append({"build": build.as_posix(), "precision": precision, "failure": str(err)})
    records = []
    order = list(engines)
    for repeat in range(args.repeats):
        for i, prompt in enumerate(ids):
            shift = (repeat * len(ids) + i) % len(order)
            for name in order[shift:] + order[:shift]:
                out = engines[name].call("generate", prompt, args.tokens, (tokenizer.eos_token_id,))
                records.append({"build": name[0], "precision": name[1], "prompt_ids": i, "repeat": repeat,
                                "new_tokens": len(out.tokens), "wall_ms": out.wall_ms, "ids": tuple(out.tokens)})
    for child in engines.values():
        child.close()
    frame = pd.DataFrame(records)
    rng = np.random.default_rng(0)
    base = args.build[0].resolve().as_posix()
    for (build, precision), group in frame.groupby(["build", "precision"], sort=False):
        ref = frame[(frame["build"] == base) & (frame["precision"] == precision)]
        tok_s = group["new_tokens"].sum() / group["wall_ms"].sum() * 1e3
        ratio, lo, hi, same = float("nan"), float("nan"), float("nan"), None
        if not ref.empty:  # portable ÷ this build: the portable build in the speedup's numerator
            paired = ref.merge(group, on=["repeat", "prompt_ids"], suffixes=("", "_base"))
            totals = paired[["new_tokens", "wall_ms", "new_tokens_base", "wall_ms_base"]].sum().to_numpy()
            ratio = float(paired_speedup(totals))
            lo, hi = bootstrap_speedup(paired, paired["prompt_ids"].unique(), rng, 1000)
            same = (paired["ids"] == paired["ids_base"]).mean()
        rows.append({"build": build, "precision": precision, "tok_s": round(tok_s, 1),
                     "portable_over_this": f"{ratio:.3f} [{lo:.3f}–{hi:.3f}]",
                     "same_tokens_as_portable": f"{same:.0%}" if same is not None else "—"})
    table = pd.DataFrame(rows)
    table.insert(1, "flags", [arch_flags(Path(b)) for b in table["build"]])
    table.insert(2, "amx_instructions", [amx_instructions(Path(b)) for b in table["build"]])
    print(f"{platform.processor() or platform.machine()}; {args.prompts} prompts × {args.repeats} repeats × "
          f"{args.tokens} tokens, {args.threads} threads, greedy, interleaved")
    print(table.to_markdown(index=False))


if __name__ == "__main__":
    main()
