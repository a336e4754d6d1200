"""GPU check: the stage timers on CUDA events, the dispatch tax, γ and batch sweeps, and losslessness, in one run.

    python benchmarks/gpu_check.py --out DIR                       # on a GPU (about 4-5 min on an H100: estimated)
    python benchmarks/gpu_check.py --device cpu --out DIR          # the CPU reference (sized for 2 cores)
    python benchmarks/gpu_check.py --device cpu --tiny --out DIR   # every step in seconds (the test suite runs it)

Prepared for a machine with a GPU and nothing else: the repository and that machine's own ``python3``
(``PYTHONPATH=. python3 benchmarks/gpu_check.py --out DIR``). Beyond specnb and the standard library it
imports torch, transformers, numpy and pandas only, and only specnb modules that do the same (a test checks
it): no weights, no tokenizer, no download. specnb needs transformers 5.x; where a machine has an older
one, carry the wheels this repository's tests ran with, from a machine with pip access (about 16 MB; name
any other requirement `pip show transformers` lists as missing there too):

    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d wheels \
        transformers==5.25.0 huggingface_hub==2.5.0 tokenizers==0.23.3
    # there:
    python3 -m pip install --no-index --no-deps --target /tmp/site wheels/*.whl
    PYTHONPATH=/tmp/site:. python3 benchmarks/gpu_check.py --out DIR

The first line printed names torch, transformers and the device found.

The models are random-init with the real shapes of public models (configs shipped in
``specnb/data/configs``, no weights): on a GPU Qwen2.5-0.5B, 1.5B and 3B at full depth, in bfloat16 and
float32. The loop's pair is a verifier and its own early exit (``specnb.models.early_exit``: its first
layers, final norm and lm_head), so acceptance is real: the verifier's later layers write into the
residual stream at ``TAIL_SCALE`` ÷ √(layers after the exit) of their random-init scale, which leaves the
exit agreeing with the verifier on part of the tokens (α is measured, not set). It measures and writes to
``--out`` (``gpu_check.json``, and ``gpu_check.txt`` for reading):

  1. stage timers: every timed generation's stage sum against its end-to-end wall time (CUDA events on a
     GPU, the host clock on a CPU: ``specnb.decode.timing``), per dtype, candidate and batch size;
  2. the dispatch tax (notebook 02's microbenchmark, ``specnb.measure.forward``): one forward of 1..16
     tokens at batch 1..64 per model on a 128-token cache, interleaved; wall-clock c beside FLOPs c and
     the fitted t = t0 + k·FLOPs per dtype;
  3. a γ sweep at batch 1 and a batch sweep at one γ of specnb's loop: speedup over verifier-only with a
     95% bootstrap CI over prompts, α, τ and the per-stage split (``specnb.measure.runs.summarise``);
  4. losslessness: at float32 greedy speculative tokens must equal verifier-only's; at bfloat16 a run may
     differ only where the verifier's top-2 logit margin at the first differing position is at most
     ``BF16_MARGIN_ULPS`` bfloat16 steps of its top logit (a near-tie that a different kernel's rounding
     flips); every differing run is listed with its margin.

Time: the steps run losslessness first, the sweeps, the dispatch grid last, and stop starting new runs once
``--budget-s`` (420 s on a GPU) has passed, listing what they cut (a cut run exits 1). The
estimate for the GPU settings is printed first (``estimate_s``): the plan's forwards, counted, at
``GPU_FORWARD_MS`` each, an eager PyTorch forward of a 28-36-layer model at small batches being bound by
its kernel launches (about 12 per layer at a few µs each, plus Python), not by the H100's FLOPs.
Exit code 0 when the checks pass, 1 when one fails, 2 on a bad argument or a transformers older than 5.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import pandas as pd
import torch
import transformers

from specnb.core.configs import resolve_config
from specnb.core.devices import cpu_name, gpu_name
from specnb.core.flops import analytic_flops
from specnb.core.paths import git_commit
from specnb.decode.generate import generate
from specnb.decode.settings import Decoding
from specnb.decode.timing import StageTimer, stage_columns
from specnb.measure.forward import GridShapes, cost_ratios, fit_dispatch, measure_forward_grids
from specnb.measure.runs import BASELINE, Candidate, make_record, rotated, summarise
from specnb.models.early_exit import exit_config, exit_draft

TAIL_SCALE = 0.5  # the verifier's layers after the exit, all together, move the residual this much (of init)
BF16_MARGIN_ULPS = 4  # a bfloat16 difference is a near-tie when the top-2 margin is within this many steps
STAGE_SUM_TOLERANCE = 0.02  # |stage sum − wall| ÷ wall, as benchmarks/engine.py targets
GPU_FORWARD_MS = 25.0  # the estimate's price of one eager forward on a GPU (see the docstring)
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "vocab_size": 512, "max_position_embeddings": 1024,
        "initializer_range": 0.1}  # wider than 0.02: a tiny model's layers would barely move its residual
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What one run measures. ``models``: shipped config names for the dispatch grid, each cut to
    ``depth[name]`` layers when given (None: full depth); ``verifier`` and ``exit_layers``: the loop's pair;
    ``tiny``: every config shrunk to ``TINY``'s widths."""

    models: tuple[str, ...]
    depth: dict | None = None
    verifier: str
    exit_layers: int
    loop_layers: int | None = None  # the loop's verifier cut to this many layers (None: the plan's depth)
    dtypes: tuple[str, ...] = ("bfloat16", "float32")
    tiny: bool = False
    grid_tokens: tuple[int, ...] = (1, 2, 4, 8, 16)
    grid_batches: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    grid_context: int = 128
    grid_repeats: int = 5
    prompt_len: int = 32
    new_tokens: int = 64
    gammas: tuple[int, ...] = (1, 2, 3, 4, 6)
    gamma_prompts: int = 8
    batch_sizes: tuple[int, ...] = (1, 4, 16, 64)
    batch_gamma: int = 3
    batch_rounds: int = 3
    lossless_gammas: tuple[int, ...] = (1, 2, 3, 4)
    lossless_prompts: int = 4
    lossless_batch: int = 4
    budget_s: float = 420.0


