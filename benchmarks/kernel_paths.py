"""Where the 1 → 2 token jump lives: one linear layer of the embedded verifier on each CPU kernel path.

    python benchmarks/kernel_paths.py [--repeats 9] [--no-write]
    python benchmarks/kernel_paths.py --forward [--repeats 15] [--no-write]

With ``--forward``: the whole verifier's decode forward of 1, 2 and 4 tokens on a 64-token KV cache
(``specnb.measure.forward.ForwardProbe``, every logit kept, as a verification keeps them) with its
linear layers on MKL's path, on oneDNN from 2 rows (what ``kernels="auto"`` gave verifier-only
before it timed one row: one row stayed on MKL) and on oneDNN from one row. One packed model, its
routing switched between samples, every (path, tokens) interleaved and rotated; writes the
``kernels-forward`` section.

For the verifier's real weights (an MLP up projection 576→1536, the down projection 1536→576 and the
tied 576→49152 LM head) and n = 1, 2, 4, 8 rows: PyTorch's default fp32 linear (MKL: a
matrix-vector kernel for one row, GEMM for more), oneDNN on a weight reordered once (what
``specnb.models.kernels.use_kernels(model, "onednn")`` uses for 1..64 rows), bf16 weights, and
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
from engine import add_tag_argument, tagged, write_readme_section  # benchmarks/engine.py

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


FORWARD_TOKENS = (1, 2, 4)
ROUTES = {"MKL (default)": (), "oneDNN from 2 rows": ((2, 64),), "oneDNN from 1 row": ((1, 64),)}


def time_forwards(repeats: int, context_len: int = 64) -> pd.DataFrame:
    """Median ms of the verifier's decode forward per (route, tokens), interleaved and rotated."""
    from specnb.decode.pairs import load_model
    from specnb.measure.forward import ForwardProbe, ForwardShape
    from specnb.models.kernels import PackedLinear, use_kernels

    model, _ = load_model("smollm2-135m", device="cpu", dtype=torch.float32)
    use_kernels(model, "onednn")
    packed = [m for m in model.modules() if isinstance(m, PackedLinear)]
    first = ForwardProbe(model, ForwardShape(n_tokens=FORWARD_TOKENS[0], context_len=context_len))
    probes = {n: first if n == FORWARD_TOKENS[0]
              else ForwardProbe(model, ForwardShape(n_tokens=n, context_len=context_len), share=first)
              for n in FORWARD_TOKENS}
    runs = [(route, n) for route in ROUTES for n in FORWARD_TOKENS]
    samples: dict[tuple[str, int], list[float]] = {run: [] for run in runs}
    for r in range(repeats + 1):  # the first round warms every path up and is dropped
        for route, n in runs[r % len(runs):] + runs[: r % len(runs)]:
            for m in packed:
                m.spans = ROUTES[route]
            ms = probes[n].time_ms()
            if r:
                samples[route, n].append(ms)
    rows = [{"path": route, "n": n, "ms": statistics.median(v)} for (route, n), v in samples.items()]
    return pd.DataFrame(rows).pivot(index="path", columns="n", values="ms").reindex(list(ROUTES))


def forward_section(repeats: int, env: dict) -> tuple[str, dict]:
    table = time_forwards(repeats)
    base = table.loc["MKL (default)"]
    shown = table.map(lambda v: f"{v:.1f}").rename(columns={n: f"{n} token(s), ms" for n in FORWARD_TOKENS})
    for n in FORWARD_TOKENS:
        shown[f"÷ MKL at {n}"] = (table[n] / base[n]).map(lambda v: f"{v:.2f}")
    one = table.loc["oneDNN from 1 row", 1] / base[1]
    markdown = "\n".join([
        f"Machine: {env['cpu']} ({env['cpu_count']} cores), {torch.get_num_threads()} threads, torch "
        f"{env['packages']['torch']}; {env['time_utc'][:10]}; commit {str(env['git_commit'])[:7]}; the verifier "
        f"`smollm2-135m`'s decode forward on a 64-token KV cache, median of {repeats} interleaved, rotated repeats "
        "(`benchmarks/kernel_paths.py --forward`).", "",
        shown.to_markdown(), "",
        f"One token (the verifier-only baseline's every step) on oneDNN takes {one:.2f}x its time on MKL's "
        "matrix-vector path."])
    return markdown, table.to_dict()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=None, help="interleaved repeats (default 9; 15 with --forward)")
    ap.add_argument("--forward", action="store_true", help="whole decode forwards of the verifier instead")
    ap.add_argument("--no-write", action="store_true")
    add_tag_argument(ap)
    args = ap.parse_args(argv)
    from safetensors import safe_open

    if args.forward:
        env = describe_environment()
        markdown, raw = forward_section(args.repeats or 15, env)
        print(markdown)
        if not args.no_write:
            (HERE / "results").mkdir(exist_ok=True)
            (HERE / "results" / f"{tagged('kernel_paths_forward', args.tag)}.json").write_text(
                json.dumps({"environment": env, "ms": raw}, indent=1, default=str))
            write_readme_section(markdown, name=tagged("kernels-forward", args.tag, "-"))
        return 0
    args.repeats = args.repeats or 9

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
        f"{args.repeats} interleaved repeats (`benchmarks/kernel_paths.py`).", "", *sections]).rstrip()
    print(markdown)
    if not args.no_write:
        (HERE / "results").mkdir(exist_ok=True)
        (HERE / "results" / "kernel_paths.json").write_text(json.dumps({"environment": env, "ms": raw}, indent=1,
                                                                   default=str))
        write_readme_section(markdown, name="kernels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
