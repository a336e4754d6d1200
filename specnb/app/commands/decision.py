"""`specnb calibrate`, `predict`: the decision framework from the command line."""

from __future__ import annotations

import argparse
from dataclasses import replace

from specnb.app.arguments import kernels_argument
from specnb.app.commands.command_table import command

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
    from specnb.measure.prompts import select_prompts

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


@command(
    "calibrate",
    "measure this machine's forward costs and the drafts' acceptance into a profile (JSON)",
    _args_calibrate,
)
def run_calibrate(args: argparse.Namespace) -> dict:
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


@command(
    "predict",
    "recommended gamma (or don't speculate), predicted speedup with band, break-even alpha",
    _args_predict,
)
def run_predict(args: argparse.Namespace) -> dict:
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
