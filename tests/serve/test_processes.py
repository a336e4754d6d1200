"""``processes``: a server is ready only when its port is its own; ``servers`` launches every
configuration's server before any is waited for and stops them all however the block ends; a reaped
server's whole process group goes with a SIGKILLed kernel, and callers read the server's own exit.

``ServerProcess.wait_ready``: a server is ready when ``/health`` answers *and* the listening socket is
its own. On Linux, where /proc says who owns a socket, "cannot say" is not "ours": a llama-server whose
bind failed (another server on its port answering ``/health``) has its /proc entries torn down before it
is a zombie ``poll()`` sees, and under load that window was hit (the port-taken test passed as ready).

``servers`` is checked on fakes that record what happened, in order; the reaper on a stand-in server
(Python that starts a grandchild and sleeps), so it runs in a second, not vLLM's minutes."""

import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from specnb.serve import processes
from specnb.serve.processes import ServerFailed, ServerProcess, group_pids


class Sleeper(ServerProcess):
    """A live process whose health and port ownership the test decides."""

    engine = "sleeper"

    def __init__(self, owned):
        super().__init__("sleeper", timeout_s=1)
        self.owned = owned

    def command(self) -> list[str]:
        return [sys.executable, "-c", "import time; time.sleep(60)"]

    def healthy(self) -> bool:
        return True

    def owns_port(self):
        return self.owned


@pytest.mark.parametrize("has_proc, owned, ready", [(True, True, True), (True, None, False), (True, False, False),
                                                     (False, None, True), (False, False, False)])
def test_a_server_is_ready_only_when_its_port_is_its_own_where_proc_can_say(monkeypatch, has_proc, owned, ready):
    monkeypatch.setattr(processes, "HAS_PROC", has_proc)
    server = Sleeper(owned)
    server.launch()
    try:
        if ready:
            server.wait_ready()
        else:
            with pytest.raises(ServerFailed, match="did not answer /health within"):
                server.wait_ready()
    finally:
        server.__exit__()


class Fake:
    """A server that logs ``launch``, ``ready`` and ``stop`` into ``events``; ``fails``: ``ready`` raises
    this (a ``ServerFailed`` line or ``KeyboardInterrupt``)."""

    def __init__(self, name, events, fails=None):
        self.name, self.events, self.fails = name, events, fails

    def launch(self):
        self.events.append(("launch", self.name))

    def ready(self):
        self.events.append(("ready", self.name))
        if self.fails is not None:
            raise self.fails
        return self

    def __exit__(self, *exc):
        self.events.append(("stop", self.name))


@pytest.fixture
def start(monkeypatch):
    """``start(names, fails={name: exception}, **servers_kwargs)`` -> (the context manager, events)."""
    def make(names, fails=None, **kwargs):
        events = []
        monkeypatch.setattr(processes, "server_for",
                            lambda config, timeout_s=None: Fake(config.name, events, (fails or {}).get(config.name)))
        return processes.servers([SimpleNamespace(name=n) for n in names], **kwargs), events
    return make


def test_every_server_is_launched_before_any_is_waited_for_and_all_are_stopped(start):
    manager, events = start(["spec-off", "ngram", "eagle3"])
    with manager as running:
        assert list(running.servers) == ["spec-off", "ngram", "eagle3"] and not running.failed
        assert events == [("launch", "spec-off"), ("launch", "ngram"), ("launch", "eagle3"),
                          ("ready", "spec-off"), ("ready", "ngram"), ("ready", "eagle3")]
    assert sorted(e for e in events if e[0] == "stop") == [("stop", "eagle3"), ("stop", "ngram"), ("stop", "spec-off")]


def test_a_speculative_server_that_fails_is_left_out_with_its_line_and_still_stopped(start):
    manager, events = start(["spec-off", "ngram", "eagle3"], fails={"eagle3": ServerFailed("eagle3: refused")},
                            keep_going=True)
    with manager as running:
        assert list(running.servers) == ["spec-off", "ngram"] and running.failed == {"eagle3": "eagle3: refused"}
    assert ("stop", "eagle3") in events and ("stop", "spec-off") in events


@pytest.mark.parametrize("fails", [ServerFailed("spec-off: exited"), KeyboardInterrupt()])
def test_the_baseline_failing_or_ctrl_c_while_waiting_stops_every_launched_server(start, fails):
    manager, events = start(["spec-off", "ngram"], fails={"spec-off": fails}, keep_going=True)
    with pytest.raises(type(fails)):
        with manager:
            pytest.fail("no block runs when the baseline did not start")
    assert {e for e in events if e[0] == "stop"} == {("stop", "spec-off"), ("stop", "ngram")}
    assert ("ready", "ngram") not in events  # nothing waited for after the failure


def test_launches_stop_one_set_before_starting_the_next_and_drop_what_never_came_up(monkeypatch):
    events = []
    monkeypatch.setattr(processes, "server_for", lambda config, timeout_s=None: Fake(
        config.name, events, ServerFailed("eagle3: refused") if config.name == "eagle3" else None))
    with processes.Launches([SimpleNamespace(name=n) for n in ["spec-off", "ngram", "eagle3"]]) as launches:
        first = launches.running
        events.clear()
        second = launches.start()
        assert second is not first and list(second.servers) == ["spec-off", "ngram"]
        stops = [i for i, e in enumerate(events) if e[0] == "stop"]
        assert len(stops) == 3 and max(stops) < events.index(("launch", "spec-off"))  # all stopped first
        assert ("launch", "eagle3") not in events  # refused at the first start: not tried again
        assert launches.failed == {"eagle3": "eagle3: refused"} and launches.count == 2
    assert events[-2:] in ([("stop", "ngram"), ("stop", "spec-off")], [("stop", "spec-off"), ("stop", "ngram")])


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
    kernel_code = (f"import sys, time\nsys.path.insert(0, {here!r})\nfrom test_processes import StandIn, SERVER\n"
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
