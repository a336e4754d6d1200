"""The ``specnb`` subcommands and ``COMMANDS``, the table ``specnb.app.cli`` builds its parser from.

Each command is a pair: ``_args_<name>(parser)`` declares flags, ``run_<name>(args)`` returns
plain data (dict or list of dicts) that ``cli.emit`` prints as JSON or a table. The table at the
end lists them in the order ``specnb --help`` shows them. What a command runs is imported inside its
run function: torch, transformers, pandas and jupyter (the decoding loop, the predictor, the notebook
runner) load only for the command that needs them, and ``specnb --help`` loads this module, the CLI
and the typed errors alone (a test counts them).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

from specnb.core.errors import ParameterError

# --- argument types and flags several commands share ----------------------------------------


def kernels_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernels", default="auto", metavar="{auto,default,onednn}",
                   help="linear-layer kernels on the CPU: auto times PyTorch's default against oneDNN with prepacked "
                        "weights per model and keeps the faster, per row count if need be (cached per machine); "
                        "default or onednn names one (default auto)")


def gamma_value(text: str):
    """``--gamma 4`` -> 4; ``--gamma auto`` -> "auto", passed through for the library to choose."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number or auto, got {text!r}") from None


def branching(text: str) -> tuple[int, ...] | str:
    """``--tree 3,2,1`` -> (3, 2, 1); ``--tree dynamic`` -> "dynamic" (the engine's EAGLE-2 tree)."""
    if text == "dynamic":
        return text
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected candidates per depth like 3,2,1, got {text!r}") from None


# --- run: execute notebooks with papermill -------------------------------------------------


def _args_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("names", nargs="*", help="notebooks by number, stem or title (default: all)")
    p.add_argument(
        "-p",
        "--parameter",
        nargs=2,
        action="append",
        default=[],
        metavar=("KEY", "VALUE"),
        help="notebook parameter (Python literal or string); repeatable",
    )
    p.add_argument(
        "--smoke", action="store_true", help="tiny settings: the whole suite in a few minutes"
    )
    p.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help="notebooks at once; smoke runs only (default 2 for --smoke on 2+ cores, else 1: timed "
        "notebooks never share the machine)",
    )
    p.add_argument("--out", help="output folder (default: outputs/<run-id>/)")


def run_run(args: argparse.Namespace) -> list[dict]:
    # deferred: the runner loads papermill and jupyter's client; the parameters and the report, light as they
    # are, stay out of specnb --help
    from specnb.app.parameters import parse_value
    from specnb.app.report import index_path
    from specnb.app.runner import run_notebooks

    params = {key: parse_value(value) for key, value in args.parameter}
    runs = run_notebooks(
        args.names,
        params,
        smoke=args.smoke,
        out=Path(args.out) if args.out else None,
        progress=not args.json,
        jobs=args.jobs,
    )
    args.closing = f"report: {index_path(Path(runs[0].ipynb).parent)}"
    return [
        {"notebook": r.name, "ok": r.ok, "seconds": round(r.seconds, 1), "html": r.html}
        for r in runs
    ]


# --- build-drafts: distil the embedded drafts from the embedded verifier ---------------------


def _args_build(p: argparse.ArgumentParser, *, seeds: str, only: str, quick: str) -> None:
    """The options both training commands take: a seed, a subset by name, a quick run, an output folder."""
    p.add_argument("--seed", type=int, default=0, help=f"seed for {seeds} (default 0)")
    p.add_argument("--only", nargs="+", metavar="NAME", help=only)
    p.add_argument("--quick", action="store_true", help=quick)
    p.add_argument("--out", help="output folder (default: the package's specnb/data/drafts/)")


def _args_build_drafts(p: argparse.ArgumentParser) -> None:
    _args_build(p, seeds="instructions, init and data order",
                only="build only these drafts (default: the whole family)",
                quick="tiny corpus and one short epoch: a smoke test, not real drafts")


