"""The simulated engine behind the seam (``specnb.serve.simulated.sim_engine``): an OpenAI-compatible server with
continuous batching and no model, whose step time follows a stated cost model and which counts in
vLLM's names, so every part of notebook 08 runs on it and its truth (each configuration's speedup at
each batch, the crossover) is known. For tests and for anyone checking the method: ``-p engine
simulated``. Its cost model is ``SimCost``'s defaults, or the JSON in ``SPECNB_SIM_COST`` (the fields
of ``SimCost``: ``fixed_ms``, ``per_token_ms``, ``draft_ms``, ``acceptance``, ``speed``,
``prompt_acceptance_spread``, ``launch_jitter``, ...). Every server started is a launch of its own:
``SimServer`` numbers its launches and mixes the number and the configuration's name into the cost's
``launch_seed`` (``simulated_http.launched_cost``), so with ``launch_jitter`` two launches of one
configuration (spec-off and its A/A twin, or one configuration relaunched each round) differ in speed."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import specnb
from specnb.core.errors import ParameterError
from specnb.serve.engines import EngineDefaults, register
from specnb.serve.simulated.sim_engine import SimConfig, SimCost, SimServer
from specnb.serve.speculation import FREE_FAMILIES, Speculation, parse_entry
from specnb.serve.vllm.engine_vllm import VllmEngine

FAMILIES = ("ngram", "suffix", "eagle3", "draft_model")  # what an entry may name; all cost as the model says


def cost_model() -> SimCost:
    """``SimCost`` from ``SPECNB_SIM_COST`` (JSON), else its defaults; one line when it is malformed."""
    text = os.environ.get("SPECNB_SIM_COST", "")
    try:
        return SimCost(**json.loads(text)) if text else SimCost()
    except (TypeError, ValueError) as err:
        raise ParameterError(f"SPECNB_SIM_COST must be a JSON object of SimCost fields, e.g. "
                             f'{{"fixed_ms": 10, "per_token_ms": 0.5, "acceptance": [0.7]}}: {err}') from None


class SimulatedEngine(EngineDefaults):
    """The simulated engine: launched here, relaunched every round (a start takes a moment); it counts,
    is probed and writes a policy's launch as vLLM does."""

    name = "simulated"
    label = "the simulated engine"
    version = specnb.__version__  # its cost model is specnb's own
    metrics_prefix = "vllm"
    launched = True
    batch_gauge = "num_requests_running"
    relaunch_each_round = True
    probe = VllmEngine.probe
    launch_json = VllmEngine.launch_json

    def configs(self, verifier: str, precision: str, entries: list[str], max_level: int, threads: int = 0
                ) -> list[SimConfig]:
        """spec-off, then one simulated server per entry (``ngram:4``, ``eagle3:3``, ...), every one on the
        same cost model with ``max_level`` sequences at most (vLLM's ``max_num_seqs``)."""
        cost = replace(cost_model(), max_num_seqs=int(max_level))
        out = [SimConfig(speculation=Speculation(), cost=cost)]
        for family, k in (parse_entry(spec, FAMILIES) for spec in entries):
            out.append(SimConfig(speculation=Speculation(entry=family, k=k, method=family, family=family,
                                                         uses_model=family not in FREE_FAMILIES), cost=cost))
        return out

    def server(self, config: SimConfig, timeout_s: float | None = None) -> SimServer:
        return SimServer(config) if timeout_s is None else SimServer(config, timeout_s)

    def machine(self, configs: list) -> str:
        cost = configs[0].cost
        return (f"simulated engine (no model): a step costs {cost.fixed_ms:g} ms + {cost.per_token_ms:g} ms per "
                f"token in the batch, speculation {cost.draft_ms:g} ms + {cost.draft_per_token_ms:g} ms per drafted "
                f"token, acceptance per position {list(cost.acceptance)}, run at {cost.speed:g}x real time"
                + (f", prompts' acceptance spread {cost.prompt_acceptance_spread:g} in logit" if
                   cost.prompt_acceptance_spread else "")
                + (f", launches' speed spread {cost.launch_jitter:g} in log" if cost.launch_jitter else ""))

    def launch_text(self, config: SimConfig) -> str:
        """The speculation in vLLM's ``--speculative-config`` form, the engine the simulation counts like."""
        spec = config.speculation
        if not spec.speculative:
            return ""
        schedule = [list(r) for r in spec.schedule] if spec.schedule else None
        return json.dumps({"method": spec.family, "num_speculative_tokens": spec.k}
                          | ({"num_speculative_tokens_per_batch_size": schedule} if schedule else {}))

    def default_entries(self, smoke: bool, verifier: str) -> list[str]:
        return [f"ngram:{3 if smoke else 4}"]

    def scheduled(self, config: SimConfig, k: int, schedule) -> SimConfig:
        ranges = tuple(tuple(int(x) for x in r) for r in schedule) if schedule else None
        return replace(config, speculation=replace(config.speculation, adaptive=True, k=k, schedule=ranges))


ENGINE = register(SimulatedEngine())
