"""Notebook 08's study as one call: its parameters as a record, a part a run does not have shown as
nothing, and a run without an engine still ending with its conclusion; its parameters checked before
any server starts (levels, loads, engines, endpoints and speculation entries refused in one line naming
the parameter and what it accepts; which engine runs is the engine's module's to say, ``specnb.serve``)."""

import ast
import contextlib
import json
import math
from dataclasses import MISSING, fields, replace

import pandas as pd
import pytest
from helpers import closed

from specnb.app import serving_study
from specnb.app.parameters import declared_parameters
from specnb.app.recorder import Recorder
from specnb.app.text.cell_report import Report
from specnb.core.devices import cpu_name
from specnb.core.errors import ParameterError
from specnb.core.paths import REPO_ROOT
from specnb.measure.serving_load import Lengths
from specnb.measure.serving_sweep import Sweep
from specnb.predict.serving_verdict import decide, model_of
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
    switch = math.sqrt(4 * 16)  # halfway in log between the batches of 4 and 16, the last drafting level and the next
    assert result.adaptive.schedule == [(1, 7, 4), (8, 4096, 0)] and verdict.switch == pytest.approx(switch)
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


@pytest.mark.parametrize("levels, name, message", [
    ([0], "concurrency", "concurrency levels must be whole numbers >= 1 .*got 0 in \\[0\\]"),
    ([1, -2], "concurrency", "got -2"),
    ([1.5], "concurrency", "got 1.5"),
    (["4"], "concurrency", "got '4'"),
    ([], "concurrency", "concurrency must be a non-empty list"),
    (4, "concurrency", "concurrency must be a non-empty list"),
    ([0], "rates", "rates levels must be numbers > 0"),
])
def test_bad_levels_are_refused_naming_the_parameter(levels, name, message):
    with pytest.raises(ParameterError, match=message) as err:
        serving_study.check_levels(levels, name)
    assert "\n" not in str(err.value)


def test_good_levels_pass_and_become_load_records():
    assert serving_study.check_levels([1, 2.0, 8]) == [1, 2, 8]
    assert serving_study.check_levels([0.5, 2], "rates") == [0.5, 2]
    closed = serving_study.load_shapes([1, 4], [], Lengths(tokens=16))
    assert [(c.name, c.concurrency, c.lengths.tokens) for c in closed] == [("closed", 1, 16), ("closed", 4, 16)]
    assert {c.lengths.range_ratio for c in closed} == {0.5}  # drawn lengths unless told: no lockstep
    opened = serving_study.load_shapes([1, 4], [2.0], Lengths(tokens=16), burstiness=0.5)
    assert [(o.name, o.rate, o.burstiness) for o in opened] == [("open", 2.0, 0.5)]
    assert opened[0].columns()["request_rate"] == 2.0 and closed[1].columns()["concurrency"] == 4


@pytest.mark.parametrize("args, message", [
    (([1], [], Lengths(tokens=0)), "max_new_tokens must be a whole number >= 1, got 0"),
    (([1], [], Lengths(tokens=16, range_ratio=1.5)), "length_range_ratio must be in \\[0, 1\\)"),
    (([1], [2.0], Lengths(tokens=16, range_ratio=0.0), 0.0), "burstiness must be above 0"),
])
def test_bad_loads_are_one_line_before_any_server_starts(args, message):
    concurrency, rates, lengths, *burstiness = args
    with pytest.raises(ParameterError, match=message) as err:
        serving_study.load_shapes(concurrency, rates, lengths, burstiness=burstiness[0] if burstiness else 1.0)
    assert "\n" not in str(err.value)
    with pytest.raises(ParameterError, match="beyond the model's context of 100"):
        serving_study.load_shapes([1], [], Lengths(tokens=80, range_ratio=0.5).check(100))


