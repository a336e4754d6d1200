"""vLLM behind the engine seam: configurations from speculation entries, built from the embedded models'
folders, the EAGLE-3 head's folder as it is, one line before any launch where a head cannot run."""

import json
from pathlib import Path

import pytest

from specnb.core.errors import ParameterError
from specnb.serve import eagle3_heads
from specnb.serve.speculation import Launch
from specnb.serve.vllm import engine_vllm


def standard_head(folder):
    """A folder in the standard EAGLE-3 layout as far as a check before launch looks (vLLM reads the rest)."""
    from specnb.models.eagle3 import Eagle3Config

    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(Eagle3Config(draft_vocab_size=64).to_json()))
    (folder / "model.safetensors").write_bytes(b"")
    return folder


def test_an_unknown_speculation_type_is_refused_before_any_launch():
    with pytest.raises(ParameterError, match="unknown type 'ngram-simple'; this engine takes ngram, suffix, eagle3"):
        engine_vllm.ENGINE.configs("smollm2-135m", "f32", ["ngram-simple:4"], 4)
    with pytest.raises(ParameterError, match="TYPE:K or DRAFT:K with K >= 1"):
        engine_vllm.ENGINE.configs("smollm2-135m", "f32", ["ngram:0"], 4)


def test_vllm_configurations_come_from_the_embedded_folders(monkeypatch, tmp_path):
    monkeypatch.setattr(engine_vllm, "hf_folder", lambda name: tmp_path / name)
    configs = engine_vllm.ENGINE.configs("smollm2-135m", "f32", ["ngram:4", "suffix:6", "smollm2-draft-xs:3"], 8)
    assert [c.name for c in configs] == ["spec-off", "ngram k=4", "suffix k=6", "smollm2-draft-xs k=3"]
    assert [c.method for c in configs] == ["none", "ngram", "suffix", "draft_model"]
    assert [c.speculation.family for c in configs] == ["none", "ngram", "suffix", "draft_model"]
    assert [c.speculation.uses_model for c in configs] == [False, False, False, True]
    assert configs[3].draft == str(tmp_path / "smollm2-draft-xs") and configs[0].model == str(tmp_path / "smollm2-135m")
    assert all(c.max_num_seqs == 8 for c in configs)


def test_eagle3_on_vllm_runs_the_heads_folder_as_it_is(monkeypatch, tmp_path):
    monkeypatch.setattr(engine_vllm, "hf_folder", lambda name: tmp_path / name)
    monkeypatch.setattr(eagle3_heads, "EAGLE3_HEAD", str(standard_head(tmp_path / "head")))
    configs = engine_vllm.ENGINE.configs("smollm2-135m", "f32", ["ngram:4", "eagle3:3"], 4)
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
    monkeypatch.setattr(engine_vllm, "hf_folder", lambda name: tmp_path / name)
    monkeypatch.setattr(eagle3_heads, "EAGLE3_HEAD", head)
    with pytest.raises(ParameterError, match=f"^speculation eagle3: .*{why}.*; use ngram:K, suffix:K") as err:
        engine_vllm.ENGINE.configs(verifier, "f32", ["eagle3:3"], 4)
    assert "\n" not in str(err.value)


def test_a_launch_is_one_speculative_config_with_its_schedule_or_none():
    scheduled = Launch(ranges=((1, 3, 4), (4, 4096, 0)), by_k={4: "ngram k=4", 0: "spec-off"}, family="ngram")
    assert json.loads(engine_vllm.ENGINE.launch_json(scheduled)) == {
        "method": "ngram", "num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": [[1, 3, 4],
                                                                                                  [4, 4096, 0]]}
    static = Launch(ranges=((1, 4096, 3),), by_k={3: "eagle3 k=3"}, family="eagle3", draft="/heads/e3")
    assert json.loads(engine_vllm.ENGINE.launch_json(static)) == {"method": "eagle3", "num_speculative_tokens": 3,
                                                           "model": "/heads/e3"}
    assert engine_vllm.ENGINE.launch_json(Launch(ranges=((1, 4096, 0),), by_k={0: "spec-off"})) == ""
