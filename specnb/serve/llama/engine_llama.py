"""llama.cpp's ``llama-server`` behind the engine seam: its configurations from speculation entries
(n-gram lookups, embedded drafts exported to GGUF, the EAGLE-3 head as ``draft-eagle3``), its server,
its forward probe (llama.cpp times a prompt's forward itself) and its flags as a user pastes them.
Its running batch is ``llamacpp:requests_processing`` (slots busy, with ``--metrics``), and requests
carry ``cache_prompt: false``: a slot then prefills every prompt in full, as vLLM without its prefix
cache does. The server's process and flags are ``specnb.serve.llama.llama_server``'s."""

from __future__ import annotations

from specnb.native import llama_build
from specnb.serve import eagle3_heads
from specnb.serve.eagle3_heads import eagle3_missing, eagle_heads, wants_head
from specnb.serve.engines import EngineDefaults, register
from specnb.serve.llama import llama_server
from specnb.serve.llama.llama_server import SPEC_TYPES, LlamaServer, LlamaServerConfig, default_threads, spec_flags
from specnb.serve.speculation import Launch, model_drafts, parse_entry, range_text

NGRAM_TYPES = tuple(t for t in SPEC_TYPES if t != "none" and not t.startswith("draft"))  # n-gram lookups
DEFAULT_HEAD = "eagle3:2"  # the head's k with the best TPOT speedup at one request (2026-12-02, benchmarks/README.md)
CTX_PER_SLOT = 512  # tokens per slot: prompt and output of one request


def verifier_gguf(verifier: str, precision: str):
    """The GGUF llama-server serves: ``verifier`` itself where it names a ``.gguf`` file (a model of the user's
    own, as it is: ``precision`` says nothing then), else the embedded verifier's at ``precision``
    (``specnb.models.gguf.embedded_gguf``, which refuses any other name in one line)."""
    from pathlib import Path

    from specnb.core.errors import ParameterError
    from specnb.models.gguf import embedded_gguf

    path = Path(verifier).expanduser()
    if path.suffix.lower() != ".gguf":
        return embedded_gguf(verifier, precision)
    if not path.is_file():
        raise ParameterError(f"verifier GGUF {str(path)!r} does not exist; pass the path of a .gguf file")
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ParameterError(f"verifier {str(path)!r} is not a GGUF file (no GGUF magic); pass a .gguf file "
                                 "that llama.cpp wrote (convert_hf_to_gguf.py)")
    return path


def head_for(kind: str, verifier: str) -> str:
    """The head an entry runs: ``eagle3`` is the embedded verifier's own (``eagle3_heads.EAGLE3_HEAD``), a head's
    name that head; it must be in the standard EAGLE-3 layout (one line otherwise)."""
    from specnb.core.errors import ParameterError
    from specnb.models.registry import EMBEDDED_VERIFIER
    from specnb.native.head_export import head_folder

    if kind == "eagle3" and verifier != EMBEDDED_VERIFIER:
        raise ParameterError(f"speculation eagle3: no EAGLE-3 head for {verifier!r} here; use an n-gram type "
                             f"({', '.join(NGRAM_TYPES)}) as TYPE:K")
    head = eagle3_heads.EAGLE3_HEAD if kind == "eagle3" else kind
    head_folder(head)
    return head


