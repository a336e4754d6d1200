"""A serving engine's processes, started and stopped by the project: the one home of what every server
we launch needs, whatever the engine (``specnb.serve.llama``, ``specnb.serve.vllm``,
``specnb.serve.simulated`` each subclass ``ServerProcess``), the servers of a list of configurations
started together (``servers``) or again on demand (``Launches``), and the reaping of an engine's
children (``reap``).

Every process started here is stopped: ``ServerProcess`` is a context manager, registered with
``atexit``, its process runs in its own session (a Ctrl-C to the notebook does not reach it half-way;
``stop`` ends its whole process group, so an engine's own children — vLLM's engine core and worker —
go with it) and gets SIGKILL from Linux when the thread that started it dies (``PR_SET_PDEATHSIG``),
so a killed Jupyter kernel takes it down too — and, for an engine whose children do not watch their
parent (vLLM's engine core and worker), every process of its group (``reaped``).

Reaping: the parent-death signal reaches the child alone. vLLM's API server spawns an engine core,
which spawns a worker; neither watches the API server, so a killed kernel left both running, holding
a core and gigabytes. A reaped server is therefore started under ``reap``, run as the child instead
(``REAP``: an isolated ``python -I`` given this package's folder, since the server's environment may
empty ``PYTHONPATH``; it imports this module and the standard library, nothing heavy): its
parent-death signal is SIGUSR1, which it answers by SIGKILLing its whole process group (the server
and every process the server started), itself included. Otherwise it waits for the server and ends
as it ended (the same exit code, or killed by the same signal), so callers read the server's own fate.

Ports: the project picks a free loopback port and the server binds it a moment later; another process
can take it in between (a race), so a start that fails to bind a port the project picked is retried
on a new one (``BIND_RETRIES``). A port the caller names is used as given. Readiness is ``/health``
answering *and* the listening socket being the child's own (or one of its children's): another
server already on that port answers ``/health`` too.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from specnb.core.errors import SpecnbError, last_line

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder holding ``specnb``: what a child imports ours from
# The reaper's command line before the server's: this package's folder, then the server's command.
REAP = ("import sys; sys.path.insert(0, sys.argv.pop(1)); "
        "from specnb.serve.processes import reap; sys.exit(reap(sys.argv[1:]))")
PR_SET_PDEATHSIG = 1
HAS_PROC = Path("/proc/self/net/tcp").is_file()  # Linux: a socket's owner can be read, and must be
BIND_RETRIES = 3  # fresh ports tried when the one the project picked was taken before the server bound it
STOP_GRACE_S = 5.0  # SIGTERM, then SIGKILL after this long
ANSI = re.compile(r"\x1b\[[0-9;]*m")


class ServerFailed(SpecnbError, RuntimeError):
    """The server did not start or died; the message ends with its last log line."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def listening_inodes(pid: int, port: int) -> set[str] | None:
    """Inodes of the sockets listening on loopback ``port`` in ``pid``'s network namespace (Linux's
    /proc), or None where /proc cannot say."""
    try:
        table = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return None
    rows = [row.split() for row in table]
    return {cols[9] for cols in rows if cols[1].endswith(f":{port:04X}") and cols[3] == "0A"}  # 0A: LISTEN