QWEN = ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-3B-Instruct")
PLANS = {
    "gpu": Plan(models=QWEN, verifier=QWEN[1], exit_layers=4),
    # the grid on the embedded pair's shapes (SmolLM2-135M and its distilled draft-s, full depth); the loop on
    # SmolLM2-135M's shape cut to 10 layers and its 2-layer exit: sized for a 2-core CPU
    "cpu": Plan(models=("smollm2-135m", "smollm2-draft-s"), verifier="smollm2-135m",
                exit_layers=2, dtypes=("float32", "bfloat16"), grid_batches=(1, 2, 4), grid_repeats=3,
                prompt_len=16, new_tokens=16, gammas=(1, 2, 3), gamma_prompts=3, batch_sizes=(1, 2), batch_rounds=2,
                lossless_gammas=(1, 3), lossless_prompts=2, lossless_batch=2, loop_layers=10, budget_s=900.0),
    "tiny": Plan(models=QWEN, depth={QWEN[0]: 2, QWEN[1]: 4, QWEN[2]: 6}, verifier=QWEN[1], exit_layers=1,
                 dtypes=("float32", "bfloat16"), tiny=True, grid_tokens=(1, 2, 4), grid_batches=(1, 2),
                 grid_context=16, grid_repeats=2, prompt_len=8, new_tokens=8, gammas=(1, 3), gamma_prompts=2,
                 batch_sizes=(1, 2), batch_rounds=2, lossless_gammas=(1, 3), lossless_prompts=2,
                 lossless_batch=2, budget_s=3600.0),  # never cut short: the suite checks every step ran
}


class Budget:
    """The run's time budget: ``left()`` is False once it is spent; what was cut short is listed."""

    def __init__(self, seconds: float):
        self.started, self.seconds, self.cut = time.perf_counter(), seconds, []

    def left(self, step: str) -> bool:
        if time.perf_counter() - self.started <= self.seconds:
            return True
        if step not in self.cut:
            self.cut.append(step)
        return False

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started


# ---------------------------------------------------------------------------- models


def model_config(name: str, plan: Plan, layers: int | None = None):
    """The shipped config of ``name``, cut to ``layers`` (else the plan's depth for it), tiny if asked."""
    config = resolve_config(name)
    if plan.tiny:
        for key, value in TINY.items():
            setattr(config, key, value)
    depth = layers or (plan.depth or {}).get(name)
    return exit_config(config, depth) if depth else config


