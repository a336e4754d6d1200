"""The verifier's EAGLE-3 head as the serving engines load it: which head "eagle3:K" runs, and why
an engine cannot run it (one line, before any server starts). One home for both engines' modules."""

from __future__ import annotations

from pathlib import Path

from specnb.core.errors import ParameterError

EAGLE3_HEAD = "smollm2-eagle3"  # what "eagle3:K" runs for the embedded verifier, on either engine (standard layout)


def eagle3_missing(verifier: str, needs_converter: bool = False, head: str | None = None) -> str:
    """"" where ``verifier`` has an EAGLE-3 head in the standard layout, else why not: another
    verifier, a head folder in another layout (``head_export.what_it_is`` says which) or, where the
    engine loads GGUF (``needs_converter``), no llama.cpp converter to make it."""
    from specnb.models.registry import EMBEDDED_VERIFIER, draft_folder
    from specnb.native.head_export import is_standard_head, what_it_is
    from specnb.native.llama_build import converter_path

    head = head or EAGLE3_HEAD
    if verifier != EMBEDDED_VERIFIER:
        return f"no EAGLE-3 head for {verifier!r} here"
    folder = draft_folder(head)
    if not is_standard_head(folder):
        return f"{head} is not an EAGLE-3 head in the standard layout vLLM loads ({what_it_is(folder)})"
    if needs_converter and not converter_path().is_file():
        return f"no llama.cpp converter to write {head}'s GGUF ({converter_path()} is missing: make setup)"
    return ""


def wants_head(smoke: bool, verifier: str) -> bool:
    """Whether an engine's default speculation looks for the verifier's EAGLE-3 head: not in a smoke
    run (one server fewer), and only where a verifier is named."""
    return not smoke and bool(verifier)


def eagle3_folder(verifier: str, alternatives: str) -> Path:
    """The folder an engine's ``eagle3`` loads for ``verifier`` (the standard layout, as it is); where
    there is none, one line saying why and naming ``alternatives``."""
    from specnb.models.registry import draft_folder

    why = eagle3_missing(verifier)
    if why:
        raise ParameterError(f"speculation eagle3: {why}; use {alternatives}")
    return draft_folder(EAGLE3_HEAD)


def eagle_heads() -> list[str]:
    """The embedded EAGLE heads, by name: what a llama-server entry may name besides ``eagle3``."""
    from specnb.decode.kinds.by_name import kind_of_name
    from specnb.models.registry import embedded_draft_names

    return [name for name in embedded_draft_names() if kind_of_name(name).name == "eagle"]
