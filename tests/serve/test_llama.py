"""llama-server behind the engine seam: configurations from speculation entries (n-gram types, the
EAGLE-3 head exported to GGUF once), refused in one line before any export, and its flags per load range."""

import pytest

from specnb.core.errors import ModelNotFoundError, ParameterError
from specnb.serve import engines, llama
from specnb.serve.engines import Launch


def test_an_unknown_speculation_type_is_refused_before_any_export(monkeypatch):
    def no_export(*args, **kwargs):
        raise AssertionError("nothing may be exported or started for a bad entry")

    monkeypatch.setattr("specnb.models.gguf.embedded_gguf", no_export)
    with pytest.raises(ParameterError, match="unknown type 'ngram-foo'; this engine takes ngram-simple, ngram-map-k"):
        llama.ENGINE.configs("smollm2-135m", "q4_1", ["ngram-foo:4"], 4)


def test_eagle3_runs_the_head_as_draft_eagle3_exported_once(monkeypatch, tmp_path):
    from specnb.core.configs import resolve_config
    from specnb.models.eagle3 import Eagle3Config, Eagle3Draft

    Eagle3Draft(Eagle3Config.from_verifier(resolve_config("smollm2-135m"), draft_vocab_size=64)).save(tmp_path / "h")
    exported = []
    monkeypatch.setattr("specnb.models.gguf.embedded_gguf", lambda name, precision: tmp_path / f"{name}-{precision}")
    monkeypatch.setattr("specnb.native.head_export.head_gguf",
                        lambda head, verifier: exported.append((head, verifier)) or tmp_path / "head.gguf")
    monkeypatch.setattr(engines, "EAGLE3_HEAD", str(tmp_path / "h"))
    configs = llama.ENGINE.configs("smollm2-135m", "f32", ["eagle3:3", "ngram-simple:4"], 2, threads=1)
    assert [c.name for c in configs] == ["spec-off", "eagle3 k=3", "ngram-simple k=4"]
    eagle = configs[1]
    assert (eagle.spec_type, eagle.draft, eagle.n_max, eagle.model) == \
        ("draft-eagle3", str(tmp_path / "head.gguf"), 3, str(tmp_path / "smollm2-135m-f32"))
    assert exported == [(str(tmp_path / "h"), "smollm2-135m")] and eagle.drafts_with_model
    assert [c.speculation.family for c in configs] == ["none", "eagle3", "ngram"]


def test_eagle3_on_llama_server_is_refused_before_any_export(monkeypatch):
    def no_export(*args, **kwargs):
        raise AssertionError("nothing may be exported for a bad head")

    monkeypatch.setattr("specnb.models.gguf.embedded_gguf", no_export)
    monkeypatch.setattr("specnb.native.head_export.head_gguf", no_export)
    monkeypatch.setattr(engines, "EAGLE3_HEAD", "smollm2-medusa")
    with pytest.raises(ModelNotFoundError, match="'smollm2-medusa' is not an EAGLE-3 head in the standard layout"):
        llama.ENGINE.configs("smollm2-135m", "f32", ["eagle3:3"], 1)
    with pytest.raises(ParameterError, match="speculation eagle3: no EAGLE-3 head for 'other'"):
        llama.ENGINE.configs("other", "f32", ["eagle3:3"], 1)


def test_a_policy_is_one_command_line_tail_per_load_range():
    from specnb.serve.llama import LlamaServerConfig

    configs = [LlamaServerConfig(model="v.gguf"), LlamaServerConfig(model="v.gguf", spec_type="ngram-simple", n_max=4)]
    launch = Launch(ranges=((1, 3, 4), (4, 7, 0), (8, 4096, 2)), by_k={4: "ngram-simple k=4", 0: "spec-off",
                                                                       2: "elsewhere k=2"})
    lines = llama.ENGINE.policy_lines(launch, configs)
    assert lines[0].startswith("1–3 concurrent: --spec-type ngram-simple --spec-draft-n-max 4")
    assert lines[1:] == ["4–7 concurrent: no --spec-type (spec-off)", "8 or more concurrent: --spec-draft-n-max 2"]