def test_drawn_lengths_are_checked_against_the_launched_engines_context():
    assert serving_study.launch_context("llama.cpp") == 512 and serving_study.launch_context("vllm") == 1024
    assert serving_study.launch_context("vllm", "http://127.0.0.1:8000") is None
    assert serving_study.launch_context("simulated") is None
    assert serving_study.load_shapes([1], [], Lengths(tokens=340).check(512))[0].lengths.longest == 510  # 340 · 1.5
    with pytest.raises(ParameterError, match="asks up to 522 tokens, beyond the model's context of 512"):
        serving_study.load_shapes([1], [], Lengths(tokens=348).check(serving_study.launch_context("llama.cpp")))


def test_engines_are_checked_and_sglang_needs_an_endpoint():
    with pytest.raises(ParameterError, match="engine must be one of llama.cpp, vllm, sglang, simulated, got 'tgi'"):
        serving_study.check_engine("tgi")
    with pytest.raises(ParameterError, match="engine 'sglang' runs only as an endpoint here"):
        serving_study.check_engine("sglang")
    assert serving_study.check_engine("sglang", "http://127.0.0.1:30000").name == "sglang"


def test_endpoint_configurations_are_records_of_what_the_user_said():
    targets = serving_study.endpoint_targets("spec-off=http://127.0.0.1:8000,ngram:4=http://127.0.0.1:8001/,"
                                     "eagle3:3=http://localhost:8002", "vllm")
    assert [t.name for t in targets] == ["spec-off", "ngram k=4", "eagle3 k=3"]
    assert [(t.speculation.family, t.speculation.k, t.speculation.uses_model) for t in targets] == [
        ("none", 0, False), ("ngram", 4, False), ("eagle3", 3, True)]
    assert targets[1].url == "http://127.0.0.1:8001"
    assert serving_study.endpoint_targets("http://[::1]:8000", "sglang")[0].name == "spec-off"
    twin = serving_study.endpoint_targets("spec-off=http://127.0.0.1:8000,spec-off-aa=http://127.0.0.1:8001", "vllm")
    assert [t.name for t in twin] == ["spec-off", "spec-off-aa"]  # a twin URL: that endpoint's launch noise
    assert twin[1].speculation.aa_twin and not twin[1].speculation.speculative
    for bad, message in (("ngram k=4=http://127.0.0.1:1", "must be spec-off, spec-off-aa .* or TYPE:K"),
                         ("ngram:4=http://127.0.0.1:1", "include spec-off=URL"),
                         ("http://10.0.0.1:8000", "not loopback"), ("127.0.0.1:8000", "must start with http")):
        with pytest.raises(ParameterError, match=message):
            serving_study.endpoint_targets(bad, "vllm")


def test_each_engine_has_its_own_default_ngram():
    assert serving_study.serving_speculation("llama.cpp", None) == ["ngram-simple:4"]
    assert serving_study.serving_speculation("vllm", None, smoke=True) == ["ngram:3"]
    assert serving_study.serving_speculation("vllm", ["suffix:8"]) == ["suffix:8"]
    assert serving_study.serving_speculation("simulated", None, smoke=True) == ["ngram:3"]
    with pytest.raises(ParameterError, match="speculation must be a list"):
        serving_study.serving_speculation("vllm", "ngram:4")


