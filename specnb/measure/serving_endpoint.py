"""What a sweep reads off a serving engine besides its requests: the spec-decode counters (scraped
before and after each run and differenced), whether the server still answers, and its forward cost
against tokens in the batch (the forward probe).

Counters are the engine's Prometheus series under its metrics prefix (``llamacpp:`` or ``vllm:``,
the same names; SGLang's two gauges are read as they are, never differenced: see
``serving_sweep``'s docstring for why a gauge is only a run's tail).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from specnb.core.errors import SpecnbError
from specnb.measure.serving_load import Target


class EndpointError(SpecnbError, RuntimeError):
    """An endpoint is unreachable or does not speak the OpenAI API; the message says which and why."""


@dataclass(kw_only=True)
class Counters:
    """Spec-decode counters of one scrape (or the difference of two)."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    accepted_per_pos: list[float] = field(default_factory=list)
    n_decode: float = 0.0  # llama.cpp: llama_decode() calls of the verifier
    tokens_predicted: float = 0.0
    accept_rate_gauge: float = float("nan")  # SGLang's gauges: read as they are, never differenced
    accept_length_gauge: float = float("nan")

    def minus(self, before: Counters) -> Counters:
        """The counters' difference since ``before``; the gauges as they are now."""
        n = max(len(self.accepted_per_pos), len(before.accepted_per_pos))
        pad = lambda v: list(v) + [0.0] * (n - len(v))  # noqa: E731
        return Counters(**{k: getattr(self, k) - getattr(before, k) for k in
                           ("drafts", "draft_tokens", "accepted", "n_decode", "tokens_predicted")},
                        accepted_per_pos=[a - b for a, b in zip(pad(self.accepted_per_pos),
                                                                pad(before.accepted_per_pos))],
                        accept_rate_gauge=self.accept_rate_gauge, accept_length_gauge=self.accept_length_gauge)


COUNTER_NAMES = {"spec_decode_num_drafts_total": "drafts", "spec_decode_num_draft_tokens_total": "draft_tokens",
                 "spec_decode_num_accepted_tokens_total": "accepted", "n_decode_total": "n_decode",
                 "tokens_predicted_total": "tokens_predicted", "generation_tokens_total": "tokens_predicted"}
GAUGE_NAMES = {"spec_accept_rate": "accept_rate_gauge", "spec_accept_length": "accept_length_gauge"}  # sglang:


def metric_line() -> re.Pattern:
    """A Prometheus sample of any registered engine's prefix: (name, labels, value)."""
    from specnb.serve.engines import engines

    prefixes = "|".join(sorted({re.escape(e.metrics_prefix) for e in engines().values()}))
    return re.compile(rf"^(?:{prefixes}):(\w+?)(?:\{{([^}}]*)\}})?\s+([-+0-9.eE]+|NaN)\s*$")


def parse_counters(text: str) -> Counters:
    """Counters from Prometheus text; series with several label sets (vLLM's per-model) are summed,
    gauges averaged. SGLang's gauges read 0 on a server that never speculated: taken as absent."""
    found, per_pos, gauges, pattern = Counters(), {}, {}, metric_line()
    for line in text.splitlines():
        match = pattern.match(line.strip())
        if not match:
            continue
        name, labels, value = match.group(1), match.group(2) or "", float(match.group(3))
        if name == "spec_decode_num_accepted_tokens_per_pos_total":
            position = int(re.search(r'position="(\d+)"', labels).group(1))
            per_pos[position] = per_pos.get(position, 0.0) + value
        elif name in COUNTER_NAMES:
            setattr(found, COUNTER_NAMES[name], getattr(found, COUNTER_NAMES[name]) + value)
        elif name in GAUGE_NAMES:
            gauges.setdefault(GAUGE_NAMES[name], []).append(value)
    found.accepted_per_pos = [per_pos.get(i, 0.0) for i in range(max(per_pos) + 1)] if per_pos else []
    if np.mean(gauges.get("accept_length_gauge", [0.0])) > 0:  # speculating: τ ≥ 1
        for attr, values in gauges.items():
            setattr(found, attr, float(np.mean(values)))
    return found


