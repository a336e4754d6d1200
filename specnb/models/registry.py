"""What a model name means: the embedded models' names, and one resolver for draft names.

A draft is named in one of five ways, and ``resolve_draft`` is the only place that tells them
apart: ``prompt-lookup`` (no model, Saxena 2023), ``exit:K`` or an embedded ``smollm2-exit-K``
(the verifier's first K layers; Elhoushi et al. 2024 "LayerSkip", Zhang et al. 2023 "Draft &
Verify"), an embedded draft (distilled model, EAGLE or Medusa head), a local folder (a checkpoint or
a head, ``specnb.models.heads.head_kind``), or a hub id. Loading (``specnb.decode.pairs``), FLOPs
tables (``specnb.decode.kinds.by_name``) and the notebooks' draft lists all go through it; what a kind
does is its module's (``specnb.decode.kinds``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specnb.core import paths
from specnb.core.errors import ParameterError
from specnb.models.heads import head_kind, read_config

EMBEDDED_VERIFIER = "smollm2-135m"
PROMPT_LOOKUP = "prompt-lookup"
# Early exits of the embedded verifier (30 layers), untrained: they show the speculation tax and why
# drafts need training (their acceptance is in benchmarks/README.md).
EMBEDDED_EXITS = {"smollm2-exit-4": 4, "smollm2-exit-12": 12, "smollm2-exit-24": 24}
DEFAULT_GAMMA = 4  # draft tokens per step when neither the user nor the draft says otherwise
# γ an embedded draft decodes best at, chosen on development prompts (the last 10 of
# ``build_instructions(200, seed=777)``, never the evaluation prompts; batch 1, greedy, 48 tokens);
# the speedups at each γ are in benchmarks/README.md, *Building the heads*.
DRAFT_GAMMA = {"smollm2-eagle": 2}


def embedded_draft_names() -> list[str]:
    """Distilled drafts committed as ``specnb/data/drafts/<name>/config.json``."""
    return sorted(p.parent.name for p in paths.DRAFTS_DIR.glob("*/config.json"))


def embedded_names() -> list[str]:
    return [EMBEDDED_VERIFIER, *embedded_draft_names(), *EMBEDDED_EXITS, PROMPT_LOOKUP]


@dataclass(frozen=True, kw_only=True)
class DraftRef:
    """A draft name resolved without loading anything.

    ``kind`` is "model" (a causal LM with its own weights: embedded, folder or hub id), "exit" (the
    first ``exit_layers`` layers of ``base``: the verifier itself, sharing its tensors, or the
    embedded verifier when an embedded exit drafts for another model), "lookup" (no model), or
    "eagle" / "medusa" (a head on the verifier's features; a hub id is known to be one only once
    its files are there, see ``specnb.models.load``)."""

    name: str
    kind: str
    exit_layers: int | None = None
    base: str | None = None


def resolve_draft(name: str, verifier: str | None = None) -> DraftRef:
    """The one place that says what a draft name means (``verifier``: the name it drafts for). It
    names kinds because a name is where a kind comes from; everything after asks the registered kind
    (``specnb.decode.kinds``)."""
    if name == PROMPT_LOOKUP:
        return DraftRef(name=name, kind="lookup")
    if name in EMBEDDED_EXITS:
        return DraftRef(name=name, kind="exit", exit_layers=EMBEDDED_EXITS[name], base=EMBEDDED_VERIFIER)
    if name.startswith("exit:"):
        try:
            k = int(name.split(":", 1)[1])
        except ValueError:
            raise ParameterError(
                f"early-exit draft {name!r} must look like exit:K with an integer K, e.g. exit:4"
            ) from None
        return DraftRef(name=name, kind="exit", exit_layers=k, base=verifier)
    folder = draft_folder(name)
    kind = head_kind(folder) if folder.is_dir() else None
    return DraftRef(name=name, kind=kind or "model")  # any other name is a causal LM's (a hub id, a checkpoint)


def draft_folder(name: str) -> Path:
    """Where a draft name's files would be: its committed folder, or the local path it names."""
    return paths.DRAFTS_DIR / name if name in embedded_draft_names() else Path(name).expanduser()


def made_for(draft: str | None) -> str | None:
    """The verifier a draft was made for, or None when it does not say: every embedded draft (distilled
    from the embedded verifier, or trained on its features) and embedded exit was made for
    ``EMBEDDED_VERIFIER``; a head folder may name its verifier in its config.json ("verifier")."""
    if draft is None or draft == PROMPT_LOOKUP or draft.startswith("exit:"):
        return None
    if draft in EMBEDDED_EXITS or draft in embedded_draft_names():
        return EMBEDDED_VERIFIER
    folder = Path(draft).expanduser()
    verifier = (read_config(folder) or {}).get("verifier") if folder.is_dir() else None
    return verifier if isinstance(verifier, str) and verifier else None


def default_gamma(draft: str | None, tree=None) -> int:
    """γ when none is given: a chain runs at the draft's own (``DRAFT_GAMMA``), anything else (a tree's
    depth included: not tuned per draft) at ``DEFAULT_GAMMA``."""
    return DRAFT_GAMMA.get(draft or "", DEFAULT_GAMMA) if tree is None else DEFAULT_GAMMA
