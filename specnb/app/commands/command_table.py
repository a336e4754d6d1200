"""``COMMANDS``, the table ``specnb.app.cli`` builds its parser from, and ``@command``, which fills it."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

COMMANDS: dict[
    str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], Any]]
] = {}


def command(name: str, help: str, arguments: Callable[[argparse.ArgumentParser], None]):
    """Register ``run(args) -> data`` as subcommand ``name``; ``arguments`` declares its flags."""

    def register(run: Callable[[argparse.Namespace], Any]):
        COMMANDS[name] = (help, arguments, run)
        return run

    return register
