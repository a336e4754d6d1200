"""The policy check's order of things without an engine: servers, sweeps and summaries stood in for,
so what is launched, measured beside what, and stopped is what the test sees."""

import contextlib

import pandas as pd
import pytest
from helpers import closed

from specnb.app import policy_check
from specnb.engine.servers import Running
from specnb.engine.vllm_server import VllmConfig
from specnb.measure.serving_sweep import Sweep


def config(method: str = "none", k: int = 4) -> VllmConfig:
    return VllmConfig(model="/m", method=method, k=k)


class Server:
    def __init__(self, name):
        self.url, self.model = f"http://127.0.0.1/{name}", "m"

    def exit_note(self):
        return ""


def measured(speedups_lo):
    """spec-off (steps of 10, 12, 20 ms) and ngram k=4 (100 tokens in 60 steps, 4 drafted each) at 1, 4
    and 16 concurrent: ngram's lower TPOT bounds as given, its points 0.1 above."""
    steps = {1: 10.0, 4: 12.0, 16: 20.0}
    counters = {"tokens_predicted": 100.0, "spec_decode_accepted_tokens": 40.0}
    rows = [{"config": "spec-off", "k": 0, "family": "none", "concurrency": c, "speedup_tpot": 1.0,
             "speedup_tpot_lo": 1.0, "mean_ttft_ms": 2 * t,
             "mean_tpot_ms": t, "request_throughput": 0.25 * c, **counters, "spec_decode_accepted_tokens": 0.0,
             "spec_decode_draft_tokens": 0.0} for c, t in steps.items()]
    rows += [{"config": "ngram k=4", "k": 4, "family": "ngram", "concurrency": c, "speedup_tpot": lo + 0.1,
              "speedup_tpot_lo": lo, "mean_ttft_ms": 2 * steps[c],
              "mean_tpot_ms": steps[c] / (lo + 0.1), "request_throughput": 0.3 * c, **counters,
              "spec_decode_draft_tokens": 240.0} for c, lo in zip(steps, speedups_lo)]
    return pd.DataFrame(rows)


@pytest.fixture
def loop(monkeypatch):
    seen = {"started": [], "stopped": [], "sweeps": [], "forecasts": []}

    @contextlib.contextmanager
    def start(configs, keep_going=False):
        seen["started"].append([c.name for c in configs])
        try:
            yield Running({c.name: Server(c.name) for c in configs})
        finally:
            seen["stopped"].append([c.name for c in configs])

    def run_sweep(targets, prompts, loads, **settings):
        seen["forecasts"].append(None)  # a sweep sent here: a forecast seen after it lands after this marker
        seen["sweeps"].append({"targets": [t.name for t in targets], "levels": [load.level for load in loads],
                               "prompts": len(prompts), "load": loads[0].name,
                               "burstiness": getattr(loads[0], "burstiness", None),
                               "probe": settings.get("probe_max_tokens")})
        return Sweep(records=pd.DataFrame(), runs=pd.DataFrame())

    monkeypatch.setattr(policy_check, "run_sweep", run_sweep)
    configs = [config(), config("ngram", 4)]
    prompts = pd.DataFrame({"prompt": ["a", "b", "c", "d"], "id": list("abcd"), "category": "x"})

    def run(speedups_lo):
        monkeypatch.setattr(policy_check, "summarise_sweep", lambda records, runs: measured(speedups_lo))
        return policy_check.check_policy(configs, prompts, closed(1, 4, 16), start=start, probe_max_tokens=80,
                                         on_forecast=seen["forecasts"].append), seen
    return run


def test_a_paying_policy_is_launched_as_adaptive_and_measured_beside_the_static_ones(loop):
    result, seen = loop([1.2, 1.05, 0.8])
    assert result.adaptive.name == "adaptive" and result.adaptive.method == "ngram" and result.adaptive.k == 4
    assert result.adaptive.schedule == [(1, 15, 4), (16, 4096, 0)]
    assert seen["started"] == [["spec-off", "ngram k=4"], ["adaptive"]]
    assert sorted(map(sorted, seen["stopped"])) == [["adaptive"], ["ngram k=4", "spec-off"]]
    first, check, trace = seen["sweeps"]
    assert first["targets"] == ["spec-off", "ngram k=4"] and check["targets"] == ["spec-off", "ngram k=4", "adaptive"]
    assert check["levels"] == [1, 4, 16] and check["load"] == "closed"
    assert first["probe"] == 80 and check["probe"] == trace["probe"] == 0  # probed once
    # the policy switches off between 4 and 16, at 8: halfway in log concurrency, spec-off's 1 and 4 requests/s
    assert trace["load"] == "open" and trace["burstiness"] == 0.25 and trace["levels"] == [pytest.approx(2.5)]
    assert trace["prompts"] == 8 and result.rate == pytest.approx(2.5) and result.note == ""


def test_the_trace_is_forecast_from_the_sweep_alone_and_handed_over_before_it_is_sent(loop):
    result, seen = loop([1.2, 1.05, 0.8])
    sweep, check, forecast, trace = seen["forecasts"]  # the sweep and the check, then the forecast, then the trace
    assert sweep is None and check is None and trace is None and forecast is result.forecast
    assert set(forecast["config"]) == {"spec-off", "ngram k=4", "adaptive"}
    assert forecast.set_index("config").loc["spec-off", "predicted_speedup_tpot"] == 1.0
    assert forecast["predicted_tpot_ms"].notna().all()


def test_where_no_level_pays_nothing_is_launched_and_the_note_says_no_speculative_config(loop):
    result, seen = loop([0.9, 0.8, 0.7])
    assert result.adaptive is None and seen["started"] == [["spec-off", "ngram k=4"]]
    assert len(seen["sweeps"]) == 1 and seen["stopped"] == [["spec-off", "ngram k=4"]]
    assert "no --speculative-config" in result.note


def test_adaptive_takes_the_family_member_with_the_largest_k():
    policy = pd.DataFrame({"concurrency": [1, 4], "k": [2, 0]})
    configs = [config(), config("ngram", 2), config("ngram", 4)]
    adaptive = policy_check.adaptive_config(configs, policy, "ngram")
    assert (adaptive.name, adaptive.k, adaptive.schedule) == ("adaptive", 2, [(1, 3, 2), (4, 4096, 0)])
    assert policy_check.adaptive_config(configs, policy.assign(k=0), "ngram") is None
    # drafting at every level is a static launch: vLLM's dynamic path costs more at the same k
    assert policy_check.adaptive_config(configs, policy.assign(k=2), "ngram").schedule is None
