"""Notebook 08's parameters are checked before any server starts: levels, engines and speculation
entries are refused in one line naming the parameter and what it accepts; vLLM's configurations are
built from the embedded models' folders."""

import json
from pathlib import Path

import pandas as pd
import pytest

from specnb.app import serving_setup as setup
from specnb.core.errors import ModelNotFoundError, ParameterError


@pytest.mark.parametrize("levels, mode, message", [
    ([0], "closed", "concurrency levels must be whole numbers >= 1 .*got 0 in \\[0\\]"),
    ([1, -2], "closed", "got -2"),
    ([1.5], "closed", "got 1.5"),
    (["4"], "closed", "got '4'"),
    ([], "closed", "concurrency must be a non-empty list"),
    (4, "closed", "concurrency must be a non-empty list"),
    ([0], "poisson", "rates levels must be numbers > 0"),
])
def test_bad_levels_are_refused_naming_the_parameter(levels, mode, message):
    with pytest.raises(ParameterError, match=message) as err:
        setup.check_levels(levels, mode)
    assert "\n" not in str(err.value)


def test_good_levels_pass():
    assert setup.check_levels([1, 2.0, 8], "closed") == [1, 2, 8]
    assert setup.check_levels([0.5, 2], "poisson") == [0.5, 2]


def test_engines_are_checked_and_sglang_needs_an_endpoint():
    with pytest.raises(ParameterError, match="engine must be one of llama.cpp, vllm, sglang, got 'tgi'"):
        setup.check_engine("tgi")
    with pytest.raises(ParameterError, match="engine 'sglang' runs only as an endpoint here"):
        setup.check_engine("sglang")
    assert setup.check_engine("sglang", "http://127.0.0.1:30000") == "sglang"


def test_an_unknown_speculation_type_is_refused_before_any_export(monkeypatch):
    def no_export(*args, **kwargs):
        raise AssertionError("nothing may be exported or started for a bad entry")

    monkeypatch.setattr("specnb.models.gguf.embedded_gguf", no_export)
    with pytest.raises(ParameterError, match="unknown type 'ngram-foo'; this engine takes ngram-simple, ngram-map-k"):
        setup.server_configs("smollm2-135m", "q4_1", ["ngram-foo:4"], 4, 512)
    with pytest.raises(ParameterError, match="unknown type 'ngram-simple'; this engine takes ngram, suffix, eagle3"):
        setup.vllm_configs("smollm2-135m", ["ngram-simple:4"], max_num_seqs=4)
    with pytest.raises(ParameterError, match="TYPE:K or DRAFT:K with K >= 1"):
        setup.vllm_configs("smollm2-135m", ["ngram:0"], max_num_seqs=4)
    with pytest.raises(ParameterError, match="speculation must be a list"):
        setup.serving_speculation("vllm", "ngram:4")


def test_each_engine_has_its_own_default_ngram():
    assert setup.serving_speculation("llama.cpp", None) == ["ngram-simple:4"]
    assert setup.serving_speculation("vllm", None, smoke=True) == ["ngram:3"]
    assert setup.serving_speculation("vllm", ["suffix:8"]) == ["suffix:8"]


def test_vllm_configurations_come_from_the_embedded_folders(monkeypatch, tmp_path):
    monkeypatch.setattr(setup, "hf_folder", lambda name: tmp_path / name)
    configs = setup.vllm_configs("smollm2-135m", ["ngram:4", "suffix:6", "smollm2-draft-xs:3"], max_num_seqs=8)
    assert [c.name for c in configs] == ["spec-off", "ngram k=4", "suffix k=6", "smollm2-draft-xs k=3"]
    assert [c.method for c in configs] == ["none", "ngram", "suffix", "draft_model"]
    assert configs[3].draft == str(tmp_path / "smollm2-draft-xs") and configs[0].model == str(tmp_path / "smollm2-135m")
    assert all(c.max_num_seqs == 8 for c in configs)
    assert setup.draft_lengths([], configs) == {"ngram k=4": 4, "suffix k=6": 6, "smollm2-draft-xs k=3": 3}
    assert setup.draft_kinds([], configs) == {"ngram k=4": False, "suffix k=6": False, "smollm2-draft-xs k=3": True}
    assert setup.probe_upto([1, 8], configs) == 8 * 7