def run_build_drafts(args: argparse.Namespace) -> list[dict]:
    from specnb.models.training.distill import build_drafts  # deferred: torch and transformers

    reports = build_drafts(seed=args.seed, only=args.only, quick=args.quick, out=args.out)
    return [
        {
            "draft": r.name,
            "params_non_embedding": r.params_non_embedding,
            "params_total": r.params_total,
            "weights_mb": r.committed_mb,
            "heldout_agreement": round(r.agreement_after, 4),
            "loss_first": round(r.loss_first, 3),
            "loss_last": round(r.loss_last, 3),
            "train_s": round(r.train_s, 1),
            "folder": r.folder,
        }
        for r in reports
    ]


# --- build-heads: train the EAGLE draft and Medusa heads on the embedded verifier's features --


def _args_build_heads(p: argparse.ArgumentParser) -> None:
    _args_build(p, seeds="the corpus, init and data order",
                only="train only these heads (default: smollm2-eagle smollm2-eagle3 smollm2-medusa)",
                quick="tiny corpus and one epoch: a smoke test, not real heads")


def run_build_heads(args: argparse.Namespace) -> list[dict]:
    from specnb.models.training.train_heads import build_heads  # deferred: torch and transformers

    built = build_heads(
        seed=args.seed,
        only=args.only,
        quick=args.quick,
        out=args.out,
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )
    corpus_s = built["stages"]["corpus_s"]
    return [
        {
            "head": r.name,
            "kind": r.kind,
            "steps": r.steps,
            "loss_first": r.first.get("loss"),
            "loss_last": r.last.get("loss"),
            "corpus_s": corpus_s,
            "train_s": r.train_s,
            "weights_mb": r.weights_mb,
            "folder": r.folder,
        }
        for r in built["reports"]
    ]



# --- flops / ratio / theory: cost per token and the closed-form speedup ---------------------


def _args_flops(p: argparse.ArgumentParser) -> None:
    p.add_argument("model",
                   help="Hugging Face id, shipped/embedded name (e.g. smollm2-135m) or folder with config.json")
    p.add_argument("--context", type=int, default=0,
                   help="positions the new token attends to (default 0: seed convention)")


def run_flops(args: argparse.Namespace) -> dict:
    from specnb.core.flops import analytic_flops  # deferred: its configs and hub stay out of specnb --help

    return analytic_flops(args.model, args.context).to_dict()


def _args_ratio(p: argparse.ArgumentParser) -> None:
    p.add_argument("draft", help="draft: id, name or folder (an EAGLE or Medusa head too), exit:K or prompt-lookup")
    p.add_argument("verifier", help="verifier model: id, name or folder")
    p.add_argument("--context", type=int, default=0, help="positions attended, for both models (default 0)")


def run_ratio(args: argparse.Namespace) -> dict:
    from specnb.decode.kinds.by_name import flops_table  # deferred: the draft kinds import torch

    # draft names mean what they mean everywhere
    # (an EAGLE or Medusa head priced as the draft table prices it)
    table = flops_table(args.verifier, [args.draft], args.context).set_index("role")
    draft, verifier = table.loc["draft"], table.loc["verifier"]
    return {
        "draft": args.draft,
        "verifier": args.verifier,
        "context": args.context,
        "c": float(draft["c_flops_at_context"]),
        "draft_flops_per_token": int(draft["flops_at_context"]),
        "verifier_flops_per_token": int(verifier["flops_at_context"]),
    }


def _args_theory(p: argparse.ArgumentParser) -> None:
    p.add_argument("--alpha", type=float, required=True, help="acceptance rate alpha in [0, 1)")
    p.add_argument("--gamma", type=float, required=True, help="draft tokens per step (whole number >= 1)")
    p.add_argument("--c", type=float, required=True, help="cost ratio draft/verifier (>= 0)")
    p.add_argument("--max-gamma", type=int, default=32, help="largest gamma searched for optimal_gamma (default 32)")


def run_theory(args: argparse.Namespace) -> dict:
    from specnb.core import theory  # deferred: numpy and pandas

    speedup = float(theory.expected_speedup(args.alpha, args.gamma, args.c))
    break_even = float(theory.break_even_alpha(args.gamma, args.c))
    best_gamma, best_speedup = theory.optimal_gamma(args.alpha, args.c, args.max_gamma)
    result = {
        "alpha": args.alpha,
        "gamma": int(args.gamma),
        "c": args.c,
        "speedup": speedup,
        "speedup_text": theory.format_speedup(speedup),
        "tokens_per_step": float(theory.tokens_per_step(args.alpha, args.gamma)),
        "break_even_alpha": None if math.isnan(break_even) else break_even,
        "optimal_gamma": int(best_gamma),
        "optimal_speedup": float(best_speedup),
    }
    if result["break_even_alpha"] is None:
        result["note"] = (
            "no alpha breaks even: with c >= 1 a draft forward costs as much as a verifier forward"
        )
    return result


