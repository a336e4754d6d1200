"""The records of notebook 07's alternatives table (``specnb.measure.alternatives`` runs them): a
``Method`` and the label the table gives it, the speculative rows asked for (``DraftChoice``), the
llama.cpp rows (``LlamaRows``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from specnb.native.llama_cpp import Generated

BASELINE_METHOD = "verifier-only · PyTorch eager · fp32"


@dataclass(kw_only=True)
class Method:
    """One way to answer a prompt. ``run(prompt_ids, max_new_tokens)`` returns a ``Generated``
    (greedy, prefill included in its wall time). ``lossless``: the output is the fp32 verifier's
    by construction (speculation, or the same math on other kernels); the measured fidelity must
    then say identical, which the table checks rather than assumes."""

    name: str
    engine: str  # "PyTorch eager", "PyTorch oneDNN", "llama.cpp"
    precision: str  # "fp32", "bf16", "int8", "F32", "Q4_1"
    speculation: str  # "" (none), or what drafts: "prompt-lookup γ=4"
    lossless: bool
    run: Callable[[list[int], int], Generated]
    model: object = None  # the verifier it runs (a torch model or an ``IsolatedLlamaCpp``), for the tax split
    failure: str | None = None  # one line, set when its engine crashed: the method is then left out


@dataclass(frozen=True, kw_only=True)
class MethodLabel:
    """How the table names a method, and whether its output is the fp32 verifier's (see ``Method``)."""

    name: str
    engine: str
    precision: str
    lossless: bool = True


@dataclass
class DraftChoice:
    """One speculative row of notebook 07's table: a draft name and γ, or a static tree. Not a serving
    configuration (``specnb.serve.speculation.Speculation``): this one names a draft for ``generate``."""

    draft: str
    gamma: int = 4
    tree: tuple[int, ...] | None = None

    @property
    def label(self) -> str:
        return f"{self.draft} " + ("tree=" + "x".join(map(str, self.tree)) if self.tree else f"γ={self.gamma}")


LLAMA_PRECISIONS = {"q4_1": "Q4_1", "f32": "F32", "f16": "F16"}


@dataclass(frozen=True, kw_only=True)
class LlamaRows:
    """The llama.cpp rows: one per precision (``LLAMA_PRECISIONS``' keys; none: no rows), Q4_1 also with
    ``draft`` (a distilled draft exported to GGUF) when one is named; ``threads`` None: torch's."""

    precisions: tuple[str, ...] = ("q4_1", "f32")
    draft: str | None = None
    threads: int | None = None
    n_ctx: int = 1024

