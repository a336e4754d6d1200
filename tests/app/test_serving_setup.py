"""Notebook 08's parameters are checked before any server starts: levels, loads, engines, endpoints
and speculation entries are refused in one line naming the parameter and what it accepts; which
engine runs is the engine's module's to say (``specnb.serve``)."""

import json

import pytest

from specnb.app import serving_setup as setup
from specnb.core.errors import ParameterError
from specnb.measure.load_shapes import Lengths


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
        setup.check_levels(levels, name)
    assert "\n" not in str(err.value)


def test_good_levels_pass_and_become_load_records():
    assert setup.check_levels([1, 2.0, 8]) == [1, 2, 8]
    assert setup.check_levels([0.5, 2], "rates") == [0.5, 2]
    closed = setup.load_shapes([1, 4], [], Lengths(tokens=16))
    assert [(c.name, c.concurrency, c.lengths.tokens) for c in closed] == [("closed", 1, 16), ("closed", 4, 16)]
    assert {c.lengths.range_ratio for c in closed} == {0.5}  # drawn lengths unless told: no lockstep
    opened = setup.load_shapes([1, 4], [2.0], Lengths(tokens=16), burstiness=0.5)
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
        setup.load_shapes(concurrency, rates, lengths, burstiness=burstiness[0] if burstiness else 1.0)
    assert "\n" not in str(err.value)
    with pytest.raises(ParameterError, match="beyond the model's context of 100"):
        setup.load_shapes([1], [], Lengths(tokens=80, range_ratio=0.5).check(100))


def test_drawn_lengths_are_checked_against_the_launched_engines_context():
    assert setup.launch_context("llama.cpp") == 512 and setup.launch_context("vllm") == 1024
    assert setup.launch_context("vllm", "http://127.0.0.1:8000") is None and setup.launch_context("simulated") is None
    assert setup.load_shapes([1], [], Lengths(tokens=340).check(512))[0].lengths.longest == 510  # 340 · 1.5
    with pytest.raises(ParameterError, match="asks up to 522 tokens, beyond the model's context of 512"):
        setup.load_shapes([1], [], Lengths(tokens=348).check(setup.launch_context("llama.cpp")))


def test_engines_are_checked_and_sglang_needs_an_endpoint():
    with pytest.raises(ParameterError, match="engine must be one of llama.cpp, vllm, sglang, simulated, got 'tgi'"):
        setup.check_engine("tgi")
    with pytest.raises(ParameterError, match="engine 'sglang' runs only as an endpoint here"):
        setup.check_engine("sglang")
    assert setup.check_engine("sglang", "http://127.0.0.1:30000").name == "sglang"


def test_endpoint_configurations_are_records_of_what_the_user_said():
    targets = setup.endpoint_targets("spec-off=http://127.0.0.1:8000,ngram:4=http://127.0.0.1:8001/,"
                                     "eagle3:3=http://localhost:8002", "vllm")
    assert [t.name for t in targets] == ["spec-off", "ngram k=4", "eagle3 k=3"]
    assert [(t.speculation.family, t.speculation.k, t.speculation.uses_model) for t in targets] == [
        ("none", 0, False), ("ngram", 4, False), ("eagle3", 3, True)]
    assert targets[1].url == "http://127.0.0.1:8001" and setup.endpoint_targets("http://[::1]:8000", "sglang")[0].name \
        == "spec-off"
    twin = setup.endpoint_targets("spec-off=http://127.0.0.1:8000,spec-off-aa=http://127.0.0.1:8001", "vllm")
    assert [t.name for t in twin] == ["spec-off", "spec-off-aa"]  # a twin URL: that endpoint's launch noise
    assert twin[1].speculation.aa_twin and not twin[1].speculation.speculative
    for bad, message in (("ngram k=4=http://127.0.0.1:1", "must be spec-off, spec-off-aa .* or TYPE:K"),
                         ("ngram:4=http://127.0.0.1:1", "include spec-off=URL"),
                         ("http://10.0.0.1:8000", "not loopback"), ("127.0.0.1:8000", "must start with http")):
        with pytest.raises(ParameterError, match=message):
            setup.endpoint_targets(bad, "vllm")


