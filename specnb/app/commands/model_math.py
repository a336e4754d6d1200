"""`specnb flops`, `ratio`, `theory`, `models`: cost per token, c and the closed-form speedup, the embedded
models."""

from __future__ import annotations

import argparse

from specnb.app.commands.command_table import command

# --- flops / ratio / theory: cost per token and the closed-form speedup ---------------------


def _args_flops(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "model",
        help="Hugging Face id, shipped/embedded name (e.g. smollm2-135m) or folder with "
        "config.json",
    )
    p.add_argument(
        "--context",
        type=int,
        default=0,
        help="positions the new token attends to (default 0: seed convention)",
    )


@command(
    "flops", "FLOPs per generated token of a model, from its config alone (no weights)", _args_flops
)
def run_flops(args: argparse.Namespace) -> dict:
    from specnb.core.flops import analytic_flops

    return analytic_flops(args.model, args.context).to_dict()


def _args_ratio(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "draft",
        help="draft: id, name or folder (an EAGLE or Medusa head too), exit:K or prompt-lookup",
    )
    p.add_argument("verifier", help="verifier model: id, name or folder")
    p.add_argument(
        "--context", type=int, default=0, help="positions attended, for both models (default 0)"
    )


@command("ratio", "cost ratio c = draft FLOPs / verifier FLOPs per token", _args_ratio)
def run_ratio(args: argparse.Namespace) -> dict:
    from specnb.decode.kinds.by_name import flops_table

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
    p.add_argument(
        "--gamma", type=float, required=True, help="draft tokens per step (whole number >= 1)"
    )
    p.add_argument("--c", type=float, required=True, help="cost ratio draft/verifier (>= 0)")
    p.add_argument(
        "--max-gamma",
        type=int,
        default=32,
        help="largest gamma searched for optimal_gamma (default 32)",
    )


@command(
    "theory",
    "expected speedup for (alpha, gamma, c), its break-even alpha and the best gamma",
    _args_theory,
)
def run_theory(args: argparse.Namespace) -> dict:
    import math

    from specnb.core import theory

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


@command(
    "models",
    "list the embedded models: role, parameters, FLOPs/token and local folder (builds caches)",
    _args_models,
)
def run_models(args: argparse.Namespace) -> list[dict]:
    from specnb.decode.kinds.by_name import list_embedded

    return list_embedded()
