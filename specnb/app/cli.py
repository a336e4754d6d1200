"""The ``specnb`` command line.

Every command takes ``--json`` and then prints one JSON document on stdout; without it, a small
readable table. Errors a user can fix (``SpecnbError``) become one line on stderr and exit code 2,
never a traceback; Ctrl-C ends with one line and exit code 130, even in a process that started
with SIGINT ignored (``take_ctrl_c``). Each command is a short pair of functions, one that declares
its arguments and one that runs it and returns plain data, listed in ``specnb.app.commands.COMMANDS``.
A command that has one more thing to say after its result (``specnb run``: where its report is) sets
``args.closing``, printed last: on stdout after the table, on stderr with ``--json`` so that stdout
stays one document.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import threading
from typing import Any

from specnb.app.commands import COMMANDS
from specnb.core.errors import SpecnbError


def format_value(value: Any) -> str:
    """Human formatting: thousands separators for ints, 4 significant decimals for floats."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}" if abs(value) < 1e5 else f"{value:,.0f}"
    return str(value)


def print_table(rows: list[dict[str, Any]] | dict[str, Any], file=None) -> None:
    """Print a dict as key/value lines, or a list of dicts as aligned columns."""
    file = file or sys.stdout
    if isinstance(rows, dict):
        width = max((len(k) for k in rows), default=0)
        for key, value in rows.items():
            if not isinstance(value, (list, dict)):
                print(f"{key:<{width}}  {format_value(value)}", file=file)
        return
    if not rows:
        print("(no rows)", file=file)
        return
    columns = list(rows[0])
    cells = [[format_value(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths)), file=file)
    for row in cells:
        print("  ".join(v.rjust(w) for v, w in zip(row, widths)), file=file)


def emit(data: Any, as_json: bool) -> None:
    """Print a command's result as JSON or as a table (a 'table' key is printed after the rest)."""
    if as_json:
        print(json.dumps(data, indent=2, default=str))
        return
    if isinstance(data, dict) and isinstance(data.get("table"), list):
        print_table({k: v for k, v in data.items() if k != "table"})
        print()
        print_table(data["table"])
    else:
        print_table(data)


def take_ctrl_c() -> None:
    """Let Ctrl-C raise ``KeyboardInterrupt`` even if this process started with SIGINT ignored.

    A child inherits an ignored SIGINT (a non-interactive shell's background job gets one, as do
    some IDE and CI harnesses), and Python then installs no handler: Ctrl-C and ``kill -INT`` are
    dropped, and a run can only be killed, without its partial notebook, HTML and summary. We take
    SIGINT back because stopping a run is always on purpose. The price: ``specnb run &`` inside a
    script now stops with a Ctrl-C meant for the script; ``setsid specnb run`` detaches it."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specnb", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, arguments, run) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        arguments(p)
        p.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
        p.set_defaults(run=run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    take_ctrl_c()
    try:
        data = args.run(args)
    except SpecnbError as err:
        code = getattr(err, "exit_code", 2)
        if code == 2:
            print(f"specnb {args.command}: error: {err}", file=sys.stderr)
        else:  # interrupted: a progress bar may still hold the line
            print(f"\nspecnb {args.command}: {err}", file=sys.stderr)
        return code
    except KeyboardInterrupt:
        print(f"specnb {args.command}: interrupted", file=sys.stderr)
        return 130
    if data is not None:
        emit(data, args.json)
    if getattr(args, "closing", None):
        print(args.closing, file=sys.stderr if args.json else sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