# --- models: the embedded verifier and drafts ---------------------------------------------


def _args_models(p: argparse.ArgumentParser) -> None:
    pass


def run_models(args: argparse.Namespace) -> list[dict]:
    from specnb.decode.kinds.by_name import list_embedded  # deferred: the draft kinds import torch

    return list_embedded()



# --- generate: the decoding engine --------------------------------------------------------


def _args_generate(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--verifier",
        default=None,
        help="HF id, local folder (with a tokenizer) or embedded name (default: "
        "the verifier the draft was made for, else smollm2-135m)",
    )
    p.add_argument(
        "--draft",
        default=None,
        help="draft (same forms, an EAGLE or Medusa head folder too), exit:K or "
        "prompt-lookup; omit for verifier-only",
    )
    p.add_argument(
        "--gamma",
        type=gamma_value,
        help="draft tokens per step or auto (default: the draft's own, else 4)",
    )
    p.add_argument(
        "--tree",
        type=branching,
        default=None,
        metavar="B1,B2,...|dynamic",
        help="a static tree for a head draft (eagle, medusa): candidates per depth, e.g. 3,2,1, replacing "
        "--gamma; or dynamic: EAGLE-2's tree grown from the draft's confidence, --gamma deep (greedy "
        "only)",
    )
    p.add_argument(
        "--confidence",
        type=float,
        default=0.0,
        help="stop a chain at the first draft token whose top probability is below this (0 to 1; default "
        "0: never); prompt lookup and trees ignore it",
    )
    p.add_argument(
        "--max-new-tokens", type=int, default=64, help="tokens to generate per prompt (default 64)"
    )
    p.add_argument(
        "--prompt",
        action="append",
        default=None,
        help="a prompt; repeat the flag to run several prompts as one batch",
    )
    p.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    p.add_argument(
        "--temperature", type=float, default=1.0, help="sampling temperature (with --sample)"
    )
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (with --sample)")
    p.add_argument("--seed", type=int, default=None, help="random seed (with --sample)")
    p.add_argument("--device", default="auto", help="cpu, cuda, mps or auto (default)")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "float16", "bfloat16"])
    kernels_argument(p)
    p.add_argument(
        "--no-chat-template",
        action="store_true",
        help="feed prompts as raw text, not as a user turn",
    )


_DEFAULT_PROMPT = "Explain in two sentences why the sky is blue."


def run_generate(args: argparse.Namespace) -> dict:
    # deferred: the decoding loop and the models import torch and transformers
    from specnb.core.sampling import SamplingConfig
    from specnb.decode.gamma import settle_gamma
    from specnb.decode.generate import check_settings, generate
    from specnb.decode.inputs import encode_prompts
    from specnb.decode.kinds.by_name import pick_verifier
    from specnb.decode.pairs import load_pair
    from specnb.decode.settings import Decoding
    from specnb.decode.timing import StageTimer
    from specnb.models.kernels import check_kernels

    if args.gamma == "auto" and (args.tree or not args.draft):
        raise ParameterError(
            "--gamma auto picks a chain's length for a draft: pass --draft and drop --tree"
        )
    gamma = settle_gamma(args.gamma, args.tree, args.draft)
    sampling = SamplingConfig(args.temperature, args.top_p, args.seed) if args.sample else None
    check_settings(
        1 if gamma == "auto" else gamma, args.max_new_tokens, sampling, args.confidence
    )  # before loading
    check_kernels(args.kernels)
    prompts = args.prompt or [_DEFAULT_PROMPT]
    verifier = pick_verifier(args.draft, args.verifier)
    pair = load_pair(
        verifier, args.draft, device=args.device, dtype=args.dtype, kernels=args.kernels
    )
    if gamma == "auto":  # this machine's profile, calibrated once if there is none (minutes)
        from specnb.predict.auto_gamma import ProfileSource, auto_gamma  # deferred: torch, pandas

        gamma = auto_gamma(
            verifier,
            args.draft,
            confidence=args.confidence,
            max_new_tokens=args.max_new_tokens,
            source=ProfileSource(device=args.device, kernels=pair.kernels, progress=not args.json),
        )
    input_ids, mask = encode_prompts(
        pair.tokenizer, prompts, chat=not args.no_chat_template, device=pair.device
    )
    eos = pair.verifier.generation_config.eos_token_id
    result = generate(pair.verifier, input_ids, mask, draft=pair.draft, sampling=sampling,
                      decoding=Decoding(gamma=gamma, max_new_tokens=args.max_new_tokens,
                                        eos_token_id=eos if eos is not None else pair.tokenizer.eos_token_id,
                                        tree=args.tree, confidence=args.confidence, vocab_size=pair.vocab_size,
                                        timer=StageTimer(pair.device)))
    return _generate_report(args, pair, prompts, result)


