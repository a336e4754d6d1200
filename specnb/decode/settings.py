"""How ``generate`` decodes, beyond the models, the prompts and the sampling: one record.

Why a record: a harness (interleaved runs, calibration, the CLI) builds a candidate's settings once
and hands them on whole, a sweep varies one field (``dataclasses.replace``), and a user's call names
only what differs from a plain greedy run::

    generate(pair.verifier, ids, mask, draft=pair.draft, decoding=Decoding(gamma=3, max_new_tokens=48))
"""

from __future__ import annotations

from dataclasses import dataclass

from specnb.decode.gamma import GammaChoice
from specnb.decode.timing import StageTimer
from specnb.decode.trees import DynamicTree


@dataclass(frozen=True, kw_only=True)
class Decoding:
    """What a run of ``generate`` is asked to do; the defaults are a plain run of up to 64 tokens per row."""

    gamma: int | GammaChoice | None = None  # draft tokens per step; None: the draft's own (``settle_gamma``)
    max_new_tokens: int = 64
    eos_token_id: int | list[int] | None = None
    tree: tuple[int, ...] | str | DynamicTree | None = None  # branching per depth, or "dynamic" (EAGLE-2)
    confidence: float = 0.0  # a chain stops where the draft's top probability falls below it (0: never)
    vocab_size: int | None = None  # both models' logits sliced to this size (None: they already agree)
    timer: bool | StageTimer | None = None  # None or False: off; True: a new ``StageTimer``
