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

Ports: the project picks a free loopback port and llama-server binds it a moment later; another
process can take it in between (a race), so a start that fails to bind a port the project picked is
retried on a new one (``BIND_RETRIES``). A port the caller names is used as given. Readiness is
``/health`` answering *and* the listening socket being the child's own: another llama-server already
on that port answers ``/health`` too.

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
BIND_RETRIES = 3  # fresh ports tried when the one the project picked was taken before the server bound it
SPEC_TYPES = ("none", "draft-simple", "ngram-simple", "ngram-map-k", "ngram-mod", "ngram-cache", "draft-eagle3")


class ServerFailed(SpecnbError, RuntimeError):
    """The server did not start or died; the message ends with its last log line."""


@dataclass(kw_only=True)
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


def owns_port(pid: int, port: int) -> bool | None:
    """Whether process ``pid`` holds the loopback socket listening on ``port`` (Linux's /proc: the
    listening socket's inode among the process's file descriptors); None where /proc cannot say."""
    try:
        table = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
        fds = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
    except OSError:
        return None
    listening = [row.split() for row in table]
    inodes = {cols[9] for cols in listening if cols[1].endswith(f":{port:04X}") and cols[3] == "0A"}  # 0A: LISTEN
    return any(f"socket:[{inode}]" in fds for inode in inodes)


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
    the log's last and first error lines if it exits or does not answer within ``timeout_s``).
    ``port``: 0 to let the project pick one (and pick again if it was lost to a race), else that port."""

    def __init__(self, config: ServerConfig, binary: Path | None = None, timeout_s: float = 120.0, port: int = 0):
        self.config, self.timeout_s = config, timeout_s
        self.binary = binary or server_binary()
        if self.binary is None:
            raise ServerFailed(BUILD_HINT)
        self.picked = not port  # the project chose the port: a bind lost to a race is retried on another
        self.port = port or free_port()
        self.log_path = Path(tempfile.mkstemp(prefix=f"specnb-server-{self.port}-", suffix=".log")[1])
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self) -> Server:
        """Launch and wait until ready; a port the project picked and lost before the server bound it
        is picked again, up to ``BIND_RETRIES`` times. On any failure the process is stopped."""
        try:
            for attempt in range(BIND_RETRIES + 1):
                self.launch()
                try:
                    self.wait_ready()
                    return self
                except ServerFailed:
                    if not (self.picked and self.lost_port() and attempt < BIND_RETRIES):
                        raise
                self.port = free_port()
        except BaseException:
            self.__exit__()
            raise
        raise AssertionError("unreachable: the last attempt returns or raises")

    def launch(self) -> None:
        args = [str(self.binary), *server_args(self.config, self.port)]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True, preexec_fn=die_with_parent)
        atexit.register(self.stop)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerFailed(f"{self.config.name}: llama-server exited with code {self.process.returncode} "
                                   f"at start on port {self.port}: {self.log_summary()}")
            if self.healthy() and owns_port(self.process.pid, self.port) is not False:
                return
            time.sleep(0.2)
        raise ServerFailed(f"{self.config.name}: llama-server did not answer /health within {self.timeout_s:.0f} s: "
                           f"{self.log_summary()}")

    def lost_port(self) -> bool:
        """Whether the server exited because its port was taken (llama.cpp logs "couldn't bind")."""
        return self.process is not None and self.process.poll() is not None and "bind" in self.log_text().lower()

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                return response.status == 200
        except OSError:  # refused while it binds, 503 while it loads
            return False

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self) -> str:
        """The last non-empty line of the server's log."""
        lines = [line.strip() for line in self.log_text().splitlines() if line.strip()]
        return lines[-1] if lines else "(empty log)"

    def log_summary(self) -> str:
        """The log's last line, and its first error line where that says more (llama.cpp's last line
        is often only "exiting due to ... error"; the first ``E`` line names the cause)."""
        errors = [line.strip() for line in self.log_text().splitlines() if " E " in line]
        last = self.log_tail()
        return last if not errors or errors[0] == last else f"{last} (first error: {errors[0]})"

    def exit_note(self) -> str:
        """"" while it runs; else how it ended (a signal or exit code) and its last log line."""
        if self.alive() or self.process is None:
            return ""
        code = self.process.returncode
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        return f"llama-server {how}: {self.log_tail()}"

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