def _rate(numerator: float, denominator: float):
    return numerator / denominator if denominator else None


def _generate_report(args: argparse.Namespace, pair, prompts: list[str], result) -> dict:
    """Per-prompt results plus batch totals; tok/s per prompt uses the batch's wall time."""
    seconds = result.wall_ms / 1e3
    stages = {k: round(v, 3) for k, v in result.stages_ms.items()}
    rows = []
    for prompt, tokens, accepted, drafted in zip(
        prompts, result.tokens, result.accepted_per_step, result.drafted_per_step
    ):
        rows.append(
            {
                "prompt": prompt,
                "text": pair.tokenizer.decode(tokens, skip_special_tokens=True),
                "tokens": tokens,
                "accepted": sum(accepted),
                "drafted": sum(drafted),
                "acceptance_rate": _rate(sum(accepted), sum(drafted)),
                "tokens_per_s": len(tokens) / seconds,
                "stages": stages,
            }
        )
    drafted = sum(map(sum, result.drafted_per_step))
    report = {
        "verifier": pair.verifier_name,
        "draft": pair.draft_name,
        "gamma": result.gamma or None,
        "gamma_reason": result.gamma_reason,
        "confidence": args.confidence,
        "tree": list(args.tree) if isinstance(args.tree, tuple) else args.tree,
        "device": str(pair.device),
        "dtype": str(pair.dtype).replace("torch.", ""),
        "kernels": pair.kernels,
        "batch_size": len(prompts),
        "new_tokens": result.new_tokens,
        "wall_ms": result.wall_ms,
        "prefill_ms": result.prefill_ms,
        "tokens_per_s": result.tokens_per_s,
        "acceptance_rate": _rate(sum(map(sum, result.accepted_per_step)), drafted),
        "mean_tokens_per_step": result.mean_tokens_per_step if drafted else None,
        "verifier_forwards": result.verifier_forwards,
        "draft_forwards": result.draft_forwards,
        "stages_ms": stages,
        "results": rows,
    }
    if not args.json:
        report["table"] = [
            {
                "prompt": r["prompt"][:40],
                "new_tokens": len(r["tokens"]),
                "accepted": r["accepted"],
                "acceptance_rate": r["acceptance_rate"],
                "tokens_per_s": r["tokens_per_s"],
                "text": r["text"].replace("\n", " ")[:60],
            }
            for r in rows
        ]
    return report



# --- calibrate / predict: the decision framework ------------------------------------------


CALIBRATE_PROMPTS = (
    20  # `calibrate` stores a profile once: enough prompts for a steady acceptance estimate
)
PREDICT_PROMPTS = (
    3  # `predict` without a profile calibrates briefly; its band says how unsure that is
)


def _prompt_arguments(p: argparse.ArgumentParser, n_default: int) -> None:
    p.add_argument(
        "--verifier", default="smollm2-135m", help="verifier: embedded name, HF id or folder"
    )
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
    p.add_argument(
        "--prompts",
        help="prompts to measure acceptance on: a category, cat1,cat2, all, or a file "
        f"with one prompt per line (default: {n_default} shipped prompts, all categories)",
    )
    p.add_argument(
        "--n-prompts", type=int, help=f"how many prompts of --prompts to use (default {n_default})"
    )
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=48,
        help="generation length to predict for (default 48)",
    )