def test_each_engines_default_runs_the_head_beside_the_ngram_where_there_is_one(monkeypatch, tmp_path):
    from specnb.models.eagle3 import Eagle3Config
    from specnb.native import llama_build
    from specnb.serve import engines

    head = tmp_path / "head"
    head.mkdir()
    (head / "config.json").write_text(json.dumps(Eagle3Config(draft_vocab_size=64).to_json()))
    (head / "model.safetensors").write_bytes(b"")
    converter = tmp_path / "convert_hf_to_gguf.py"
    converter.write_text("")
    monkeypatch.setattr(llama_build, "converter_path", lambda: converter)
    monkeypatch.setattr(engines, "EAGLE3_HEAD", str(head))
    assert serving_study.serving_speculation("vllm", None, verifier="smollm2-135m") == ["ngram:4", "eagle3:3"]
    assert serving_study.speculation_note("vllm", None, False, "smollm2-135m") == ""
    speculation = serving_study.serving_speculation
    assert speculation("vllm", None, smoke=True, verifier="smollm2-135m") == ["ngram:3"]  # 1 server less
    assert speculation("llama.cpp", None, verifier="smollm2-135m") == ["ngram-simple:4", "eagle3:2"]
    assert speculation("llama.cpp", None, smoke=True, verifier="smollm2-135m") == ["ngram-simple:3"]
    assert serving_study.serving_speculation("vllm", ["ngram:2"], verifier="smollm2-135m") == ["ngram:2"]
    converter.unlink()  # llama-server needs llama.cpp's converter for the head's GGUF; vLLM reads the folder
    assert serving_study.serving_speculation("llama.cpp", None, verifier="smollm2-135m") == ["ngram-simple:4"]
    assert serving_study.speculation_note("llama.cpp", None, False, "smollm2-135m").startswith(
        "eagle3:2 left out of llama-server's default speculation: no llama.cpp converter")
    assert serving_study.serving_speculation("vllm", None, verifier="smollm2-135m") == ["ngram:4", "eagle3:3"]
    monkeypatch.setattr(engines, "EAGLE3_HEAD", "smollm2-medusa")
    assert serving_study.serving_speculation("vllm", None, verifier="smollm2-135m") == ["ngram:4"]
    note = serving_study.speculation_note("vllm", None, False, "smollm2-135m")
    assert note.startswith("eagle3:3 left out of vLLM's default speculation: smollm2-medusa is not an EAGLE-3 head")
    assert serving_study.speculation_note("vllm", ["ngram:4"], False, "smollm2-135m") == ""


def test_the_machine_line_names_the_cpu_and_the_engine_not_the_endpoint():
    line = serving_study.machine_line("vllm", [], "http://127.0.0.1:8000")
    assert line.startswith(cpu_name()) and "vllm" in line and "127.0.0.1" not in line
    assert serving_study.machine_line("vllm", [VllmConfig(model="/m", threads=2)]) == \
        f"{cpu_name()}, vLLM 0.32.0 (CPU) with 2 unbound torch thread(s)"


def test_the_probe_reaches_the_largest_verification_batch_and_drafts_are_named_by_configuration():
    configs = [VllmConfig(model="/m"), VllmConfig(model="/m", method="ngram", k=6),
               VllmConfig(model="/m", method="eagle3", draft="/heads/e3", k=3)]
    assert serving_study.probe_max_tokens([1, 8], configs) == 8 * 7
    assert model_of(configs, ["eagle3 k=3", "spec-off"]) == "/heads/e3" and model_of(configs, ["ngram k=6"]) == ""


def test_endpoints_are_loopback_unless_remote_is_allowed(monkeypatch):
    monkeypatch.delenv("SPECNB_ALLOW_REMOTE", raising=False)
    [only] = serving_study.endpoint_targets("http://127.0.0.1:8000/", "vllm")
    assert (only.name, only.url, only.engine) == ("spec-off", "http://127.0.0.1:8000", "vllm")
    with pytest.raises(ParameterError, match="engine"):
        serving_study.endpoint_targets("http://127.0.0.1:8000", "tgi")
    monkeypatch.setenv("SPECNB_ALLOW_REMOTE", "1")
    assert serving_study.endpoint_targets("http://10.0.0.5:8000", "sglang")[0].url == "http://10.0.0.5:8000"


def test_a_verdict_needs_three_rounds_and_says_so_in_one_line():
    assert serving_study.check_rounds(3, policy=True) == 3 and serving_study.check_rounds(1, policy=False) == 1
    for bad, policy, message in ((2, True, "rounds must be >= 3 where a verdict is asked"),
                                 (0, False, "rounds must be a whole number >= 1"), ("3", True, "whole number")):
        with pytest.raises(ParameterError, match=message) as err:
            serving_study.check_rounds(bad, policy)
        assert "\n" not in str(err.value)


