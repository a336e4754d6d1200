"""Argument types and flags that several ``specnb`` commands share (``specnb.app.commands``): the
kernel choice, γ as a whole number or "auto", a static tree's branching."""

from __future__ import annotations

import argparse
import contextlib

from specnb.core.errors import ParameterError, SpecnbError


def kernels_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernels", default="auto", metavar="{auto,default,onednn}",
                   help="linear-layer kernels on the CPU: auto times PyTorch's default against oneDNN with prepacked "
                        "weights per model and keeps the faster, per row count if need be (cached per machine); "
                        "default or onednn names one (default auto)")


def gamma_value(text: str):
    """``--gamma 4`` -> 4; ``--gamma auto`` -> "auto", passed through for the library to choose."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number or auto, got {text!r}") from None


@contextlib.contextmanager
def gamma_auto_unsupported(gamma):
    """An engine that does not take gamma="auto" yet fails on the string somewhere inside: say so in
    one line instead of a traceback (a real bug with an integer gamma still surfaces)."""
    try:
        yield
    except (TypeError, ValueError) as err:
        if gamma != "auto" or isinstance(err, SpecnbError):
            raise
        raise ParameterError("--gamma auto is not supported by this engine version; pass a whole number, "
                             "e.g. --gamma 4") from None


def branching(text: str) -> tuple[int, ...]:
    """``--tree 3,2,1`` -> (3, 2, 1)."""
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected candidates per depth like 3,2,1, got {text!r}") from None
