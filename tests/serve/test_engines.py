"""The serving-engine seam: the worked example of CONTRIBUTING.md registered as it is written there and
swept at an endpoint (two simulated servers), with nothing else told about it; a configuration's
display name comes from its record."""

import pandas as pd
import pytest
from helpers import closed

from specnb.core.errors import ParameterError
from specnb.serve.engines import ENGINES, EngineDefaults, Launch, Speculation, engine_named, range_text, register


class TgiEngine(EngineDefaults):
    name = "tgi"
    label = "TGI"
    metrics_prefix = "vllm"  # its counters use vLLM's names

    def policy_lines(self, launch: Launch, configs: list) -> list[str]:
        return [f"{range_text(lo, hi, i == len(launch.ranges) - 1)} concurrent: "
                + ("no speculation" if k == 0 else f"--num-speculative-tokens {k}")
                for i, (lo, hi, k) in enumerate(launch.ranges)]


@pytest.fixture
def tgi():
    engine = register(TgiEngine())
    yield engine
    ENGINES.pop("tgi")


def test_a_display_name_is_derived_from_the_record():
    assert Speculation().name == "spec-off" and not Speculation().speculative
    ngram = Speculation(entry="ngram", k=4, method="ngram", family="ngram")
    assert ngram.name == "ngram k=4" and ngram.columns()["k"] == 4
    assert Speculation(entry="ngram", k=4, adaptive=True).name == "adaptive"
    with pytest.raises(ParameterError, match="engine must be one of llama.cpp, vllm, sglang, simulated"):
        engine_named("tgi")


def test_an_engine_registered_in_one_module_is_swept_at_an_endpoint(tgi):
    from specnb.app import serving_study as setup
    from specnb.measure.serving_load import check_target
    from specnb.measure.serving_stats import summarise_sweep
    from specnb.measure.serving_sweep import SweepSettings, run_sweep
    from specnb.predict.serving_verdict import decide
    from specnb.serve.simulated import SimConfig, SimCost, SimServer

    cost = SimCost(fixed_ms=10.0, per_token_ms=1.0, acceptance=(0.9,), speed=5.0)
    ngram = Speculation(entry="ngram", k=3, method="ngram", family="ngram")
    prompts = pd.DataFrame({"prompt": ["one two", "three four five"], "category": ["a", "b"]})
    with SimServer(SimConfig(speculation=Speculation(), cost=cost)) as off, \
            SimServer(SimConfig(speculation=ngram, cost=cost)) as spec:
        targets = [check_target(t) for t in setup.endpoint_targets(f"spec-off={off.url},ngram:3={spec.url}", "tgi")]
        sweep = run_sweep(targets, prompts, closed(1, tokens=8), SweepSettings(warmup=False))
    assert setup.check_engine("tgi", "http://127.0.0.1:1") is tgi
    summary = summarise_sweep(sweep.records, sweep.runs, n_boot=50)
    row = summary.set_index("config").loc["ngram k=3"]
    assert row["engine"] == "tgi" and row["k"] == 3 and row["spec_decode_num_drafts"] > 0  # its counters read
    # 4 measured requests at concurrency 1 (2 prompts in whole cycles to 3 turnovers) after a filler: all steady, paired
    assert row["identical_outputs"] == row["paired_requests"] == 4
    assert row["speedup_tpot"] > 1.2  # the simulated draft is 5x as fast as its verifier and accepts 90%
    verdict = decide(summary.assign(tpot_log_var=1e-6), engine="tgi")  # the row's speedup taken as exact
    assert verdict.kind == "static" and verdict.chosen.name == "ngram k=3"
    assert tgi.policy_lines(verdict.launch, []) == ["1 or more concurrent: --num-speculative-tokens 3"]
