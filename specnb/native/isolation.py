"""Native engines run in a child process, so their crash is a one-line note, not a dead kernel.

Why: a third-party engine (llama.cpp) executes machine code built for *a* CPU; on another one an
instruction can fault (SIGILL: AMX on a virtualised Xeon), or a bug can SIGSEGV. In-process, that
kills the Jupyter kernel or the command line — the whole notebook is lost for one row of a table.
A ``Child`` holds the engine object in its own Python process and forwards method calls over a
pipe; if the child dies, the call raises ``EngineCrashed`` with one line that names the signal and,
where the child could tell, the library the faulting instruction lives in. Timings are taken
inside the child, so the pipe's round trip is not in any measured figure.

``report_native_faults`` is what lets the child name the library: a SIGILL/SIGSEGV/SIGBUS/SIGFPE
handler (installed through ``sigaction`` with ``SA_RESETHAND``) writes the faulting address and its
library (``dladdr``) to stderr, then returns, so the instruction faults again and the process dies
by the signal as it would have — the parent still sees the signal in the exit status.

Test hook: ``SPECNB_CRASH_ENGINE=SIGNAL`` (e.g. ``SIGILL``) makes every engine child kill itself
with that signal on its first call, to check that the crash path ends as a note.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import pickle
import platform
import signal
import subprocess
import sys
import tempfile
from multiprocessing.connection import Connection

from specnb.core.errors import SpecnbError

FAULT_MARK = "specnb-fault:"
CRASH_ENV = "SPECNB_CRASH_ENGINE"
FAULT_SIGNALS = (signal.SIGILL, signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE)


class EngineCrashed(SpecnbError, RuntimeError):
    """A native engine's process died (a signal, or an exit) during a call; the message is one line."""


def describe_exit(what: str, returncode: int, stderr: str = "") -> str:
    """One line for a process that ended badly: the signal by name and meaning (and the library
    the fault handler named), or the exit code and the last line it printed."""
    fault = [line for line in stderr.splitlines() if line.startswith(FAULT_MARK)]
    where = ""
    if fault and " in " in fault[-1]:
        where = " in " + fault[-1].rsplit(" in ", 1)[1].strip()
    if returncode < 0:
        sig = signal.Signals(-returncode)
        return f"{what} died with {sig.name} ({signal.strsignal(sig).lower()}){where}"
    last = next((line.strip() for line in reversed(stderr.splitlines()) if line.strip()), "")
    return f"{what} exited with code {returncode}" + (f": {last[:200]}" if last else "")


# ------------------------------------------------------------------ in the child: naming the fault

class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


class _SigAction(ctypes.Structure):  # glibc's struct sigaction on Linux
    _fields_ = [("sa_sigaction", ctypes.c_void_p), ("sa_mask", ctypes.c_ulong * 16),
                ("sa_flags", ctypes.c_int), ("sa_restorer", ctypes.c_void_p)]


_SA_SIGINFO, _SA_RESETHAND = 0x4, 0x80000000
_RIP_OFFSET = 8 + 8 + 24 + 16 * 8  # ucontext_t: uc_flags, uc_link, uc_stack, then gregs[REG_RIP = 16]
_HANDLER_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
_keep: list = []  # the handler and its action must outlive this call


