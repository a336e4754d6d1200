"""Notebook 08's study as one call: its parameters as a record, a part a run does not have shown as
nothing, and a run without an engine still ending with its conclusion."""

import contextlib
import json
import math
from dataclasses import replace

import pandas as pd
import pytest
from helpers import closed

from specnb.app import serving_study
from specnb.app.recorder import Recorder
from specnb.app.text.cell_report import Report
from specnb.measure.serving_sweep import Sweep
from specnb.predict.serving_verdict import decide
from specnb.serve.engines import engine_named
from specnb.serve.processes import Running
from specnb.serve.vllm import VllmConfig


def test_parameters_are_read_from_the_notebook_with_a_smoke_runs_sizes():
    names = {"engine": "simulated", "smoke": True, "seed": 3, "In": [], "pd": None}  # a kernel's other names ignored
    params = serving_study.Params.of(names)
    assert (params.engine, params.seed, params.n_prompts, params.concurrency) == ("simulated", 3, 4, [1, 2])
    assert serving_study.Params.of({"n_prompts": 8}).n_prompts == 8


def test_show_prints_lines_displays_parts_and_skips_what_is_missing(capsys):
    serving_study.show("note: one", None, Report("**two**", {}))
    out = capsys.readouterr().out
    assert out.startswith("note: one\n") and "None" not in out