def build_model(config, device, seed: int = 0):
    """A random-init causal LM of ``config`` in eval mode, created on ``device`` in float32."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    return model.eval()


def quiet_tail(verifier, exit_layers: int) -> None:
    """Scale down what the layers after the exit write into the residual stream (attention and MLP
    outputs), so the exit predicts the verifier's token often, as a trained early exit would."""
    tail = verifier.model.layers[exit_layers:]
    scale = TAIL_SCALE / math.sqrt(max(len(tail), 1))
    with torch.no_grad():
        for layer in tail:
            layer.self_attn.o_proj.weight.mul_(scale)
            layer.mlp.down_proj.weight.mul_(scale)


def loop_pair(plan: Plan, device):
    """(verifier, its early exit) in float32: the exit shares the verifier's modules, so a dtype change of
    the verifier changes both."""
    verifier = build_model(model_config(plan.verifier, plan, plan.loop_layers), device)
    quiet_tail(verifier, plan.exit_layers)
    return verifier, exit_draft(verifier, plan.exit_layers)


def random_prompts(n: int, length: int, vocab: int, seed: int) -> torch.Tensor:
    """[n, length] token ids, equal lengths (no padding), so every row of a batch is alike."""
    return torch.randint(0, vocab, (n, length), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------------------- 2. the dispatch tax


def dispatch(plan: Plan, device, budget: Budget) -> dict:
    """Per dtype: the forward grid of every model, the dispatch fit and the cost ratios against the largest."""
    configs = {name: model_config(name, plan) for name in plan.models}
    flops = {name: float(analytic_flops(config).flops_per_token) for name, config in configs.items()}
    models = {name: build_model(config, device, seed=i) for i, (name, config) in enumerate(configs.items())}
    verifier = max(flops, key=flops.get)
    out = {"flops_per_token": flops, "verifier": verifier,
           "layers": {name: c.num_hidden_layers for name, c in configs.items()}}
    for dtype in plan.dtypes:
        if not budget.left(f"dispatch {dtype}"):
            continue
        for model in models.values():
            model.to(DTYPES[dtype])
        shapes = [GridShapes(name=name, model=model, n_tokens=plan.grid_tokens) for name, model in models.items()]
        grid = measure_forward_grids(shapes, plan.grid_batches, plan.grid_context, plan.grid_repeats, device)
        fit = fit_dispatch(grid, flops)
        ratios = cost_ratios(grid, flops, fit, verifier)
        out[dtype] = {"grid": grid.drop(columns=["samples_ms"]).to_dict("records"), "fit": asdict(fit),
                      "cost_ratios": ratios.to_dict("records")}
    return out


# ---------------------------------------------------------------------------- 1, 3. timed loops


def candidates(draft, exit_layers: int, gammas) -> list[Candidate]:
    name = f"exit-{exit_layers}"
    return [Candidate(name=BASELINE, draft=None, draft_name=None, gamma=0),
            *[Candidate(name=f"{name} γ={g}", draft=draft, draft_name=name, gamma=g) for g in gammas]]


def timed_run(verifier, ids: torch.Tensor, cand: Candidate, new_tokens: int, device):
    """One greedy generation with the stage timer on (CUDA events on a GPU)."""
    return generate(verifier, ids.to(device), draft=cand.draft,
                    decoding=Decoding(gamma=max(cand.gamma, 1), max_new_tokens=new_tokens,
                                      timer=StageTimer(device)))


def sweep(verifier, units: list[torch.Tensor], cands: list[Candidate], plan: Plan, device, budget: Budget,
          step: str) -> pd.DataFrame:
    """Raw records (``specnb.measure.runs.make_record``), every candidate on each prompt batch in an order
    rotated per batch, after one short untimed run of each."""
    for cand in cands:
        timed_run(verifier, units[0], cand, min(4, plan.new_tokens), device)
    records = []
    for i, ids in enumerate(units):
        if not budget.left(step):
            break
        batch = pd.DataFrame({"id": [f"{step}-{i}-{r}" for r in range(len(ids))], "category": "random"})
        for cand in rotated(cands, i):
            result = timed_run(verifier, ids, cand, plan.new_tokens, device)
            records.append(make_record(0, batch, cand, result, result.stages_ms))
    return pd.DataFrame.from_records(records)


def summary_rows(records: pd.DataFrame) -> list[dict]:
    if records.empty or records["prompt_ids"].nunique() < 1:
        return []
    keep = ["candidate", "gamma", "batch_size", "records", "new_tokens", "tok_s", "speedup", "speedup_lo",
            "speedup_hi", "alpha", "alpha_token", "tau", *[f"{c}_per_token" for c in stage_columns()]]
    return summarise(records)[keep].to_dict("records")


def stage_sums(records: pd.DataFrame, dtype: str, step: str) -> list[dict]:
    """Per candidate and batch size: summed stage times against summed wall time, and the worst run."""
    if records.empty:
        return []
    stages = records[stage_columns()].sum(axis=1)
    error = (stages - records["wall_ms"]).abs() / records["wall_ms"]
    frame = records.assign(stage_sum_ms=stages, error=error)
    rows = []
    for (name, batch_size), group in frame.groupby(["candidate", "batch_size"], sort=False):
        rows.append({"step": step, "dtype": dtype, "candidate": name, "batch_size": int(batch_size),
                     "runs": len(group), "stage_sum_ms": float(group["stage_sum_ms"].sum()),
                     "wall_ms": float(group["wall_ms"].sum()), "max_rel_error": float(group["error"].max())})
    return rows


def loop_sweeps(verifier, draft, plan: Plan, device, budget: Budget) -> tuple[dict, list[dict]]:
    """The γ sweep at batch 1 and the batch sweep at ``plan.batch_gamma``, in the plan's first dtype."""
    dtype, vocab = plan.dtypes[0], verifier.config.vocab_size
    verifier.to(DTYPES[dtype])
    prompts = random_prompts(plan.gamma_prompts, plan.prompt_len, vocab, seed=1)
    gamma_records = sweep(verifier, [p[None] for p in prompts], candidates(draft, plan.exit_layers, plan.gammas),
                          plan, device, budget, "gamma sweep")
    batch_records = []
    for b in plan.batch_sizes:
        rows = random_prompts(b * plan.batch_rounds, plan.prompt_len, vocab, seed=100 + b)
        units = [rows[i * b:(i + 1) * b] for i in range(plan.batch_rounds)]
        got = sweep(verifier, units, candidates(draft, plan.exit_layers, (plan.batch_gamma,)), plan, device, budget,
                    "batch sweep")
        batch_records.append(got)
    batch = pd.concat(batch_records, ignore_index=True) if batch_records else pd.DataFrame()
    sums = stage_sums(gamma_records, dtype, "gamma sweep") + stage_sums(batch, dtype, "batch sweep")
    return {"dtype": dtype, "gamma_sweep": summary_rows(gamma_records), "batch_sweep": summary_rows(batch)}, sums


# ---------------------------------------------------------------------------- 4. losslessness


def bf16_bound(top: float) -> float:
    """``BF16_MARGIN_ULPS`` steps of bfloat16 (8 significant bits) at the magnitude of ``top``."""
    return BF16_MARGIN_ULPS * 2.0 ** (math.floor(math.log2(max(abs(top), 1e-30))) - 7)


def margin_at(verifier, context: list[int], device) -> tuple[float, float]:
    """(top-1 − top-2 logit, top-1 logit) of the verifier's next-token logits after ``context``."""
    with torch.inference_mode():
        logits = verifier(input_ids=torch.tensor([context], device=device)).logits[0, -1].float()
    top = torch.topk(logits, 2).values
    return float(top[0] - top[1]), float(top[0])


def differences(verifier, ids: torch.Tensor, alone, spec, device) -> list[dict]:
    """Each row whose speculative tokens differ from verifier-only's: where, and the verifier's margin there."""
    out = []
    for r, (want, got) in enumerate(zip(alone.tokens, spec.tokens)):
        at = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), None)
        if at is None and len(want) == len(got):
            continue
        at = at if at is not None else min(len(want), len(got))
        margin, top = margin_at(verifier, ids[r].tolist() + want[:at], device)
        out.append({"row": r, "position": at, "margin": margin, "top_logit": top})
    return out


