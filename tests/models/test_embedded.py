"""embedded.convert_gguf: the one-time build of the embedded verifier shows its own bar, never transformers'."""

import sys

import pytest

from specnb.models import embedded


class Built(Exception):
    """Stops the build once the GGUF was read: the rest needs real weights."""


def test_the_gguf_readers_own_bar_stays_out_of_the_cell(monkeypatch, tmp_path, capsys):
    import transformers

    def read(*args, **kwargs):
        print("Converting and de-quantizing GGUF tensors...: 100%", file=sys.stderr)  # what its tqdm writes
        return object()

    def load(*args, **kwargs):
        read()
        raise Built

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", read)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", load)
    with pytest.raises(Built):
        embedded.convert_gguf(tmp_path / "model.gguf", tmp_path / "out")
    err = capsys.readouterr().err
    assert "de-quantizing" not in err and "building smollm2-135m (one time)" in err
