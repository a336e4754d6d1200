"""The shape of a load, as a record every request and summary row carries: how requests arrive,
how long each one is asked to be, and which of them saw the level sustained.

GuideLLM makes each load profile a strategy object the scheduler asks for the next request, never
branching on a profile's name; ``vllm bench serve`` keeps request rate (Poisson or gamma arrivals,
``burstiness``) and max concurrency as separate knobs and draws output lengths with a range ratio.
Here a shape is a frozen dataclass:

- ``Closed``: ``concurrency`` requests in flight, each worker sending its next when its last one
  finished (vLLM bench's ``max_concurrency``; its level column is ``concurrency``).
- ``Open``: arrivals at ``rate`` requests/s, exponential gaps at burstiness 1, gamma below (bursts
  with quiet spells between), none capped (``request_rate``).

Both carry the output-length rule (``Lengths``: drawn over [L/2, 3L/2] by default, as vLLM bench's
``--random-range-ratio 0.5``), the number of requests (0: as many as the shape needs) and the seed.
Lengths are drawn because equal ones make a closed loop run in lockstep: a level's requests start
together and drain together, so spec-off's successors prefill in one batch while speculation's,
desynchronised by acceptance, land in their neighbours' decode steps (issue 40).

A closed loop is also measured in its **steady window** only (``window``): from the run's first
completion (the first wave's ramp-up is over) to its last send (after it the queue is empty and the
level drains). ``turnovers`` is how many requests each slot runs inside it: a run sends
(turnovers + 2)·concurrency requests, one wave to ramp up, one to drain. An open loop's window is the
whole trace: its rate holds throughout.

``columns()`` is what a record carries, ``shape_of(frame)`` reads it back from a table — a new shape
(a replayed trace, open-loop steps) is a new record type and one line in ``SHAPES``, not a new string
branch. ``steps_batch`` says whether the level *is* the number of sequences in an engine step (a
closed loop), what the serving predictor and policy price a step by.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from specnb.core.errors import ParameterError


@dataclass(frozen=True, kw_only=True)
class Lengths:
    """Output tokens asked per request: drawn uniformly over [tokens·(1 − r), tokens·(1 + r)] per
    (prompt, round), seeded, as vLLM bench's ``--random-range-ratio`` (0.5 unless told), or ``tokens``
    each at ``range_ratio`` 0 — which makes a closed loop run in lockstep (see the module)."""

    tokens: int
    range_ratio: float = 0.5

    def check(self, context: int | None = None) -> Lengths:
        if not isinstance(self.tokens, int) or isinstance(self.tokens, bool) or self.tokens < 1:
            raise ParameterError(f"max_new_tokens must be a whole number >= 1, got {self.tokens!r}")
        if not 0.0 <= self.range_ratio < 1.0:
            raise ParameterError(f"length_range_ratio must be in [0, 1) (0: every request max_new_tokens long), "
                                 f"got {self.range_ratio!r}")
        if context is not None and self.longest > context:
            raise ParameterError(f"max_new_tokens {self.tokens} with length_range_ratio {self.range_ratio} asks up "
                                 f"to {self.longest} tokens, beyond the model's context of {context}")
        return self

    @property
    def longest(self) -> int:
        return int(math.floor(self.tokens * (1 + self.range_ratio)))

    def draw(self, prompt_ids: list[str], round_index: int, seed: int) -> list[int]:
        """Per request, its output length: the same for a (prompt, round) whatever the configuration,
        so requests pair exactly; at least 2 (a TPOT needs two tokens)."""
        if not self.range_ratio:
            return [self.tokens] * len(prompt_ids)
        lo, hi = max(2, math.ceil(self.tokens * (1 - self.range_ratio))), max(2, self.longest)
        import zlib

        return [int(np.random.default_rng([seed, round_index, zlib.crc32(p.encode())]).integers(lo, hi + 1))
                for p in prompt_ids]

    def columns(self) -> dict:
        return {"max_tokens_asked": self.tokens, "range_ratio": self.range_ratio}


@dataclass(frozen=True, kw_only=True)
class Closed:
    """``concurrency`` requests in flight, each slot turning over ``turnovers`` times in the steady window."""

    concurrency: int
    lengths: Lengths = field(default_factory=lambda: Lengths(tokens=32))
    requests: int = 0
    turnovers: int = 3
    seed: int = 0
    name = "closed"
    column = "concurrency"
    unit = "concurrent requests"
    axis = "concurrency"
    level_format = "{:g} concurrent"
    steps_batch = True  # the level is the number of sequences a step serves

    def __post_init__(self):
        turnovers = self.turnovers
        if not isinstance(turnovers, int) or isinstance(turnovers, bool) or turnovers < 1:
            raise ParameterError(f"turnovers must be a whole number >= 1 (requests each slot runs in a run's steady "
                                 f"window; below 1 the window holds none), got {turnovers!r}")

    @property
    def level(self) -> float:
        return self.concurrency

    @property
    def run_requests(self) -> int:
        """Requests one run sends: a wave to ramp up, ``turnovers`` in the steady window, a wave to drain."""
        return (self.turnovers + 2) * self.concurrency

    @property
    def warm_concurrency(self) -> int:
        return self.concurrency

    def text(self) -> str:
        return self.level_format.format(self.concurrency)

    def send(self, target, texts: list[str], max_tokens: list[int], ignore_eos: bool, round_index: int):
        """The coroutine that sends ``texts`` as this load: (records, duration in s)."""
        from specnb.measure.serving_load import send_closed

        return send_closed(target, texts, self.concurrency, max_tokens, ignore_eos)

    def requests_for(self, texts: list[str]) -> list[str]:
        """Each prompt once, cycled until one run's worth (``run_requests``): fewer would leave no
        steady window."""
        n = max(len(texts), self.requests or 0, self.run_requests)
        return [texts[i % len(texts)] for i in range(n)]

    def pieces(self, n: int) -> list[list[int]]:
        """The request indices in the pieces each configuration runs in turn: as many runs of at least
        ``run_requests`` as ``n`` holds (the remainder spread over them, so no run is too short for a
        steady window). Configurations alternate run by run, so a slow spell of a shared machine lands
        on all of them, not on the one whose whole level it overlapped."""
        count = max(1, n // self.run_requests)
        return [part.tolist() for part in np.array_split(np.arange(n), count)]

    def window(self, sent_s: np.ndarray, finished_s: np.ndarray) -> tuple[float, float]:
        """(start, end) in s of the run's steady window: its first completion, its last send."""
        done = finished_s[np.isfinite(finished_s)]
        return (float(done.min()), float(np.max(sent_s))) if len(done) else (math.inf, -math.inf)

    def columns(self) -> dict:
        return {"load": self.name, self.column: self.concurrency, "burstiness": math.nan, "requests": self.requests,
                "turnovers": self.turnovers, "load_seed": self.seed, **self.lengths.columns()}