def scrape(target: Target, timeout_s: float = 10.0) -> Counters:
    """The target's spec-decode counters now (zeros when it exposes no ``/metrics``; a virtual
    target's from its engine, ``Target.virtual``)."""
    import httpx

    if target.virtual is not None:
        return target.virtual.counters()

    try:
        response = httpx.get(f"{target.url}/metrics", timeout=timeout_s)
    except httpx.HTTPError as err:
        raise EndpointError(f"{target.name}: cannot read {target.url}/metrics: {err}") from err
    return parse_counters(response.text) if response.status_code == 200 else Counters()


def check_target(target: Target, timeout_s: float = 10.0) -> Target:
    """Fail with one line unless ``target`` answers ``/v1/models`` like an OpenAI server; fills in
    ``model`` with the first model it serves when none was given."""
    import httpx

    try:
        response = httpx.get(f"{target.url}/v1/models", timeout=timeout_s)
        models = [m["id"] for m in response.json()["data"]]
    except httpx.HTTPError as err:
        raise EndpointError(f"{target.name}: {target.url} is unreachable ({err}); start the server or fix "
                            "-p endpoint") from err
    except (ValueError, KeyError, TypeError) as err:
        raise EndpointError(f"{target.name}: {target.url}/v1/models is not an OpenAI-compatible answer "
                            f"(HTTP {response.status_code})") from err
    return Target(url=target.url, engine=target.engine, model=target.model or (models[0] if models else ""),
                  speculation=target.speculation)


def reachable(target: Target, timeout_s: float = 5.0) -> bool:
    """Whether the target still answers ``/v1/models`` (how a sweep on an endpoint tells a dead server)."""
    import httpx

    try:
        return httpx.get(f"{target.url}/v1/models", timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


def probe_tokens(max_tokens: int) -> list[int]:
    """1, 2, 3, 4, 6, 8, 12, ... up to the first size at or above ``max_tokens``."""
    sizes, n = [1, 2, 3], 4
    while sizes[-1] < max_tokens:
        sizes += [n, n * 3 // 2]
        n *= 2
    return [x for i, x in enumerate(sizes) if i == 0 or sizes[i - 1] < max_tokens]


def probe_forward(target: Target, sizes: list[int], repeats: int = 3, seed: int = 0,
                  clock: Callable[[], float] = time.perf_counter) -> pd.DataFrame:
    """The engine's cost of one forward with n tokens in the batch, for n in ``sizes``: a prompt of n
    random token ids evaluated in one batch, the same matrix shapes as one decode step over n
    sequences, timed as the target's engine can (``ServingEngine.probe``: llama.cpp times it itself, vLLM by
    the client). Sizes interleaved, ``repeats`` each; median ms. ``clock``: seconds (a test passes its own)."""
    import httpx

    from specnb.serve.engines import engine_named

    probe = engine_named(target.engine).probe
    rng = np.random.default_rng(seed)
    rows = []
    with httpx.Client(timeout=120.0) as client:
        for r in range(repeats):
            for n in sizes[r % len(sizes):] + sizes[:r % len(sizes)]:
                timed = probe(client, target, rng.integers(1000, 20000, size=n).tolist(), clock)
                if timed is not None:
                    rows.append({"tokens": timed[0], "forward_ms": timed[1]})
    frame = pd.DataFrame(rows, columns=["tokens", "forward_ms"])
    return frame.groupby("tokens", as_index=False)["forward_ms"].median()


def probed_target(targets: list[Target]) -> Target | None:
    """The first target whose engine can time a forward (None: none can)."""
    from specnb.serve.engines import engine_named

    return next((t for t in targets if engine_named(t.engine).probe is not None), None)
