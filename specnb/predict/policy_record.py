"""A serving policy as the record that crosses measure → predict → app: per level what to run
(``PolicyLevel``) and the load its ranges are keyed on (``Policy.keyed_on``).

Why a record: a policy from one noisy figure per level is keyed on the client's concurrency, one over
rounds (``noise_aware``) on the engine's measured batch, and a reader must not tell them apart by
which columns a table happens to carry. Tables stay for the recorder, CSVs and charts:
``Policy.frame()`` is the policy's table, column for column.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import pandas as pd

KEYS = ("batch", "concurrency")  # what a policy's ranges may be keyed on: the engine's batch, the client's load


@dataclass(frozen=True, kw_only=True)
class PolicyLevel:
    """One measured level: its load (``concurrency``), the configuration to run and its k, the TPOT
    speedup it stands on, the load its range starts at (``cut``, NaN on the first level) and, from a
    policy over rounds, the measured ``batch``, the median and spread over rounds, how many rounds,
    whether a measurement there was too noisy to act on and the costlier configurations it tied with."""

    concurrency: float
    config: str = ""
    k: int = 0
    speedup_tpot: float = math.nan
    cut: float = math.nan
    batch: float = math.nan
    median_speedup: float = math.nan
    spread: float = math.nan
    rounds: float = math.nan
    noisy: bool = False
    tie_with: str = ""

    def load(self, keyed_on: str) -> float:
        """This level's load on the policy's key: its measured batch, or its concurrency."""
        return self.batch if keyed_on == "batch" else self.concurrency


FIELDS = tuple(f.name for f in fields(PolicyLevel))


@dataclass(frozen=True, kw_only=True)
class Policy:
    """A per-level policy: ``levels`` in the order of their concurrency, ``keyed_on`` ("batch": ranges
    over the engine's measured batch, from a policy over rounds; "concurrency": over the client's
    load), and ``columns``, the table's columns in their order (what ``frame`` writes)."""

    levels: tuple[PolicyLevel, ...]
    keyed_on: str
    columns: tuple[str, ...]

    def __post_init__(self):
        if self.keyed_on not in KEYS:
            raise ValueError(f"a policy is keyed on one of {KEYS}, got {self.keyed_on!r}")

    def __len__(self) -> int:
        return len(self.levels)

    def by_load(self) -> list[PolicyLevel]:
        """The levels in the order of the load the policy is keyed on (a stable sort)."""
        return sorted(self.levels, key=lambda level: level.load(self.keyed_on))

    def loads(self) -> list[float]:
        """Each level's load on the policy's key, in level order."""
        return [level.load(self.keyed_on) for level in self.levels]

    def drafts(self) -> bool:
        """Whether any level drafts (k > 0)."""
        return any(level.k > 0 for level in self.levels)

    def with_levels(self, levels, columns: tuple[str, ...] | None = None) -> Policy:
        """The same policy, keyed the same way, over ``levels`` (and ``columns``, default its own)."""
        return replace(self, levels=tuple(levels), columns=self.columns if columns is None else tuple(columns))

    def frame(self) -> pd.DataFrame:
        """The policy's table: one row per level, its ``columns`` in order."""
        rows = [{c: getattr(level, c) for c in self.columns} for level in self.levels]
        return pd.DataFrame(rows, columns=list(self.columns))


def policy_of(table: pd.DataFrame, keyed_on: str) -> Policy:
    """A policy table (``Policy.frame``'s, or one read back from a CSV) as the record, keyed on
    ``keyed_on``. Columns the record has no field for are refused."""
    unknown = [c for c in table.columns if c not in FIELDS]
    if unknown:
        raise ValueError(f"a policy table carries {FIELDS} only, not {unknown}")
    levels = tuple(PolicyLevel(**row) for row in table.to_dict("records"))
    return Policy(levels=levels, keyed_on=keyed_on, columns=tuple(table.columns))
