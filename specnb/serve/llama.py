"""llama.cpp's ``llama-server`` behind the engine seam: its configurations from speculation entries
(n-gram lookups, embedded drafts exported to GGUF, the EAGLE-3 head as ``draft-eagle3``), its flags
as a user pastes them, its forward probe (llama.cpp times a prompt's forward itself) and its server,
started and stopped by the project on loopback. Its running batch is ``llamacpp:requests_processing``
(slots busy, with ``--metrics``), and requests carry ``cache_prompt: false``: a slot then prefills
every prompt in full, as vLLM without its prefix cache does.

Why a server: the decision practitioners face is whether to switch speculation on in a *serving
engine* under load, with continuous batching across requests — not in one stream of their own
loop. ``llama-server`` does that on a CPU: parallel slots (``-np``), continuous batching, speculative
decoding per slot (a draft GGUF or n-gram lookup) and Prometheus counters with vLLM's names
(``--metrics``). Its speculation settings are per launch, so every configuration is its own server.

Process handling — free port, own process group, death with the parent, readiness, log tail, stop —
is ``specnb.serve.processes``'s, shared with every engine.

Threads: llama.cpp's OpenMP threads spin; on a loaded 2-core machine ``-t 2`` fell to 0.3 tok/s
where ``-t 1`` gave 8, so the default is cores − 1, at least 1 (``default_threads``).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from specnb.core.devices import cpu_name
from specnb.core.errors import ParameterError
from specnb.models import gguf
from specnb.native import llama_build
from specnb.serve import engines
from specnb.serve.engines import (
    EngineDefaults,
    Launch,
    RegisteredEngine,
    Speculation,
    eagle3_missing,
    eagle_heads,
    model_drafts,
    parse_entry,
    range_text,
    register,
    wants_head,
)
from specnb.serve.processes import ServerFailed, ServerProcess

BUILD_HINT = ("llama-server not found: build it with `make setup` (or `python -m specnb.native.llama_build`), set "
              "SPECNB_LLAMA_SERVER to a llama-server binary, or pass a running server with -p endpoint URL")
FAMILY = {"draft-simple": "draft_model", "draft-eagle3": "eagle3"}  # vLLM's word for each; the rest are n-grams
SPEC_TYPES = ("none", "draft-simple", "ngram-simple", "ngram-map-k", "ngram-mod", "ngram-cache", "draft-eagle3")
NGRAM_TYPES = tuple(t for t in SPEC_TYPES if t != "none" and not t.startswith("draft"))  # n-gram lookups
DEFAULT_HEAD = "eagle3:2"  # the head's k with the best TPOT speedup at one request (2026-12-02, benchmarks/README.md)
CTX_PER_SLOT = 512  # tokens per slot: prompt and output of one request


def verifier_gguf(verifier: str, precision: str):
    """The GGUF llama-server serves: ``verifier`` itself where it names a ``.gguf`` file (a model of the user's
    own, as it is: ``precision`` says nothing then), else the embedded verifier's at ``precision``
    (``specnb.models.gguf.embedded_gguf``, which refuses any other name in one line)."""
    path = Path(verifier).expanduser()
    if path.suffix.lower() != ".gguf":
        return gguf.embedded_gguf(verifier, precision)
    if not path.is_file():
        raise ParameterError(f"verifier GGUF {str(path)!r} does not exist; pass the path of a .gguf file")
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ParameterError(f"verifier {str(path)!r} is not a GGUF file (no GGUF magic); pass a .gguf file "
                                 "that llama.cpp wrote (convert_hf_to_gguf.py)")
    return path


def head_for(kind: str, verifier: str) -> str:
    """The head an entry runs: ``eagle3`` is the embedded verifier's own (``engines.EAGLE3_HEAD``), a head's
    name that head; it must be in the standard EAGLE-3 layout (one line otherwise)."""
    # deferred: the draft registry and the head export import torch
    from specnb.models.registry import EMBEDDED_VERIFIER
    from specnb.native.head_export import head_folder

    if kind == "eagle3" and verifier != EMBEDDED_VERIFIER:
        raise ParameterError(f"speculation eagle3: no EAGLE-3 head for {verifier!r} here; use an n-gram type "
                             f"({', '.join(NGRAM_TYPES)}) as TYPE:K")
    head = engines.EAGLE3_HEAD if kind == "eagle3" else kind
    head_folder(head)
    return head


class LlamaServerEngine(EngineDefaults):
    """llama-server: launched here, one server per configuration, relaunched every round (a start takes
    seconds)."""

    name = "llama.cpp"
    label = "llama-server"
    metrics_prefix = "llamacpp"
    launched = True
    batch_gauge = "requests_processing"
    request_extra = {"cache_prompt": False}
    context = CTX_PER_SLOT
    relaunch_each_round = True
    version = llama_build.VERSION  # the llama-cpp-python whose vendored llama.cpp is built

    def configs(self, verifier: str, precision: str, entries: list[str], max_level: int, threads: int = 0
                ) -> list[LlamaServerConfig]:
        """spec-off, then one server per entry: ``"ngram-simple:4"`` (an n-gram type and its draft
        length), ``"smollm2-draft-s:3"`` (an embedded draft, exported to GGUF, at k = 3) or ``"eagle3:3"``
        / ``"smollm2-eagle3:3"`` (the EAGLE-3 head, ``draft-eagle3``, exported to GGUF by llama.cpp's
        converter and cached per head file hash, ``specnb.native.head_export.head_gguf``); ``max_level``
        slots. The verifier is ``verifier_gguf``'s: the embedded one at ``precision`` or a .gguf file of the
        user's own. Every entry and head is checked before anything is exported."""
        from specnb.native.head_export import head_gguf  # deferred: it imports torch

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
                draft = str(gguf.embedded_gguf(kind, "q4_1" if precision == "q4_1" else "f32"))
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
        return missing_note()


