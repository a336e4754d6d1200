"""Definitions of the ``specnb`` subcommands (registered into ``specnb.cli`` with ``@command``).

Each command is a pair: ``_args_<name>(parser)`` declares flags, ``run_<name>(args)`` returns
plain data (dict or list of dicts) that ``cli.emit`` prints as JSON or a table. Heavy imports
(torch, transformers) happen inside the run functions so ``specnb --help`` stays fast.
"""

from __future__ import annotations

import argparse

from specnb.cli import command


# --- run: execute notebooks with papermill -------------------------------------------------


def _args_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("names", nargs="*", help="notebooks by number, stem or title (default: all)")
    p.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("KEY", "VALUE"),
                   help="notebook parameter (Python literal or string); repeatable")
    p.add_argument("--smoke", action="store_true", help="tiny settings: the whole suite in a few minutes")
    p.add_argument("--out", help="output folder (default: outputs/<run-id>/)")


@command("run", "execute notebooks into outputs/<run-id>/ (ipynb, offline html, csv, summary json)", _args_run)
def run_run(args: argparse.Namespace) -> list[dict]:
    from pathlib import Path

    from specnb.runner import parse_value, run_notebooks

    params = {key: parse_value(value) for key, value in args.parameter}
    runs = run_notebooks(args.names, params, smoke=args.smoke, out=Path(args.out) if args.out else None,
                         progress=not args.json)
    return [{"notebook": r.name, "ok": r.ok, "seconds": round(r.seconds, 1), "html": r.html} for r in runs]