def lossless(verifier, draft, plan: Plan, device, budget: Budget) -> tuple[dict, list[dict]]:
    """Per dtype: how many runs (γ × prompt batch) gave verifier-only's tokens, and every differing row with
    the verifier's margin where it first differs."""
    out, sums = {}, []
    vocab = verifier.config.vocab_size
    prompts = random_prompts(plan.lossless_prompts + plan.lossless_batch, plan.prompt_len, vocab, seed=7)
    units = [prompts[i][None] for i in range(plan.lossless_prompts)] + [prompts[plan.lossless_prompts:]]
    spec_cands = candidates(draft, plan.exit_layers, plan.lossless_gammas)[1:]
    base = Candidate(name=BASELINE, draft=None, draft_name=None, gamma=0)
    for dtype in plan.dtypes:
        if not budget.left(f"lossless {dtype}"):
            continue
        verifier.to(DTYPES[dtype])
        runs, differed, differing, records = 0, 0, [], []
        for ids in units:
            alone = timed_run(verifier, ids, base, plan.new_tokens, device)
            for cand in spec_cands:
                spec = timed_run(verifier, ids, cand, plan.new_tokens, device)
                batch = pd.DataFrame({"id": [f"lossless-{runs}-{r}" for r in range(len(ids))], "category": "random"})
                records.append(make_record(0, batch, cand, spec, spec.stages_ms))
                found = differences(verifier, ids, alone, spec, device)
                for d in found:
                    bound = bf16_bound(d["top_logit"]) if dtype == "bfloat16" else 0.0
                    differing.append({**d, "run": runs, "gamma": cand.gamma, "batch_size": len(ids), "bound": bound,
                                      "near_tie": d["margin"] <= bound})
                runs, differed = runs + 1, differed + bool(found)
        passed = all(d["near_tie"] for d in differing) if dtype == "bfloat16" else not differing
        rule = ("identical tokens" if dtype == "float32"
                else f"a difference only where the top-2 margin is at most {BF16_MARGIN_ULPS} bfloat16 steps")
        out[dtype] = {"runs": runs, "identical": runs - differed, "differing": differing, "passed": passed,
                      "rule": rule}
        sums += stage_sums(pd.DataFrame.from_records(records), dtype, "lossless")
    return out, sums


