"""llama.cpp as a second engine, through llama-cpp-python: verifier-only decoding, its own
speculation (prompt lookup, or a draft exported to GGUF), and the forward probe the tax split needs.

Why a second engine: specnb's per-forward "hardware tax" is measured through PyTorch eager and
transformers, so it mixes what the machine costs with what the framework costs. llama.cpp runs the
same weights (an F32 export of the same checkpoint) with its own kernels and no Python per layer;
the difference is the framework's share. Its Q4_1 file is what a CPU user would run instead.

Every generation goes through ``Llama.generate`` at temperature 0 (llama.cpp's greedy sampler),
where llama-cpp-python runs its ``draft_model`` speculation, so speculation and verifier-only are
compared like with like. The binding is optional: ``missing_note`` says how to add it, or why the
build on this machine failed its self-test (``specnb.native.llama_build``).

Callers get an ``IsolatedLlamaCpp``: the model lives in a child process (``specnb.native.isolation``),
so native code that faults on this CPU ends one method with a note, not the notebook. ``LlamaCpp``
is what runs inside that child.
"""

from __future__ import annotations

import importlib.util
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specnb.core.sequences import first_mismatch
from specnb.native.isolation import Child
from specnb.native.llama_build import read_status

INSTALL_HINT = ("llama.cpp rows need llama-cpp-python: `make setup` builds it for this CPU (cmake and a C++ "
                "compiler, about 7 min on 2 cores), or `pip install llama-cpp-python==0.3.36`")


def missing_note() -> str | None:
    """None when llama.cpp can run here; else one line: how to install it, or how setup's self-test
    of this machine's build failed (then it is left out rather than crashing later)."""
    status = read_status()
    if status is not None and not status.get("ok"):
        return (f"llama.cpp left out: {status.get('error')} "
                "(at setup; see docs/gpus-and-macs.md, *llama.cpp on your CPU*)")
    try:  # found, not imported: importing loads llama.cpp's native code into this process
        found = importlib.util.find_spec("llama_cpp")
    except ValueError:  # a module object without a spec
        found = None
    return None if found is not None else INSTALL_HINT


@dataclass
class Generated:
    """One greedy generation: the new token ids (prompt excluded), its wall time, and how many
    verifier forwards it took (fewer than tokens when speculation accepted drafts)."""

    tokens: list[int]
    wall_ms: float
    verifier_forwards: int


class LlamaCpp:
    """One GGUF model in llama.cpp with its own KV cache, driven token by token.

    ``draft``: a ``LlamaDraftModel`` (``lookup_draft``, ``GGUFDraft``) that ``generate`` consults
    after every verification; llama-cpp-python then evaluates all logits of every forward (it must,
    to verify the drafted tokens). ``n_batch = n_ctx`` so ``forward`` can ask for all logits of one
    call (the verification shape) or only the last row (llama.cpp then skips the head elsewhere).
    """

    def __init__(self, path, threads: int, n_ctx: int = 1024, draft=None):
        import llama_cpp

        self.path = str(path)
        self.llm = llama_cpp.Llama(model_path=self.path, n_threads=threads, n_threads_batch=threads, n_ctx=n_ctx,
                                   n_batch=n_ctx, n_ubatch=n_ctx, logits_all=True, draft_model=draft, verbose=False)
        self.draft = draft
        self.vocab_size = self.llm.n_vocab()
        self.probes: dict[tuple[int, int], LlamaCppProbe] = {}  # time_probe's, one per shape

    @property
    def length(self) -> int:
        return self.llm.n_tokens

    def forward(self, tokens: list[int], all_logits: bool = False) -> np.ndarray:
        """Append ``tokens`` to the sequence; logits [len(tokens) or 1, V] (a view: copy to keep)."""
        start = self.llm.n_tokens
        self.llm._logits_all = all_logits  # read by Llama.eval when it builds the batch
        self.llm.eval(tokens)
        if all_logits:
            return self.llm.scores[start:start + len(tokens)]
        return np.ctypeslib.as_array(self.llm._ctx.get_logits_ith(-1), shape=(self.vocab_size,))[None]

    def truncate(self, length: int) -> None:
        """Roll the sequence back to ``length`` tokens (the next eval drops the KV slots after it)."""
        self.llm.n_tokens = min(length, self.llm.n_tokens)

    def generate(self, prompt: list[int], max_new_tokens: int, eos=()) -> Generated:
        """Greedy generation of up to ``max_new_tokens`` after ``prompt``, prefill included in the time."""
        eos = set(eos)
        calls = getattr(self.draft, "calls", 0)
        self.llm._logits_all = True if self.draft is not None else False
        self.llm.reset()
        out: list[int] = []
        t0 = time.perf_counter()
        for token in self.llm.generate(list(prompt), temp=0.0, top_k=1, repeat_penalty=1.0, reset=True):
            out.append(int(token))
            if len(out) >= max_new_tokens or token in eos:
                break
        wall_ms = (time.perf_counter() - t0) * 1e3
        forwards = getattr(self.draft, "calls", calls) - calls if self.draft is not None else len(out)
        return Generated(out, wall_ms, max(forwards, 1))

    def probe(self, n_tokens: int, context_len: int) -> LlamaCppProbe:
        return LlamaCppProbe(self, n_tokens, context_len)

    def time_probe(self, n_tokens: int, context_len: int) -> float:
        """One timed probe forward (the probes of one shape are alike, so they are kept per shape)."""
        key = (n_tokens, context_len)
        if key not in self.probes:
            self.probes[key] = self.probe(n_tokens, context_len)
        return self.probes[key].time_ms()


