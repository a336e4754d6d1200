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
    serve/     serving engines under load: what a configuration drafts (``speculation``: the
               ``Speculation`` record), what an engine is and the one table of them (``engines``:
               the ``ServingEngine`` protocol), one sub-folder per engine (``llama/``, ``vllm/``, ``simulated/``
               with its cost model ``simulated_cost``, ``openai/``), their processes
               (``server_process``, ``servers``) and the reaping of strays (``reaper``)
    measure/   prompts, interleaved runs into raw records (``runs``), how many runs a CI needs (``sizing``),
               per-position acceptance, forward-pass microbenchmarks (``forward``), the notebooks' tables
               (``analysis``), load on a serving engine: its shape as a record (``load_shapes``), the requests
               (``serving_load``), the sweep (``serving_sweep``), the engine's counters and forward probe
               (``serving_endpoint``), a run's steady window and the engine's own batch (``serving_steady``),
               the sweep's statistics: summaries, launch-to-launch noise and its store of A/A pairs, CIs
               simultaneous over what a verdict reads, the policy measured and vLLM's own load client beside
               ours (``serving_stats``), per-round figures and a trace's occupancy (``serving_rounds``), a
               sweep's target in virtual time, the simulated engine answering it with no HTTP (``serving_virtual``)
    predict/   acceptance traces (each kind's trace, replayed), the cost model and hardware profile
               (``costs``), the predictor and its pick (``pick``), ``gamma="auto"`` (``auto_gamma``), calibration and
               validation, speculation under serving load (``serving_predictor``) and the policy and
               launch that follow from it (``serving_policy``, a Policy record keyed on the batch or the
               concurrency, ``policy_record``; over rounds, ``noise_aware``;
               one launch, ``serving_launch``; decided once, ``serving_decision``), a trace's
               speedups forecast before it is sent (``trace_forecast``) and reconstructed from its
               batch occupancy (``trace_prediction``), why a draft won or lost (``draft_reason``) and which
               engine to use instead of speculating (``engine_choice``)
    app/       charts (``charts/``), notebook text (``text/``), sliders, the notebook recorder, the
               papermill runner and the ``specnb`` command, notebook 08's parameters
               (``serving_setup``) and its policy measured as one server in four phases (``policy_run``)
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
