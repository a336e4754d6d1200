"""Model loading: local folders, bad inputs, devices, the embedded caches, draft assembly, early exits.

Tiny random Llama/Qwen2 models stand in for real ones; their tokenizer is the embedded verifier's
(copied once per session), so vocabulary checks run against a real 49152-token tokenizer.
"""

import json
import shutil
import socket

import pytest
import torch
from helpers import perturbed_copy, tiny_model, word_pair
from safetensors.torch import save_file
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedTokenizerFast,
)

from specnb.core import devices
from specnb.core.errors import DeviceError, IncompatibleModelsError, ModelNotFoundError, ParameterError
from specnb.decode import pairs
from specnb.models import embedded, load, registry
from specnb.models.early_exit import exit_draft
from specnb.models.lookup import PromptLookup

VOCAB = 49152
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


TIED = dict(intermediate_size=128, tie_word_embeddings=True, eos_token_id=2, pad_token_id=2)  # as the hub's models


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory):
    """The embedded verifier's tokenizer files (the real cache; CI builds it once)."""
    source = embedded.embedded_verifier_path()
    folder = tmp_path_factory.mktemp("tokenizer")
    for name in TOKENIZER_FILES:
        shutil.copy(source / name, folder / name)
    return folder


def save_tiny(folder, tokenizer_dir, seed=0, with_tokenizer=True, vocab=VOCAB, **config):
    tiny_model(vocab=vocab, seed=seed, **TIED, **config).save_pretrained(folder)
    if with_tokenizer:
        for name in TOKENIZER_FILES:
            shutil.copy(tokenizer_dir / name, folder / name)
    return folder