class LlamaCppProbe:
    """``specnb.measure.forward``'s probe interface for llama.cpp: one forward of ``n_tokens`` new
    tokens with all logits (the verification shape) on a ``context_len``-token cache, rolled back
    after. Probes of one model share its cache; each re-prefills the context only if it is gone."""

    def __init__(self, model: LlamaCpp, n_tokens: int, context_len: int):
        self.model, self.n_tokens, self.context_len, self.batch_size = model, n_tokens, context_len, 1
        rng = np.random.default_rng(0)
        self.context = rng.integers(0, model.vocab_size, context_len).tolist()
        self.new = rng.integers(0, model.vocab_size, n_tokens).tolist()

    def time_ms(self) -> float:
        llm = self.model.llm
        if llm.n_tokens < self.context_len or llm.input_ids[: self.context_len].tolist() != self.context:
            llm.reset()
            self.model.forward(self.context)
        self.model.truncate(self.context_len)
        t0 = time.perf_counter()
        self.model.forward(self.new, all_logits=True)
        elapsed = (time.perf_counter() - t0) * 1e3
        self.model.truncate(self.context_len)
        return elapsed


def lookup_draft(gamma: int):
    """llama-cpp-python's own prompt lookup (n-grams of up to 2 tokens), proposing up to ``gamma``."""
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    class CountedLookup(LlamaPromptLookupDecoding):
        calls = 0

        def __call__(self, input_ids, /, **kwargs):
            self.calls += 1
            return super().__call__(input_ids, **kwargs)

    return CountedLookup(max_ngram_size=2, num_pred_tokens=gamma)


def gguf_draft(path, gamma: int, threads: int, head_tokens=None, n_ctx: int = 1024):
    """A draft model in GGUF as a ``LlamaDraftModel`` (llama-cpp-python ships only prompt lookup).

    ``generate`` calls it with the whole sequence so far; it keeps its own KV cache, drops what the
    verifier rejected, evaluates the missing suffix and proposes ``gamma`` tokens greedily.
    ``head_tokens``: restrict the argmax to these ids, as specnb's trimmed draft head does (GGUF has
    no trimmed head, so the full head is still computed).
    """
    from llama_cpp.llama_speculative import LlamaDraftModel

    class GGUFDraft(LlamaDraftModel):
        calls = 0

        def __init__(self):
            self.model = LlamaCpp(path, threads, n_ctx)
            self.mask = None
            if head_tokens is not None:
                self.mask = np.full(self.model.vocab_size, -np.inf, dtype=np.float32)
                self.mask[np.asarray(head_tokens)] = 0.0

        def pick(self, logits: np.ndarray) -> int:
            return int(np.argmax(logits[-1] if self.mask is None else logits[-1] + self.mask))

        def __call__(self, input_ids, /, **kwargs):
            self.calls += 1
            ids = np.asarray(input_ids).tolist()
            have = self.model.llm.input_ids[: self.model.length].tolist()
            common = first_mismatch(have, ids)
            self.model.truncate(min(common, len(ids) - 1))  # always re-evaluate the last token
            token = self.pick(self.model.forward(ids[self.model.length:]))
            out = [token]
            for _ in range(gamma - 1):
                token = self.pick(self.model.forward([token]))
                out.append(token)
            return np.array(out, dtype=np.intc)

    return GGUFDraft()


@dataclass(frozen=True, kw_only=True)
class LlamaDraftSpec:
    """llama.cpp's own speculation, as data that can cross into the child: a draft model file ``path``
    (with the trimmed head's ``head_tokens``), or prompt lookup when ``path`` is None."""

    gamma: int
    path: str | None = None
    head_tokens: tuple[int, ...] | None = None


def open_model(path: str, threads: int, n_ctx: int, draft: LlamaDraftSpec | None) -> LlamaCpp:
    """Build a ``LlamaCpp`` with its draft: the factory an ``IsolatedLlamaCpp`` runs in its child."""
    if draft is None:
        return LlamaCpp(path, threads, n_ctx)
    if draft.path is None:
        return LlamaCpp(path, threads, n_ctx, draft=lookup_draft(draft.gamma))
    return LlamaCpp(path, threads, n_ctx, draft=gguf_draft(draft.path, draft.gamma, threads, draft.head_tokens, n_ctx))


class IsolatedLlamaCpp:
    """A ``LlamaCpp`` in a child process, with the same ``generate`` and ``probe``: a crash there
    raises ``specnb.native.isolation.EngineCrashed`` (one line naming the signal) in the caller."""

    def __init__(self, path, threads: int, n_ctx: int = 1024, draft: LlamaDraftSpec | None = None):
        self.path = str(path)
        self.child = Child("specnb.native.llama_cpp:open_model", self.path, threads, n_ctx, draft,
                           what=f"llama.cpp ({Path(self.path).name})")

    def generate(self, prompt: list[int], max_new_tokens: int, eos=()) -> Generated:
        return self.child.call("generate", list(prompt), max_new_tokens, tuple(eos))

    def probe(self, n_tokens: int, context_len: int) -> IsolatedProbe:
        return IsolatedProbe(self, n_tokens, context_len)

    @property
    def crash(self) -> str | None:
        """How its process died (one line), or None while it runs."""
        return self.child.crash

    def close(self) -> None:
        self.child.close()


class IsolatedProbe:
    """``LlamaCppProbe`` run in the model's child; ``time_ms`` is timed there."""

    def __init__(self, model: IsolatedLlamaCpp, n_tokens: int, context_len: int):
        self.model, self.n_tokens, self.context_len, self.batch_size = model, n_tokens, context_len, 1

    def time_ms(self) -> float:
        return self.model.child.call("time_probe", self.n_tokens, self.context_len)
