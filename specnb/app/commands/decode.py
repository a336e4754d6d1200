"""`specnb generate`: the decoding engine on one batch of prompts, with per-stage times."""

from __future__ import annotations

import argparse

from specnb.app.arguments import branching, gamma_value, kernels_argument
from specnb.app.commands.command_table import command
from specnb.core.errors import ParameterError

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


@command(
    "generate",
    "generate text with the verifier alone or with speculative decoding, with per-stage times",
    _args_generate,
)
def run_generate(args: argparse.Namespace) -> dict:
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
        from specnb.predict.auto_gamma import ProfileSource, auto_gamma

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