# ---------------------------------------------------------------------------- the run


def estimate_s(plan: Plan, forward_ms: float) -> float:
    """Seconds the plan takes at ``forward_ms`` per forward: the grid's forwards per dtype (warm-up
    included) plus one forward per new token of every timed generation (a speculative one makes fewer
    verifier forwards and more, cheaper, draft forwards: counted as one per token)."""
    grid = len(plan.models) * len(plan.grid_tokens) * len(plan.grid_batches) * (plan.grid_repeats + 2)
    gamma_runs = (len(plan.gammas) + 1) * (plan.gamma_prompts + 1)
    batch_runs = len(plan.batch_sizes) * 2 * (plan.batch_rounds + 1)
    lossless_runs = (plan.lossless_prompts + 1) * (len(plan.lossless_gammas) + 1)
    tokens = plan.new_tokens * (gamma_runs + batch_runs + lossless_runs * len(plan.dtypes))
    return (grid * len(plan.dtypes) + tokens) * forward_ms / 1e3


def environment(device, commit: str | None) -> dict:
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
            "device": str(device), "gpu": gpu_name() if device.type == "cuda" else None, "cpu": cpu_name(),
            "torch_threads": torch.get_num_threads(), "python": sys.version.split()[0],
            "commit": commit or git_commit(), "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def checks(result: dict) -> dict:
    sums = [row["max_rel_error"] for row in result["stage_sums"]]
    lossless_ok = {dtype: got["passed"] for dtype, got in result["lossless"].items()}
    return {"stage_sums_within_tolerance": bool(sums) and max(sums) <= STAGE_SUM_TOLERANCE,
            "stage_sum_tolerance": STAGE_SUM_TOLERANCE, **{f"lossless_{d}": ok for d, ok in lossless_ok.items()},
            "complete": not result["cut_by_budget"]}


def run(plan: Plan, device: torch.device, commit: str | None = None) -> dict:
    budget = Budget(plan.budget_s)
    result = {"schema": 1, "environment": environment(device, commit), "plan": asdict(plan)}
    verifier, draft = loop_pair(plan, device)
    result["loop"] = {"verifier": plan.verifier, "layers": verifier.config.num_hidden_layers,
                      "exit_layers": plan.exit_layers, "tail_scale": TAIL_SCALE}
    # losslessness first, the dispatch grid last: a run cut short by its budget keeps the checks
    result["lossless"], sums = lossless(verifier, draft, plan, device, budget)
    sweeps, more = loop_sweeps(verifier, draft, plan, device, budget)
    result["loop"].update(sweeps)
    result["stage_sums"] = sums + more
    del verifier, draft
    if device.type == "cuda":
        torch.cuda.empty_cache()
    result["dispatch"] = dispatch(plan, device, budget)
    result["cut_by_budget"] = budget.cut
    result["seconds"] = budget.elapsed_s()
    result["checks"] = checks(result)
    return result


