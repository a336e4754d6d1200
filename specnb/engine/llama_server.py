"""A serving engine started and stopped by the project: llama.cpp's ``llama-server`` on loopback.

Why a server: the decision practitioners face is whether to switch speculation on in a *serving
engine* under load, with continuous batching across requests — not in one stream of their own
loop. ``llama-server`` does that on a CPU: parallel slots (``-np``), continuous batching, speculative
decoding per slot (a draft GGUF or n-gram lookup) and Prometheus counters with vLLM's names
(``--metrics``). Its speculation settings are per launch, so every configuration is its own server.

Every process started here is stopped: ``Server`` is a context manager, registered with ``atexit``,
its process runs in its own session (a Ctrl-C to the notebook does not reach it half-way; ``stop``
ends its whole group) and gets SIGKILL from Linux when the process that started it dies
(``PR_SET_PDEATHSIG``), so a killed Jupyter kernel takes it down too.

Threads: llama.cpp's OpenMP threads spin; on a loaded 2-core machine ``-t 2`` fell to 0.3 tok/s
where ``-t 1`` gave 8, so the default is cores − 1, at least 1 (``default_threads``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from specnb.core.errors import SpecnbError

BUILD_HINT = ("llama-server not found: build it with `make setup` (or `python -m specnb.engine.llama_build`), set "
              "SPECNB_LLAMA_SERVER to a llama-server binary, or pass a running server with -p endpoint URL")
SPEC_TYPES = ("none", "draft-simple", "ngram-simple", "ngram-map-k", "ngram-mod", "ngram-cache", "draft-eagle3")


class ServerFailed(SpecnbError, RuntimeError):
    """The server did not start or died; the message ends with its last log line."""


@dataclass
class ServerConfig:
    """One server launch: the verifier GGUF, the speculation (``spec_type`` "none" for spec-off,
    ``draft`` a GGUF for "draft-simple"), draft length ``n_max`` (≥ ``n_min``), slots and threads.
    ``extra``: more llama-server flags, verbatim."""

    name: str
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


def default_threads(cores: int | None = None) -> int:
    """cores − 1, at least 1: spinning OpenMP threads on every core of a busy machine collapse."""
    return max(1, (cores or os.cpu_count() or 1) - 1)


def server_binary() -> Path | None:
    """``$SPECNB_LLAMA_SERVER``, else the project's llama.cpp build, else ``llama-server`` on PATH."""
    from specnb.engine.llama_build import server_path

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
    from specnb.engine.llama_build import read_status, server_path

    binary = server_binary()
    if binary is None:
        return BUILD_HINT
    status = read_status()
    if binary == server_path() and status is not None and not status.get("ok"):
        return (f"llama-server left out: {status.get('error')} (at setup); pass a running server with "
                "-p endpoint URL")
    return None


def spec_flags(config: ServerConfig) -> list[str]:
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


def server_args(config: ServerConfig, port: int, host: str = "127.0.0.1") -> list[str]:
    """The command line after the binary: loopback, one port, ``slots`` slots of ``ctx_per_slot``
    tokens each, continuous batching, metrics on, the speculation flags."""
    threads = str(config.threads or default_threads())
    return ["-m", str(config.model), "--host", host, "--port", str(port), "-t", threads, "-tb", threads,
            "-np", str(config.slots), "-c", str(config.slots * config.ctx_per_slot), "-cb", "--metrics",
            *spec_flags(config), *config.extra]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def load_libc():
    """libc, loaded in the parent: the child between fork and exec must not import or load anything."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


LIBC = load_libc()


def die_with_parent() -> None:
    """In the child before exec: SIGKILL when the thread that started it exits (``PR_SET_PDEATHSIG``,
    Linux), so start servers from the main thread."""
    if LIBC is not None:
        LIBC.prctl(1, signal.SIGKILL)


class Server:
    """A running llama-server: ``url``, ``pid``, ``log_tail()``; ``stop()`` (idempotent) ends it.

    ``with Server(config) as server:`` starts it and waits for ``/health`` (``ServerFailed`` with
    the last log line if it exits or does not answer within ``timeout_s``)."""

    def __init__(self, config: ServerConfig, binary: Path | None = None, timeout_s: float = 120.0):
        self.config, self.timeout_s = config, timeout_s
        self.binary = binary or server_binary()
        if self.binary is None:
            raise ServerFailed(BUILD_HINT)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(tempfile.mkstemp(prefix=f"specnb-server-{self.port}-", suffix=".log")[1])
        self.process: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self) -> Server:
        args = [str(self.binary), *server_args(self.config, self.port)]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True, preexec_fn=die_with_parent)
        atexit.register(self.stop)
        try:
            self.wait_ready()
        except BaseException:
            self.__exit__()
            raise
        return self

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerFailed(f"{self.config.name}: llama-server exited with code {self.process.returncode} "
                                   f"at start: {self.log_tail()}")
            if self.healthy():
                return
            time.sleep(0.2)
        raise ServerFailed(f"{self.config.name}: llama-server did not answer /health within {self.timeout_s:.0f} s: "
                           f"{self.log_tail()}")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                return response.status == 200
        except OSError:  # refused while it binds, 503 while it loads
            return False

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self) -> str:
        """The last non-empty line of the server's log."""
        try:
            lines = [line.strip() for line in self.log_path.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            return "(no log)"
        return lines[-1] if lines else "(empty log)"

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL after 5 s; the log file is removed."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=5)
        atexit.unregister(self.stop)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
        with contextlib.suppress(OSError):
            self.log_path.unlink()


@contextlib.contextmanager
def servers(configs: list[ServerConfig], timeout_s: float = 120.0):
    """Start every configuration's server (one after another), yield {name: Server}, stop them all."""
    with contextlib.ExitStack() as stack:
        yield {c.name: stack.enter_context(Server(c, timeout_s=timeout_s)) for c in configs}
