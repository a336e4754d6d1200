"""vLLM launches without a server: the speculation JSON each method gets, the schedule refused
before launch when vLLM would cap or reject it, the environment (loopback, CPU, preloads), and the
root cause picked from a vLLM log."""

import json

import pytest

from specnb.core.errors import ParameterError
from specnb.native import vllm_build
from specnb.serve.vllm.vllm_server import (
    VllmConfig,
    VllmServer,
    check_schedule,
    serve_args,
    server_env,
    speculative_config,
)


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
    from specnb.serve.vllm.vllm_server import missing_note

    monkeypatch.setenv("SPECNB_CACHE", str(tmp_path))
    assert "vLLM not installed: run `make setup`" in missing_note()
    vllm_build.mark_absent("the self-test failed: boom")
    assert missing_note() == ("vLLM left out: vLLM 0.32.0: the self-test failed: boom (at setup); pass a running "
                              "vLLM with -p endpoint URL")
    assert vllm_build.read_absent() == "vLLM 0.32.0: the self-test failed: boom"
