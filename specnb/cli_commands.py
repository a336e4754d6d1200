"""Definitions of the ``specnb`` subcommands (registered into ``specnb.cli`` with ``@command``).

Each command is a pair: ``_args_<name>(parser)`` declares flags, ``run_<name>(args)`` returns
plain data (dict or list of dicts) that ``cli.emit`` prints as JSON or a table. Heavy imports
(torch, transformers) happen inside the run functions so ``specnb --help`` stays fast.
"""

from __future__ import annotations

import argparse

from specnb.cli import command