def test_the_forecast_saver_writes_the_forecast_to_the_table_and_results_json(tmp_path):
    rec = Recorder(tmp_path, "08_serving")
    forecast = pd.DataFrame({"config": ["spec-off", "adaptive"], "predicted_tpot_ms": [20.0, 16.0],
                             "trace_mean_batch": [6.04, 5.51], "clamped_share": [0.1, 0.0],
                             "predicted_speedup_tpot": [1.0, 1.25], "clamped": [True, False]})
    serving_study.forecast_saver(rec)(forecast)
    results = json.loads((tmp_path / "08_serving.results.json").read_text())
    assert results["trace_forecast"]["adaptive"] == {"speedup_tpot": 1.25, "mean_batch": 5.51, "clamped_share": 0.0}
    assert len(pd.read_csv(tmp_path / "08_serving.trace_forecast.csv")) == 2


def test_a_gguf_of_the_users_own_is_the_verifier_llama_server_serves(monkeypatch, tmp_path):
    def no_export(*args, **kwargs):
        raise AssertionError("a GGUF of the user's own is served as it is, never exported")

    monkeypatch.setattr("specnb.models.gguf.embedded_gguf", no_export)
    mine = tmp_path / "My-Model-Q8_0.gguf"
    mine.write_bytes(b"GGUF" + bytes(60))
    configs = serving_study.launch_configs("llama.cpp", str(mine), "q4_1", ["ngram-simple:4"], [1, 2], threads=1)
    assert [c.name for c in configs] == ["spec-off", "ngram-simple k=4"]
    assert {c.model for c in configs} == {str(mine)} and configs[0].slots == 2
    assert serving_study.serving_speculation("llama.cpp", None, verifier=str(mine)) == ["ngram-simple:4"]  # no head
    assert serving_study.speculation_note("llama.cpp", None, False, str(mine)).startswith("eagle3:2 left out")
    with pytest.raises(ParameterError, match="speculation eagle3: no EAGLE-3 head for"):
        serving_study.launch_configs("llama.cpp", str(mine), "q4_1", ["eagle3:2"], [1])


@pytest.mark.parametrize("content, message", [(None, "does not exist; pass the path of a .gguf file"),
                                              (b"PK\x03\x04 not a gguf", "is not a GGUF file")])
def test_a_missing_or_foreign_verifier_gguf_is_one_line_before_any_server(tmp_path, content, message):
    path = tmp_path / "model.gguf"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ParameterError, match=message) as caught:
        serving_study.launch_configs("llama.cpp", str(path), "q4_1", ["ngram-simple:4"], [1])
    assert "\n" not in str(caught.value)


def test_an_hf_verifier_on_llama_server_says_to_pass_a_gguf():
    with pytest.raises(ParameterError, match="pass a .gguf file of your own as the verifier, -p verifier PATH.gguf"):
        serving_study.launch_configs("llama.cpp", "Qwen/Qwen2.5-0.5B-Instruct", "q4_1", ["ngram-simple:4"], [1])


def test_every_study_parameter_is_declared_by_notebook_08_with_the_same_default():
    """``-p NAME`` is refused for a name the parameters cell lacks (``parameters.check_parameters``), so a
    study setting the notebook does not declare (``screen``, ``aa_twin``, ``moe``) could never be set."""
    declared = declared_parameters(REPO_ROOT / "notebooks" / "08_serving.ipynb")
    for f in fields(serving_study.Params):
        assert f.name in declared, f"notebook 08 does not declare {f.name}"
        default = f.default if f.default is not MISSING else f.default_factory()
        assert ast.literal_eval(declared[f.name]["default"]) == default, f.name
