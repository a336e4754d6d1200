"""specnb.serve.vllm.vllm_setup on a machine with an NVIDIA GPU: nothing is built, one line says how notebook 08
reaches a vLLM, and that line is the marker notebook 08 prints."""

import importlib.machinery

import pytest

from specnb.native import vllm_build
from specnb.serve.vllm import vllm_setup


@pytest.fixture
def gpu_machine(monkeypatch, tmp_path):
    """``nvidia-smi`` on PATH, the cache in ``tmp_path``, and installing or self-testing vLLM a failure."""
    monkeypatch.setenv("SPECNB_CACHE", str(tmp_path))
    monkeypatch.delenv("SPECNB_SKIP_VLLM", raising=False)
    on_path = {"nvidia-smi": "/usr/bin/nvidia-smi"}
    monkeypatch.setattr(vllm_setup.shutil, "which", on_path.get)
    for name in ("install", "self_test"):
        monkeypatch.setattr(vllm_setup, name, lambda *a, **k: pytest.fail("a GPU machine builds nothing"))


def test_without_a_gpu_there_is_no_line(monkeypatch):
    monkeypatch.setattr(vllm_setup.shutil, "which", lambda name: None)
    assert vllm_setup.gpu_line() is None


def test_a_gpu_without_vllm_says_how_to_point_notebook_08_at_a_server(gpu_machine, monkeypatch, capsys):
    monkeypatch.setattr(vllm_setup.importlib.util, "find_spec", lambda name: None)
    assert vllm_setup.main([]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed.count("\n") == 0 and "-p engine vllm -p endpoint http://127.0.0.1:8000" in printed
    assert "importable" not in printed and vllm_build.read_absent() == printed


def test_a_gpu_with_vllm_importable_names_its_version(gpu_machine, monkeypatch, capsys):
    spec = importlib.machinery.ModuleSpec("vllm", None)
    monkeypatch.setattr(vllm_setup.importlib.util, "find_spec", lambda name: spec if name == "vllm" else None)
    monkeypatch.setattr(vllm_setup.importlib.metadata, "version", lambda name: "0.11.2")
    assert vllm_setup.main([]) == 0
    printed = capsys.readouterr().out.strip()
    assert "vLLM 0.11.2 is importable here" in printed and "-p endpoint http://127.0.0.1:8000" in printed
    assert vllm_build.read_absent() == printed
