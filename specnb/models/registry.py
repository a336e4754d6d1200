"""What a model name means: the embedded models' names, and one resolver for draft names.

A draft is named in one of five ways, and ``resolve_draft`` is the only place that tells them
apart: ``prompt-lookup`` (no model, Saxena 2023), ``exit:K`` or an embedded ``smollm2-exit-K``
(the verifier's first K layers; Elhoushi et al. 2024 "LayerSkip", Zhang et al. 2023 "Draft &
Verify"), an embedded draft (distilled model, EAGLE or Medusa head), a local folder (a checkpoint or
a head, ``specnb.models.heads.head_kind``), or a hub id. Loading (``specnb.models.load``), FLOPs
tables and the notebooks' draft lists all go through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specnb.core import paths
from specnb.core.errors import ParameterError
from specnb.models.heads import head_flops, head_kind, read_config

EMBEDDED_VERIFIER = "smollm2-135m"
PROMPT_LOOKUP = "prompt-lookup"
# Early exits of the embedded verifier (30 layers), untrained: they show the speculation tax and why
# drafts need training (their acceptance is in benchmarks/README.md).
EMBEDDED_EXITS = {"smollm2-exit-4": 4, "smollm2-exit-12": 12, "smollm2-exit-24": 24}
KINDS = ("model", "exit", "lookup", "eagle", "medusa")  # what ``DraftRef.kind`` can be
HEAD_KINDS = ("eagle", "medusa")  # drafts that read the verifier's features
DEFAULT_GAMMA = 4  # draft tokens per step when neither the user nor the draft says otherwise
# γ an embedded draft decodes best at, chosen on development prompts (the last 10 of
# ``build_instructions(200, seed=777)``, never the evaluation prompts; batch 1, greedy, 48 tokens):
# ``smollm2-eagle`` γ 2 1.11x, γ 3 0.88x, γ 4 0.86x (benchmarks/README.md, *Building the heads*).
DRAFT_GAMMA = {"smollm2-eagle": 2}


def embedded_draft_names() -> list[str]:
    """Distilled drafts committed as ``specnb/data/drafts/<name>/config.json``."""
    return sorted(p.parent.name for p in paths.DRAFTS_DIR.glob("*/config.json"))


def embedded_names() -> list[str]:
    return [EMBEDDED_VERIFIER, *embedded_draft_names(), *EMBEDDED_EXITS, PROMPT_LOOKUP]


@dataclass(frozen=True)
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
    """The one place that says what a draft name means (``verifier``: the name it drafts for)."""
    if name == PROMPT_LOOKUP:
        return DraftRef(name, "lookup")
    if name in EMBEDDED_EXITS:
        return DraftRef(name, "exit", EMBEDDED_EXITS[name], EMBEDDED_VERIFIER)
    if name.startswith("exit:"):
        try:
            k = int(name.split(":", 1)[1])
        except ValueError:
            raise ParameterError(
                f"early-exit draft {name!r} must look like exit:K with an integer K, e.g. exit:4"
            ) from None
        return DraftRef(name, "exit", k, verifier)
    folder = paths.DRAFTS_DIR / name if name in embedded_draft_names() else Path(name).expanduser()
    kind = head_kind(folder) if folder.is_dir() else None
    return DraftRef(name, kind or "model")


def shares_verifier(ref: DraftRef, verifier: str) -> bool:
    """An exit of the verifier itself reuses its loaded tensors; any other draft loads its own."""
    return ref.kind == "exit" and ref.base == verifier


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


def pick_verifier(draft: str | None, verifier: str | None = None) -> str:
    """The verifier to run ``draft`` with: ``verifier`` when named, else the one the draft was made for,
    else the embedded verifier. A head (EAGLE, Medusa) reads its verifier's features, so naming another
    verifier than the one it was made for is a one-line error; a distilled draft or an exit drafts for
    any verifier that shares its tokenizer (``specnb.models.load`` checks that)."""
    own = made_for(draft)
    if verifier is None:
        return own or EMBEDDED_VERIFIER
    if own is not None and own != verifier and resolve_draft(draft).kind in HEAD_KINDS:
        raise ParameterError(f"head {draft!r} was made for verifier {own!r}, not {verifier!r}; drop --verifier "
                             f"or pass {own!r}")
    return verifier


def default_gamma(draft: str | None, tree=None) -> int:
    """γ when none is given: a chain runs at the draft's own (``DRAFT_GAMMA``), anything else (a tree's
    depth included: not tuned per draft) at ``DEFAULT_GAMMA``."""
    return DRAFT_GAMMA.get(draft or "", DEFAULT_GAMMA) if tree is None else DEFAULT_GAMMA


def check_verifier_name(name: str) -> None:
    """A draft-only name passed as the verifier is a one-line error, not a failed download."""
    if resolve_draft(name).kind != "model":
        raise ParameterError(f"{name!r} is a draft, not a verifier; pass it as the draft")


def draft_config(verifier_config, ref: DraftRef, verifier: str | None = None):
    """The config a draft's FLOPs are counted from: an exit is its base's config (``verifier_config``
    when the base is the verifier ``verifier``) cut to K layers; a head's FLOPs come counted
    (``specnb.models.heads.head_flops``); None for prompt lookup (no model)."""
    from specnb.core.configs import resolve_config
    from specnb.models.early_exit import exit_config

    if ref.kind == "lookup":
        return None
    if ref.kind in HEAD_KINDS:
        folder = paths.DRAFTS_DIR / ref.name if ref.name in embedded_draft_names() else Path(ref.name).expanduser()
        return head_flops(ref.kind, (read_config(folder) or {}) if folder.is_dir() else {}, verifier_config)
    if ref.kind == "exit":
        base = verifier_config if ref.base in (None, verifier) else resolve_config(ref.base)
        return exit_config(base, ref.exit_layers)
    return resolve_config(ref.name)


def flops_table(verifier: str, drafts: list[str], context: int = 128):
    """``specnb.core.flops.flops_table`` for a verifier and drafts given by name."""
    from specnb.core.configs import resolve_config
    from specnb.core.flops import flops_table as table

    v_config = resolve_config(verifier)
    configs = {name: draft_config(v_config, resolve_draft(name, verifier), verifier) for name in drafts}
    return table(v_config, configs, context, verifier)