def socket_fds(pid: int) -> set[str]:
    try:
        return {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
    except OSError:
        return set()


def owns_port(pid: int, port: int) -> bool | None:
    """Whether process ``pid`` holds the loopback socket listening on ``port`` (the listening socket's
    inode among the process's file descriptors); None where /proc cannot say."""
    inodes = listening_inodes(pid, port)
    if inodes is None or not os.path.isdir(f"/proc/{pid}/fd"):
        return None
    return any(f"socket:[{inode}]" in socket_fds(pid) for inode in inodes)


def group_pids(pgid: int) -> list[int]:
    """Live processes of process group ``pgid`` (zombies excluded), from /proc."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(pid))
    return found


def load_libc():
    """libc, loaded in the parent: the child between fork and exec must not import or load anything."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


LIBC = load_libc()


def die_with_parent() -> None:
    """In the child before exec: SIGKILL when the thread that started it exits (``PR_SET_PDEATHSIG``,
    Linux), so start servers from the main thread."""
    if LIBC is not None:
        LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class ServerProcess:
    """A running server: ``url``, ``pid``, ``log_tail()``; ``stop()`` (idempotent) ends its process group.

    ``with Server(config) as server:`` starts it and waits for ``/health`` (``ServerFailed`` with the
    log's last line, and its first error line where that says more, if it exits or does not answer
    within ``timeout_s``). ``port``: 0 to let the project pick one (and pick again if it was lost to a
    race), else that port. An engine says how to launch it (``command``, ``environment``), what its
    log calls an error (``is_error_line``) and a lost bind (``bind_failed``)."""

    engine = "server"  # how messages name it
    reaped = False  # True: run under ``reap`` (an engine whose children do not watch their parent)

    def __init__(self, name: str, timeout_s: float, port: int = 0):
        self.name, self.timeout_s = name, timeout_s
        self.picked = not port  # the project chose the port: a bind lost to a race is retried on another
        self.port = port or free_port()
        self.log_path = Path(tempfile.mkstemp(prefix=f"specnb-{self.engine}-{self.port}-", suffix=".log")[1])
        self.process: subprocess.Popen | None = None

    # ------------------------------------------------------------ what an engine says

    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str] | None:
        return None  # the parent's

    def is_error_line(self, line: str) -> bool:
        return " E " in line or "Error" in line

    def bind_failed(self, log: str) -> bool:
        return "bind" in log.lower()

    # ------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self) -> ServerProcess:
        """Launch and wait until ready (``launch`` then ``ready``)."""
        try:
            self.launch()
        except BaseException:
            self.__exit__()
            raise
        return self.ready()

    def ready(self) -> ServerProcess:
        """Wait until the launched server is ready; a port the project picked and lost before the
        server bound it is picked again, up to ``BIND_RETRIES`` times. On any failure (Ctrl-C included)
        the process group is stopped. Split from ``launch`` so that several servers start at once
        (``servers``): a vLLM start is minutes of three processes importing."""
        try:
            for attempt in range(BIND_RETRIES + 1):
                try:
                    self.wait_ready()
                    return self
                except ServerFailed:
                    if not (self.picked and self.lost_port() and attempt < BIND_RETRIES):
                        raise
                self.stop()
                self.port = free_port()
                self.launch()
        except BaseException:
            self.__exit__()
            raise
        raise AssertionError("unreachable: the last attempt returns or raises")

    def launch(self) -> None:
        command = self.command()
        if self.reaped:
            command = [sys.executable, "-I", "-c", REAP, str(PACKAGE_ROOT), *command]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, env=self.environment(),
                                            start_new_session=True, preexec_fn=die_with_parent)
        atexit.register(self.stop)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerFailed(f"{self.name}: {self.engine} exited with code {self.process.returncode} "
                                   f"at start on port {self.port}: {self.log_summary()}")
            # ours, said by /proc where Linux has one: a server exiting because its bind failed (another
            # server answering /health) has its /proc entries torn down before it is a zombie that poll()
            # sees, so "cannot say" must not count as ours there; elsewhere /proc cannot say at all
            owned = self.owns_port()
            if self.healthy() and (owned is True if HAS_PROC else owned is not False) and self.process.poll() is None:
                return
            time.sleep(0.2)
        raise ServerFailed(f"{self.name}: {self.engine} did not answer /health within {self.timeout_s:.0f} s: "
                           f"{self.log_summary()}")

    def owns_port(self) -> bool | None:
        """Whether the listening socket on our port is held by the server's process group (an engine
        may serve HTTP from a child); None where /proc cannot say."""
        answers = [owns_port(pid, self.port) for pid in group_pids(self.process.pid) or [self.process.pid]]
        return True if any(answers) else (None if all(a is None for a in answers) else False)

    def lost_port(self) -> bool:
        """Whether the server exited because its port was taken."""
        return self.process is not None and self.process.poll() is not None and self.bind_failed(self.log_text())

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                return response.status == 200
        except OSError:  # refused while it binds, 503 while it loads
            return False

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_text(self) -> str:
        """The log as text, without terminal colour codes (an engine may colour its log even into a file)."""
        try:
            return ANSI.sub("", self.log_path.read_text(errors="replace"))
        except OSError:
            return ""

    def log_tail(self) -> str:
        """The last non-empty line of the server's log."""
        return last_line(self.log_text(), "(empty log)")

    def log_summary(self) -> str:
        """The log's last line, and its first error line where that says more (an engine's last line is
        often only "exiting due to ... error"; the first error line names the cause)."""
        errors = [line.strip() for line in self.log_text().splitlines() if self.is_error_line(line)]
        last = self.log_tail()
        return last if not errors or errors[0] == last else f"{last} (first error: {errors[0]})"

    def exit_note(self) -> str:
        """"" while it runs; else how it ended (a signal or exit code) and its last log line."""
        if self.alive() or self.process is None:
            return ""
        code = self.process.returncode
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        return f"{self.engine} {how}: {self.log_tail()}"

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL after ``STOP_GRACE_S``; every process of the
        group is gone when it returns (an engine's children may outlive their parent's exit)."""
        if self.process is None:
            return
        group = self.process.pid
        if self.process.poll() is None or group_pids(group):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGTERM)
            deadline = time.monotonic() + STOP_GRACE_S
            while time.monotonic() < deadline and (self.process.poll() is None or group_pids(group)):
                time.sleep(0.05)
            if group_pids(group):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(group, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=STOP_GRACE_S)
        atexit.unregister(self.stop)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
        with contextlib.suppress(OSError):
            self.log_path.unlink()


# ------------------------------------------------------------------ the servers of a list of configurations


def server_for(config, timeout_s: float | None = None) -> ServerProcess:
    """The (not yet started) server of one configuration; ``timeout_s`` None: the engine's default."""
    return config.engine.server(config, timeout_s)