ENGINE = register(LlamaServerEngine())


# ------------------------------------------------------------------ one launch and its process


@dataclass(kw_only=True)
class LlamaServerConfig:
    """One server launch: the verifier GGUF, the speculation (``spec_type`` "none" for spec-off,
    ``draft`` a GGUF for "draft-simple", an EAGLE-3 head's GGUF for "draft-eagle3"), draft length
    ``n_max`` (≥ ``n_min``), slots and threads; ``entry``: what the user asked for (an n-gram type,
    a draft's or head's name; default the ``spec_type``), the display name's root.
    ``extra``: more llama-server flags, verbatim."""

    engine = RegisteredEngine("llama.cpp")  # ``ENGINE`` above (not a field)
    model: str
    spec_type: str = "none"
    draft: str | None = None
    n_max: int = 4
    n_min: int = 0
    p_min: float = 0.0
    slots: int = 4
    ctx_per_slot: int = 1024
    threads: int = 0  # 0: default_threads()
    extra: list[str] = field(default_factory=list)
    entry: str = ""
    aa_twin: bool = False  # spec-off's second launch, named ``AA_TWIN_CONFIG`` (``serving_stats.with_twin``)

    @property
    def speculation(self) -> Speculation:
        if self.spec_type == "none":
            return Speculation(aa_twin=self.aa_twin)
        return Speculation(entry=self.entry or self.spec_type, k=self.n_max, method=self.spec_type,
                           family=FAMILY.get(self.spec_type, "ngram"), uses_model=self.drafts_with_model)

    @property
    def name(self) -> str:
        return self.speculation.name

    @property
    def speculative(self) -> bool:
        return self.spec_type != "none"

    @property
    def draft_length(self) -> int:
        return self.n_max

    @property
    def drafts_with_model(self) -> bool:
        return self.spec_type.startswith("draft")


