"""The policy check's order of things without an engine: servers, sweeps and summaries stood in for,
so what is launched, measured beside what, and stopped is what the test sees."""

import contextlib
import math

import pandas as pd
import pytest
from helpers import closed

from specnb.app import policy_run
from specnb.app.policy_run import PolicyHooks
from specnb.measure.serving_sweep import Sweep, SweepSettings
from specnb.predict.policy_record import policy_of
from specnb.serve.servers import Running
from specnb.serve.vllm.vllm_server import VllmConfig


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

    def run_sweep(targets, prompts, loads, settings, hooks):
        seen["forecasts"].append(None)  # a sweep sent here: a forecast seen after it lands after this marker
        seen["sweeps"].append({"targets": [t.name for t in targets], "levels": [load.level for load in loads],
                               "prompts": len(prompts), "load": loads[0].name,
                               "burstiness": getattr(loads[0], "burstiness", None),
                               "probe": settings.probe_max_tokens})
        return Sweep(records=pd.DataFrame(), runs=pd.DataFrame())

    monkeypatch.setattr(policy_run, "run_sweep", run_sweep)
    configs = [config(), config("ngram", 4)]
    prompts = pd.DataFrame({"prompt": ["a", "b", "c", "d"], "id": list("abcd"), "category": "x"})

    def run(speedups_lo):
        monkeypatch.setattr(policy_run, "summarise_sweep", lambda *a, **k: measured(speedups_lo))
        return policy_run.run_policy(configs, prompts, closed(1, 4, 16), SweepSettings(probe_max_tokens=80),
                                     hooks=PolicyHooks(start=start, on_forecast=seen["forecasts"].append)), seen
    run.start = start
    return run


def test_a_paying_policy_is_launched_as_adaptive_and_measured_beside_the_static_ones(loop):
    result, seen = loop([1.2, 1.05, 0.8])
    assert result.adaptive.name == "adaptive" and result.adaptive.method == "ngram" and result.adaptive.k == 4
    # the k = 0 range costs n-gram's own δ (0.15 ms at 1: 7.69 ms × 5/3 − t(5) = 12.67), so it runs at 0.985x;
    # ngram's 1.15 at 4 and 0.9 at 16 cross that at 4·4^(0.165 / 0.25) = 9.9
    zero = 1 / (1 + (10 / 1.3 * 5 / 3 - (12 + 8 / 12)) / 10)
    switch = 4 * 4 ** ((1.15 - zero) / 0.25)
    assert result.adaptive.schedule == [(1, 9, 4), (10, 4096, 0)] and result.decision.switch == pytest.approx(switch)
    assert result.decision.kind == "schedule" and result.decision.server is result.adaptive
    assert seen["started"] == [["spec-off", "ngram k=4"], ["adaptive"]]
    assert sorted(map(sorted, seen["stopped"])) == [["adaptive"], ["ngram k=4", "spec-off"]]
    first, check, trace = seen["sweeps"]
    assert first["targets"] == ["spec-off", "ngram k=4"] and check["targets"] == ["spec-off", "ngram k=4", "adaptive"]
    assert check["levels"] == [1, 4, 16] and check["load"] == "closed"
    assert first["probe"] == 80 and check["probe"] == trace["probe"] == 0  # probed once
    # the trace keeps the switch in flight on spec-off: its request rate in log concurrency (1 at 4, 4 at 16)
    rate = 1 + 3 * math.log(switch / 4, 16 / 4)
    assert trace["load"] == "open" and trace["burstiness"] == 0.25 and trace["levels"] == [pytest.approx(rate)]
    assert trace["prompts"] == 8 and result.rate == pytest.approx(rate) and result.note == ""


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
    assert seen["stopped"] == [["spec-off", "ngram k=4"]]
    assert "no --speculative-config" in result.note and result.decision.kind == "none"
    sweep, trace = seen["sweeps"]  # no check pass; the trace still holds the verdict against bursty load
    assert trace["load"] == "open" and trace["targets"] == ["spec-off", "ngram k=4"]


def test_a_launch_of_one_range_is_the_static_configuration_with_no_second_server_and_no_check_pass(loop):
    result, seen = loop([1.2, 1.1, 1.05])  # ngram pays at every level: one range, k = 4 throughout
    assert result.decision.kind == "static" and result.decision.config == "ngram k=4"
    assert result.decision.server.name == "ngram k=4" and result.adaptive is None
    assert seen["started"] == [["spec-off", "ngram k=4"]]  # nothing launched beside the static servers
    sweep, trace = seen["sweeps"]  # no check pass: the sweep measured this launch as itself
    assert trace["load"] == "open" and trace["targets"] == ["spec-off", "ngram k=4"]
    assert "a static configuration measured as itself" in result.note


def test_adaptive_takes_the_family_member_with_the_largest_k():
    from specnb.predict.serving_decision import scheduled_server

    table = pd.DataFrame({"concurrency": [1, 4], "k": [2, 0]})  # no speedups: the cut at the geometric mean
    configs = [config(), config("ngram", 2), config("ngram", 4)]
    adaptive = scheduled_server(configs, policy_of(table, "concurrency"), "ngram")
    assert (adaptive.name, adaptive.k, adaptive.schedule) == ("adaptive", 2, [(1, 1, 2), (2, 4096, 0)])
    assert scheduled_server(configs, policy_of(table.assign(k=0), "concurrency"), "ngram") is None


def test_whatever_the_seed_the_text_prints_the_schedule_that_was_launched(monkeypatch, loop):
    """The summary's CIs depend on the run's seed: the seed reaches the summary the decision is made
    from, and the policy text and verdict render that one decision, so each seed prints exactly the
    schedule its check launched (the notebook's path: ``decision = loop.decision``)."""
    import json

    from specnb.app.text.nb08_serving import launch_verdict, policy_text

    bounds = {0: [1.2, 1.05, 0.8], 1: [1.2, 0.9, 0.8]}  # at 4, seed 1's bootstrap puts the lower bound below 0.95
    monkeypatch.setattr(policy_run, "summarise_sweep",
                        lambda records, runs, seed, noise: measured(bounds[seed]))
    printed = {}
    for seed in bounds:
        result = policy_run.run_policy([config(), config("ngram", 4)], pd.DataFrame({"prompt": ["a"], "id": ["a"]}),
                                       closed(1, 4, 16), SweepSettings(seed=seed), hooks=PolicyHooks(start=loop.start))
        report, (verdict, line) = policy_text(result.decision), launch_verdict(result.decision)
        launched = result.adaptive.engine.launch_text(result.adaptive)
        assert report.values["policy_vllm"] == launched == line == result.decision.launch_line
        assert f"`--speculative-config '{launched}'`" in verdict and result.decision.seed == seed
        printed[seed] = json.loads(launched)["num_speculative_tokens_per_batch_size"]
    assert printed[0] != printed[1] and printed[1][0][:2] == [1, 1]  # seed 1 drafts at 1 only
