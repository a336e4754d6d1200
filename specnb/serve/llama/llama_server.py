"""A serving engine started and stopped by the project: llama.cpp's ``llama-server`` on loopback.

Why a server: the decision practitioners face is whether to switch speculation on in a *serving
engine* under load, with continuous batching across requests — not in one stream of their own
loop. ``llama-server`` does that on a CPU: parallel slots (``-np``), continuous batching, speculative
decoding per slot (a draft GGUF or n-gram lookup) and Prometheus counters with vLLM's names
(``--metrics``). Its speculation settings are per launch, so every configuration is its own server.

Process handling — free port, own process group, death with the parent, readiness, log tail, stop —
is ``specnb.serve.server_process``'s, shared with vLLM's server.

Threads: llama.cpp's OpenMP threads spin; on a loaded 2-core machine ``-t 2`` fell to 0.3 tok/s
where ``-t 1`` gave 8, so the default is cores − 1, at least 1 (``default_threads``).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from specnb.serve.engines import RegisteredEngine
from specnb.serve.server_process import ServerFailed, ServerProcess, free_port, owns_port  # noqa: F401 (re-exported)
from specnb.serve.speculation import Speculation

BUILD_HINT = ("llama-server not found: build it with `make setup` (or `python -m specnb.native.llama_build`), set "
              "SPECNB_LLAMA_SERVER to a llama-server binary, or pass a running server with -p endpoint URL")
FAMILY = {"draft-simple": "draft_model", "draft-eagle3": "eagle3"}  # vLLM's word for each; the rest are n-grams
SPEC_TYPES = ("none", "draft-simple", "ngram-simple", "ngram-map-k", "ngram-mod", "ngram-cache", "draft-eagle3")


@dataclass(kw_only=True)
class LlamaServerConfig:
    """One server launch: the verifier GGUF, the speculation (``spec_type`` "none" for spec-off,
    ``draft`` a GGUF for "draft-simple", an EAGLE-3 head's GGUF for "draft-eagle3"), draft length
    ``n_max`` (≥ ``n_min``), slots and threads; ``entry``: what the user asked for (an n-gram type,
    a draft's or head's name; default the ``spec_type``), the display name's root.
    ``extra``: more llama-server flags, verbatim."""

    engine = RegisteredEngine("llama.cpp")  # ``engine_llama.ENGINE`` (not a field)
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
    from specnb.native.llama_build import server_path

    if os.environ.get("SPECNB_LLAMA_SERVER"):
        path = Path(os.environ["SPECNB_LLAMA_SERVER"])
        return path if path.is_file() else None
    if server_path().is_file():
        return server_path()
    found = shutil.which("llama-server")
    return Path(found) if found else None


def missing_note() -> str | None:
    """None when a llama-server binary is found (and setup's self-test of the project's build, if it
    ran one, passed), else one line saying how to get one or why it was left out."""
    from specnb.native.llama_build import read_status, server_path

    binary = server_binary()
    if binary is None:
        return BUILD_HINT
    status = read_status()
    if binary == server_path() and status is not None and not status.get("ok"):
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
