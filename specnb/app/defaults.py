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
from specnb.decode.kinds.by_name import flops_table, kind_of_name
from specnb.measure.alternatives import DraftChoice
from specnb.models.registry import EMBEDDED_EXITS, EMBEDDED_VERIFIER, PROMPT_LOOKUP, embedded_draft_names
from specnb.serve.engines import model_drafts


def distilled_draft_names() -> list[str]:
    """The committed distilled drafts (causal LMs), not the EAGLE / Medusa heads beside them."""
    return model_drafts()


def head_draft_names() -> list[str]:
    """The committed heads that draft from the verifier's features: EAGLE first, then Medusa."""
    heads = [name for name in embedded_draft_names() if kind_of_name(name).reads_features]
    return sorted(heads, key=lambda name: kind_of_name(name).name)


def default_draft(verifier: str) -> str:
    """The draft a notebook uses when none is named: for the embedded verifier, the distilled draft
    with the best Leviathan speedup predicted from its recorded held-out agreement (as α) and its
    FLOPs c; the early exit ``smollm2-exit-4`` when no distilled draft is committed."""
    if verifier != EMBEDDED_VERIFIER:
        raise ParameterError(f"no default draft for verifier {verifier!r}; pass one, e.g. -p draft "
                             "Qwen/Qwen2.5-0.5B-Instruct")
    names = distilled_draft_names()
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


DRAFT_KINDS = ("distilled", "heads", "exits", "lookup")


def notebook_drafts(verifier: str, draft: str | None = None, drafts=None, kinds=DRAFT_KINDS,
                    one_per_kind: bool = False) -> list[str]:
    """The drafts a notebook compares: ``[draft]`` when one is named (``-p draft X`` is what every
    notebook accepts), else ``drafts``, else for the embedded verifier its embedded drafts of
    ``kinds`` (distilled ones cheapest first, EAGLE and Medusa heads, early exits, prompt lookup;
    with ``one_per_kind`` only the first of each, as a smoke run wants). Another verifier has no
    embedded drafts: it gets ``default_draft``'s one-line error asking for one, not drafts built for
    a different model."""
    if draft is not None:
        return [draft]
    if drafts is not None:
        return [drafts] if isinstance(drafts, str) else list(drafts)
    if verifier != EMBEDDED_VERIFIER:
        return [default_draft(verifier)]
    unknown = set(kinds) - set(DRAFT_KINDS)
    if unknown:
        raise ParameterError(f"unknown draft kinds {sorted(unknown)}; known: {', '.join(DRAFT_KINDS)}")
    distilled = distilled_draft_names()
    if distilled:  # cheapest first, so a smoke run's drafts[:1] is the fastest to load and run
        c = flops_table(verifier, distilled, context=0).set_index("model")["c_flops"]
        distilled = sorted(distilled, key=lambda name: c[name])
    found = {"distilled": distilled, "heads": head_draft_names(), "exits": list(EMBEDDED_EXITS),
             "lookup": [PROMPT_LOOKUP]}
    return [name for kind in kinds for name in found[kind][: 1 if one_per_kind else None]]


def sweep_drafts(verifier: str, draft: str | None = None, drafts=None) -> list[str]:
    """Notebook 03's drafts: as ``notebook_drafts``, but by default for the embedded verifier prompt
    lookup (no forward: the draft that can win on a CPU), the EAGLE heads (a forward of one layer,
    accepted far more often than a small model; specnb's own layout and the standard EAGLE-3 one) and
    ``default_draft`` (a distilled model, which shows the speculation tax), swept side by side on the
    same prompts."""
    if draft is None and drafts is None and verifier == EMBEDDED_VERIFIER:
        return [PROMPT_LOOKUP, *[h for h in head_draft_names() if h.endswith(("eagle", "eagle3"))],
                default_draft(verifier)]
    return notebook_drafts(verifier, draft, drafts)


def decision_drafts(verifier: str, draft: str | None = None, drafts=None, smoke: bool = False) -> list[str]:
    """Notebook 06's drafts: as ``notebook_drafts`` over distilled drafts, heads and prompt lookup, but
    for the embedded verifier one distilled draft (draft-s; the others are shown in notebooks 03–04),
    the heads and prompt lookup, so the whole demo stays within its time budget; a smoke run takes
    the first only."""
    if draft is None and drafts is None and verifier == EMBEDDED_VERIFIER and not smoke:
        drafts = ["smollm2-draft-s", *head_draft_names(), PROMPT_LOOKUP]
    return notebook_drafts(verifier, draft, drafts, kinds=("distilled", "heads", "lookup"))[: 1 if smoke else None]


def parse_speculation(items) -> list:
    """``["prompt-lookup:4", "smollm2-eagle:3x2"]`` (draft:γ or draft:tree) as ``DraftChoice``s; a bad
    item is a one-line error."""
    found = []
    for item in [items] if isinstance(items, str) else items:
        name, _, shape = str(item).rpartition(":")
        try:
            sizes = tuple(int(b) for b in shape.split("x"))
        except ValueError:
            sizes = ()
        if not name or not sizes or min(sizes) < 1:
            raise ParameterError(f"speculation item {item!r} must be DRAFT:GAMMA or DRAFT:TREE, e.g. "
                                 "prompt-lookup:4 or smollm2-eagle:3x2x1")
        found.append(DraftChoice(name, sizes[0]) if len(sizes) == 1 else DraftChoice(name, len(sizes), sizes))
    return found


def alternative_speculation(verifier: str, speculation, pick=None, smoke: bool = False) -> list:
    """Notebook 07's speculative rows: the predictor's ``pick`` first (when there is one), then
    ``speculation`` (parsed), or by default for the embedded verifier prompt lookup at γ = 4 and
    the EAGLE head with a small tree when one is committed; duplicates dropped."""
    if speculation is not None:
        chosen = parse_speculation(speculation)
    elif verifier == EMBEDDED_VERIFIER:
        chosen = [DraftChoice(PROMPT_LOOKUP, 4)]
        if "smollm2-eagle" in embedded_draft_names() and not smoke:
            chosen.append(DraftChoice("smollm2-eagle", 2, (3, 2)))
    else:
        raise ParameterError(f"name the speculation to compare for {verifier!r}, e.g. -p speculation "
                             "\"['prompt-lookup:4', 'Qwen/Qwen2.5-0.5B-Instruct:3']\"")
    ordered = ([pick] if pick is not None else []) + chosen
    return list({s.label: s for s in ordered}.values())
