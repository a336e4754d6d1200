"""What a draft name's kind says before anything loads: whether it can be a verifier, which verifier
it runs with, and the config its FLOPs are counted from (``flops_table``, ``list_embedded``)."""

from __future__ import annotations

from specnb.core import flops
from specnb.core.configs import resolve_config
from specnb.core.errors import ParameterError
from specnb.core.flops import FlopsReport, analytic_flops
from specnb.decode.kinds.kind import kind_named
from specnb.models.embedded import embedded_verifier_path, model_path
from specnb.models.registry import (
    EMBEDDED_VERIFIER,
    DraftRef,
    embedded_names,
    made_for,
    resolve_draft,
)


def kind_of_name(name: str, verifier: str | None = None):
    """The registered kind a draft name resolves to (``specnb.models.registry.resolve_draft``)."""
    return kind_named(resolve_draft(name, verifier).kind)


def check_verifier_name(name: str) -> None:
    """A draft-only name passed as the verifier is a one-line error, not a failed download."""
    if not kind_of_name(name).verifies:
        raise ParameterError(f"{name!r} is a draft, not a verifier; pass it as the draft")


def pick_verifier(draft: str | None, verifier: str | None = None) -> str:
    """The verifier to run ``draft`` with: ``verifier`` when named, else the one the draft was made for,
    else the embedded verifier. A head (EAGLE, Medusa) reads its verifier's features, so naming another
    verifier than the one it was made for is a one-line error; a distilled draft or an exit drafts for
    any verifier that shares its tokenizer (``specnb.decode.pairs`` checks that)."""
    own = made_for(draft)
    if verifier is None:
        return own or EMBEDDED_VERIFIER
    if own is not None and own != verifier and kind_of_name(draft).reads_features:
        raise ParameterError(f"head {draft!r} was made for verifier {own!r}, not {verifier!r}; drop --verifier "
                             f"or pass {own!r}")
    return verifier


def draft_config(verifier_config, ref: DraftRef, verifier: str | None = None):
    """The config a draft's FLOPs are counted from (an exit: its base's config cut to K layers), or a
    head's ``FlopsReport`` counted from its config.json; None for a draft with no model (prompt lookup)."""
    return kind_named(ref.kind).flops(verifier_config, ref, verifier)


def flops_table(verifier: str, drafts: list[str], context: int = 128):
    """``specnb.core.flops.flops_table`` for a verifier and drafts given by name."""
    v_config = resolve_config(verifier)
    configs = {name: draft_config(v_config, resolve_draft(name, verifier), verifier) for name in drafts}
    return flops.flops_table(v_config, configs, context, verifier)


def list_embedded() -> list[dict]:
    """One row per embedded model: name, role, kind (drafts: model, exit, lookup, eagle, medusa), params,
    flops_per_token, path (None: not a standalone checkpoint)."""
    from transformers import AutoConfig

    verifier_config = AutoConfig.from_pretrained(embedded_verifier_path())
    rows = []
    for name in embedded_names():
        ref = None if name == EMBEDDED_VERIFIER else resolve_draft(name, EMBEDDED_VERIFIER)
        config = verifier_config if ref is None else draft_config(verifier_config, ref, EMBEDDED_VERIFIER)
        cost = config if isinstance(config, FlopsReport) or config is None else analytic_flops(config)  # heads: counted
        path = model_path(name)
        rows.append({
            "name": name,
            "role": "verifier" if ref is None else "draft",
            "kind": None if ref is None else ref.kind,
            "params": cost.params if cost else 0,  # prompt lookup: no weights, no matmuls
            "flops_per_token": cost.flops_per_token if cost else 0,
            "path": str(path) if path else None,
        })
    return rows
