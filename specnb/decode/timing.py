"""Per-stage timers for the decoding loops.

Why stages: a speculative step spends time drafting, verifying, accepting and rolling caches
back; the speedup question is which of these dominates. The timer *tiles* a run: every instant
between ``start()`` and ``stop()`` belongs to exactly one stage (time outside an explicit stage
is "other"), so the stage times sum to the end-to-end time by construction.

Synchronisation per device (what a number means depends on it):

- CPU: ``time.perf_counter`` at each boundary; work is synchronous.
- CUDA: a ``torch.cuda.Event(enable_timing=True)`` is recorded at each boundary and the elapsed
  times are read after one ``torch.cuda.synchronize()`` in ``stop()``, so timing adds no host
  stalls (PyTorch docs, "CUDA semantics: asynchronous execution").
- MPS: ``torch.mps.synchronize()`` then ``perf_counter`` at each boundary. ``torch.mps.Event``
  has had elapsed-time bugs, so we pay one sync per boundary instead; expect some overhead.

When timing is off, generation uses ``NULL_TIMER`` whose ``stage()`` returns a shared no-op
context manager: one attribute lookup and call per stage.

References: gpt-fast (pytorch-labs) ``generate.py`` for the stage split; Spec-Bench for raw records.
"""

from __future__ import annotations

import time

import torch

STAGES = ("prefill", "draft", "verify", "accept", "rollback", "other")
BOOKKEEPING = ("accept", "rollback", "other")  # host work around the forwards of a step


def stage_columns(stages=STAGES) -> list[str]:
    """Record columns of the stage times, ``<stage>_ms`` (``specnb.measure.runs`` writes them)."""
    return [f"{stage}_ms" for stage in stages]


class _CpuClock:
    """Host clock; correct when every op is synchronous (CPU). ``now``: the host clock, in seconds."""

    def __init__(self, now=time.perf_counter):
        self.now = now

    def mark(self):
        return self.now()

    def finish(self) -> None:
        pass

    def elapsed_ms(self, a, b) -> float:
        return (b - a) * 1e3


class _CudaClock:
    """CUDA events on the current stream; read after one synchronize at the end."""

    def mark(self):
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def finish(self) -> None:
        torch.cuda.synchronize()

    def elapsed_ms(self, a, b) -> float:
        return a.elapsed_time(b)


class _MpsClock(_CpuClock):
    """Synchronize MPS before reading the host clock (no reliable MPS events)."""

    def mark(self):
        torch.mps.synchronize()
        return self.now()

    def finish(self) -> None:
        torch.mps.synchronize()


def make_clock(device, now=time.perf_counter) -> _CpuClock | _CudaClock | _MpsClock:
    """The clock that measures ``device`` correctly; falls back to the CPU clock when absent. ``now``:
    the host clock the CPU and MPS clocks read (CUDA reads its events)."""
    kind = torch.device(device).type if device is not None else "cpu"
    if kind == "cuda" and torch.cuda.is_available():
        return _CudaClock()
    if kind == "mps" and torch.backends.mps.is_available():
        return _MpsClock(now)
    return _CpuClock(now)


def synchronize(device) -> None:
    """Wait for queued work on ``device`` (no-op on CPU), before reading a host clock."""
    kind = torch.device(device).type if device is not None else "cpu"
    if kind == "cuda" and torch.cuda.is_available():
        torch.cuda.synchronize()
    elif kind == "mps" and torch.backends.mps.is_available():
        torch.mps.synchronize()


class _Stage:
    """Reusable context manager for one stage (no allocation per use)."""

    __slots__ = ("timer", "name")

    def __init__(self, timer: StageTimer, name: str):
        self.timer, self.name = timer, name

    def __enter__(self):
        self.timer.switch(self.name)
        return self

    def __exit__(self, *exc):
        self.timer.switch("other")
        return False


class StageTimer:
    """Tiles a run into stages: ``start()``, ``with timer.stage("draft"): ...``, ``stop()``.

    Stages do not nest: entering one ends the current one, leaving one returns to "other".
    ``stages_ms()`` and ``total_ms()`` are valid after ``stop()``. ``now``: the host clock in seconds
    (``time.perf_counter``; a test passes a scripted one so that stage sums are checked exactly).
    """

    enabled = True

    def __init__(self, device="cpu", now=time.perf_counter):
        self.clock = make_clock(device, now)
        self._stages = {name: _Stage(self, name) for name in STAGES}
        self._marks: list = []
        self._labels: list[str] = []
        self._current = "other"
        self._totals: dict[str, float] | None = None

    def start(self) -> None:
        self._marks, self._labels, self._current, self._totals = [self.clock.mark()], [], "other", None

    def switch(self, name: str) -> None:
        """End the current stage here and begin ``name``."""
        self._marks.append(self.clock.mark())
        self._labels.append(self._current)
        self._current = name

    def stage(self, name: str) -> _Stage:
        return self._stages[name]

    def stop(self) -> None:
        self.switch("other")
        self.clock.finish()
        totals = dict.fromkeys(STAGES, 0.0)
        for a, b, label in zip(self._marks, self._marks[1:], self._labels):
            totals[label] += self.clock.elapsed_ms(a, b)
        self._totals = totals

    def stages_ms(self) -> dict[str, float]:
        if self._totals is None:
            raise RuntimeError("StageTimer.stages_ms() read before stop(); call stop() first")
        return dict(self._totals)

    def total_ms(self) -> float:
        return sum(self.stages_ms().values())


class _NullStage:
    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class NullTimer:
    """Timing switched off: every call is a no-op and ``stages_ms()`` is empty."""

    enabled = False
    _stage = _NullStage()

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def switch(self, name: str) -> None:
        pass

    def stage(self, name: str) -> _NullStage:
        return self._stage

    def stages_ms(self) -> dict[str, float]:
        return {}


NULL_TIMER = NullTimer()
