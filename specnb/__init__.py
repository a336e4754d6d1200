"""specnb: will speculative decoding make *your* verifier/draft pair faster on *your* hardware?

The folders follow the data flow, and imports only go downwards (a test checks it):

    core/      model math and plumbing, no weights: FLOPs per token (``flops``), Leviathan's formulas
               (``theory``), sampling and padding, token sequences (``sequences``), the reference
               run's figures, devices, configs, typed errors
    models/    getting models into memory: draft names (``registry``), the embedded verifier and
               drafts, finding and reading weights (``load``), early exits, trimmed heads, prompt
               lookup, FLOPs counted on a meta-device forward (``flop_count``);
               ``models/training`` distils the drafts and trains the EAGLE / Medusa heads
    native/    native code built for this CPU and run where its crash cannot take a kernel down:
               llama.cpp (``llama_build``, run in a child process by ``isolation`` and ``llama_cpp``),
               vLLM's own environment (``vllm_build``), an EAGLE-3 head in the serving engines'
               formats (``head_export``)
    decode/    the KV-cached decoding loop (``generate``), the Drafter seam every draft plugs into
               (``drafters``), the draft kinds, one module each, in one table (``kinds/``: drafter,
               loader, trace and pricing side by side; CONTRIBUTING.md), loading a verifier and its
               drafts by kind (``pairs``), γ settled in one place (``gamma``), KV caches,
               accept/reject (``accept``), the stage timer (``timing``)
    serve/     serving engines under load: what an engine is, what a configuration drafts and the one
               table of engines (``engines``: the ``ServingEngine`` protocol, the ``Speculation`` record,
               an endpoint someone else runs), their processes and the reaping of strays (``processes``),
               one module per launched engine (``llama``, ``vllm``, ``simulated``: a cost model, its
               scheduler, virtual-time drivers and an HTTP face)
    measure/   prompts, interleaved runs into raw records (``runs``), how many runs a CI needs (``sizing``),
               per-position acceptance, forward-pass microbenchmarks (``forward``), the notebooks' tables
               (``analysis``), load on one serving engine: its shape as a record, the requests, a run's steady
               window, the engine's own batch, counters and forward probe (``serving_load``); the sweep over
               levels and configurations, its per-round figures and a trace's occupancy, and its targets in
               virtual time, the simulated engine answering with no HTTP (``serving_sweep``); the sweep's
               statistics: summaries, launch-to-launch noise and its store of A/A pairs, CIs simultaneous over
               what a verdict reads, the launch checked and vLLM's own load client beside ours (``serving_stats``)
    predict/   acceptance traces (each kind's trace, replayed), the cost model and hardware profile
               (``costs``), the predictor and its pick (``pick``), ``gamma="auto"`` (``auto_gamma``), calibration and
               validation, speculation under serving load (``serving_model``: TPOT against the batch, what
               a configuration reaches at a level and a trace's speedups, forecast before it is sent and
               reconstructed from its batch occupancy by one predictor) and the one verdict a sweep's
               summary gives (``serving_verdict``: every launch priced from its CIs, the tie rule, how sure,
               the launch line and its Policy over the batch or the concurrency), why a draft won or lost
               (``draft_reason``) and which engine to use instead of speculating (``engine_choice``)
    app/       charts (``charts/``), notebook text (``text/``), sliders, the notebook recorder, the
               papermill runner and the ``specnb`` command, notebook 08's study as one call: its parameters
               checked, the sweep, the verdict judged once, the launch checked (``serving_study``)
    notebooks/ (beside the package) the narrative, calling into all of the above

What a user's own notebook or script needs is importable from here, whatever folder it lives in:
``from specnb import load_pair, generate, encode_prompts``. The names are loaded on first use, so
``import specnb`` stays light.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_HOMES = {  # each module, the names it gives the package root
    # models
    "specnb.decode.pairs": ("load_pair", "load_drafts", "load_model"),
    "specnb.models.load": ("Pair",),
    "specnb.models.lookup": ("PromptLookup",),
    # decoding
    "specnb.decode.generate": ("generate", "GenerationResult"),
    "specnb.decode.settings": ("Decoding",),
    "specnb.decode.inputs": ("encode_prompts",),
    "specnb.core.sampling": ("SamplingConfig",),
    "specnb.decode.timing": ("StageTimer",),
    "specnb.decode.drafters": ("Drafter",),
    # model math
    "specnb.core.flops": ("analytic_flops", "cost_ratio"),
    "specnb.models.flop_count": ("measure_flops",),
    "specnb.core.theory": ("expected_speedup", "tokens_per_step", "break_even_alpha", "break_even_c",
                           "optimal_gamma"),
    # measurement
    "specnb.measure.prompts": ("select_prompts", "load_prompts"),
    "specnb.measure.runs": ("make_candidates", "run_interleaved", "summarise"),
    # prediction
    "specnb.predict.calibrate": ("calibrate", "CalibrationSettings"),
    "specnb.predict.predictor": ("predict", "Workload", "Bootstrap"),
    "specnb.predict.auto_gamma": ("auto_gamma", "ProfileSource"),
    "specnb.predict.validate": ("validate",),
    "specnb.predict.costs": ("load_profile", "save_profile"),
    # notebooks
    "specnb.app.runner": ("run_notebooks",),
    # errors
    "specnb.core.errors": ("SpecnbError", "ParameterError", "ModelNotFoundError", "IncompatibleModelsError",
                           "DeviceError", "ConfigError", "ConversionError"),
}
_API = {name: module for module, names in _HOMES.items() for name in names}
__all__ = sorted(_API)


def __getattr__(name: str):
    if name in _API:
        value = getattr(importlib.import_module(_API[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'specnb' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
