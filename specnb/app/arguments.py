"""Argument types and flags that several ``specnb`` commands share (``specnb.app.commands``): the
kernel choice, γ as a whole number or "auto", a static tree's branching or "dynamic"."""

from __future__ import annotations

import argparse


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


def branching(text: str) -> tuple[int, ...] | str:
    """``--tree 3,2,1`` -> (3, 2, 1); ``--tree dynamic`` -> "dynamic" (the engine's EAGLE-2 tree)."""
    if text == "dynamic":
        return text
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected candidates per depth like 3,2,1, got {text!r}") from None
