"""vLLM without a server: configurations from speculation entries, built from the embedded models'
folders, the EAGLE-3 head's folder as it is, one line before any launch where a head cannot run; the
speculation JSON each method gets, the schedule refused before launch when vLLM would cap or reject it,
the environment (loopback, CPU, preloads), the root cause picked from a vLLM log; and ``make setup``'s
step on a machine with an NVIDIA GPU: nothing is built, one line says how notebook 08 reaches a vLLM,
and that line is the marker notebook 08 prints. The real vLLM is ``test_vllm_server.py``'s."""

import importlib.machinery
import json
from pathlib import Path

import pytest

from specnb.core.errors import ParameterError
from specnb.native import vllm_build
from specnb.serve import engines, vllm
from specnb.serve.engines import Launch
from specnb.serve.vllm import VllmConfig, VllmServer, check_schedule, serve_args, server_env, speculative_config


def standard_head(folder):
    """A folder in the standard EAGLE-3 layout as far as a check before launch looks (vLLM reads the rest)."""
    from specnb.models.eagle3 import Eagle3Config

    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(Eagle3Config(draft_vocab_size=64).to_json()))
    (folder / "model.safetensors").write_bytes(b"")
    return folder


def test_an_unknown_speculation_type_is_refused_before_any_launch():
    with pytest.raises(ParameterError, match="unknown type 'ngram-simple'; this engine takes ngram, suffix, eagle3"):
        vllm.ENGINE.configs("smollm2-135m", "f32", ["ngram-simple:4"], 4)
    with pytest.raises(ParameterError, match="TYPE:K or DRAFT:K with K >= 1"):
        vllm.ENGINE.configs("smollm2-135m", "f32", ["ngram:0"], 4)


def test_vllm_configurations_come_from_the_embedded_folders(monkeypatch, tmp_path):
    monkeypatch.setattr(vllm, "hf_folder", lambda name: tmp_path / name)
    configs = vllm.ENGINE.configs("smollm2-135m", "f32", ["ngram:4", "suffix:6", "smollm2-draft-xs:3"], 8)
    assert [c.name for c in configs] == ["spec-off", "ngram k=4", "suffix k=6", "smollm2-draft-xs k=3"]
    assert [c.method for c in configs] == ["none", "ngram", "suffix", "draft_model"]
    assert [c.speculation.family for c in configs] == ["none", "ngram", "suffix", "draft_model"]
    assert [c.speculation.uses_model for c in configs] == [False, False, False, True]
    assert configs[3].draft == str(tmp_path / "smollm2-draft-xs") and configs[0].model == str(tmp_path / "smollm2-135m")
    assert all(c.max_num_seqs == 8 for c in configs)


def test_eagle3_on_vllm_runs_the_heads_folder_as_it_is(monkeypatch, tmp_path):
    monkeypatch.setattr(vllm, "hf_folder", lambda name: tmp_path / name)
    monkeypatch.setattr(engines, "EAGLE3_HEAD", str(standard_head(tmp_path / "head")))
    configs = vllm.ENGINE.configs("smollm2-135m", "f32", ["ngram:4", "eagle3:3"], 4)
    eagle = configs[2]
    assert (eagle.name, eagle.method, eagle.draft, eagle.k) == ("eagle3 k=3", "eagle3", str(tmp_path / "head"), 3)
    assert eagle.speculation.uses_model and not configs[1].speculation.uses_model  # priced as a drafting model


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
    monkeypatch.setattr(vllm, "hf_folder", lambda name: tmp_path / name)
    monkeypatch.setattr(engines, "EAGLE3_HEAD", head)
    with pytest.raises(ParameterError, match=f"^speculation eagle3: .*{why}.*; use ngram:K, suffix:K") as err:
        vllm.ENGINE.configs(verifier, "f32", ["eagle3:3"], 4)
    assert "\n" not in str(err.value)