def default_threads(cores: int | None = None) -> int:
    """cores − 1, at least 1: spinning OpenMP threads on every core of a busy machine collapse."""
    return max(1, (cores or os.cpu_count() or 1) - 1)


def server_binary() -> Path | None:
    """``$SPECNB_LLAMA_SERVER``, else the project's llama.cpp build, else ``llama-server`` on PATH."""
    if os.environ.get("SPECNB_LLAMA_SERVER"):
        path = Path(os.environ["SPECNB_LLAMA_SERVER"])
        return path if path.is_file() else None
    if llama_build.server_path().is_file():
        return llama_build.server_path()
    found = shutil.which("llama-server")
    return Path(found) if found else None


def missing_note() -> str | None:
    """None when a llama-server binary is found (and setup's self-test of the project's build, if it
    ran one, passed), else one line saying how to get one or why it was left out."""
    binary = server_binary()
    if binary is None:
        return BUILD_HINT
    status = llama_build.read_status()
    if binary == llama_build.server_path() and status is not None and not status.get("ok"):
        return (f"llama-server left out: {status.get('error')} (at setup); pass a running server with "
                "-p endpoint URL")
    return None


def spec_flags(config: LlamaServerConfig) -> list[str]:
    """llama-server's speculation flags for ``config`` (draft length for both drafts and n-grams)."""
    if config.spec_type not in SPEC_TYPES:
        raise ServerFailed(f"unknown spec_type {config.spec_type!r}; known: {', '.join(SPEC_TYPES)}")
    if config.spec_type == "none":
        return []
    flags = ["--spec-type", config.spec_type, "--spec-draft-n-max", str(config.n_max),
             "--spec-draft-n-min", str(config.n_min), "--spec-draft-p-min", str(config.p_min)]
    if config.spec_type.startswith("draft"):
        if not config.draft:
            raise ServerFailed(f"{config.name}: spec_type {config.spec_type} needs a draft GGUF")
        flags += ["-md", str(config.draft)]
    if config.spec_type in ("ngram-simple", "ngram-map-k"):
        kind = config.spec_type.removeprefix("ngram-")
        flags += [f"--spec-ngram-{kind}-size-n", "3", f"--spec-ngram-{kind}-size-m", str(config.n_max)]
    return flags


def server_args(config: LlamaServerConfig, port: int, host: str = "127.0.0.1") -> list[str]:
    """The command line after the binary: loopback, one port, ``slots`` slots of ``ctx_per_slot``
    tokens each, continuous batching, metrics on, the speculation flags."""
    threads = str(config.threads or default_threads())
    return ["-m", str(config.model), "--host", host, "--port", str(port), "-t", threads, "-tb", threads,
            "-np", str(config.slots), "-c", str(config.slots * config.ctx_per_slot), "-cb", "--metrics",
            *spec_flags(config), *config.extra]


class LlamaServer(ServerProcess):
    """A running llama-server (see ``ServerProcess``: ``url``, ``pid``, ``log_tail()``, ``stop()``).

    ``with LlamaServer(config) as server:`` starts it and waits for ``/health``. ``port``: 0 to let the
    project pick one (and pick again if it was lost to a race), else that port."""

    engine = "llama-server"

    def __init__(self, config: LlamaServerConfig, binary: Path | None = None, timeout_s: float = 120.0, port: int = 0):
        self.config = config
        self.binary = binary or server_binary()
        if self.binary is None:
            raise ServerFailed(BUILD_HINT)
        super().__init__(config.name, timeout_s, port)

    def command(self) -> list[str]:
        return [str(self.binary), *server_args(self.config, self.port)]

    def is_error_line(self, line: str) -> bool:  # llama.cpp's log level column, less what it calls normal
        return " E " in line and "this warning is normal" not in line  # draft-eagle3's context during fitting

    def bind_failed(self, log: str) -> bool:
        return "bind" in log.lower()  # "couldn't bind HTTP server socket"