def test_a_study_without_an_engine_is_a_note_and_still_concludes(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECNB_LLAMA_SERVER", str(tmp_path / "no-such-llama-server"))
    params = serving_study.Params(smoke=True, output_dir=str(tmp_path), interactive=False, n_prompts=4,
                                  concurrency=[1, 2], max_new_tokens=12)
    study = serving_study.run(params)
    assert any("llama-server not found" in line for line in study.intro) and study.summary.empty
    assert study.policy_report is not None and study.forecast_report is None and study.tpot_chart is None
    assert "llama-server not found" in study.conclusion.markdown
    results = json.loads((tmp_path / "08_serving.results.json").read_text())
    assert results["launch_line"] == "" and "machine" in results


# ---------------------------------------------------------------- the measured run, engine stood in for


def config(method: str = "none", k: int = 4) -> VllmConfig:
    return VllmConfig(model="/m", method=method, k=k)


class Server:
    def __init__(self, name):
        self.url, self.model = f"http://127.0.0.1/{name}", "m"

    def exit_note(self):
        return ""


def measured(speedups: list[float], half: float = 0.08) -> pd.DataFrame:
    """spec-off (steps of 10, 12, 20 ms) and ngram k=4 at 1, 4 and 16 concurrent with the TPOT speedups
    given, each CI ± ``half`` in log (the summary's simultaneous band, c 2.5)."""
    steps = {1: 10.0, 4: 12.0, 16: 20.0}
    counters = {"tokens_predicted": 100.0, "spec_decode_accepted_tokens": 40.0}
    rows = [{"config": "spec-off", "k": 0, "family": "none", "concurrency": c, "speedup_tpot": 1.0,
             "mean_ttft_ms": 2 * t, "mean_tpot_ms": t, "request_throughput": 0.25 * c, "mean_batch": float(c),
             **counters, "spec_decode_accepted_tokens": 0.0, "spec_decode_draft_tokens": 0.0}
            for c, t in steps.items()]
    rows += [{"config": "ngram k=4", "k": 4, "family": "ngram", "concurrency": c, "speedup_tpot": x,
              "speedup_tpot_lo": x * math.exp(-half), "speedup_tpot_hi": x * math.exp(half),
              "tpot_log_var": (half / 2.5) ** 2, "launch_sigma": 0.0, "launch_pairs": 3, "critical": 2.5,
              "mean_ttft_ms": 2 * steps[c], "mean_tpot_ms": steps[c] / x, "request_throughput": 0.3 * c,
              "mean_batch": float(c), **counters, "spec_decode_draft_tokens": 240.0}
             for c, x in zip(steps, speedups)]
    return pd.DataFrame(rows)


@pytest.fixture
def loop(monkeypatch, tmp_path):
    seen = {"started": [], "stopped": [], "sweeps": [], "forecasts": []}

    @contextlib.contextmanager
    def start(configs):
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

    monkeypatch.setattr(serving_study, "run_sweep", run_sweep)
    monkeypatch.setattr(serving_study, "forecast_saver", lambda rec: seen["forecasts"].append)
    configs = [config(), config("ngram", 4)]
    prompts = pd.DataFrame({"prompt": ["a", "b", "c", "d"], "id": list("abcd"), "category": "x"})
    params = serving_study.Params(engine="vllm", interactive=False, output_dir=str(tmp_path))
    ready = serving_study.Prepared(loads=closed(1, 4, 16), served=engine_named("vllm"), prompts=prompts,
                                   configs=configs, absent=None, notes=(), machine="test")

    def run(speedups, seed=0):
        summary = measured(speedups)
        verdict = decide(summary, engine="vllm", configs=configs)
        monkeypatch.setattr(serving_study, "judge", lambda sweep, p, launched: (None, summary, verdict))
        rec = Recorder(str(tmp_path), f"run{seed}")
        return serving_study.measure(replace(params, seed=seed), ready, rec, start=start), seen
    return run


def test_a_schedule_is_launched_as_adaptive_and_measured_beside_the_static_ones(loop):
    result, seen = loop([1.3, 1.15, 0.7])
    verdict = result.verdict
    assert verdict.kind == "schedule" and result.adaptive is verdict.server
    assert result.adaptive.name == "adaptive" and result.adaptive.method == "ngram" and result.adaptive.k == 4
    assert [level.k for level in verdict.policy.levels] == [4, 4, 0]
    # the k = 0 range at vLLM's n-gram price (0.95): ngram's 1.15 at 4 and 0.7 at 16 cross it at 4·4^(0.2 / 0.45)
    switch = 4 * 4 ** ((1.15 - 0.95) / (1.15 - 0.95 - (0.7 - 0.95)))
    assert result.adaptive.schedule == [(1, math.ceil(switch) - 1, 4), (math.ceil(switch), 4096, 0)]
    assert verdict.switch == pytest.approx(switch)
    assert seen["started"] == [["spec-off", "ngram k=4"], ["adaptive"]]
    assert sorted(map(sorted, seen["stopped"])) == [["adaptive"], ["ngram k=4", "spec-off"]]
    first, check, trace = seen["sweeps"]
    assert first["targets"] == ["spec-off", "ngram k=4"] and check["targets"] == ["spec-off", "ngram k=4", "adaptive"]
    assert check["levels"] == [1, 4, 16] and check["load"] == "closed"
    assert first["probe"] > 0 and check["probe"] == trace["probe"] == 0  # probed once
    rate = 1 + 3 * math.log(switch / 4, 16 / 4)  # the switch in flight on spec-off: 1 req/s at 4, 4 at 16
    assert trace["load"] == "open" and trace["burstiness"] == 0.25 and trace["levels"] == [pytest.approx(rate)]
    assert trace["prompts"] == 8 and result.rate == pytest.approx(rate) and result.note == ""


def test_the_trace_is_forecast_from_the_sweep_alone_and_recorded_before_it_is_sent(loop):
    result, seen = loop([1.3, 1.15, 0.7])
    sweep, check, forecast, trace = seen["forecasts"]  # the sweep and the check, then the forecast, then the trace
    assert sweep is None and check is None and trace is None and forecast is result.forecast
    assert set(forecast["config"]) == {"spec-off", "ngram k=4", "adaptive"}
    assert forecast.set_index("config").loc["spec-off", "predicted_speedup_tpot"] == 1.0


def test_where_nothing_pays_nothing_is_launched_and_the_note_says_so(loop):
    result, seen = loop([0.8, 0.75, 0.7])
    assert result.adaptive is None and seen["started"] == [["spec-off", "ngram k=4"]]
    assert "no --speculative-config" in result.note and result.verdict.kind == "none"
    _, trace = seen["sweeps"]  # no check pass; the trace still checks the launch against bursty load
    assert trace["load"] == "open" and trace["targets"] == ["spec-off", "ngram k=4"]


def test_a_static_launch_is_measured_as_itself_with_no_second_server(loop):
    result, seen = loop([1.3, 1.25, 1.2])
    assert result.verdict.kind == "static" and result.verdict.config == "ngram k=4" and result.adaptive is None
    assert seen["started"] == [["spec-off", "ngram k=4"]]
    _, trace = seen["sweeps"]
    assert trace["targets"] == ["spec-off", "ngram k=4"] and "measured as itself" in result.note


def test_what_is_printed_is_what_was_launched(loop):
    """The policy text, the verdict line, results.json's launch line and the launched server are one
    record's: each renders the ``Verdict``."""
    from specnb.app.text.nb08_serving import policy_text, verdict_line

    result, _ = loop([1.3, 1.15, 0.7])
    verdict = result.verdict
    launched = result.adaptive.engine.launch_text(result.adaptive)
    assert verdict.line == launched and launched in policy_text(verdict).markdown
    assert f"`{launched}`" in verdict_line(verdict)
    assert json.loads(launched)["num_speculative_tokens_per_batch_size"][0][2] == 4
