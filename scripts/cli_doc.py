"""Write docs/cli.md from the ``specnb`` command's own argparse parsers.

    python scripts/cli_doc.py            # rewrite docs/cli.md
    python scripts/cli_doc.py --check    # exit 1 if docs/cli.md differs from what the parsers say

Why generated: a hand-kept flag list drifts the day a flag is added. The parsers
(``specnb.app.cli.build_parser``, each command declared in ``specnb.app.commands``) are the truth;
this page is their help text as tables. ``tests/docs/test_cli_page.py`` fails when a command or
flag is missing from the page.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parents[1] / "docs" / "cli.md"

INTRO = """# The `specnb` command

Generated from the command's argparse parsers by `python scripts/cli_doc.py`; do not edit by hand.

Every command takes `--json` (one JSON document on stdout) and otherwise prints a small table. An
error you can fix (an unknown model, a bad value) is one line on stderr and exit code 2; Ctrl-C ends
with one line and exit code 130. `specnb run` also prints where the run's report (`index.html`) is,
last (on stderr with `--json`). Models are Hugging Face ids, local folders or embedded names (`specnb models`).

```bash
specnb flops Qwen/Qwen2.5-3B-Instruct                              # 6,171,394,048 FLOPs/token (seed convention)
specnb ratio Qwen/Qwen2.5-0.5B-Instruct Qwen/Qwen2.5-3B-Instruct   # c = 0.1601
specnb theory --alpha 0.392 --gamma 4 --c 0.1601                   # 0.99x, break-even α, optimal γ
specnb generate --draft smollm2-eagle --prompt "Why is the sky blue?"  # its verifier and its own γ implied
specnb calibrate --draft smollm2-draft-s --out profile.json
specnb predict --draft smollm2-draft-s --profile profile.json --prompts code
specnb export-head smollm2-eagle3 --format eagle3 --out eagle3-vllm  # vLLM: "method": "eagle3"
specnb run 03 -p gammas "[1, 2, 4, 8]"                             # one notebook, one parameter changed
```
"""


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The commands, in the order ``specnb --help`` lists them."""
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def flag_rows(command: argparse.ArgumentParser) -> list[tuple[str, str, str]]:
    """(flag or positional, default, help) per argument, ``--help`` left out."""
    rows = []
    for action in command._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        name = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.dest}`"
        if action.metavar:
            shown = " ".join(action.metavar) if isinstance(action.metavar, tuple) else action.metavar
            name += f" {shown}"
        elif action.choices:
            name += " {" + ",".join(map(str, action.choices)) + "}"
        unset = action.default is None or action.default is False or action.default in ([], argparse.SUPPRESS)
        default = "" if unset else f"`{action.default}`"
        rows.append((name, default, " ".join((action.help or "").split()).replace("|", "\\|")))
    return rows


def render(parser: argparse.ArgumentParser) -> str:
    """The whole page: the intro, then per command its help line, usage and a table of its arguments."""
    parts = [INTRO]
    for name, command in subparsers(parser).items():
        usage = " ".join(command.format_usage().split())
        parts += [f"## `specnb {name}`\n", " ".join((command.description or "").split()) + "\n",
                  f"```\n{usage.removeprefix('usage: ')}\n```\n",
                  "| argument | default | what it does |", "|---|---|---|"]
        parts += [f"| {flag} | {default} | {text} |" for flag, default, text in flag_rows(command)]
        parts.append("")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(PAGE.parents[1]))  # this checkout's package, whatever the environment installed
    from specnb.app.cli import build_parser

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the page is out of date, write nothing")
    args = ap.parse_args(argv)
    text = render(build_parser())
    if args.check:
        current = PAGE.read_text() if PAGE.exists() else ""
        fresh = current == text
        print("docs/cli.md is up to date" if fresh else "docs/cli.md is out of date: python scripts/cli_doc.py")
        return 0 if fresh else 1
    PAGE.parent.mkdir(exist_ok=True)
    PAGE.write_text(text)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
