"""The simulated engine's cost model (``SimCost``): what a step costs, what a prompt accepts, how
fast a launch runs — the stated truth ``simulated.SimEngine`` runs on.

What varies as on a real engine, each 0 by default (the engine is then exactly the formula):
prompts differ in acceptance (``prompt_acceptance_spread``: each prompt's acceptance shifted in
logit by its own draw, fixed by (seed, key), so a prompt resent in a later round accepts exactly as
before, as a greedy prompt does), and launches differ in speed (``launch_jitter``: every step of
one engine instance, one launch, scaled by one factor drawn from ``launch_seed``), so two launches of
one configuration differ as two vLLM launches do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specnb.core.errors import ParameterError

PROMPT_STREAM, LAUNCH_STREAM = 1, 2  # seed-sequence words that keep these draws apart from the acceptance draws


@dataclass(frozen=True, kw_only=True)
class SimCost:
    """The step-cost model, in ms of simulated time:

        step_ms = fixed_ms + per_token_ms · (decode sequences · (1 + k)) + prefill_per_token_ms · prompt tokens
                  + [speculating] (draft_ms + draft_per_token_ms · k · decode sequences)

    ``draft_ms`` is paid whenever the configuration speculates, k = 0 included (vLLM still runs its
    speculative path); ``draft_per_token_ms`` is a draft model's forward per drafted token (0 for
    n-gram). ``acceptance[j]``: probability draft position j is accepted given 0..j-1 were (the last
    value repeats). ``speed``: simulated seconds per real second, for the HTTP server only.

    ``prompt_acceptance_spread``: the sd of a per-prompt shift of every ``acceptance[j]`` in logit
    space (``prompt_acceptance``), so prompts differ as real ones do. ``launch_jitter``: the sd of
    log of a per-launch factor on every step (``launch_factor``, drawn from ``launch_seed``); a new
    ``SimEngine`` is a new launch, and the HTTP server gives each launch its own seed
    (``simulated_http.launched_cost``). ``simulated.expected_speedup`` is the truth without either."""

    fixed_ms: float = 10.0
    per_token_ms: float = 0.5
    prefill_per_token_ms: float | None = None  # None: per_token_ms
    draft_ms: float = 0.0
    draft_per_token_ms: float = 0.0
    acceptance: tuple[float, ...] = (0.7,)
    max_num_seqs: int = 64
    speed: float = 1.0
    seed: int = 0
    prompt_acceptance_spread: float = 0.0
    launch_jitter: float = 0.0
    launch_seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "acceptance", tuple(float(a) for a in self.acceptance))
        if not all(0.0 <= a <= 1.0 for a in self.acceptance):
            raise ParameterError(f"acceptance {self.acceptance} must be probabilities in [0, 1]")
        if self.max_num_seqs < 1 or self.speed <= 0:
            raise ParameterError(f"max_num_seqs ({self.max_num_seqs}) must be >= 1 and speed ({self.speed}) > 0")
        if self.prompt_acceptance_spread < 0 or self.launch_jitter < 0:
            raise ParameterError(f"prompt_acceptance_spread ({self.prompt_acceptance_spread}) and launch_jitter "
                                 f"({self.launch_jitter}) are standard deviations: use values >= 0")

    def accept_probability(self, position: int) -> float:
        return self.acceptance[min(position, len(self.acceptance) - 1)] if self.acceptance else 0.0

    def prompt_acceptance(self, key: int) -> tuple[float, ...]:
        """The acceptance per position of the prompt with ``key``: each ``acceptance[j]`` shifted in
        logit by one draw from N(0, ``prompt_acceptance_spread``) seeded by (seed, key); 0 and 1 stay."""
        if not self.prompt_acceptance_spread:
            return self.acceptance
        shift = np.random.default_rng([self.seed, key, PROMPT_STREAM]).normal(0.0, self.prompt_acceptance_spread)
        return tuple(a if a in (0.0, 1.0) else float(1.0 / (1.0 + np.exp(-(np.log(a / (1 - a)) + shift))))
                     for a in self.acceptance)

    def launch_factor(self) -> float:
        """What every step of one launch is scaled by: exp(N(0, ``launch_jitter``)) from ``launch_seed``."""
        if not self.launch_jitter:
            return 1.0
        return float(np.exp(np.random.default_rng([self.launch_seed, LAUNCH_STREAM]).normal(0.0, self.launch_jitter)))

    def step_ms(self, decode_tokens: int, prefill_tokens: int, sequences: int, k: int, speculative: bool) -> float:
        prefill_ms = self.per_token_ms if self.prefill_per_token_ms is None else self.prefill_per_token_ms
        draft = self.draft_ms + self.draft_per_token_ms * k * sequences if speculative else 0.0
        return self.fixed_ms + self.per_token_ms * decode_tokens + prefill_ms * prefill_tokens + draft
