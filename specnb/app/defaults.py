"""Which drafts a notebook compares when the reader names none.

For the embedded verifier: its embedded drafts by kind (distilled ones cheapest first, early exits,
prompt lookup); for any other verifier there are no embedded drafts, so a one-line error asks for
one (``-p draft NAME``) rather than running drafts built for a different model.
"""

from __future__ import annotations

import json

from specnb.core import paths
from specnb.core.errors import ParameterError
from specnb.core.theory import optimal_gamma
from specnb.models.registry import EMBEDDED_EXITS, EMBEDDED_VERIFIER, PROMPT_LOOKUP, embedded_draft_names, flops_table


def default_draft(verifier: str) -> str:
    """The draft a notebook uses when none is named: for the embedded verifier, the distilled draft
    with the best Leviathan speedup predicted from its recorded held-out agreement (as α) and its
    FLOPs c; the early exit ``smollm2-exit-4`` when no distilled draft is committed."""
    if verifier != EMBEDDED_VERIFIER:
        raise ParameterError(f"no default draft for verifier {verifier!r}; pass one, e.g. -p draft "
                             "Qwen/Qwen2.5-0.5B-Instruct")
    names = embedded_draft_names()
    if not names:
        return "smollm2-exit-4"
    table = flops_table(verifier, names, context=0).set_index("model")

    def predicted(name: str) -> float:
        try:
            meta = json.loads((paths.DRAFTS_DIR / name / "meta.json").read_text())
            alpha = float(meta["heldout_top1_agreement"]["after"])
        except (OSError, ValueError, KeyError, TypeError):
            return 0.0
        return float(optimal_gamma(min(alpha, 0.99), table.loc[name, "c_flops"])[1])

    return max(names, key=predicted)


DRAFT_KINDS = ("distilled", "exits", "lookup")


def notebook_drafts(verifier: str, draft: str | None = None, drafts=None, kinds=DRAFT_KINDS,
                    one_per_kind: bool = False) -> list[str]:
    """The drafts a notebook compares: ``[draft]`` when one is named (``-p draft X`` is what every
    notebook accepts), else ``drafts``, else for the embedded verifier its embedded drafts of
    ``kinds`` (distilled ones cheapest first, early exits, prompt lookup; with ``one_per_kind`` only
    the first of each, as a smoke run wants). Another verifier has no embedded drafts: it gets
    ``default_draft``'s one-line error asking for one, not drafts built for a different model."""
    if draft is not None:
        return [draft]
    if drafts is not None:
        return [drafts] if isinstance(drafts, str) else list(drafts)
    if verifier != EMBEDDED_VERIFIER:
        return [default_draft(verifier)]
    unknown = set(kinds) - set(DRAFT_KINDS)
    if unknown:
        raise ParameterError(f"unknown draft kinds {sorted(unknown)}; known: {', '.join(DRAFT_KINDS)}")
    distilled = embedded_draft_names()
    if distilled:  # cheapest first, so a smoke run's drafts[:1] is the fastest to load and run
        c = flops_table(verifier, distilled, context=0).set_index("model")["c_flops"]
        distilled = sorted(distilled, key=lambda name: c[name])
    found = {"distilled": distilled, "exits": list(EMBEDDED_EXITS), "lookup": [PROMPT_LOOKUP]}
    return [name for kind in kinds for name in found[kind][: 1 if one_per_kind else None]]


def sweep_drafts(verifier: str, draft: str | None = None, drafts=None) -> list[str]:
    """Notebook 03's drafts: as ``notebook_drafts``, but by default for the embedded verifier prompt
    lookup (no forward: the draft that can win on a CPU) next to ``default_draft`` (a distilled
    model, which shows the speculation tax), swept side by side on the same prompts."""
    if draft is None and drafts is None and verifier == EMBEDDED_VERIFIER:
        return [PROMPT_LOOKUP, default_draft(verifier)]
    return notebook_drafts(verifier, draft, drafts)


def decision_drafts(verifier: str, draft: str | None = None, drafts=None, smoke: bool = False) -> list[str]:
    """Notebook 06's drafts: as ``notebook_drafts`` over distilled drafts and prompt lookup, but for
    the embedded verifier without draft-xs (α ≈ 0.07, shown in notebooks 03–04), so the whole demo
    stays within its time budget; a smoke run takes the first only."""
    if draft is None and drafts is None and verifier == EMBEDDED_VERIFIER and not smoke:
        drafts = ["smollm2-draft-s", "smollm2-draft-m", PROMPT_LOOKUP]
    return notebook_drafts(verifier, draft, drafts, kinds=("distilled", "lookup"))[: 1 if smoke else None]
