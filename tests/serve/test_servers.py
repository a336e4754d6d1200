"""``servers``: every configuration's server launched before any is waited for (starts overlap), a
speculative one that fails left out with its line, and every launched server stopped however the
block ends — on fakes that record what happened, in order."""

from types import SimpleNamespace

import pytest

from specnb.serve import servers as engine_servers
from specnb.serve.server_process import ServerFailed


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
        monkeypatch.setattr(engine_servers, "server_for",
                            lambda config, timeout_s=None: Fake(config.name, events, (fails or {}).get(config.name)))
        return engine_servers.servers([SimpleNamespace(name=n) for n in names], **kwargs), events
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
    monkeypatch.setattr(engine_servers, "server_for", lambda config, timeout_s=None: Fake(
        config.name, events, ServerFailed("eagle3: refused") if config.name == "eagle3" else None))
    with engine_servers.Launches([SimpleNamespace(name=n) for n in ["spec-off", "ngram", "eagle3"]]) as launches:
        first = launches.running
        events.clear()
        second = launches.start()
        assert second is not first and list(second.servers) == ["spec-off", "ngram"]
        stops = [i for i, e in enumerate(events) if e[0] == "stop"]
        assert len(stops) == 3 and max(stops) < events.index(("launch", "spec-off"))  # all stopped first
        assert ("launch", "eagle3") not in events  # refused at the first start: not tried again
        assert launches.failed == {"eagle3": "eagle3: refused"} and launches.count == 2
    assert events[-2:] in ([("stop", "ngram"), ("stop", "spec-off")], [("stop", "spec-off"), ("stop", "ngram")])