def standard_head(folder):
    """A folder in the standard EAGLE-3 layout as far as a check before launch looks (vLLM reads the rest)."""
    from specnb.models.eagle3 import Eagle3Config

    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(Eagle3Config(draft_vocab_size=64).to_json()))
    (folder / "model.safetensors").write_bytes(b"")
    return folder


def test_eagle3_on_vllm_runs_the_heads_folder_as_it_is(monkeypatch, tmp_path):
    monkeypatch.setattr(setup, "hf_folder", lambda name: tmp_path / name)
    monkeypatch.setattr(setup, "EAGLE3_HEAD", str(standard_head(tmp_path / "head")))
    configs = setup.vllm_configs("smollm2-135m", ["ngram:4", "eagle3:3"], max_num_seqs=4)
    eagle = configs[2]
    assert (eagle.name, eagle.method, eagle.draft, eagle.k) == ("eagle3 k=3", "eagle3", str(tmp_path / "head"), 3)
    assert setup.draft_kinds([], configs) == {"ngram k=4": False, "eagle3 k=3": True}  # priced as a drafting model
    assert setup.draft_kinds(["spec-off", "eagle3 k=3"], []) == {"eagle3 k=3": True}  # an endpoint's, by its name


@pytest.mark.parametrize("head, verifier, why", [
    ("smollm2-eagle-old", "smollm2-135m", "smollm2-eagle-old is not an EAGLE-3 head in the standard layout vLLM "
                                          "loads \\(an EAGLE head in specnb's own layout"),
    ("smollm2-medusa", "smollm2-135m", "smollm2-medusa is not an EAGLE-3 head .*\\(a Medusa head\\)"),
    ("no-such-head", "smollm2-135m", "\\(no embedded head or folder of that name\\)"),
    ("smollm2-medusa", "other", "no EAGLE-3 head for 'other' here"),
])
def test_eagle3_on_vllm_without_a_standard_head_is_one_line_saying_why(monkeypatch, tmp_path, head, verifier, why):
    if head == "smollm2-eagle-old":  # specnb's own layout, as the embedded head was before its retraining
        head = str(tmp_path / head)
        Path(head).mkdir()
        (Path(head) / "config.json").write_text(json.dumps({"kind": "eagle", "hidden_size": 576}))
        (Path(head) / "weights.safetensors").write_bytes(b"")
    monkeypatch.setattr(setup, "hf_folder", lambda name: tmp_path / name)
    monkeypatch.setattr(setup, "EAGLE3_HEAD", head)
    with pytest.raises(ParameterError, match=f"^speculation eagle3: .*{why}.*; use ngram:K, suffix:K") as err:
        setup.vllm_configs(verifier, ["eagle3:3"], max_num_seqs=4)
    assert "\n" not in str(err.value)


def test_each_engines_default_runs_the_head_beside_the_ngram_where_there_is_one(monkeypatch, tmp_path):
    from specnb.engine import llama_build

    converter = tmp_path / "convert_hf_to_gguf.py"
    converter.write_text("")
    monkeypatch.setattr(llama_build, "converter_path", lambda: converter)
    monkeypatch.setattr(setup, "EAGLE3_HEAD", str(standard_head(tmp_path / "head")))
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
    monkeypatch.setattr(setup, "EAGLE3_HEAD", "smollm2-medusa")
    assert setup.serving_speculation("vllm", None, verifier="smollm2-135m") == ["ngram:4"]
    note = setup.speculation_note("vllm", None, False, "smollm2-135m")
    assert note.startswith("eagle3:3 left out of vLLM's default speculation: smollm2-medusa is not an EAGLE-3 head")
    assert setup.speculation_note("vllm", ["ngram:4"], False, "smollm2-135m") == ""


