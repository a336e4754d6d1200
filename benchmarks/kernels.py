"""Where the 1 → 2 token jump lives: one linear layer of the embedded verifier on each CPU kernel path.

    python benchmarks/kernels.py [--repeats 9] [--no-write]

For the verifier's real weights (an MLP up projection 576→1536, the down projection 1536→576 and the
tied 576→49152 LM head) and n = 1, 2, 4, 8 rows: PyTorch's default fp32 linear (MKL: a
matrix-vector kernel for one row, GEMM for more), oneDNN on a weight reordered once (what
``specnb.models.kernels.use_kernels(model, "onednn")`` uses for 2..64 rows), bf16 weights, and
dynamic int8 (``torch.ao`` quantized linear, what ``specnb.models.precision`` uses). Every
(path, n) is timed interleaved with the others, repeat by repeat; the table gives the median ms per
call and t(2) ÷ t(1), and the effective bandwidth of one row. Writes the ``kernels`` section of
benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F
from engine import write_readme_section  # benchmarks/engine.py

from specnb.app.runner import describe_environment
from specnb.models.embedded import embedded_verifier_path

HERE = Path(__file__).resolve().parent
ROWS = (1, 2, 4, 8)
SHAPES = {"up 576→1536": "model.layers.0.mlp.up_proj.weight", "down 1536→576": "model.layers.0.mlp.down_proj.weight",
          "head 576→49152": "model.embed_tokens.weight"}


def paths(weight: torch.Tensor) -> dict:
    """Kernel path name -> function of x [n, K] -> [n, N], all computing x @ weight.T."""
    packed = torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), 16)
    bf16 = weight.to(torch.bfloat16)
    linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    linear.weight.data.copy_(weight)
    with warnings.catch_warnings():  # torch.ao's deprecation notice; the kernel is what specnb.models.precision uses
        warnings.simplefilter("ignore", DeprecationWarning)
        int8 = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(linear), {torch.nn.Linear}, torch.qint8)
    return {
        "default (MKL)": lambda x: F.linear(x, weight),
        "oneDNN, prepacked": lambda x: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], ""),
        "bf16 weights": lambda x: F.linear(x.to(torch.bfloat16), bf16),
        "dynamic int8": lambda x: int8(x),
    }


def time_paths(funcs: dict, k: int, repeats: int, inner: int) -> pd.DataFrame:
    inputs = {n: torch.randn(n, k) for n in ROWS}
    samples: dict[tuple[str, int], list[float]] = {}
    with torch.inference_mode():
        for f in funcs.values():  # warm up every path and shape
            for x in inputs.values():
                f(x)
        for _ in range(repeats):
            for name, f in funcs.items():
                for n, x in inputs.items():
                    start = time.perf_counter()
                    for _ in range(inner):
                        f(x)
                    samples.setdefault((name, n), []).append((time.perf_counter() - start) / inner * 1e3)
    rows = [{"path": name, "n": n, "ms": statistics.median(v)} for (name, n), v in samples.items()]
    return pd.DataFrame(rows).pivot(index="path", columns="n", values="ms").reindex(list(funcs))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    from safetensors import safe_open

    env = describe_environment()
    sections, raw = [], {}
    with safe_open(str(embedded_verifier_path() / "model.safetensors"), framework="pt") as f:
        weights = {shape: f.get_tensor(name).float() for shape, name in SHAPES.items()}
    for shape, weight in weights.items():
        big = weight.numel() > 10_000_000
        table = time_paths(paths(weight), weight.shape[1], args.repeats, inner=3 if big else 50)
        raw[shape] = table.to_dict()
        mb = weight.numel() * 4 / 1e6
        shown = table.map(lambda v: f"{v:.3f}")
        shown["t(2) ÷ t(1)"] = (table[2] / table[1]).map(lambda v: f"{v:.2f}")
        shown["t(8) ÷ t(1)"] = (table[8] / table[1]).map(lambda v: f"{v:.2f}")
        sections += [f"**{shape}** (fp32 weight {mb:.1f} MB; default one row: "
                     f"{mb / table.loc['default (MKL)', 1]:.1f} GB/s), ms per call for n rows:", "",
                     shown.rename(columns={n: f"n={n}" for n in ROWS}).to_markdown(), ""]
    markdown = "\n".join([
        f"Machine: {env['cpu']} ({env['cpu_count']} cores), {torch.get_num_threads()} threads, torch "
        f"{env['packages']['torch']}; {env['time_utc'][:10]}; commit {str(env['git_commit'])[:7]}; median of "
        f"{args.repeats} interleaved repeats (`benchmarks/kernels.py`).", "", *sections]).rstrip()
    print(markdown)
    if not args.no_write:
        (HERE / "results").mkdir(exist_ok=True)
        (HERE / "results" / "kernels.json").write_text(json.dumps({"environment": env, "ms": raw}, indent=1,
                                                                   default=str))
        write_readme_section(markdown, name="kernels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