def test_each_engine_has_its_own_default_ngram():
    assert setup.serving_speculation("llama.cpp", None) == ["ngram-simple:4"]
    assert setup.serving_speculation("vllm", None, smoke=True) == ["ngram:3"]
    assert setup.serving_speculation("vllm", ["suffix:8"]) == ["suffix:8"]
    assert setup.serving_speculation("simulated", None, smoke=True) == ["ngram:3"]
    with pytest.raises(ParameterError, match="speculation must be a list"):
        setup.serving_speculation("vllm", "ngram:4")


def test_each_engines_default_runs_the_head_beside_the_ngram_where_there_is_one(monkeypatch, tmp_path):
    from specnb.models.eagle3 import Eagle3Config
    from specnb.native import llama_build
    from specnb.serve import eagle3_heads

    head = tmp_path / "head"
    head.mkdir()
    (head / "config.json").write_text(json.dumps(Eagle3Config(draft_vocab_size=64).to_json()))
    (head / "model.safetensors").write_bytes(b"")
    converter = tmp_path / "convert_hf_to_gguf.py"
    converter.write_text("")
    monkeypatch.setattr(llama_build, "converter_path", lambda: converter)
    monkeypatch.setattr(eagle3_heads, "EAGLE3_HEAD", str(head))
    assert setup.serving_speculation("vllm", None, verifier="smollm2-135m") == ["ngram:4", "eagle3:3"]
    assert setup.speculation_note("vllm", None, False, "smollm2-135m") == ""
    assert setup.serving_speculation("vllm", None, smoke=True, verifier="smollm2-135m") == ["ngram:3"]  # 1 server less
    assert setup.serving_speculation("llama.cpp", None, verifier="smollm2-135m") == ["ngram-simple:4", "eagle3:2"]
    assert setup.serving_speculation("llama.cpp", None, smoke=True, verifier="smollm2-135m") == ["ngram-simple:3"]
    assert setup.serving_speculation("vllm", ["ngram:2"], verifier="smollm2-135m") == ["ngram:2"]
    converter.unlink()  # llama-server needs llama.cpp's converter for the head's GGUF; vLLM reads the folder
    assert setup.serving_speculation("llama.cpp", None, verifier="smollm2-135m") == ["ngram-simple:4"]
    assert setup.speculation_note("llama.cpp", None, False, "smollm2-135m").startswith(
        "eagle3:2 left out of llama-server's default speculation: no llama.cpp converter")
    assert setup.serving_speculation("vllm", None, verifier="smollm2-135m") == ["ngram:4", "eagle3:3"]
    monkeypatch.setattr(eagle3_heads, "EAGLE3_HEAD", "smollm2-medusa")
    assert setup.serving_speculation("vllm", None, verifier="smollm2-135m") == ["ngram:4"]
    note = setup.speculation_note("vllm", None, False, "smollm2-135m")
    assert note.startswith("eagle3:3 left out of vLLM's default speculation: smollm2-medusa is not an EAGLE-3 head")
    assert setup.speculation_note("vllm", ["ngram:4"], False, "smollm2-135m") == ""


def test_the_machine_line_names_the_cpu_and_the_engine_not_the_endpoint():
    from specnb.core.devices import cpu_name
    from specnb.serve.vllm.vllm_server import VllmConfig

    line = setup.machine_line("vllm", [], "http://127.0.0.1:8000")
    assert line.startswith(cpu_name()) and "vllm" in line and "127.0.0.1" not in line
    assert setup.machine_line("vllm", [VllmConfig(model="/m", threads=2)]) == \
        f"{cpu_name()}, vLLM 0.32.0 (CPU) with 2 unbound torch thread(s)"


def test_the_probe_reaches_the_largest_verification_batch_and_drafts_are_named_by_configuration():
    from specnb.serve.vllm.vllm_server import VllmConfig

    configs = [VllmConfig(model="/m"), VllmConfig(model="/m", method="ngram", k=6),
               VllmConfig(model="/m", method="eagle3", draft="/heads/e3", k=3)]
    assert setup.probe_max_tokens([1, 8], configs) == 8 * 7
    from specnb.predict.serving_decision import config_drafts

    assert config_drafts(configs) == {"eagle3 k=3": "/heads/e3"}


