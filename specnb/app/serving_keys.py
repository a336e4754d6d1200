"""The names notebook 08 records its values and tables under (``<run>.results.json`` keys and
``<run>.<table>.csv`` names), written once: the study and its text write them, the serving study's
benchmark and the tests read them."""

from __future__ import annotations

SETTINGS = "settings"
LOAD_AVERAGE_START = "load_average_start"
LOAD_AVERAGE_END = "load_average_end"
MINUTES = "minutes"
LAUNCH_NOISE = "launch_noise"
POLICY_VLLM = "policy_vllm"  # the verdict's --speculative-config in vLLM's form
VERDICT_RECORD = "verdict_record"  # the Verdict: launch, kind, line, how sure, tied, the noise it rests on
LAUNCH_LINE = "launch_line"  # what a user pastes: "" for no speculation
TRACE_FORECAST = "trace_forecast"  # also the forecast's table
TRACE_FORECAST_ERROR = "trace_forecast_median_error"
TRACE_RECONSTRUCTION_ERROR = "trace_reconstruction_median_error"
MACHINE = "machine"
VERDICT = "verdict"

IDENTICAL_SHARE = "identical share"
SPEEDUP_FIRST = "speedup_tpot first"
SPEEDUP_LAST = "speedup_tpot last"
CROSSOVER = "crossover"

FIRST_PHASE = "sweep"  # a study's passes: "sweep", then "check" and "trace"


def config_key(config: str, what: str) -> str:
    """A per-configuration value's key: ``"ngram k=3 identical share"``."""
    return f"{config} {what}"


def phase_table(phase: str, table: str) -> str:
    """A table of one phase of the policy run: the first phase's under its own name, a later one's
    prefixed (``check_requests``, ``trace_runs``)."""
    return f"{phase}_{table}" if phase and phase != FIRST_PHASE else table