def test_the_policy_names_the_launched_heads_folder_or_a_placeholder_at_an_endpoint():
    import pandas as pd

    from specnb.engine.vllm_server import VllmConfig

    configs = [VllmConfig(name="spec-off", model="/m"), VllmConfig(name="ngram k=4", model="/m", method="ngram"),
               VllmConfig(name="eagle3 k=3", model="/m", method="eagle3", draft="/heads/e3", k=3)]
    policy = pd.DataFrame({"concurrency": [1, 4], "config": ["eagle3 k=3", "spec-off"], "k": [3, 0]})
    assert setup.policy_model(policy, "eagle3", configs) == "/heads/e3"
    assert setup.policy_model(policy, "ngram", configs) == ""
    assert setup.policy_model(policy, "eagle3", []) == "<the eagle3 model's folder>"


def test_the_machine_line_names_the_cpu_and_the_engine_not_the_endpoint():
    from specnb.core.devices import cpu_name

    line = setup.machine_line("vllm", [], "http://127.0.0.1:8000")
    assert line.startswith(cpu_name()) and "vllm" in line and "127.0.0.1" not in line
    from specnb.engine.vllm_server import VllmConfig

    assert setup.machine_line("vllm", [VllmConfig(name="spec-off", model="/m", threads=2)]) == \
        f"{cpu_name()}, vLLM 0.32.0 (CPU) with 2 unbound torch thread(s)"


def test_eagle3_runs_the_head_as_draft_eagle3_exported_once(monkeypatch, tmp_path):
    from specnb.core.configs import resolve_config
    from specnb.models.eagle3 import Eagle3Config, Eagle3Draft

    Eagle3Draft(Eagle3Config.from_verifier(resolve_config("smollm2-135m"), draft_vocab_size=64)).save(tmp_path / "h")
    exported = []
    monkeypatch.setattr("specnb.models.gguf.embedded_gguf", lambda name, precision: tmp_path / f"{name}-{precision}")
    monkeypatch.setattr("specnb.engine.head_export.head_gguf",
                        lambda head, verifier: exported.append((head, verifier)) or tmp_path / "head.gguf")
    monkeypatch.setattr(setup, "EAGLE3_HEAD", str(tmp_path / "h"))
    configs = setup.server_configs("smollm2-135m", "f32", ["eagle3:3", "ngram-simple:4"], 2, 512, threads=1)
    assert [c.name for c in configs] == ["spec-off", "eagle3 k=3", "ngram-simple k=4"]
    eagle = configs[1]
    assert (eagle.spec_type, eagle.draft, eagle.n_max, eagle.model) == \
        ("draft-eagle3", str(tmp_path / "head.gguf"), 3, str(tmp_path / "smollm2-135m-f32"))
    assert exported == [(str(tmp_path / "h"), "smollm2-135m")] and eagle.drafts_with_model


def test_eagle3_on_llama_server_is_refused_before_any_export(monkeypatch):
    def no_export(*args, **kwargs):
        raise AssertionError("nothing may be exported for a bad head")

    monkeypatch.setattr("specnb.models.gguf.embedded_gguf", no_export)
    monkeypatch.setattr("specnb.engine.head_export.head_gguf", no_export)
    monkeypatch.setattr(setup, "EAGLE3_HEAD", "smollm2-medusa")
    with pytest.raises(ModelNotFoundError, match="'smollm2-medusa' is not an EAGLE-3 head in the standard layout"):
        setup.server_configs("smollm2-135m", "f32", ["eagle3:3"], 1, 512)
    with pytest.raises(ParameterError, match="speculation eagle3: no EAGLE-3 head for 'other'"):
        setup.server_configs("other", "f32", ["eagle3:3"], 1, 512)


