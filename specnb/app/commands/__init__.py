"""The ``specnb`` subcommands, registered in ``COMMANDS`` with ``@command`` (``specnb.app.cli``
builds the parser from it), one module per group: ``notebooks`` (run, build-drafts, build-heads),
``model_math`` (flops, ratio, theory, models), ``decode`` (generate), ``decision`` (calibrate, predict),
``export`` (export-head).

Each command is a pair: ``_args_<name>(parser)`` declares flags, ``run_<name>(args)`` returns
plain data (dict or list of dicts) that ``cli.emit`` prints as JSON or a table. Heavy imports
(torch, transformers) happen inside the run functions so ``specnb --help`` stays fast.
"""

from specnb.app.commands.command_table import COMMANDS, command

# Each module registers its commands on import, in the order `specnb --help` lists them.
# isort: off
from specnb.app.commands import notebooks  # noqa: E402,F401
from specnb.app.commands import model_math  # noqa: E402,F401
from specnb.app.commands import decode  # noqa: E402,F401
from specnb.app.commands import decision  # noqa: E402,F401
from specnb.app.commands import export  # noqa: E402,F401
# isort: on

__all__ = ["COMMANDS", "command"]
