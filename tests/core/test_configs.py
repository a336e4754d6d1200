"""configs: model names, folders and files into transformers configs, offline when possible."""

import json

import pytest
from helpers import tiny_config

from specnb.core import paths
from specnb.core.configs import resolve_config
from specnb.core.errors import ConfigError, ModelNotFoundError
from specnb.core.flops import analytic_flops, cost_ratio

# --- resolving names ----------------------------------------------------------------------------


def test_shipped_names_resolve_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = resolve_config("Qwen/Qwen2.5-3B-Instruct")
    assert (config.model_type, config.hidden_size, config.num_hidden_layers) == ("qwen2", 2048, 36)
    assert resolve_config("qwen2.5-7b-instruct").vocab_size == 152064
    smol = resolve_config("smollm2-135m")
    assert smol.to_dict() == resolve_config("HuggingFaceTB/SmolLM2-135M-Instruct").to_dict()
    assert (smol.num_hidden_layers, smol.num_key_value_heads, smol.tie_word_embeddings) == (30, 3, True)


def test_local_folder_and_file(tmp_path):
    config = tiny_config("llama", vocab=160, tie_word_embeddings=True)
    config.save_pretrained(tmp_path / "tiny")
    assert analytic_flops(str(tmp_path / "tiny")).flops_per_token == analytic_flops(config).flops_per_token
    assert resolve_config(str(tmp_path / "tiny" / "config.json")).hidden_size == 64
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        resolve_config(str(tmp_path / "empty"))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match="bad.json"):
        resolve_config(str(tmp_path / "bad.json"))


def test_embedded_draft_folder(tmp_path, monkeypatch):
    monkeypatch.setattr("specnb.core.paths.DRAFTS_DIR", tmp_path)
    (tmp_path / "smollm2-draft-s").mkdir()
    config = tiny_config("qwen2", vocab=160, num_key_value_heads=1, tie_word_embeddings=True)
    config.save_pretrained(tmp_path / "smollm2-draft-s")
    assert resolve_config("smollm2-draft-s").num_key_value_heads == 1
    assert cost_ratio("smollm2-draft-s", "smollm2-135m") < 0.01


def test_unknown_model_offline_is_one_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError) as err:
        resolve_config("nobody/no-such-model-xyz")
    message = str(err.value)
    assert "\n" not in message
    for part in ("shipped config", "local folder", "Hugging Face cache", "config.json", "online"):
        assert part in message


def test_unreachable_hub_does_not_hang(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr("specnb.core.hub.hub_reachable", lambda: False)
    with pytest.raises(ModelNotFoundError, match="unreachable"):
        resolve_config("nobody/no-such-model-xyz")


def test_early_exit_names_are_not_configs():
    with pytest.raises(ModelNotFoundError, match="specnb.models"):
        resolve_config("exit:4")


def test_shipped_configs_are_plain_config_json():
    for path in paths.CONFIGS_DIR.glob("*.json"):
        data = json.loads(path.read_text())
        assert data["model_type"] in ("qwen2", "llama") and "architectures" in data


def test_a_gated_config_says_to_accept_its_licence_and_log_in(monkeypatch):
    import transformers

    def refuse(name, local_files_only=False, **kwargs):
        if local_files_only:
            raise OSError("not cached")
        raise OSError("You are trying to access a gated repo.\nMake sure to have access to it.")

    monkeypatch.setattr("specnb.core.hub.hub_offline", lambda: False)
    monkeypatch.setattr("specnb.core.hub.hub_reachable", lambda: True)
    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", refuse)
    with pytest.raises(ModelNotFoundError, match="'org/gated-xyz' is gated on the Hugging Face hub: accept its "
                                                 "licence on its page, then log in"):
        resolve_config("org/gated-xyz")
