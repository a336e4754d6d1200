"""An early exit: the first K layers of a verifier (Elhoushi et al. 2024 "LayerSkip"; Zhang et al.
2023 "Draft & Verify"), sharing its tensors when it is the verifier's own (``exit:K``), else of the
embedded verifier it was named after. It drafts and is traced and priced like any causal LM."""

from __future__ import annotations

from specnb.core.configs import resolve_config
from specnb.decode.kinds.kind import DraftKind, register
from specnb.decode.kinds.kind_model import fit_vocab, trace_model
from specnb.decode.model_drafters import ModelDrafter
from specnb.models import load
from specnb.models.early_exit import exit_config, exit_draft


def shares_verifier(ref, verifier: str) -> bool:
    """An exit of the verifier itself reuses its loaded tensors; an exit of another model loads that one."""
    return ref.base in (None, verifier)


def load_exit(pair, ref, source, folder=None):
    if source is None:  # the verifier's own layers
        return exit_draft(pair.verifier, ref.exit_layers)
    model = exit_draft(load.load_weights(source, pair.device, pair.dtype), ref.exit_layers)
    return fit_vocab(pair, model, source, ref.name)  # e.g. an embedded exit drafting for another verifier


def exit_flops(verifier_config, ref, verifier=None):
    """Its base's config (``verifier_config`` when the base is the verifier) cut to K layers."""
    base = verifier_config if shares_verifier(ref, verifier) else resolve_config(ref.base)
    return exit_config(base, ref.exit_layers)


KIND = register(DraftKind(
    name="exit", drafter=ModelDrafter, load=load_exit,
    weights=lambda ref, verifier: None if shares_verifier(ref, verifier) else ref.base,
    flops=exit_flops, trace=trace_model))