@dataclass(frozen=True, kw_only=True)
class Open:
    """Arrivals at ``rate`` requests/s (Poisson at ``burstiness`` 1, gamma-shaped bursts below 1)."""

    rate: float
    burstiness: float = 1.0
    lengths: Lengths = field(default_factory=lambda: Lengths(tokens=32))
    requests: int = 0
    seed: int = 0
    name = "open"
    column = "request_rate"
    unit = "requests/s"
    axis = "request rate"
    level_format = "{:g} req/s"
    steps_batch = False

    @property
    def level(self) -> float:
        return self.rate

    def text(self) -> str:
        return self.level_format.format(self.rate)

    @property
    def warm_concurrency(self) -> int:
        return 1  # no level of requests in flight to warm up at

    def send(self, target, texts: list[str], max_tokens: list[int], ignore_eos: bool, round_index: int):
        """The coroutine that sends ``texts`` as this load, arrivals seeded per round."""
        from specnb.measure.serving_load import send_open

        return send_open(target, texts, self.rate, max_tokens, self.round_seed(round_index), ignore_eos,
                         self.burstiness)

    def round_seed(self, round_index: int) -> int:
        """The seed of a round's arrivals (``serving_load.arrival_gaps``): each round its own draw."""
        return self.seed + round_index

    def requests_for(self, texts: list[str]) -> list[str]:
        n = self.requests or len(texts)
        return [texts[i % len(texts)] for i in range(n)]

    def pieces(self, n: int) -> list[list[int]]:
        """One piece: the arrival process spans the run."""
        return [list(range(n))]

    def window(self, sent_s: np.ndarray, finished_s: np.ndarray) -> tuple[float, float]:
        """The whole trace: its rate holds from the first arrival to the last."""
        return -math.inf, math.inf

    def columns(self) -> dict:
        return {"load": self.name, self.column: self.rate, "burstiness": self.burstiness, "requests": self.requests,
                "load_seed": self.seed, **self.lengths.columns()}


SHAPES = {shape.name: shape for shape in (Closed, Open)}


def shape_of(frame) -> type:
    """The shape a table's rows were measured under, from its ``load`` column; a table without one
    (nothing measured yet) reads as closed loop, the default load."""
    names = set(frame["load"].dropna()) if "load" in getattr(frame, "columns", ()) else set()
    if len(names) > 1:
        raise ParameterError(f"one table holds several load shapes ({', '.join(sorted(names))}): summarise each apart")
    return SHAPES[names.pop()] if names else Closed


def steady_flags(load, sent_s, finished_s) -> np.ndarray:
    """Per request of one run, whether its whole life lies in the load's steady window (``window``):
    sent at or after its start, finished at or before its end; a request that never finished is not."""
    sent_s, finished_s = np.asarray(sent_s, float), np.asarray(finished_s, float)
    start, end = load.window(sent_s, finished_s)
    return (sent_s >= start) & (finished_s <= end)  # NaN finished: False


def level_text(shape: type, value) -> str:
    """A level as text in ``shape``'s unit: "4 concurrent" or "2 req/s"."""
    return shape.level_format.format(value)