def one_method_each(eagle3: list[float], ngram=(1.12, 1.08, 1.05, 0.95)) -> pd.DataFrame:
    """spec-off (steps of 10, 10.5, 11, 20 ms at 1, 2, 4, 16 in a batch), eagle3 k=3 with the given TPOT
    speedups and n-gram k=4 (by default close behind it at 1–2 and paying to 4); each lower bound 0.08
    under its point."""
    levels, step = [1, 2, 4, 16], [10.0, 10.5, 11.0, 20.0]
    rows = [{"config": "spec-off", "concurrency": b, "mean_tpot_ms": t, "speedup_tpot": 1.0, "speedup_tpot_lo": 1.0,
             "tokens_predicted": 100.0, "spec_decode_draft_tokens": 0.0, "spec_decode_accepted_tokens": 0.0}
            for b, t in zip(levels, step)]
    # eagle3: 100 tokens in 60 steps, 3 drafted each (d = 3, τ' = 5/3); n-gram d = 4
    for config, speedups, drafted in (("eagle3 k=3", eagle3, 180.0), ("ngram k=4", list(ngram), 240.0)):
        rows += [{"config": config, "concurrency": b, "mean_tpot_ms": t / x, "speedup_tpot": x,
                  "speedup_tpot_lo": x - 0.08, "tokens_predicted": 100.0, "spec_decode_draft_tokens": drafted,
                  "spec_decode_accepted_tokens": 40.0} for b, t, x in zip(levels, step, speedups)]
    return pd.DataFrame(rows)


def test_one_vllm_launch_is_chosen_by_its_worst_level_with_every_k0_range_priced():
    from specnb.predict.serving_predictor import adaptive_expected, launch_policy, serving_policy, zero_range_speedup

    lengths = {"eagle3 k=3": 3, "ngram k=4": 4}
    summary = one_method_each([1.17, 1.10, 0.90, 0.60])
    overall = serving_policy(summary, lengths)
    assert list(overall["config"]) == ["eagle3 k=3", "eagle3 k=3", "ngram k=4", "spec-off"]  # eagle3 chosen most
    # a k = 0 range pays the method's own step cost δ: eagle3's 3.25 ms at 1 (8.55 ms × 5/3 − t(4) = 11), scaled
    # like the step, so 1 / (1 + 0.3245) at every level; n-gram's 3.13 ms (8.93 × 5/3 − t(5) = 11.75)
    zero = zero_range_speedup(summary, "eagle3 k=3", [1, 4, 16])
    assert zero[4] == pytest.approx(11 / (11 + (10 / 1.17 * 5 / 3 - 11) * 1.1), rel=1e-6)
    ngram_zero = zero_range_speedup(summary, "ngram k=4", [16])[16]
    assert ngram_zero == pytest.approx(1 / (1 + (10 / 1.12 * 5 / 3 - 11.75) / 10))
    # eagle3's launch drafts at 4 too (0.90 beats its k = 0 range's 0.755), not at 16 (0.60 does not)
    eagle3 = launch_policy(summary, {"eagle3 k=3": 3})
    assert list(eagle3["k"]) == [3, 3, 3, 0]
    assert list(adaptive_expected(summary, eagle3, "eagle3 k=3")) == pytest.approx([1.17, 1.10, 0.90, zero[16]])
    # n-gram's launch drafts at 16 as well (0.95 against 0.76 at k = 0): worst level 0.95 of the best static,
    # eagle3's 0.755, vLLM without speculation's 1 / 1.17
    method, policy = setup.vllm_policy(summary, overall, lengths)
    assert method == "ngram" and list(policy["k"]) == [4, 4, 4, 4]
    # where the head pays at every level its schedule has no k = 0, and it is the one launch
    method, policy = setup.vllm_policy(one_method_each([1.17, 1.10, 1.08, 1.10]), overall, lengths)
    assert method == "eagle3" and list(policy["k"]) == [3, 3, 3, 3]
    # n-gram paying at 1 only, 0.80 elsewhere: drafting everywhere (0.80) or k = 0 ranges (0.69) both lose
    # more at 2–16 than 1.10 gains at 1, so the policy is vLLM without speculation, and says why
    lone = one_method_each([0.5] * 4, ngram=(1.10, 0.80, 0.80, 0.80))
    lone = lone[lone["config"] != "eagle3 k=3"]
    alone = serving_policy(lone, {"ngram k=4": 4})
    method, policy = setup.vllm_policy(lone, alone, {"ngram k=4": 4})
    assert method == "ngram" and list(policy["k"]) == [0, 0, 0, 0] and set(policy["config"]) == {"spec-off"}
    assert "k = 0 ranges elsewhere cost more" in setup.no_launch_why(alone, method)
    assert "did not pay at any level" in setup.no_launch_why(alone.assign(k=0), method)