class LlamaServerEngine(EngineDefaults):
    """llama-server: launched here, one server per configuration, relaunched every round (a start takes
    seconds)."""

    name = "llama.cpp"
    label = "llama-server"
    version = llama_build.VERSION  # the llama-cpp-python whose vendored llama.cpp is built
    metrics_prefix = "llamacpp"
    launched = True
    batch_gauge = "requests_processing"
    request_extra = {"cache_prompt": False}
    context = CTX_PER_SLOT
    relaunch_each_round = True

    def configs(self, verifier: str, precision: str, entries: list[str], max_level: int, threads: int = 0
                ) -> list[LlamaServerConfig]:
        """spec-off, then one server per entry: ``"ngram-simple:4"`` (an n-gram type and its draft
        length), ``"smollm2-draft-s:3"`` (an embedded draft, exported to GGUF, at k = 3) or ``"eagle3:3"``
        / ``"smollm2-eagle3:3"`` (the EAGLE-3 head, ``draft-eagle3``, exported to GGUF by llama.cpp's
        converter and cached per head file hash, ``specnb.native.head_export.head_gguf``); ``max_level``
        slots. The verifier is ``verifier_gguf``'s: the embedded one at ``precision`` or a .gguf file of the
        user's own. Every entry and head is checked before anything is exported."""
        from specnb.models.gguf import embedded_gguf
        from specnb.native.head_export import head_gguf

        heads = eagle_heads()
        parsed = [parse_entry(spec, (*NGRAM_TYPES, *model_drafts(), "eagle3", *heads)) for spec in entries]
        head_of = {kind: head_for(kind, verifier) for kind, _ in parsed if kind == "eagle3" or kind in heads}
        common = {"model": str(verifier_gguf(verifier, precision)), "slots": int(max_level),
                  "ctx_per_slot": CTX_PER_SLOT, "threads": threads or default_threads()}
        out = [LlamaServerConfig(**common)]
        for kind, k in parsed:
            if kind in NGRAM_TYPES:
                out.append(LlamaServerConfig(entry=kind, spec_type=kind, n_max=k, **common))
            elif kind in head_of:
                draft = str(head_gguf(head_of[kind], verifier))
                out.append(LlamaServerConfig(entry=kind, spec_type="draft-eagle3", draft=draft, n_max=k,
                                             **common))
            else:
                draft = str(embedded_gguf(kind, "q4_1" if precision == "q4_1" else "f32"))
                out.append(LlamaServerConfig(entry=kind, spec_type="draft-simple", draft=draft, n_max=k,
                                             **common))
        return out

    def default_entries(self, smoke: bool, verifier: str) -> list[str]:
        """ngram-simple at k = 4 (3 in a smoke run), and the EAGLE-3 head beside it where there is one."""
        ngram = [f"ngram-simple:{3 if smoke else 4}"]
        head = wants_head(smoke, verifier) and not eagle3_missing(verifier, True)
        return ngram + ([DEFAULT_HEAD] if head else [])

    def default_note(self, smoke: bool, verifier: str) -> str:
        why = eagle3_missing(verifier, True) if wants_head(smoke, verifier) else ""
        return f"{DEFAULT_HEAD} left out of llama-server's default speculation: {why}" if why else ""

    def machine(self, configs: list) -> str:
        from specnb.core.devices import cpu_name

        return f"{cpu_name()}, llama-server with {configs[0].threads} thread(s)"

    def probe(self, client, target, ids: list[int], clock) -> tuple[int, float] | None:
        """(tokens, ms) of one forward over ``ids`` as llama.cpp times it (``prompt_ms``, no prompt cache)."""
        body = {"prompt": ids, "n_predict": 1, "cache_prompt": False, "temperature": 0.0}
        timings = client.post(f"{target.url}/completion", json=body).json().get("timings", {})
        return (int(timings["prompt_n"]), float(timings["prompt_ms"])) if "prompt_ms" in timings else None

    def launch_text(self, config) -> str:
        """A configuration's speculation flags, a draft's path shown as a placeholder."""
        return " ".join("<draft GGUF>" if config.draft and f == str(config.draft) else f
                        for f in spec_flags(config))

    def policy_lines(self, launch: Launch, configs: list) -> list[str]:
        """One command-line tail per load range: llama-server fixes its speculation per launch."""
        flags = {c.name: self.launch_text(c) for c in configs if isinstance(c, LlamaServerConfig)}
        lines = []
        for i, (start, end, k) in enumerate(launch.ranges):
            what = ("no --spec-type (spec-off)" if k == 0
                    else flags.get(launch.by_k.get(k, ""), f"--spec-draft-n-max {k}"))
            lines.append(f"{range_text(start, end, i == len(launch.ranges) - 1)} concurrent: {what}")
        return lines

    def server(self, config: LlamaServerConfig, timeout_s: float | None = None) -> LlamaServer:
        return LlamaServer(config) if timeout_s is None else LlamaServer(config, timeout_s=timeout_s)

    def missing(self) -> str | None:
        return llama_server.missing_note()


ENGINE = register(LlamaServerEngine())