@dataclass
class Running:
    """The servers that started, by configuration name, and one line per configuration that did not."""

    servers: dict[str, ServerProcess] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


@contextlib.contextmanager
def servers(configs: list, timeout_s: float | None = None, keep_going: bool = False):
    """Start every configuration's server — all launched at once, then each waited for, so their
    starts overlap — yield ``Running``, stop them all however the block ends. With ``keep_going``, a
    speculative configuration that fails to start (an engine refusing a method) is left out with its
    one line in ``failed``; the first configuration (the baseline) failing, or every other one, raises
    ``ServerFailed`` all the same."""
    running = Running()
    with contextlib.ExitStack() as stack:
        launched = []
        for i, config in enumerate(configs):
            try:
                server = server_for(config, timeout_s)
            except ServerFailed as err:  # refused before launch (the engine not installed)
                if not keep_going or i == 0:
                    raise
                running.failed[config.name] = str(err)
                continue
            stack.callback(server.__exit__)  # stopped however the block ends, Ctrl-C included
            server.launch()
            launched.append((i, config, server))
        for i, config, server in launched:
            try:
                running.servers[config.name] = server.ready()
            except ServerFailed as err:
                if not keep_going or i == 0:
                    raise
                running.failed[config.name] = str(err)
        if keep_going and len(configs) > 1 and len(running.servers) == 1:
            raise ServerFailed(next(iter(running.failed.values())))
        yield running


class Launches:
    """``servers(configs, keep_going=True)`` that can be started again: ``start`` stops the running
    set (one set at a time: the same ports, memory and cores) and starts the configurations that came
    up the first time. ``running``: the current set; ``failed``: every start's lines; ``count``: starts."""

    def __init__(self, configs: list, timeout_s: float | None = None):
        self.configs, self.timeout_s, self.stack = list(configs), timeout_s, contextlib.ExitStack()
        self.running, self.failed, self.count = Running(), {}, 0

    def __enter__(self) -> Launches:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stack.close()

    def start(self) -> Running:
        self.stack.close()
        if self.count:
            self.configs = [c for c in self.configs if c.name in self.running.servers]
        self.running = self.stack.enter_context(servers(self.configs, self.timeout_s, keep_going=True))
        self.failed |= {f"{name} (launch {self.count})" if self.count else name: line
                        for name, line in self.running.failed.items()}
        self.count += 1
        return self.running


# ------------------------------------------------------------------ the reaper


def kill_group(*_) -> None:
    """The reaper's answer to its parent's death: SIGKILL to its whole group, itself included."""
    os.killpg(os.getpgid(0), signal.SIGKILL)


def reap(argv: list[str]) -> int:
    """Run the server command ``argv`` as this process's child and end as it ended; SIGKILL the whole
    group when this process's parent dies (see the module docstring). What ``REAP`` runs."""
    if not argv:
        print("usage: python -I -c REAP PACKAGE_ROOT COMMAND [ARG ...]", file=sys.stderr)
        return 2
    parent = os.getppid()
    signal.signal(signal.SIGUSR1, kill_group)
    LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGUSR1)
    if os.getppid() != parent:  # the parent died before the signal was armed
        return 1
    # SIGTERM (``ServerProcess.stop`` signals the whole group) reaches the server too: wait for it to go.
    # A caught signal is reset to its default in the exec'd server; an ignored one would be inherited.
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.signal(signal.SIGINT, lambda *_: None)
    server = subprocess.Popen(argv)
    while True:
        try:
            code = server.wait()
            break
        except InterruptedError:
            continue
    if code < 0:  # killed by a signal: end the same way, so the caller reads the server's fate
        if -code != signal.SIGKILL:  # SIGKILL has no handler to reset
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code
