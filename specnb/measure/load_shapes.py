"""The shape of a load, as a record every request and summary row carries: how requests arrive and
how long each one is asked to be.

GuideLLM makes each load profile a strategy object the scheduler asks for the next request, never
branching on a profile's name; ``vllm bench serve`` keeps request rate (Poisson or gamma arrivals,
``burstiness``) and max concurrency as separate knobs and draws output lengths with a range ratio.
Here a shape is a frozen dataclass:

- ``Closed``: ``concurrency`` requests in flight, each worker sending its next when its last one
  finished (vLLM bench's ``max_concurrency``; its level column is ``concurrency``).
- ``Open``: arrivals at ``rate`` requests/s, exponential gaps at burstiness 1, gamma below (bursts
  with quiet spells between), none capped (``request_rate``).

Both carry the output-length rule (``Lengths``), the number of requests (0: every prompt once) and
the seed. ``columns()`` is what a record carries, ``shape_of(frame)`` reads it back from a table — a
new shape (a replayed trace, open-loop steps) is a new record type and one line in ``SHAPES``, not a
new string branch. ``steps_batch`` says whether the level *is* the number of sequences in an engine
step (a closed loop), what the serving predictor and policy price a step by.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from specnb.core.errors import ParameterError


@dataclass(frozen=True, kw_only=True)
class Lengths:
    """Output tokens asked per request: ``tokens`` each (``range_ratio`` 0), or drawn uniformly over
    [tokens·(1 − r), tokens·(1 + r)] per (prompt, round), seeded, as vLLM bench's ``--random-range-ratio``."""

    tokens: int
    range_ratio: float = 0.0

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
    """``concurrency`` requests in flight."""

    concurrency: int
    lengths: Lengths = field(default_factory=lambda: Lengths(tokens=32))
    requests: int = 0
    seed: int = 0
    name = "closed"
    column = "concurrency"
    unit = "concurrent requests"
    axis = "concurrency"
    level_format = "{:g} concurrent"
    steps_batch = True  # the level is the number of sequences a step serves

    @property
    def level(self) -> float:
        return self.concurrency

    def text(self) -> str:
        return self.level_format.format(self.concurrency)

    def send(self, target, texts: list[str], max_tokens: list[int], ignore_eos: bool, round_index: int):
        """The coroutine that sends ``texts`` as this load: (records, duration in s)."""
        from specnb.measure.serving_load import send_closed

        return send_closed(target, texts, self.concurrency, max_tokens, ignore_eos)

    def requests_for(self, texts: list[str]) -> list[str]:
        """Each prompt once, cycled until every worker has one (fewer prompts would never fill it)."""
        n = max(len(texts), self.requests or 0, self.concurrency)
        return [texts[i % len(texts)] for i in range(n)]

    def pieces(self, n: int, per_slot: int = 4) -> list[list[int]]:
        """The request indices in the pieces each configuration runs in turn: ``per_slot``·c at a time, so
        configurations alternate every few seconds at low concurrency (a slow spell of a shared machine
        then lands on all of them, not on the one whose whole level it overlapped)."""
        size = max(1, per_slot * self.concurrency)
        return [list(range(start, min(start + size, n))) for start in range(0, n, size)]

    def columns(self) -> dict:
        return {"load": self.name, self.column: self.concurrency, "burstiness": math.nan, "requests": self.requests,
                "load_seed": self.seed, **self.lengths.columns()}


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

    def send(self, target, texts: list[str], max_tokens: list[int], ignore_eos: bool, round_index: int):
        """The coroutine that sends ``texts`` as this load, arrivals seeded per round."""
        from specnb.measure.serving_load import send_open

        return send_open(target, texts, self.rate, max_tokens, self.seed + round_index, ignore_eos, self.burstiness)

    def requests_for(self, texts: list[str]) -> list[str]:
        n = self.requests or len(texts)
        return [texts[i % len(texts)] for i in range(n)]

    def pieces(self, n: int, per_slot: int = 4) -> list[list[int]]:
        """One piece: the arrival process spans the run."""
        return [list(range(n))]

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


def level_text(shape: type, value) -> str:
    """A level as text in ``shape``'s unit: "4 concurrent" or "2 req/s"."""
    return shape.level_format.format(value)
