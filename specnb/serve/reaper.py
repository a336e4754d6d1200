"""Run a server command so that none of its processes outlives the thread that started it.

    python -I reaper.py COMMAND [ARG ...]

Why: ``ServerProcess`` gives its child Linux's parent-death signal (SIGKILL when the notebook's kernel
dies, even by SIGKILL), but that signal reaches the child alone. vLLM's API server spawns an engine
core, which spawns a worker; neither watches the API server, so a killed kernel left both running,
holding a core and gigabytes. This shim is that child instead: its parent-death signal is SIGUSR1,
which it catches and answers by SIGKILLing its whole process group (the server and every process the
server started), itself included. Otherwise it waits for the server and ends as it ended (the same
exit code, or killed by the same signal), so callers read the server's own fate.

Standard library only, run as a script with ``-I``: it starts in milliseconds and imports nothing of
specnb's (the server's environment may empty ``PYTHONPATH``).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1


def kill_group(*_) -> None:
    os.killpg(os.getpgid(0), signal.SIGKILL)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: reaper.py COMMAND [ARG ...]", file=sys.stderr)
        return 2
    parent = os.getppid()
    signal.signal(signal.SIGUSR1, kill_group)
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGUSR1)
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
