"""docs/cli.md names every ``specnb`` command and every flag the real argparse parsers declare."""

import argparse
from pathlib import Path

from specnb.app.cli import build_parser

PAGE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def declared() -> dict[str, list[str]]:
    """Each command's flags and positionals, from the parser ``specnb`` itself runs (``--help`` left out)."""
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {name: [flag for a in command._actions if not isinstance(a, argparse._HelpAction)
                   for flag in (a.option_strings or [a.dest])]
            for name, command in action.choices.items()}


def sections(page: str) -> dict[str, str]:
    """The page's text per ``## `specnb NAME` `` heading."""
    parts = page.split("\n## `specnb ")[1:]
    return {part.split("`", 1)[0]: part for part in parts}


def test_every_command_and_flag_is_on_the_page():
    documented = sections(PAGE.read_text())
    commands = declared()
    assert len(commands) >= 10 and sum(map(len, commands.values())) >= 60  # the parsers were read, not an empty table
    missing = [f"{name} {flag}" for name, flags in commands.items() for flag in flags
               if f"`{flag}`" not in documented.get(name, "")]
    assert missing == [], f"docs/cli.md lacks {missing}: run python scripts/cli_doc.py"


def test_the_page_names_no_command_the_parser_lacks():
    assert sorted(sections(PAGE.read_text())) == sorted(declared())
