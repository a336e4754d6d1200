"""`specnb export-head`: a standard EAGLE-3 head copied as vLLM's folder or converted by llama.cpp's own
converter into the GGUF llama-server loads; every bad input is one line, exit 2, and nothing written."""

import json

import pytest
import torch

from specnb.app.cli import main
from specnb.models.eagle3 import Eagle3Config, Eagle3Draft, is_eagle3
from specnb.native import head_export, llama_build


def save_head(folder, **shape):
    """A random standard-layout head: the embedded verifier's shapes unless ``shape`` says otherwise."""
    from specnb.core.configs import resolve_config

    torch.manual_seed(0)
    config = Eagle3Config.from_verifier(resolve_config("smollm2-135m"), draft_vocab_size=512, **shape)
    head = Eagle3Draft(config)
    head.set_vocabulary(torch.arange(0, 1024, 2))
    head.save(folder)
    return folder


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    return save_head(tmp_path_factory.mktemp("heads") / "head")


def export(capsys, *argv):
    code = main(["export-head", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def refused(capsys, tmp_path, *argv, out=None):
    """The command's one error line; asserts exit 2 and that nothing was left beside the output."""
    out = out or tmp_path / "out"
    before = sorted(p.name for p in out.parent.iterdir())
    code, stdout, err = export(capsys, *argv, "--out", out)
    assert code == 2 and stdout == "" and err.count("\n") == 1 and err.startswith("specnb export-head: error: "), err
    assert sorted(p.name for p in out.parent.iterdir()) == before  # no output, no temporary sibling
    return err


@pytest.mark.parametrize("name, says", [
    ("smollm2-draft-s", "a model checkpoint, not a head"),
    ("smollm2-medusa", "a Medusa head"),
    ("no-such-head", "no embedded head or folder of that name"),
])
def test_a_name_that_is_no_eagle3_head_is_refused(capsys, tmp_path, name, says):
    err = refused(capsys, tmp_path, name, "--format", "gguf")
    assert f"{name!r} is not an EAGLE-3 head in the standard layout ({says})" in err


def test_a_folder_that_is_no_head_is_refused(capsys, tmp_path):
    (tmp_path / "random").mkdir()
    (tmp_path / "random" / "notes.txt").write_text("hello")
    assert "(no config.json there)" in refused(capsys, tmp_path, tmp_path / "random", "--format", "eagle3")
    (tmp_path / "random" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert "(a model checkpoint, not a head)" in refused(capsys, tmp_path, tmp_path / "random", "--format", "eagle3")


def test_a_head_for_another_verifier_is_refused(capsys, tmp_path):
    from specnb.models.eagle3 import CONFIG_FILE

    other = save_head(tmp_path / "other")
    config = json.loads((other / CONFIG_FILE).read_text())
    (other / CONFIG_FILE).write_text(json.dumps({**config, "target_hidden_size": 896, "vocab_size": 151936}))
    err = refused(capsys, tmp_path, other, "--format", "eagle3")
    assert "was made for another verifier (hidden size 896 vs the verifier's 576; vocabulary 151936 vs 49152)" in err


def test_llama_server_takes_only_a_head_on_three_layers(capsys, tmp_path):
    two = save_head(tmp_path / "two", aux_layer_ids=(2, 27))
    err = refused(capsys, tmp_path, two, "--format", "gguf")
    assert "reads verifier layers [2, 27]; llama-server's draft-eagle3 reads exactly 3" in err


def test_damaged_weights_are_one_line(capsys, tmp_path, head):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(head, broken)
    (broken / "model.safetensors").write_bytes(b"not safetensors")
    assert "does not load in the standard layout" in refused(capsys, tmp_path, broken, "--format", "eagle3")


def test_an_unknown_format_and_an_occupied_output_are_refused(capsys, tmp_path, head):
    assert "unknown export format 'onnx'; use eagle3" in refused(capsys, tmp_path, head, "--format", "onnx")
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "keep.txt").write_text("mine")
    err = refused(capsys, tmp_path, head, "--format", "eagle3", out=occupied)
    assert "exists and is not an empty folder" in err and (occupied / "keep.txt").read_text() == "mine"
    assert sorted(p.name for p in occupied.iterdir()) == ["keep.txt"]
    (tmp_path / "a-file").write_text("x")
    assert "is not an empty folder" in refused(capsys, tmp_path, head, "--format", "eagle3", out=tmp_path / "a-file")


def test_eagle3_is_a_checked_copy_of_the_standard_layout(capsys, tmp_path, head):
    out = tmp_path / "empty"
    out.mkdir()  # an empty folder is taken
    code, stdout, _ = export(capsys, head, "--format", "eagle3", "--out", out, "--json")
    data = json.loads(stdout)
    assert code == 0 and data["path"] == str(out) and data["files"] == "config.json, model.safetensors"
    for name in ("config.json", "model.safetensors"):
        assert (out / name).read_bytes() == (head / name).read_bytes()
    assert is_eagle3(json.loads((out / "config.json").read_text())) and Eagle3Draft.load(out).head_ids[1] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]


def test_a_missing_converter_or_package_is_one_line(capsys, tmp_path, head, monkeypatch):
    monkeypatch.setattr(llama_build, "converter_path", lambda: tmp_path / "nowhere" / "convert_hf_to_gguf.py")
    assert "llama.cpp's converter is not here" in refused(capsys, tmp_path, head, "--format", "gguf")
    script = tmp_path / "llama.cpp" / "convert_hf_to_gguf.py"
    script.parent.mkdir()
    script.write_text("")
    monkeypatch.setattr(llama_build, "converter_path", lambda: script)
    assert "gguf package (gguf-py) is missing" in refused(capsys, tmp_path, head, "--format", "gguf")
    (script.parent / "gguf-py" / "gguf").mkdir(parents=True)
    monkeypatch.setattr(head_export, "CONVERTER_NEEDS", ("torch", "no_such_package_for_specnb"))
    err = refused(capsys, tmp_path, head, "--format", "gguf")
    assert "needs the Python package(s) no_such_package_for_specnb: pip install no_such_package_for_specnb" in err


def test_a_converter_that_fails_halfway_leaves_nothing(capsys, tmp_path, head, monkeypatch):
    script = tmp_path / "llama.cpp" / "convert_hf_to_gguf.py"
    (script.parent / "gguf-py" / "gguf").mkdir(parents=True)
    script.write_text("import sys\nout = sys.argv[sys.argv.index('--outfile') + 1]\nopen(out, 'wb').write(b'GGUF')\n"
                      "sys.exit('ValueError: EAGLE-3 d2t contains duplicate target ids')\n")
    monkeypatch.setattr(llama_build, "converter_path", lambda: script)
    monkeypatch.setattr(head_export, "verifier_folder", lambda verifier: tmp_path / "verifier")
    err = refused(capsys, tmp_path, head, "--format", "gguf")
    assert "llama.cpp's converter failed on head (exit 1): ValueError: EAGLE-3 d2t contains duplicate" in err


@pytest.mark.slow
@pytest.mark.skipif(not llama_build.converter_path().is_file(), reason="no llama.cpp source (make setup)")
def test_gguf_is_llama_cpps_eagle3_file(capsys, tmp_path, head):
    import gguf

    code, stdout, err = export(capsys, head, "--format", "gguf", "--out", tmp_path / "gguf", "--json")
    assert code == 0, err
    path = json.loads(stdout)["path"]
    reader = gguf.GGUFReader(path)
    field = reader.fields["general.architecture"]
    assert bytes(field.parts[field.data[0]]).decode() == "eagle3"
    layers = reader.fields["eagle3.target_layers"]
    assert [int(layers.parts[i][0]) for i in layers.data] == [2, 15, 27]
    tensors = {t.name: t for t in reader.tensors}
    assert tensors["d2t"].tensor_type.name == "I64" and list(tensors["d2t"].data[:3]) == [0, 2, 4]  # absolute ids
    assert tuple(tensors["fc.weight"].shape) == (3 * 576, 576) and tensors["output.weight"].shape[1] == 512
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gguf"]