def test_a_launch_is_one_speculative_config_with_its_schedule_or_none():
    scheduled = Launch(ranges=((1, 3, 4), (4, 4096, 0)), by_k={4: "ngram k=4", 0: "spec-off"}, family="ngram")
    assert json.loads(vllm.ENGINE.launch_json(scheduled)) == {
        "method": "ngram", "num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": [[1, 3, 4],
                                                                                                  [4, 4096, 0]]}
    static = Launch(ranges=((1, 4096, 3),), by_k={3: "eagle3 k=3"}, family="eagle3", draft="/heads/e3")
    assert json.loads(vllm.ENGINE.launch_json(static)) == {"method": "eagle3", "num_speculative_tokens": 3,
                                                           "model": "/heads/e3"}
    assert vllm.ENGINE.launch_json(Launch(ranges=((1, 4096, 0),), by_k={0: "spec-off"})) == ""


def test_spec_off_has_no_speculative_config_and_serves_loopback_in_float32():
    args = serve_args(VllmConfig(model="/m/verifier"), port=8123)
    assert args[:2] == ["serve", "/m/verifier"] and "--speculative-config" not in args
    assert args[args.index("--host") + 1] == "127.0.0.1" and args[args.index("--port") + 1] == "8123"
    assert args[args.index("--dtype") + 1] == "float32" and "--enforce-eager" in args
    assert "--no-enable-prefix-caching" in args  # vLLM 0.32's BooleanOptionalAction for enable_prefix_caching


