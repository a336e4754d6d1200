"""γ decided in one place: the default when none is given (the draft's own, ``specnb.models.registry.
default_gamma``), a static tree's depth in its place, and a choice made per batch size (``GammaChoice``,
the predictor's ``gamma="auto"``). The loop (``specnb.decode.generate``) and the CLI both settle γ here."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from specnb.core.errors import ParameterError
from specnb.decode.trees import DynamicTree, TreeShape
from specnb.models.registry import default_gamma


@runtime_checkable
class GammaChoice(Protocol):
    """Picks γ for the batch size at hand and says why (``specnb.predict.auto_gamma.AutoGamma``)."""

    def choose(self, batch_size: int) -> tuple[int, str]: ...


def choose_gamma(gamma, batch_size: int) -> tuple[int, str]:
    """(γ, why): a number is used as given; a ``GammaChoice`` picks one for ``batch_size``. The string
    "auto" needs the draft's calibration on this machine, which the engine cannot see (it knows models,
    not their names), so it asks for the choice object that the prediction layer builds."""
    if isinstance(gamma, GammaChoice):
        chosen, reason = gamma.choose(batch_size)
        return int(chosen), reason
    if isinstance(gamma, str):
        raise ParameterError(
            f"gamma={gamma!r} is not a number; for the predictor's best γ on this machine pass "
            "gamma=specnb.auto_gamma(verifier_name, draft_name) (it reads or measures this machine's profile), "
            "or give gamma as a whole number >= 1")
    return gamma, ""


def settle_gamma(gamma, tree=None, draft_name: str | None = None):
    """γ as a run decides it before any model loads, for the loop and the CLI alike: None is the draft's
    own default (``specnb.models.registry.default_gamma``, the one place a default is chosen); a static
    tree's depth replaces γ; a number, "auto" or a ``GammaChoice`` stays (a choice picks per batch size)."""
    gamma = default_gamma(draft_name, tree) if gamma is None else gamma
    static = tree is not None and not isinstance(tree, (str, DynamicTree))
    return as_tree(tree, gamma).depth if static else gamma


def as_tree(branching, gamma) -> TreeShape | DynamicTree | None:
    """A static tree from its branching per depth, e.g. ``(3, 2, 1)``; ``"dynamic"``: EAGLE-2's dynamic
    tree ``gamma`` deep with the default width and node budget; a ``DynamicTree`` as given; None stays None."""
    if branching is None or isinstance(branching, DynamicTree):
        return branching
    if isinstance(branching, str):
        if branching != "dynamic" or not isinstance(gamma, int):
            raise ParameterError(f"tree={branching!r} with gamma={gamma!r}: use tree=\"dynamic\" with a whole "
                                 "gamma (its depth), a DynamicTree, or a branching per depth such as (3, 2, 1)")
        return DynamicTree(gamma)
    if not len(branching):
        raise ParameterError("a tree needs at least one depth, e.g. tree=(3, 2, 1); drop tree= to draft a chain")
    return TreeShape(tuple(int(b) for b in branching))