def _selected_prompts(args: argparse.Namespace, n_default: int):
    from specnb.measure.prompts import select_prompts  # deferred: pandas

    return select_prompts(
        args.prompts or "all", n_default if args.n_prompts is None else args.n_prompts
    )


def _args_calibrate(p: argparse.ArgumentParser) -> None:
    _prompt_arguments(p, CALIBRATE_PROMPTS)
    p.add_argument("--draft", action="append", required=True, help="draft to calibrate; repeatable")
    p.add_argument(
        "--batch", type=int, nargs="+", default=[1], help="batch sizes to time (default 1)"
    )
    p.add_argument(
        "--gamma", type=int, default=8, help="longest gamma to profile acceptance at (default 8)"
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=15,
        help="timed forwards per size, interleaved across sizes (default 15)",
    )
    p.add_argument("--out", required=True, help="where to write the hardware profile (JSON)")
    kernels_argument(p)


def run_calibrate(args: argparse.Namespace) -> dict:
    # deferred: the calibration imports torch, transformers and pandas
    from specnb.core.theory import validate_gamma
    from specnb.predict.calibrate import CalibrationSettings, calibrate
    from specnb.predict.costs import save_profile

    validate_gamma(args.gamma)
    prompts = _selected_prompts(args, CALIBRATE_PROMPTS)
    settings = CalibrationSettings(
        device=args.device,
        kernels=args.kernels,
        gamma=args.gamma,
        max_new_tokens=args.max_new_tokens,
        batch_sizes=tuple(args.batch),
        repeats=args.repeats,
        progress=not args.json,
    )
    profile, _ = calibrate(args.verifier, args.draft, prompts=prompts, settings=settings)
    path = save_profile(profile, args.out)
    table = [
        {
            "model": profile.verifier,
            "t0_ms": profile.verifier_decode.t0_ms,
            "ms_per_token": profile.verifier_decode.ms_per_token,
            "r2": profile.verifier_decode.r2,
        }
    ]
    for name, cost in profile.drafts.items():
        decode = cost.decode
        table.append(
            {
                "model": name,
                "t0_ms": decode.t0_ms if decode else cost.step_ms,
                "ms_per_token": decode.ms_per_token if decode else 0.0,
                "r2": decode.r2 if decode else None,
                "alpha": profile.acceptance[name].alpha_iid(),
            }
        )
    return {
        "profile": str(path),
        "device": profile.device,
        "verifier": profile.verifier,
        "kernels": profile.machine.get("kernels"),
        "table": table,
    }


def _args_predict(p: argparse.ArgumentParser) -> None:
    _prompt_arguments(p, PREDICT_PROMPTS)
    p.add_argument(
        "--draft",
        required=True,
        help="draft: embedded name, exit:K, prompt-lookup, HF id or folder",
    )
    p.add_argument("--batch", type=int, default=1, help="batch size to predict for (default 1)")
    p.add_argument(
        "--profile",
        help="hardware profile from `specnb calibrate` (default: calibrate now, briefly)",
    )
    p.add_argument("--max-gamma", type=int, default=8, help="predict gamma = 1..this (default 8)")
    p.add_argument("--gamma", type=int, help="also report this gamma's prediction")
    kernels_argument(p)


