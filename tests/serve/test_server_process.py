"""``ServerProcess.wait_ready``: a server is ready when ``/health`` answers *and* the listening socket is
its own. On Linux, where /proc says who owns a socket, "cannot say" is not "ours": a llama-server whose
bind failed (another server on its port answering ``/health``) has its /proc entries torn down before it
is a zombie ``poll()`` sees, and under load that window was hit (the port-taken test passed as ready)."""

import sys

import pytest

from specnb.serve import server_process
from specnb.serve.server_process import ServerFailed, ServerProcess


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
    monkeypatch.setattr(server_process, "HAS_PROC", has_proc)
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