def report_native_faults(fd: int = 2) -> bool:
    """In this process, make a native fault print ``specnb-fault: SIGILL at 0x… in libX.so`` to
    ``fd`` before the process dies by the signal. Linux/glibc only; elsewhere a no-op (False)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
    except (OSError, AttributeError):
        return False

    def handler(signum, info, context):
        # the faulting instruction: RIP in the ucontext on x86-64 (uc_mcontext.gregs[REG_RIP]);
        # elsewhere siginfo_t.si_addr, which is the instruction for SIGILL and the data address otherwise
        offset = _RIP_OFFSET if context and platform.machine() == "x86_64" else None
        address = ctypes.c_void_p.from_address(context + offset if offset else info + 16).value or 0
        found = _DlInfo()
        library = "?"
        if libc.dladdr(address, ctypes.byref(found)) and found.dli_fname:
            library = os.path.basename(found.dli_fname.decode(errors="replace"))
        os.write(fd, f"{FAULT_MARK} {signal.Signals(signum).name} at {address:#x} in {library}\n".encode())

    callback = _HANDLER_TYPE(handler)
    action = _SigAction()
    action.sa_sigaction = ctypes.cast(callback, ctypes.c_void_p).value
    action.sa_flags = _SA_SIGINFO | _SA_RESETHAND
    for sig in FAULT_SIGNALS:
        if libc.sigaction(int(sig), ctypes.byref(action), None) != 0:
            return False
    _keep.extend([callback, action])
    return True


def _serve(read_fd: int, write_fd: int) -> None:
    """The child's loop: build the object from the first message, then answer calls until told to stop
    (or until the parent is gone: its end of the pipe closes, and on Linux the child gets SIGKILL)."""
    report_native_faults()
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    inbox, outbox = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    factory, args, kwargs = inbox.recv()
    module, name = factory.split(":")
    __import__(module)
    try:
        target = getattr(sys.modules[module], name)(*args, **kwargs)
    except Exception as err:  # a bad file, a missing library: an ordinary error, sent back
        outbox.send(("error", f"{type(err).__name__}: {err}"))
        return
    outbox.send(("ready", None))
    crash = os.environ.get(CRASH_ENV)
    while True:
        try:
            method, args, kwargs = inbox.recv()
        except EOFError:
            return
        if method is None:
            return
        if crash:
            signal.signal(signal.Signals[crash], signal.SIG_DFL)  # die by it, as a fault would
            os.kill(os.getpid(), signal.Signals[crash])
        try:
            outbox.send(("ok", getattr(target, method)(*args, **kwargs)))
        except Exception as err:
            outbox.send(("error", f"{type(err).__name__}: {err}"))


# ------------------------------------------------------------------ in the parent

class Child:
    """An object built by ``factory`` ("module:function") in a child Python process.

    ``call(method, *args)`` runs ``object.method(*args)`` there and returns its (picklable) result;
    an exception there comes back as ``RuntimeError``; a dead child raises ``EngineCrashed``, and
    every later call raises the same one line. ``close`` (or the context manager) ends the child.
    ``env``: variables added to the child's environment (``LLAMA_CPP_LIB_PATH`` picks a build).
    """

    def __init__(self, factory: str, *args, what: str = "engine", env: dict | None = None, **kwargs):
        self.what = what
        self.crash: str | None = None
        down_r, down_w = os.pipe()
        up_r, up_w = os.pipe()
        self._stderr = tempfile.TemporaryFile(mode="w+")
        env = dict(os.environ, **(env or {}), PYTHONFAULTHANDLER="")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", f"from specnb.native.isolation import _serve; _serve({down_r}, {up_w})"],
            pass_fds=(down_r, up_w), stdin=subprocess.DEVNULL, stdout=self._stderr, stderr=self._stderr, env=env,
            start_new_session=True)  # Ctrl-C in a terminal reaches the parent, which ends the child
        os.close(down_r)
        os.close(up_w)
        self._out, self._in = Connection(down_w, readable=False), Connection(up_r, writable=False)
        self._send((factory, args, kwargs))
        self._receive()

    def _send(self, message) -> None:
        try:
            self._out.send(message)
        except (BrokenPipeError, OSError):
            self._died()

    def _receive(self):
        try:
            kind, value = self._in.recv()
        except (EOFError, OSError, pickle.UnpicklingError):
            self._died()
        if kind == "error":
            raise RuntimeError(f"{self.what}: {value}")
        return value

    def _died(self):
        returncode = self.proc.wait()
        self._stderr.seek(0)
        self.crash = describe_exit(self.what, returncode, self._stderr.read())
        self.close()
        raise EngineCrashed(self.crash)

    def call(self, method: str, *args, **kwargs):
        if self.crash:
            raise EngineCrashed(self.crash)
        self._send((method, args, kwargs))
        return self._receive()

    def close(self) -> None:
        """End the child (politely, then by force) and release the pipes; safe to call twice."""
        if self.proc.poll() is None:
            try:
                self._out.send((None, (), {}))
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        for conn in (self._out, self._in):
            if not conn.closed:
                conn.close()
        if not self._stderr.closed:
            self._stderr.close()

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