def table(rows: list[dict], columns: list[str]) -> str:
    frame = pd.DataFrame(rows)
    return frame[[c for c in columns if c in frame]].to_string(index=False, float_format=lambda v: f"{v:.3g}") \
        if len(frame) else "(none)"


def report(result: dict) -> str:
    """The short text beside the JSON: machine, each step's table, the checks."""
    env, loop, disp = result["environment"], result["loop"], result["dispatch"]
    lines = [f"torch {env['torch']}, transformers {env['transformers']}, device {env['device']} "
             f"({env['gpu'] or env['cpu']}), commit {str(env['commit'])[:7]}, {env['time_utc']}, "
             f"{result['seconds']:.0f} s", ""]
    for dtype in result["plan"]["dtypes"]:
        if dtype in disp:
            fit = disp[dtype]["fit"]
            lines += [f"dispatch tax, {dtype}: t = {fit['t0_ms']:.2f} ms + {fit['ms_per_gflop']:.3f} ms/GFLOP "
                      f"(R² {fit['r2']:.2f}); against {disp['verifier']}:",
                      table(disp[dtype]["cost_ratios"], ["draft", "flops_c", "wall_clock_c", "flops_smaller",
                                                         "times_faster", "draft_ms", "verifier_ms"]), ""]
    columns = ["candidate", "batch_size", "speedup", "speedup_lo", "speedup_hi", "alpha", "tau", "tok_s",
               "draft_ms_per_token", "verify_ms_per_token", "accept_ms_per_token", "rollback_ms_per_token"]
    lines += [f"γ sweep, batch 1, {loop['dtype']}, {loop['verifier']} ({loop['layers']} layers) and its "
              f"exit at {loop['exit_layers']}:", table(loop["gamma_sweep"], columns), "",
              f"batch sweep, γ {result['plan']['batch_gamma']}:", table(loop["batch_sweep"], columns), "",
              "stage sum vs wall, worst run per configuration:",
              table(result["stage_sums"], ["step", "dtype", "candidate", "batch_size", "runs", "max_rel_error"]), ""]
    for dtype, got in result["lossless"].items():
        margins = ", ".join(f"{d['margin']:.3g} (bound {d['bound']:.3g})" for d in got["differing"]) or "none"
        lines.append(f"lossless, {dtype}: {got['identical']} of {got['runs']} runs identical; rule: {got['rule']}; "
                     f"margins where they differ: {margins}; {'passed' if got['passed'] else 'FAILED'}")
    lines += ["", "checks: " + ", ".join(f"{k} {v}" for k, v in result["checks"].items())]
    if result["cut_by_budget"]:
        lines.append(f"cut short by the time budget: {', '.join(result['cut_by_budget'])}")
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for gpu_check.json and gpu_check.txt")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tiny", action="store_true", help="tiny configs: every step in seconds (the suite's run)")
    p.add_argument("--budget-s", type=float, default=None, help="stop starting runs after this many seconds")
    p.add_argument("--commit", default=None, help="the commit measured, where the tree is no git checkout")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), transformers {transformers.__version__}, "
          f"device {device} ({gpu_name() if device.type == 'cuda' else cpu_name()})", flush=True)
    if int(transformers.__version__.split(".")[0]) < 5:
        print("specnb needs transformers 5.x: carry its wheel (this script's docstring says how)", file=sys.stderr)
        return 2
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here: pass --device cpu", file=sys.stderr)
        return 2
    plan = PLANS["tiny" if args.tiny else "gpu" if device.type == "cuda" else "cpu"]
    plan = replace(plan, budget_s=args.budget_s) if args.budget_s else plan
    print(f"plan: {len(plan.models)} models, dtypes {', '.join(plan.dtypes)}; estimate at {GPU_FORWARD_MS:.0f} ms "
          f"per forward (a GPU's eager forward): {estimate_s(plan, GPU_FORWARD_MS) / 60:.1f} min; "
          f"budget {plan.budget_s:.0f} s", flush=True)
    result = run(plan, device, args.commit)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.json").write_text(json.dumps(result, indent=1, default=str))
    text = report(result)
    (out / "gpu_check.txt").write_text(text + "\n")
    print(text)
    return 0 if all(v for k, v in result["checks"].items() if k != "stage_sum_tolerance") else 1


if __name__ == "__main__":
    sys.exit(main())
