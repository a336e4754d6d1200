"""Stage timers tile a run (stage times sum to the end-to-end time) on every device path.

The sums are checked exactly against a scripted clock (``FakeClock``): a timer that drops a stage,
counts one twice or loses the time between stages fails by a whole scripted interval, whatever the
machine's load. The one test on the real clock asserts only what a monotonic clock guarantees."""

import time

import pytest
import torch

from specnb.decode import timing
from specnb.decode.timing import NULL_TIMER, STAGES, StageTimer, make_clock


class FakeClock:
    """A host clock that moves only when told: ``advance(ms)``; calling it reads seconds."""

    def __init__(self):
        self.s = 100.0

    def __call__(self) -> float:
        return self.s

    def advance(self, ms: float) -> None:
        self.s += ms / 1e3


# ms each stage is scripted to take in ``run_stages``; the untimed gaps land in "other"
SCRIPTED = {"prefill": 3.0, "draft": 5 * 1.0, "verify": 5 * 2.0, "accept": 5 * 0.25, "rollback": 5 * 0.125,
            "other": 5 * 0.5 + 0.75}
BOUNDARIES = 1 + 2 * 21 + 1  # start, two switches per stage entered (1 prefill + 5 x 4), stop


def run_stages(timer, wait) -> None:
    """A fake loop with stages and untimed gaps; ``wait(ms)`` passes time (scripted or real)."""
    timer.start()
    with timer.stage("prefill"):
        wait(3.0)
    for _ in range(5):
        with timer.stage("draft"):
            wait(1.0)
        wait(0.5)  # untimed bookkeeping: must land in "other"
        with timer.stage("verify"):
            wait(2.0)
        with timer.stage("accept"):
            wait(0.25)
        with timer.stage("rollback"):
            wait(0.125)
    wait(0.75)  # after the last stage, before stop(): "other" too
    timer.stop()


def test_cpu_stages_are_the_scripted_times_exactly():
    clock = FakeClock()
    timer = StageTimer("cpu", now=clock)
    run_stages(timer, clock.advance)
    stages = timer.stages_ms()
    assert set(stages) == set(STAGES)
    assert stages == pytest.approx(SCRIPTED, abs=1e-9)
    assert timer.total_ms() == pytest.approx(sum(SCRIPTED.values()), abs=1e-9)


def test_a_second_run_starts_from_zero():
    clock = FakeClock()
    timer = StageTimer("cpu", now=clock)
    run_stages(timer, clock.advance)
    clock.advance(50.0)  # between runs: belongs to neither
    run_stages(timer, clock.advance)
    assert timer.stages_ms() == pytest.approx(SCRIPTED, abs=1e-9)


def busy(ms: float) -> None:
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


def test_on_the_real_clock_stages_tile_the_run_and_hold_their_busy_waits():
    """Only what a monotonic clock guarantees under any load: each stage at least its busy-wait, the
    stages inside the wall time measured around them (time outside ``start``/``stop`` is not counted)."""
    timer = StageTimer("cpu")
    t0 = time.perf_counter()
    run_stages(timer, busy)
    wall = (time.perf_counter() - t0) * 1e3
    stages = timer.stages_ms()
    assert all(stages[name] >= scripted for name, scripted in SCRIPTED.items())
    assert timer.total_ms() <= wall


def test_reading_before_stop_is_an_error():
    timer = StageTimer("cpu")
    timer.start()
    with pytest.raises(RuntimeError, match="stop"):
        timer.stages_ms()


def test_null_timer_is_a_no_op():
    waited = []
    run_stages(NULL_TIMER, waited.append)
    assert NULL_TIMER.stages_ms() == {} and len(waited) == 1 + 5 * 5 + 1


class FakeEvent:
    """Stands in for torch.cuda.Event: record() takes the scripted clock's time (``FakeEvent.clock``)."""

    clock: FakeClock
    created = 0

    def __init__(self, enable_timing=False):
        assert enable_timing
        FakeEvent.created += 1
        self.t = None

    def record(self):
        self.t = FakeEvent.clock()

    def elapsed_time(self, other):
        return (other.t - self.t) * 1e3


def test_cuda_path_with_scripted_events(monkeypatch):
    clock, syncs = FakeClock(), []
    monkeypatch.setattr(FakeEvent, "clock", clock, raising=False)
    monkeypatch.setattr(FakeEvent, "created", 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: syncs.append(1))
    timer = StageTimer("cuda", now=lambda: pytest.fail("CUDA timing reads its events, not the host clock"))
    assert isinstance(timer.clock, timing._CudaClock)
    run_stages(timer, clock.advance)
    assert len(syncs) == 1, "CUDA timing must synchronize once, at stop()"
    assert FakeEvent.created == BOUNDARIES
    assert timer.stages_ms() == pytest.approx(SCRIPTED, abs=1e-9)


def test_mps_path_with_mocked_sync(monkeypatch):
    if torch.backends.mps.is_available():
        pytest.skip("real MPS present")
    clock, syncs = FakeClock(), []
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(torch.mps, "synchronize", lambda: syncs.append(1))
    timer = StageTimer("mps", now=clock)
    assert isinstance(timer.clock, timing._MpsClock)
    run_stages(timer, clock.advance)
    assert len(syncs) == BOUNDARIES + 1  # every boundary, plus the final sync in stop()
    assert timer.stages_ms() == pytest.approx(SCRIPTED, abs=1e-9)


def test_missing_device_falls_back_to_cpu_clock(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert type(make_clock("cuda")) is timing._CpuClock


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_real_cuda_stages_tile_the_run():
    """On real events, only what holds under any load: the stages sum to the total, and ten 2048² matmuls
    outweigh one add by far. (That the stages tile the run exactly is checked on scripted events above;
    the events' clock is the device's, so comparing them with the host's wall time would need a tolerance.)"""
    x = torch.randn(2048, 2048, device="cuda")
    timer = StageTimer("cuda")
    torch.cuda.synchronize()
    timer.start()
    for _ in range(5):
        with timer.stage("verify"):
            for _ in range(10):
                x = (x @ x).tanh()
        with timer.stage("accept"):
            x = x + 1
    timer.stop()
    stages = timer.stages_ms()
    assert stages["verify"] > stages["accept"] > 0
    assert timer.total_ms() == pytest.approx(sum(stages.values()))