@pytest.fixture
def fake_cache(tmp_path, tokenizer_dir, monkeypatch):
    """An empty specnb cache whose 'GGUF conversion' writes a tiny random verifier; counts builds."""
    monkeypatch.setenv("SPECNB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(embedded, "find_embedded_gguf", lambda: tmp_path / "fake.gguf")
    builds = []

    def convert(gguf, out):
        builds.append(out)
        save_tiny(out, tokenizer_dir, seed=len(builds))  # each rebuild: different weights

    monkeypatch.setattr(embedded, "convert_gguf", convert)
    return builds


# ---------------------------------------------------------------- local folders and pairs

def test_local_folder_loads_in_eval_mode(tmp_path, tokenizer_dir):
    folder = save_tiny(tmp_path / "tiny", tokenizer_dir)
    model, tokenizer = pairs.load_model(str(folder), device="cpu", dtype="float32")
    assert not model.training and model.dtype == torch.float32 and model.device.type == "cpu"
    assert len(tokenizer) == VOCAB and tokenizer.eos_token_id == 2


def test_dtype_is_applied(tmp_path, tokenizer_dir):
    folder = save_tiny(tmp_path / "tiny", tokenizer_dir)
    model, _ = pairs.load_model(str(folder), device="cpu", dtype="bfloat16")
    assert model.dtype == torch.bfloat16


def test_pair_of_folders_with_same_vocab(tmp_path, tokenizer_dir):
    v = save_tiny(tmp_path / "v", tokenizer_dir, layers=2)
    d = save_tiny(tmp_path / "d", tokenizer_dir, layers=1, seed=1)
    pair = pairs.load_pair(str(v), str(d), device="cpu")
    assert pair.vocab_size is None and pair.dtype == torch.float32
    assert pair.draft.config.num_hidden_layers == 1 and not pair.draft.training
    assert (pair.verifier_name, pair.draft_name) == (str(v), str(d))


def test_padded_embedding_sets_vocab_size(tmp_path, tokenizer_dir):
    """Same tokenizer, different logit widths (like Qwen2.5-7B vs 0.5B): slice to the tokenizer."""
    v = save_tiny(tmp_path / "v", tokenizer_dir, vocab=VOCAB + 64)
    d = save_tiny(tmp_path / "d", tokenizer_dir)
    pair = pairs.load_pair(str(v), str(d), device="cpu")
    assert pair.vocab_size == len(pair.tokenizer) == VOCAB


def other_tokenizer(folder):
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers import models as tok_models

    vocab = {f"w{i}": i for i in range(100)}
    tok = Tokenizer(tok_models.WordLevel(vocab, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0").save_pretrained(folder)


def test_mismatched_tokenizers_fail_before_weights(tmp_path, tokenizer_dir, monkeypatch):
    v = save_tiny(tmp_path / "v", tokenizer_dir)
    d = save_tiny(tmp_path / "d", tokenizer_dir, vocab=100, with_tokenizer=False)
    other_tokenizer(d)
    monkeypatch.setattr(load, "load_weights", lambda *a: pytest.fail("weights loaded before the vocab check"))
    with pytest.raises(IncompatibleModelsError, match="different tokenizers"):
        pairs.load_pair(str(v), str(d), device="cpu")


def test_draft_without_tokenizer_uses_verifiers_when_sizes_agree(tmp_path, tokenizer_dir):
    v = save_tiny(tmp_path / "v", tokenizer_dir)
    d = save_tiny(tmp_path / "d", tokenizer_dir, with_tokenizer=False)
    assert pairs.load_pair(str(v), str(d), device="cpu").vocab_size is None
    bad = save_tiny(tmp_path / "bad", tokenizer_dir, vocab=VOCAB + 64, with_tokenizer=False)
    with pytest.raises(IncompatibleModelsError, match="vocab_size"):
        pairs.load_pair(str(v), str(bad), device="cpu")


def test_prompt_lookup_draft(tmp_path, tokenizer_dir):
    from specnb.models.lookup import PromptLookup

    v = save_tiny(tmp_path / "v", tokenizer_dir)
    pair = pairs.load_pair(str(v), "prompt-lookup", device="cpu")
    assert isinstance(pair.draft, PromptLookup) and pair.draft_name == "prompt-lookup"
    assert pairs.load_pair(str(v), None, device="cpu").draft is None


# ---------------------------------------------------------------- bad inputs

def test_folder_without_tokenizer(tmp_path, tokenizer_dir):
    folder = save_tiny(tmp_path / "tiny", tokenizer_dir, with_tokenizer=False)
    with pytest.raises(ModelNotFoundError, match="no tokenizer.*save_pretrained"):
        pairs.load_model(str(folder), device="cpu")


def test_folder_without_config_and_missing_folder(tmp_path):
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        pairs.load_model(str(tmp_path), device="cpu")
    with pytest.raises(ModelNotFoundError, match="not a folder"):
        pairs.load_model(str(tmp_path / "nope"), device="cpu")


def test_unknown_embedded_name_lists_known_ones():
    with pytest.raises(ModelNotFoundError, match="smollm2-135m.*prompt-lookup"):
        pairs.load_model("smollm2-huge", device="cpu")
    with pytest.raises(ModelNotFoundError, match="known: smollm2-135m"):
        embedded.model_path("smollm2-huge")


def test_missing_hub_id_offline_says_what_was_tried(monkeypatch):
    """Offline means no network wait: not one connection is tried (the probe included)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(socket.socket, "connect", lambda *a: pytest.fail("a connection was tried offline"))
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: pytest.fail("a connection was tried offline"))
    with pytest.raises(ModelNotFoundError) as err:
        pairs.load_pair("no-such-org-xyz/no-such-model-123", device="cpu")
    message = str(err.value)
    for fragment in ("offline", "embedded names", "local folder", "Hugging Face cache", "go online"):
        assert fragment in message


def test_unreachable_hub_fails_fast(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: nothing listens
    assert not load.hub_reachable()
    with pytest.raises(ModelNotFoundError, match="unreachable.*local folder"):
        pairs.load_model("no-such-org-xyz/no-such-model-123", device="cpu")


def test_a_gated_model_says_to_accept_its_licence_and_log_in(monkeypatch):
    class GatedRepoError(Exception):  # huggingface_hub's, by name: the hub refused the download
        pass

    def refuse(*args, **kwargs):
        raise GatedRepoError("401 Client Error. Cannot access gated repo for url https://huggingface.co/...")

    monkeypatch.setattr(load, "hub_offline", lambda: False)
    monkeypatch.setattr(load, "hub_reachable", lambda: True)
    monkeypatch.setattr("huggingface_hub.hf_hub_download", refuse)
    with pytest.raises(ModelNotFoundError) as err:
        load.locate("meta-llama/no-such-gated-model-xyz")
    assert str(err.value) == ("model 'meta-llama/no-such-gated-model-xyz' is gated on the Hugging Face hub: accept "
                              "its licence on its page, then log in (`hf auth login`) or set HF_TOKEN")


def test_drafts_are_not_verifiers_and_need_one():
    with pytest.raises(ParameterError, match="needs a verifier"):
        pairs.load_model("exit:4", device="cpu")
    with pytest.raises(ParameterError, match="not a verifier"):
        pairs.load_pair("prompt-lookup", device="cpu")


def test_bad_exit_spec(tmp_path, tokenizer_dir):
    v = save_tiny(tmp_path / "v", tokenizer_dir)
    with pytest.raises(ParameterError, match="exit:K"):
        pairs.load_pair(str(v), "exit:four", device="cpu")
    with pytest.raises(ParameterError, match="1..2"):
        pairs.load_pair(str(v), "exit:3", device="cpu")


# ---------------------------------------------------------------- device and dtype

def test_auto_device_and_dtype():
    device = devices.resolve_device("auto")
    assert device.type == devices.available_devices()[0]
    assert devices.resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert devices.resolve_dtype("bf16", torch.device("cpu")) == torch.bfloat16
    with pytest.raises(ParameterError, match="unknown dtype"):
        devices.resolve_dtype("float8", torch.device("cpu"))


@pytest.mark.parametrize("device", ["cuda", "mps"])
def test_unavailable_device_names_the_available_ones(device):
    if device in devices.available_devices():
        pytest.skip(f"this machine has {device}")
    with pytest.raises(DeviceError, match=r"not available.*available: .*cpu"):
        devices.resolve_device(device)


def test_nonsense_device():
    with pytest.raises(DeviceError, match="unknown device"):
        devices.resolve_device("gpu-please")


# ---------------------------------------------------------------- embedded verifier cache

def test_verifier_cache_builds_once_then_reuses(fake_cache):
    path = embedded.embedded_verifier_path()
    assert embedded.embedded_verifier_path() == path and len(fake_cache) == 1
    model, tokenizer = pairs.load_model("smollm2-135m", device="cpu")
    assert model.config.num_hidden_layers == 2 and len(fake_cache) == 1


@pytest.mark.parametrize("damage", ["truncate", "flip", "no-manifest", "missing-file"])
def test_damaged_verifier_cache_is_rebuilt(fake_cache, damage):
    path = embedded.embedded_verifier_path()
    weights = path / "model.safetensors"
    if damage == "truncate":
        with open(weights, "r+b") as f:
            f.truncate(weights.stat().st_size // 2)
    elif damage == "flip":
        data = bytearray(weights.read_bytes())
        data[-100] ^= 0xFF
        weights.write_bytes(bytes(data))
    elif damage == "no-manifest":
        (path / "specnb-manifest.json").unlink()
    else:
        (path / "tokenizer.json").unlink()
    assert not embedded.cache_is_valid(path)
    embedded.embedded_verifier_path()
    assert len(fake_cache) == 2 and embedded.cache_is_valid(path)
    AutoModelForCausalLM.from_pretrained(path)  # the rebuilt checkpoint loads


# ---------------------------------------------------------------- embedded drafts

def write_committed_draft(drafts, name, hidden=32, seed=1):
    """A draft in the committed format: no embedding/lm_head, fp16, an embed_proj when narrower."""
    model = tiny_model(vocab=VOCAB, hidden=hidden, layers=1, seed=seed, **TIED)
    config = model.config
    state = {k: v.half() for k, v in model.state_dict().items()
             if k not in ("model.embed_tokens.weight", "lm_head.weight")}
    state["embed_proj.weight"] = torch.randn(hidden, 64).half()  # [d_draft, d_verifier]
    folder = drafts / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config.to_dict()))
    save_file(state, folder / "weights.safetensors")
    (folder / "meta.json").write_text(json.dumps({"seed": seed}))
    return state


def test_draft_assembly_is_standalone_and_rebuilt_on_new_weights(fake_cache, tmp_path, monkeypatch):
    monkeypatch.setattr("specnb.core.paths.DRAFTS_DIR", tmp_path / "drafts")
    assert "tiny-draft" not in registry.embedded_names()
    state = write_committed_draft(tmp_path / "drafts", "tiny-draft")
    assert "tiny-draft" in registry.embedded_names()
    path = embedded.embedded_draft_path("tiny-draft")
    draft = AutoModelForCausalLM.from_pretrained(path)
    assert len(AutoTokenizer.from_pretrained(path)) == VOCAB
    verifier_embed = AutoModelForCausalLM.from_pretrained(embedded.embedded_verifier_path()).model.embed_tokens.weight
    expected = verifier_embed @ state["embed_proj.weight"].float().T  # [V, d_draft]
    assert torch.allclose(draft.model.embed_tokens.weight, expected, atol=1e-5)
    assert torch.equal(draft.lm_head.weight, draft.model.embed_tokens.weight)
    q = "model.layers.0.self_attn.q_proj.weight"
    assert torch.equal(draft.state_dict()[q], state[q].float())
    built = (path / "model.safetensors").stat().st_mtime_ns
    assert embedded.embedded_draft_path("tiny-draft") == path
    assert (path / "model.safetensors").stat().st_mtime_ns == built  # cached, not rebuilt

    shutil.rmtree(tmp_path / "drafts" / "tiny-draft")
    new_state = write_committed_draft(tmp_path / "drafts", "tiny-draft", seed=2)
    redrafted = AutoModelForCausalLM.from_pretrained(embedded.embedded_draft_path("tiny-draft"))
    assert torch.equal(redrafted.state_dict()[q], new_state[q].float())

    (embedded.embedded_verifier_path() / "specnb-manifest.json").unlink()  # verifier rebuilt: new embedding
    verifier_embed = AutoModelForCausalLM.from_pretrained(embedded.embedded_verifier_path()).model.embed_tokens.weight
    redrafted = AutoModelForCausalLM.from_pretrained(embedded.embedded_draft_path("tiny-draft"))
    expected = verifier_embed @ new_state["embed_proj.weight"].float().T
    assert torch.allclose(redrafted.model.embed_tokens.weight, expected, atol=1e-5)

    pair = pairs.load_pair("smollm2-135m", "tiny-draft", device="cpu")
    assert pair.draft.config.hidden_size == 32 and pair.vocab_size is None


def test_unknown_or_incomplete_draft(fake_cache, tmp_path, monkeypatch):
    monkeypatch.setattr("specnb.core.paths.DRAFTS_DIR", tmp_path / "drafts")
    with pytest.raises(ModelNotFoundError, match="build-drafts"):
        embedded.embedded_draft_path("smollm2-draft-zz")
    write_committed_draft(tmp_path / "drafts", "half-done")
    (tmp_path / "drafts" / "half-done" / "weights.safetensors").unlink()
    with pytest.raises(ModelNotFoundError, match="no weights.safetensors"):
        embedded.embedded_draft_path("half-done")


# ---------------------------------------------------------------- early exit

@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_full_depth_exit_equals_verifier_and_shares_tensors(arch):
    verifier = tiny_model(arch, vocab=300, layers=3, **TIED)
    ids = torch.randint(0, 300, (2, 7))  # ids: [B, S]
    full = exit_draft(verifier, 3)
    with torch.no_grad():
        assert torch.equal(full(ids).logits, verifier(ids).logits)  # logits: [B, S, V]
    short = exit_draft(verifier, 1)
    assert len(short.model.layers) == 1 and short.config.num_hidden_layers == 1
    v_params = {p.data_ptr() for p in verifier.parameters()}
    assert all(p.data_ptr() in v_params for p in short.parameters())
    assert short.lm_head.weight.data_ptr() == verifier.lm_head.weight.data_ptr()
    with torch.no_grad():
        cache = short(ids, use_cache=True).past_key_values
    assert len(cache.layers) == 1  # its own, shorter KV cache


def test_exit_pair_shares_the_loaded_verifier(fake_cache):
    pair = pairs.load_pair("smollm2-135m", "exit:1", device="cpu")
    assert pair.draft.model.layers[0] is pair.verifier.model.layers[0]
    assert pair.draft.model.embed_tokens is pair.verifier.model.embed_tokens


# ---------------------------------------------------------------- the real embedded verifier

@pytest.mark.slow
def test_real_embedded_verifier_loads_from_its_cache_without_converting_again(monkeypatch):
    embedded.embedded_verifier_path()  # build if needed (one time)
    monkeypatch.setattr(embedded, "convert_gguf", lambda *a: pytest.fail("a cached verifier was converted again"))
    model, tokenizer = pairs.load_model("smollm2-135m", device="cpu")
    assert model.config.num_hidden_layers == 30 and tokenizer.eos_token_id == 2
    draft, _ = pairs.load_model("smollm2-exit-4", device="cpu")
    assert draft.config.num_hidden_layers == 4


def test_cli_models_json(fake_cache, tmp_path, monkeypatch, capsys):
    from specnb.app.cli import main

    monkeypatch.setattr("specnb.core.paths.DRAFTS_DIR", tmp_path / "drafts")
    monkeypatch.setattr(registry, "EMBEDDED_EXITS", {"smollm2-exit-1": 1})  # the fake verifier has 2 layers
    write_committed_draft(tmp_path / "drafts", "tiny-draft")
    assert main(["models", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == {"smollm2-135m", "tiny-draft", "smollm2-exit-1", "prompt-lookup"}
    assert all(set(r) == {"name", "role", "kind", "params", "flops_per_token", "path"} for r in rows.values())
    assert [rows[n]["kind"] for n in ("smollm2-135m", "tiny-draft", "smollm2-exit-1", "prompt-lookup")] == [
        None, "model", "exit", "lookup"]
    assert rows["smollm2-135m"]["role"] == "verifier" and rows["tiny-draft"]["role"] == "draft"
    assert rows["smollm2-exit-1"]["path"] is None and rows["prompt-lookup"]["params"] == 0
    for name in ("smollm2-135m", "tiny-draft"):
        AutoModelForCausalLM.from_pretrained(rows[name]["path"])
        AutoTokenizer.from_pretrained(rows[name]["path"])
    assert 0 < rows["tiny-draft"]["flops_per_token"] < rows["smollm2-135m"]["flops_per_token"]


def test_load_drafts_loads_verifier_once_and_each_draft(tmp_path, monkeypatch):
    pair = word_pair()
    verifier, folder = tmp_path / "verifier", tmp_path / "draft"
    for model, where in ((pair.verifier, verifier), (perturbed_copy(pair.verifier, 0.1, 2), folder)):
        model.save_pretrained(where)
        pair.tokenizer.save_pretrained(where)
    loaded, real = [], load.load_weights
    monkeypatch.setattr(load, "load_weights", lambda source, *a: loaded.append(source.name) or real(source, *a))
    got, drafts = pairs.load_drafts(str(verifier), ["prompt-lookup", "exit:1", str(folder), "prompt-lookup"], "cpu")
    assert loaded == [str(verifier), str(folder)] and list(drafts) == ["prompt-lookup", "exit:1", str(folder)]
    assert isinstance(drafts["prompt-lookup"], PromptLookup)
    assert drafts["exit:1"].config.num_hidden_layers == 1
    assert drafts["exit:1"].model.layers[0] is got.verifier.model.layers[0]  # shared, not copied
    assert isinstance(drafts[str(folder)], type(got.verifier))
    with pytest.raises(ParameterError, match="exit:K"):
        pairs.load_drafts(str(verifier), ["exit:four"], "cpu")


# ---------------------------------------------------------------- kernels

def test_load_drafts_records_each_models_kernel_choice(tmp_path, tokenizer_dir, monkeypatch):
    """Every model with weights gets its own decision, recorded as plain data; an early exit runs on the
    verifier's layers, prompt lookup has none."""
    from specnb.models import kernels

    monkeypatch.setenv("SPECNB_CACHE", str(tmp_path / "cache"))
    timed = []

    def onednn_for_the_verifier(layers, widths, budget_s=1.0):
        timed.append(len(layers))
        verifier = len(timed) == 1  # the verifier is decided first
        quick, slow = [1.0] * len(widths), [2.0] * len(widths)
        return ({"default": slow, "onednn": quick} if verifier else {"default": quick, "onednn": slow}), 3

    monkeypatch.setattr(kernels, "time_paths", onednn_for_the_verifier)
    v = str(save_tiny(tmp_path / "v", tokenizer_dir))
    d = str(save_tiny(tmp_path / "d", tokenizer_dir, seed=1, num_hidden_layers=1))
    pair, drafts = pairs.load_drafts(v, [d, "exit:1", "prompt-lookup"], device="cpu", dtype="float32")
    assert json.loads(json.dumps(pair.kernels)) == pair.kernels
    assert list(pair.kernels) == [v, d, "exit:1"] and len(timed) == 2
    assert (pair.kernels[v]["path"], pair.kernels[v]["reason"], pair.verifier.kernels) == ("onednn", "timed", "onednn")
    assert pair.kernels[v]["ms"] == {"default": [2.0] * 3, "onednn": [1.0] * 3}  # 1, 2 and 4 rows
    assert (pair.kernels[d]["path"], drafts[d].kernels) == ("default", "default")
    assert pair.kernels["exit:1"]["path"] == "onednn" and pair.kernels["exit:1"]["reason"] == "shared with the verifier"
    labels = [kernels.kernel_label(m) for m in (pair.verifier, drafts[d], drafts["exit:1"], drafts["prompt-lookup"])]
    assert labels == ["onednn", "default", "onednn", ""]  # read off the layers each one runs
    named = pairs.load_pair(v, d, device="cpu", dtype="float32", kernels="default")
    assert {c["reason"] for c in named.kernels.values()} == {"asked"} and len(timed) == 2
