"""Servers for a list of configurations, whichever engine each is for: each configuration names its
engine (``config.engine``, a ``ServingEngine``), whose ``server`` makes its process. ``servers``
starts them once; ``Launches`` starts them again on demand (fresh launches, for launch noise)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from specnb.serve.server_process import ServerFailed, ServerProcess


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