def test_endpoints_are_loopback_unless_remote_is_allowed(monkeypatch):
    monkeypatch.delenv("SPECNB_ALLOW_REMOTE", raising=False)
    [only] = setup.endpoint_targets("http://127.0.0.1:8000/", "vllm")
    assert (only.name, only.url, only.engine) == ("spec-off", "http://127.0.0.1:8000", "vllm")
    with pytest.raises(ParameterError, match="engine"):
        setup.endpoint_targets("http://127.0.0.1:8000", "tgi")
    monkeypatch.setenv("SPECNB_ALLOW_REMOTE", "1")
    assert setup.endpoint_targets("http://10.0.0.5:8000", "sglang")[0].url == "http://10.0.0.5:8000"


def test_a_policy_needs_three_rounds_and_says_so_in_one_line():
    assert setup.check_rounds(3, policy=True) == 3 and setup.check_rounds(1, policy=False) == 1
    for bad, policy, message in ((2, True, "rounds must be >= 3 where a policy is asked"),
                                 (0, False, "rounds must be a whole number >= 1"), ("3", True, "whole number")):
        with pytest.raises(ParameterError, match=message) as err:
            setup.check_rounds(bad, policy)
        assert "\n" not in str(err.value)


def test_the_forecast_saver_writes_the_forecast_to_the_table_and_results_json(tmp_path):
    import pandas as pd

    from specnb.app.recorder import Recorder

    rec = Recorder(tmp_path, "08_serving")
    forecast = pd.DataFrame({"config": ["spec-off", "adaptive"], "predicted_tpot_ms": [20.0, 16.0],
                             "trace_mean_batch": [6.04, 5.51], "clamped_share": [0.1, 0.0],
                             "predicted_speedup_tpot": [1.0, 1.25], "clamped": [True, False]})
    setup.forecast_saver(rec)(forecast)
    results = json.loads((tmp_path / "08_serving.results.json").read_text())
    assert results["trace_forecast"]["adaptive"] == {"speedup_tpot": 1.25, "mean_batch": 5.51, "clamped_share": 0.0}
    assert len(pd.read_csv(tmp_path / "08_serving.trace_forecast.csv")) == 2


def test_a_gguf_of_the_users_own_is_the_verifier_llama_server_serves(monkeypatch, tmp_path):
    def no_export(*args, **kwargs):
        raise AssertionError("a GGUF of the user's own is served as it is, never exported")

    monkeypatch.setattr("specnb.models.gguf.embedded_gguf", no_export)
    mine = tmp_path / "My-Model-Q8_0.gguf"
    mine.write_bytes(b"GGUF" + bytes(60))
    configs = setup.launch_configs("llama.cpp", str(mine), "q4_1", ["ngram-simple:4"], [1, 2], threads=1)
    assert [c.name for c in configs] == ["spec-off", "ngram-simple k=4"]
    assert {c.model for c in configs} == {str(mine)} and configs[0].slots == 2
    assert setup.serving_speculation("llama.cpp", None, verifier=str(mine)) == ["ngram-simple:4"]  # no head for it
    assert setup.speculation_note("llama.cpp", None, False, str(mine)).startswith("eagle3:2 left out")
    with pytest.raises(ParameterError, match="speculation eagle3: no EAGLE-3 head for"):
        setup.launch_configs("llama.cpp", str(mine), "q4_1", ["eagle3:2"], [1])


@pytest.mark.parametrize("content, message", [(None, "does not exist; pass the path of a .gguf file"),
                                              (b"PK\x03\x04 not a gguf", "is not a GGUF file")])
def test_a_missing_or_foreign_verifier_gguf_is_one_line_before_any_server(tmp_path, content, message):
    path = tmp_path / "model.gguf"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ParameterError, match=message) as caught:
        setup.launch_configs("llama.cpp", str(path), "q4_1", ["ngram-simple:4"], [1])
    assert "\n" not in str(caught.value)


def test_an_hf_verifier_on_llama_server_says_to_pass_a_gguf():
    with pytest.raises(ParameterError, match="pass a .gguf file of your own as the verifier, -p verifier PATH.gguf"):
        setup.launch_configs("llama.cpp", "Qwen/Qwen2.5-0.5B-Instruct", "q4_1", ["ngram-simple:4"], [1])
