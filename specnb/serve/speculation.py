"""What one configuration drafts (``Speculation``), a per-load policy as one launch carries it
(``Launch``), and how a user names a configuration (``parse_entry``).

A configuration's identity is a ``Speculation`` record: what the user asked for (``entry``, e.g.
"ngram", "ngram-simple", "eagle3", "smollm2-draft-s"), its draft length ``k``, whether it drafts
with a model (a forward to pay, unlike an n-gram lookup), the engine's ``method`` and, for a policy
launched as one server, its per-batch-size ``schedule``. Its display name is derived from it
(``name``), never parsed back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

BASELINE_CONFIG = "spec-off"  # the display name of a configuration that does not speculate
ADAPTIVE_CONFIG = "adaptive"  # the display name of a policy launched as one server (its schedule)
AA_TWIN_CONFIG = "spec-off-aa"  # spec-off launched a second time: an A/A pair that measures launch noise
NOT_CANDIDATES = (ADAPTIVE_CONFIG, AA_TWIN_CONFIG)  # measured beside the static ones, never a policy's choice
# The families (``Speculation.family``) that draft without a model, an n-gram or suffix lookup: no
# draft to load, no forward to pay (``uses_model`` False). vLLM's method names are these families.
FREE_FAMILIES = ("ngram", "suffix")


@dataclass(frozen=True, kw_only=True)
class Speculation:
    """What one configuration drafts. ``entry`` "" is spec-off."""

    entry: str = ""
    k: int = 0
    method: str = "none"  # the engine's own name for it (vLLM ``method``, llama-server ``--spec-type``)
    family: str = "none"  # the same in words every engine shares, vLLM's: ngram, suffix, eagle3, draft_model, ...
    uses_model: bool = False
    schedule: tuple[tuple[int, int, int], ...] | None = None
    adaptive: bool = False  # the policy as one launch: named ``ADAPTIVE_CONFIG`` whatever its k
    aa_twin: bool = False  # spec-off's second launch (``AA_TWIN_CONFIG``), only what launch noise is measured by

    @property
    def speculative(self) -> bool:
        return bool(self.entry)

    @property
    def name(self) -> str:
        if self.adaptive:
            return ADAPTIVE_CONFIG
        if self.entry:
            return f"{self.entry} k={self.k}"
        return AA_TWIN_CONFIG if self.aa_twin else BASELINE_CONFIG

    def k_at(self, batch: float) -> int:
        """The draft length at a scheduler batch size: the ``schedule`` range that holds it (vLLM's
        ``num_speculative_tokens_per_batch_size``), else ``k``; 0 for spec-off."""
        if not self.entry:
            return 0
        return next((k for lo, hi, k in self.schedule or () if lo <= round(batch) <= hi), self.k)

    def columns(self) -> dict:
        """What every record and summary row of this configuration carries about it."""
        return {"config": self.name, "method": self.method, "family": self.family,
                "k": self.k if self.entry else 0, "uses_model": self.uses_model, "adaptive": self.adaptive,
                "schedule": json.dumps([list(r) for r in self.schedule]) if self.schedule else ""}


SPEC_OFF = Speculation()


@dataclass(frozen=True, kw_only=True)
class Launch:
    """A per-load policy as one launch would carry it: inclusive ``(lo, hi, k)`` load ranges, the
    configuration each k was measured as (``by_k``), the method family the launch drafts with and
    the folder of its head or draft model ("" for a method that drafts without one)."""

    ranges: tuple[tuple[int, int, int], ...]
    by_k: dict[int, str]
    family: str = "ngram"
    draft: str = ""

    @property
    def drafts(self) -> bool:
        return any(k for *_, k in self.ranges)


def parse_entry(spec: str, accepted: tuple[str, ...]) -> tuple[str, int]:
    """``TYPE:K`` or ``DRAFT:K`` split, K ≥ 1, TYPE or DRAFT among ``accepted``: how a user names a
    configuration to launch (``-p speculation``) or one at an endpoint (``-p endpoint TYPE:K=URL``)."""
    from specnb.core.errors import ParameterError

    kind, _, k = str(spec).rpartition(":")
    if not kind or not k.isdigit() or int(k) < 1:
        raise ParameterError(f"speculation entry {spec!r} must be TYPE:K or DRAFT:K with K >= 1, e.g. "
                             f"{accepted[0]}:4; TYPE or DRAFT one of {', '.join(accepted)}")
    if kind not in accepted:
        raise ParameterError(f"speculation entry {spec!r}: unknown type {kind!r}; this engine takes "
                             f"{', '.join(accepted)} (each as TYPE:K)")
    return kind, int(k)


def model_drafts() -> list[str]:
    """The embedded drafts that are models of their own (not heads): what an engine loads as a draft."""
    from specnb.decode.kinds.by_name import kind_of_name
    from specnb.models.registry import embedded_draft_names

    return [name for name in embedded_draft_names() if not kind_of_name(name).reads_features]


def range_text(start: int, end: int, last: bool) -> str:
    """A policy range of loads as prose: "1", "2–3", "16 or more"."""
    return f"{start} or more" if last else f"{start}" if start == end else f"{start}–{end}"
