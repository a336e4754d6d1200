"""parameters.check_values: a value the notebooks would refuse minutes in is refused before any kernel
starts, in the notebook's own words, and leaves no run folder behind."""

from pathlib import Path

import pytest

from specnb.app import cli
from specnb.app.parameters import check_values
from specnb.core.errors import SpecnbError

NOTEBOOKS = Path(__file__).parents[2] / "notebooks"
GAMMA, ALTERNATIVES, SERVING = (NOTEBOOKS / name for name in ("03_gamma_sweep.ipynb", "07_alternatives.ipynb",
                                                             "08_serving.ipynb"))


@pytest.mark.parametrize("paths, parameters, message", [
    ([GAMMA], {"prompts": "/nowhere/prompts.txt"}, "prompt file '/nowhere/prompts.txt' does not exist"),
    ([GAMMA], {"prompts": "maths"}, "unknown prompt categories ['maths']"),
    ([GAMMA], {"verifier": "/nowhere/model"}, "'/nowhere/model' is not a folder"),  # not "no default draft"
    ([GAMMA], {"draft": "./nowhere-draft"}, "'./nowhere-draft' is not a folder"),
    ([GAMMA], {"verifier": "smollm2-13m"}, "unknown embedded model 'smollm2-13m'"),
    ([GAMMA], {"drafts": ["prompt-lookup", "smollm2-draft-q"]}, "unknown embedded model 'smollm2-draft-q'"),
    ([ALTERNATIVES], {"llama": ["q3"]}, "unknown GGUF precision 'q3'"),
    ([SERVING], {"engine": "nope"}, "engine must be one of"),
    ([SERVING], {"verifier": "/nowhere/v.gguf"}, "verifier GGUF '/nowhere/v.gguf' does not exist"),
    ([SERVING], {"precision": "q3"}, "unknown GGUF precision 'q3'"),
    ([SERVING], {"engine": "llama.cpp", "verifier": "some/model"}, "no GGUF export for 'some/model'"),
])
def test_a_bad_value_is_refused_in_one_line(paths, parameters, message):
    with pytest.raises(SpecnbError) as refused:
        check_values(paths, parameters)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_good_values_pass(tmp_path):
    prompts = tmp_path / "mine.txt"
    prompts.write_text("Say hello.\n")
    check_values([GAMMA, SERVING], {"prompts": str(prompts), "engine": "simulated", "draft": "prompt-lookup"})
    check_values([GAMMA], {"drafts": ["smollm2-draft-s", "exit:4", "smollm2-eagle"], "verifier": "smollm2-135m"})
    check_values([SERVING], {"verifier": "/any/where.gguf", "endpoint": "http://127.0.0.1:8000"})  # not started here
    check_values([SERVING], {"verifier": "HuggingFaceTB/SmolLM2-135M-Instruct"})  # the run may serve it on vLLM


def test_the_command_line_refuses_before_any_kernel_or_run_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SPECNB_NOTEBOOKS", str(NOTEBOOKS))
    out = tmp_path / "run"
    assert cli.main(["run", "3", "--smoke", "-p", "prompts", str(tmp_path / "none.txt"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist; pass a text file with one prompt per line" in err
    assert not out.exists()
