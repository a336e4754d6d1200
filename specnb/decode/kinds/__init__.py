"""The draft kinds, one module each: a causal LM (``kind_model``), an early exit (``kind_exit``),
prompt lookup (``kind_lookup``), an EAGLE head (``kind_eagle``), Medusa heads (``kind_medusa``).

Adding a kind is writing its module (a drafter, a loader, a trace, its pricing: ``kind.DraftKind``,
ending with ``register(KIND)``) and naming it on the import line below; CONTRIBUTING.md shows a tiny one.
"""

from specnb.decode.kinds import kind_eagle, kind_exit, kind_lookup, kind_medusa, kind_model  # noqa: F401 (they register)
from specnb.decode.kinds.kind import KINDS, DraftKind, kind_named, kind_of, register

__all__ = ["KINDS", "DraftKind", "kind_named", "kind_of", "register"]