def run_predict(args: argparse.Namespace) -> dict:
    # deferred: the predictor imports torch, transformers and pandas
    from specnb.app.text.common import prediction_verdict
    from specnb.app.text.nb06_decision import instead_line
    from specnb.core.theory import validate_gamma
    from specnb.measure.alternatives import load_measured
    from specnb.predict.calibrate import SHORT_CALIBRATION, ensure_calibrated
    from specnb.predict.costs import load_profile
    from specnb.predict.predictor import Workload, predict

    validate_gamma(args.max_gamma)
    if args.gamma is not None:
        validate_gamma(args.gamma)
    # None keeps a profile's traces (or calibrates on the shipped default);
    # a bad file fails before any measurement
    prompts = (
        None
        if args.prompts is None and args.n_prompts is None
        else _selected_prompts(args, PREDICT_PROMPTS)
    )
    profile = load_profile(args.profile) if args.profile else None
    settings = replace(
        SHORT_CALIBRATION,
        device=args.device,
        kernels=args.kernels,
        gamma=max(args.max_gamma, args.gamma or 1),
        max_new_tokens=args.max_new_tokens,
        progress=not args.json,
    )
    profile = ensure_calibrated(args.verifier, args.draft, profile, prompts=prompts, settings=settings)
    gammas = range(1, max(args.max_gamma, args.gamma or 1) + 1)
    workload = Workload(batch_size=args.batch, max_new_tokens=args.max_new_tokens)
    prediction = predict(profile, args.draft, gammas, workload)
    result = {**prediction.as_dict(), "verdict": prediction_verdict(prediction)}
    if args.gamma is not None:
        row = next(r for r in result["table"] if r["gamma"] == args.gamma)
        keys = ("predicted_speedup", "speedup_lo", "speedup_hi")
        result["gamma_speedup"] = {"gamma": args.gamma, **{k: row[k] for k in keys}}
    result["device"] = profile.device
    measured = load_measured(
        args.verifier
    )  # notebook 07's alternatives on this machine, if it ran here
    result["instead"] = instead_line(measured)
    result["alternatives"] = measured["rows"] if measured else []
    return result


# --- export-head: an EAGLE-3 head in the files a serving engine loads (``specnb.native.head_export``) ----


def _args_export_head(p: argparse.ArgumentParser) -> None:
    p.add_argument("head", help="an EAGLE-3 head in the standard layout: smollm2-eagle3 (the embedded one; "
                                "smollm2-eagle is specnb's own layout and is refused) or a folder with config.json + "
                                "model.safetensors")
    p.add_argument("--format", required=True, metavar="FORMAT",
                   help="eagle3: the folder vLLM's \"method\": \"eagle3\" loads; gguf: the file llama-server's "
                        "--spec-type draft-eagle3 -md FILE loads (made by llama.cpp's own converter)")
    p.add_argument("--out", required=True, metavar="DIR", help="a new (or empty) folder to write into")
    p.add_argument("--verifier", default="smollm2-135m",
                   help="the verifier the head drafts for: embedded name or HF folder (default smollm2-135m)")


def run_export_head(args: argparse.Namespace) -> dict:
    from specnb.native.head_export import export_head  # deferred: torch and safetensors

    return export_head(args.head, args.format, args.out, verifier=args.verifier)


class Command(NamedTuple):
    """One subcommand: its one-line help, the function that declares its flags, the one that runs it."""

    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], Any]


COMMANDS: dict[str, Command] = {  # in the order `specnb --help` lists them
    "run": Command("execute notebooks into outputs/<run-id>/ (ipynb, offline html, csv, summary json, index.html)",
                   _args_run, run_run),
    "build-drafts": Command("distil the draft family from the embedded verifier (15-35 min on 2 CPU cores; an "
                            "interrupted corpus step resumes)", _args_build_drafts, run_build_drafts),
    "build-heads": Command("train the EAGLE draft and Medusa heads on the embedded verifier's features (corpus built "
                           "if missing, resumable; stage times on stderr; ≈ 40 min on 2 busy cores, 15 of them CPU "
                           "time in training)", _args_build_heads, run_build_heads),
    "flops": Command("FLOPs per generated token of a model, from its config alone (no weights)", _args_flops,
                     run_flops),
    "ratio": Command("cost ratio c = draft FLOPs / verifier FLOPs per token", _args_ratio, run_ratio),
    "theory": Command("expected speedup for (alpha, gamma, c), its break-even alpha and the best gamma",
                      _args_theory, run_theory),
    "models": Command("list the embedded models: role, parameters, FLOPs/token and local folder (builds caches)",
                      _args_models, run_models),
    "generate": Command("generate text with the verifier alone or with speculative decoding, with per-stage times",
                        _args_generate, run_generate),
    "calibrate": Command("measure this machine's forward costs and the drafts' acceptance into a profile (JSON)",
                         _args_calibrate, run_calibrate),
    "predict": Command("recommended gamma (or don't speculate), predicted speedup with band, break-even alpha",
                       _args_predict, run_predict),
    "export-head": Command("export an EAGLE-3 head for vLLM (--format eagle3) or llama-server (--format gguf)",
                           _args_export_head, run_export_head),
}
