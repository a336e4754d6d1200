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

A closed loop is measured in its **steady state** only. A run sends ``concurrency`` **filler**
requests first (one per slot: they absorb the ramp-up, when every slot starts at once), then the
measured requests, and keeps sending fillers while any measured request is still in flight, then
stops and drains (``serving_load.ClosedFeed``): every measured request runs with ``concurrency``
requests in flight. Fillers are recorded (``filler`` True) but never paired or summarised. The
**steady window** (``window``) runs from the run's first completion to the first completion after
its last send, the moment the loop stopped holding its level; ``steady_flags`` checks each request
against it, so a measured request outside it (fillers capped short by a failing server) is marked,
not counted. ``turnovers`` is how many measured requests each slot runs in a run. An open loop's
window is the whole trace: its rate holds throughout.

**Every prompt at every level**: a round measures each prompt the same number of times at every
level (``requests_for``: whole cycles of the prompts, enough that each slot turns over), its order
rotated round by round, so levels compare the same prompt mix and no prompt always sits at a run's
edge.

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

FILLER_STREAM = 1  # the seed word fillers' lengths are drawn with (a trailing 0 would draw the measured ones')
FILLERS_PER_SLOT = 4  # a run's fillers are capped at this many per slot plus one per measured request
TIE_S = 1e-6  # instants this close are one: a completion and the send it frees a slot for (virtual time, rounded)


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

    def draw(self, prompt_ids: list[str], round_index: int, seed: int, filler: bool = False) -> list[int]:
        """Per request, its output length: the same for a (prompt, round) whatever the configuration,
        so requests pair exactly; at least 2 (a TPOT needs two tokens). ``filler``: drawn from a stream
        of their own (a fourth seed word), so no filler's key can draw a measured request's length."""
        if not self.range_ratio:
            return [self.tokens] * len(prompt_ids)
        lo, hi = max(2, math.ceil(self.tokens * (1 - self.range_ratio))), max(2, self.longest)
        import zlib

        stream = [FILLER_STREAM] if filler else []
        return [int(np.random.default_rng([seed, round_index, zlib.crc32(p.encode()), *stream]).integers(lo, hi + 1))
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
        """Measured requests one run holds at least: ``turnovers`` per slot (its fillers come on top)."""
        return self.turnovers * self.concurrency

    @property
    def warm_concurrency(self) -> int:
        return self.concurrency

    def text(self) -> str:
        return self.level_format.format(self.concurrency)

    def send(self, target, texts: list[str], max_tokens: list[int], ignore_eos: bool, round_index: int,
             fillers: tuple[list[str], list[int]] = ((), ())):
        """The coroutine that sends ``texts`` as this load, ``fillers`` (texts, lengths) around them:
        (records: the measured in order, then the fillers sent; duration in s)."""
        from specnb.measure.serving_load import send_closed

        return send_closed(target, texts, self.concurrency, max_tokens, ignore_eos, fillers=fillers)

    def requests_for(self, n_prompts: int, round_index: int = 0) -> list[int]:
        """The prompts (rows) one round measures, in the order sent: whole cycles of every prompt, as
        many as hold a run's worth (``run_requests``) and ``requests``, so each prompt is measured
        equally often at every level (the same mix); the order starts at prompt ``round_index``, so no
        prompt sits at the same place every round."""
        n = max(n_prompts, self.requests or 0, self.run_requests)
        n = -(-n // n_prompts) * n_prompts  # whole cycles
        return [(round_index + i) % n_prompts for i in range(n)]

    def fillers_for(self, n_prompts: int, round_index: int, measured: int) -> list[int]:
        """The prompts (rows) a run's fillers may use, in order: the cap on them, ``FILLERS_PER_SLOT``
        per slot plus one per measured request (a server that fails requests at once while one hangs
        cannot make the loop spin for ever); a run sends c of them, then as many as keep the level
        while its measured requests finish."""
        cap = FILLERS_PER_SLOT * self.concurrency + measured
        return [(round_index + j) % n_prompts for j in range(cap)]

    def pieces(self, n: int) -> list[list[int]]:
        """The request indices in the pieces each configuration runs in turn: as many runs of at least
        ``run_requests`` measured requests as ``n`` holds (the remainder spread over them). Configurations
        alternate run by run, so a slow spell of a shared machine lands on all of them, not on the one
        whose whole level it overlapped."""
        count = max(1, n // self.run_requests)
        return [part.tolist() for part in np.array_split(np.arange(n), count)]

    def window(self, sent_s: np.ndarray, finished_s: np.ndarray) -> tuple[float, float]:
        """(start, end) in s of the run's steady window: its first completion (the leading fillers'
        ramp-up is over), and the first completion after its last send (the loop stops sending where
        no measured request is left in flight: from there it drains). A completion is stamped before
        the send it frees a slot for (at the same instant in virtual time: ``TIE_S``), so the one that
        triggered the last send is not after it."""
        done = finished_s[np.isfinite(finished_s)]
        if not len(done):
            return math.inf, -math.inf
        last_send = float(np.max(sent_s))
        after = done[done > last_send + TIE_S]
        return float(done.min()), float(after.min()) if len(after) else last_send

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

    def send(self, target, texts: list[str], max_tokens: list[int], ignore_eos: bool, round_index: int,
             fillers: tuple[list[str], list[int]] = ((), ())):
        """The coroutine that sends ``texts`` as this load, arrivals seeded per round (no fillers: the
        whole trace is measured)."""
        from specnb.measure.serving_load import arrival_gaps, send_open

        gaps = arrival_gaps(len(texts), self.rate, self.burstiness, self.round_seed(round_index))
        return send_open(target, texts, max_tokens, gaps, ignore_eos)

    def round_seed(self, round_index: int) -> int:
        """The seed of a round's arrivals (``serving_load.arrival_gaps``): each round its own draw."""
        return self.seed + round_index

    def requests_for(self, n_prompts: int, round_index: int = 0) -> list[int]:
        """The prompts (rows) in the order they arrive: each once, or cycled to ``requests``."""
        return [i % n_prompts for i in range(self.requests or n_prompts)]

    def fillers_for(self, n_prompts: int, round_index: int, measured: int) -> list[int]:
        return []  # the whole trace is measured

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
    sent at or after its start, finished at or before its end (within ``TIE_S``: a finish is a send
    plus a latency, rounded); a request that never finished is not."""
    sent_s, finished_s = np.asarray(sent_s, float), np.asarray(finished_s, float)
    start, end = load.window(sent_s, finished_s)
    return (sent_s >= start - TIE_S) & (finished_s <= end + TIE_S)  # NaN finished: False


def level_text(shape: type, value) -> str:
    """A level as text in ``shape``'s unit: "4 concurrent" or "2 req/s"."""
    return shape.level_format.format(value)
