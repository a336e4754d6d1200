"""Stage timers tile a run (stage times sum to the end-to-end time) on every device path."""

import time

import pytest
import torch

from specnb.engine import timing
from specnb.engine.timing import NULL_TIMER, STAGES, StageTimer, make_clock


def busy(ms: float) -> None:
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


def run_stages(timer) -> float:
    """A fake loop with stages and untimed gaps; returns the externally measured wall time in ms."""
    t0 = time.perf_counter()
    timer.start()
    with timer.stage("prefill"):
        busy(3)
    for _ in range(5):
        with timer.stage("draft"):
            busy(1)
        busy(0.3)  # untimed bookkeeping: must land in "other"
        with timer.stage("verify"):
            busy(1)
        with timer.stage("accept"):
            busy(0.2)
        with timer.stage("rollback"):
            busy(0.1)
    timer.stop()
    return (time.perf_counter() - t0) * 1e3


def test_cpu_stages_sum_to_wall_time_within_2_percent():
    timer = StageTimer("cpu")
    wall = run_stages(timer)
    stages = timer.stages_ms()
    assert set(stages) == set(STAGES)
    assert abs(sum(stages.values()) - wall) / wall < 0.02
    assert stages["prefill"] >= 3.0 and stages["draft"] >= 5.0 and stages["verify"] >= 5.0
    assert stages["other"] >= 1.5  # the five 0.3 ms gaps


def test_reading_before_stop_is_an_error():
    timer = StageTimer("cpu")
    timer.start()
    with pytest.raises(RuntimeError, match="stop"):
        timer.stages_ms()


def test_null_timer_is_a_no_op():
    wall = run_stages(NULL_TIMER)
    assert NULL_TIMER.stages_ms() == {} and wall > 0


class FakeEvent:
    """Stands in for torch.cuda.Event: records the host clock at record()."""

    created = 0

    def __init__(self, enable_timing=False):
        assert enable_timing
        FakeEvent.created += 1
        self.t = None

    def record(self):
        self.t = time.perf_counter()

    def elapsed_time(self, other):
        return (other.t - self.t) * 1e3


def test_cuda_path_with_mocked_events(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("real CUDA present: covered by the real-device test")
    syncs = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: syncs.append(1))
    timer = StageTimer("cuda")
    assert isinstance(timer.clock, timing._CudaClock)
    wall = run_stages(timer)
    assert len(syncs) == 1, "CUDA timing must synchronize once, at stop()"
    assert FakeEvent.created == 1 + 2 * 21 + 1  # start, two boundaries per stage, stop
    assert abs(timer.total_ms() - wall) / wall < 0.02


def test_mps_path_with_mocked_sync(monkeypatch):
    if torch.backends.mps.is_available():
        pytest.skip("real MPS present")
    syncs = []
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(torch.mps, "synchronize", lambda: syncs.append(1))
    timer = StageTimer("mps")
    assert isinstance(timer.clock, timing._MpsClock)
    wall = run_stages(timer)
    assert len(syncs) == 1 + 2 * 21 + 1 + 1  # every boundary, plus the final sync in stop()
    assert abs(timer.total_ms() - wall) / wall < 0.02


def test_missing_device_falls_back_to_cpu_clock(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert type(make_clock("cuda")) is timing._CpuClock


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_real_cuda_stages_sum_to_wall_time():
    x = torch.randn(2048, 2048, device="cuda")
    timer = StageTimer("cuda")
    t0 = time.perf_counter()
    timer.start()
    for _ in range(5):
        with timer.stage("verify"):
            for _ in range(10):
                x = (x @ x).tanh()
        with timer.stage("accept"):
            x = x + 1
    timer.stop()
    wall = (time.perf_counter() - t0) * 1e3
    stages = timer.stages_ms()
    assert stages["verify"] > stages["accept"] > 0
    assert abs(timer.total_ms() - wall) / wall < 0.05  # event clock vs host clock
