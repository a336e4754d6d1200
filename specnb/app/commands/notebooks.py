"""`specnb run`, `build-drafts`, `build-heads`: notebooks executed, drafts distilled, heads trained."""

from __future__ import annotations

import argparse

from specnb.app.commands.command_table import command

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


@command(
    "run",
    "execute notebooks into outputs/<run-id>/ (ipynb, offline html, csv, summary json, index.html)",
    _args_run,
)
def run_run(args: argparse.Namespace) -> list[dict]:
    from pathlib import Path

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


@command(
    "build-drafts",
    "distil the draft family from the embedded verifier (15-35 min on 2 CPU cores; an "
    "interrupted corpus step resumes)",
    _args_build_drafts,
)
def run_build_drafts(args: argparse.Namespace) -> list[dict]:
    from specnb.models.training.distill import build_drafts

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


@command(
    "build-heads",
    "train the EAGLE draft and Medusa heads on the embedded verifier's features (corpus built "
    "if missing, resumable; stage times on stderr; ≈ 40 min on 2 busy cores, 15 of them CPU "
    "time in training)",
    _args_build_heads,
)
def run_build_heads(args: argparse.Namespace) -> list[dict]:
    import sys

    from specnb.models.training.train_heads import build_heads

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