def test_each_method_gets_its_own_speculative_config(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    ngram = speculative_config(VllmConfig(model="/m", method="ngram", k=3))
    assert ngram == {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
    assert speculative_config(VllmConfig(model="/m", method="suffix", k=8)) == {"method": "suffix",
                                                                               "num_speculative_tokens": 8}
    draft = speculative_config(VllmConfig(model="/m", method="draft_model", draft=str(tmp_path), k=2))
    assert draft == {"method": "draft_model", "num_speculative_tokens": 2, "model": str(tmp_path)}
    args = serve_args(VllmConfig(model="/m", method="draft_model", draft=str(tmp_path), k=2), port=1)
    assert json.loads(args[args.index("--speculative-config") + 1]) == draft


@pytest.mark.parametrize("config, message", [
    (VllmConfig(model="/m", method="medusa"), "unknown vLLM method 'medusa'; known: none, ngram"),
    (VllmConfig(model="/m", method="ngram", k=0), "must be >= 1"),
    (VllmConfig(model="/m", method="draft_model", draft="/nowhere"),
     "needs a draft folder with a config.json"),
])
def test_a_bad_method_is_refused_before_launch(config, message):
    with pytest.raises(ParameterError, match=message):
        VllmServer(config, check_installed=False)


def test_a_schedule_becomes_vllms_sorted_ranges():
    config = VllmConfig(model="/m", method="ngram", k=4, schedule=[(3, 4096, 0), [1, 2, 4]])
    assert speculative_config(config)["num_speculative_tokens_per_batch_size"] == [[1, 2, 4], [3, 4096, 0]]


@pytest.mark.parametrize("schedule, message", [
    ([[1, 2, 5]], "schedule k 5 for batch sizes \\[1, 2\\] must be between 0 and num_speculative_tokens = 4"),
    ([[1, 4, 2], [3, 8, 0]], "overlap at batch size 3"),
    ([[2, 8, 1]], "must start at batch size 1"),
    ([[0, 8, 1]], "1 <= lo <= hi"),
    ([[4, 2, 1]], "1 <= lo <= hi"),
    ([[1, 8, -1]], "between 0 and"),
    ([], "empty"),
    ([[1, 8]], "list of \\[lo, hi, k\\]"),
    ("1-8:2", "list of \\[lo, hi, k\\]"),
])
def test_a_bad_schedule_is_refused_before_launch_in_one_line(schedule, message):
    with pytest.raises(ParameterError, match=message) as err:
        check_schedule(schedule, k=4)
    assert "\n" not in str(err.value)
    with pytest.raises(ParameterError):  # the server refuses it before it launches anything
        VllmServer(VllmConfig(model="/m", method="ngram", k=4, schedule=schedule), check_installed=False)


def test_the_environment_is_cpu_offline_with_the_threads_given(monkeypatch):
    monkeypatch.setenv("LD_PRELOAD", "/opt/mine.so")
    env = server_env(VllmConfig(model="/m", threads=3, kv_cache_gib=2))
    assert env["VLLM_TARGET_DEVICE"] == "cpu" and env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert env["OMP_NUM_THREADS"] == "3" and env["HF_HUB_OFFLINE"] == "1" and env["VLLM_NO_USAGE_STATS"] == "1"
    assert env["LD_PRELOAD"].endswith("/opt/mine.so")  # ours first, the caller's kept
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"  # threads given: unbound
    bound = server_env(VllmConfig(model="/m"))
    assert bound["VLLM_CPU_OMP_THREADS_BIND"] == "auto" and "OMP_NUM_THREADS" not in bound  # vLLM's own binding


def test_the_launcher_answers_the_cli_version_lookup_for_the_cpu_distribution():
    cmd = vllm_build.command("serve", "/m")
    assert cmd[0] == str(vllm_build.python_path()) and cmd[1] == "-c" and cmd[-2:] == ["serve", "/m"]
    assert "'vllm-cpu'" in cmd[2] and "+cpu" in cmd[2]  # vLLM detects its CPU platform from that version


def test_the_one_line_is_the_root_cause_not_the_generic_last_line(tmp_path):
    server = VllmServer(VllmConfig(model="/m"), check_installed=False)
    server.log_path.write_text(
        "(APIServer pid=1) INFO 12-02 01:01:37 [api_utils.py:347] starting\n"
        "(EngineCore pid=2) ERROR 12-02 01:02:00 [core.py:1] EngineCore failed to start.\n"
        "(EngineCore pid=2) ValueError: Available memory on node 0 (0.5/13.59 GiB) on kv cache allocation is less "
        "than requested memory for kv (64.00 GiB).\n"
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n")
    assert server.log_summary().startswith("(EngineCore pid=2) ValueError: Available memory on node 0")
    server.__exit__()
    assert not server.log_path.exists()


def test_missing_note_says_why_vllm_is_absent(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECNB_CACHE", str(tmp_path))
    assert "vLLM not installed: run `make setup`" in vllm.missing_note()
    vllm_build.mark_absent("the self-test failed: boom")
    assert vllm.missing_note() == ("vLLM left out: vLLM 0.32.0: the self-test failed: boom (at setup); pass a running "
                              "vLLM with -p endpoint URL")
    assert vllm_build.read_absent() == "vLLM 0.32.0: the self-test failed: boom"


@pytest.fixture
def gpu_machine(monkeypatch, tmp_path):
    """``nvidia-smi`` on PATH, the cache in ``tmp_path``, and installing or self-testing vLLM a failure."""
    monkeypatch.setenv("SPECNB_CACHE", str(tmp_path))
    monkeypatch.delenv("SPECNB_SKIP_VLLM", raising=False)
    on_path = {"nvidia-smi": "/usr/bin/nvidia-smi"}
    monkeypatch.setattr(vllm.shutil, "which", on_path.get)
    monkeypatch.setattr(vllm_build, "install", lambda *a, **k: pytest.fail("a GPU machine builds nothing"))
    monkeypatch.setattr(vllm, "self_test", lambda *a, **k: pytest.fail("a GPU machine builds nothing"))


def test_without_a_gpu_there_is_no_line(monkeypatch):
    monkeypatch.setattr(vllm.shutil, "which", lambda name: None)
    assert vllm.gpu_line() is None


def test_a_gpu_without_vllm_says_how_to_point_notebook_08_at_a_server(gpu_machine, monkeypatch, capsys):
    monkeypatch.setattr(vllm.importlib.util, "find_spec", lambda name: None)
    assert vllm.main([]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed.count("\n") == 0 and "-p engine vllm -p endpoint http://127.0.0.1:8000" in printed
    assert "importable" not in printed and vllm_build.read_absent() == printed


def test_a_gpu_with_vllm_importable_names_its_version(gpu_machine, monkeypatch, capsys):
    spec = importlib.machinery.ModuleSpec("vllm", None)
    monkeypatch.setattr(vllm.importlib.util, "find_spec", lambda name: spec if name == "vllm" else None)
    monkeypatch.setattr(vllm.importlib.metadata, "version", lambda name: "0.11.2")
    assert vllm.main([]) == 0
    printed = capsys.readouterr().out.strip()
    assert "vLLM 0.11.2 is importable here" in printed and "-p endpoint http://127.0.0.1:8000" in printed
    assert vllm_build.read_absent() == printed
