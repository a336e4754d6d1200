"""``reaper``: a reaped server's whole process group — the server and the children it started — goes with
a SIGKILLed kernel, and callers read the server's own exit (its code, or the signal that killed it). On a
stand-in server (Python that starts a grandchild and sleeps), so it runs in a second, not vLLM's minutes."""

import os
import signal
import subprocess
import sys
import time

from specnb.serve.server_process import ServerProcess, group_pids

# a "server" that starts a child of its own (as vLLM's API server starts its engine core) and waits
SERVER = ("import subprocess, sys, time\n"
          "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
          "time.sleep(600)\n")


class StandIn(ServerProcess):
    engine = "stand-in"
    reaped = True

    def __init__(self, code: str):
        self.code = code
        super().__init__("stand-in", timeout_s=5)

    def command(self) -> list[str]:
        return [sys.executable, "-c", self.code]


def wait_until(predicate, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds  # polled: a loaded machine takes a while
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)
    return predicate()


def test_a_killed_kernel_takes_the_reaped_servers_whole_group_with_it():
    here = os.path.dirname(__file__)
    kernel_code = (f"import sys, time\nsys.path.insert(0, {here!r})\nfrom test_reaper import StandIn, SERVER\n"
                   "s = StandIn(SERVER)\ns.launch()\nprint(s.pid, flush=True)\ntime.sleep(600)\n")
    kernel = subprocess.Popen([sys.executable, "-c", kernel_code], stdout=subprocess.PIPE, text=True)
    try:
        group = int(kernel.stdout.readline())
        assert wait_until(lambda: len(group_pids(group)) >= 3), group_pids(group)  # reaper, server, its child
        kernel.send_signal(signal.SIGKILL)  # no atexit, no context manager
        kernel.wait()
        assert wait_until(lambda: group_pids(group) == []), group_pids(group)
    finally:
        kernel.kill()


def test_the_caller_reads_the_servers_own_exit_code_and_signal():
    exits = StandIn("import sys; sys.exit(3)")
    exits.launch()
    assert exits.process.wait(timeout=60) == 3
    stopped = StandIn(SERVER)
    stopped.launch()
    assert wait_until(lambda: len(group_pids(stopped.pid)) >= 3)
    stopped.stop()  # SIGTERM to the group: the server ends by it, and so the reaper
    assert stopped.process.returncode == -signal.SIGTERM and group_pids(stopped.pid) == []
    killed = StandIn(SERVER)
    killed.launch()
    assert wait_until(lambda: len(group_pids(killed.pid)) >= 3)
    server = next(pid for pid in group_pids(killed.pid) if pid != killed.pid and
                  open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1] == str(killed.pid))
    os.kill(server, signal.SIGKILL)  # the server dies on its own: the reaper ends as it did
    assert killed.process.wait(timeout=60) == -signal.SIGKILL
    assert "killed by SIGKILL" in killed.exit_note()
    killed.stop()
    assert group_pids(killed.pid) == []
