"""cli: `specnb predict` and `specnb calibrate` from the command line: JSON out, bad input as one line and exit 2."""

import json

import pytest
import torch
from helpers import DRAFT, synthetic_profile

from specnb.app.cli import main
from specnb.core.errors import DeviceError, ParameterError
from specnb.predict import costs


def run_cli(argv, capsys):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_predict_from_profile_json(tmp_path, capsys):
    path = costs.save_profile(synthetic_profile(), tmp_path / "p.json")
    code, out, err = run_cli(
        ["predict", "--verifier", "tiny", "--draft", DRAFT, "--profile", str(path), "--gamma", "3", "--json"], capsys
    )
    assert code == 0, err
    data = json.loads(out)
    assert {"recommended_gamma", "predicted_speedup", "break_even_alpha", "table"} <= set(data)
    assert [row["gamma"] for row in data["table"]] == list(range(1, 9))
    assert data["gamma_speedup"]["gamma"] == 3
    code, out, _ = run_cli(["predict", "--verifier", "tiny", "--draft", DRAFT, "--profile", str(path)], capsys)
    assert code == 0 and "break_even_alpha" in out and "predicted_speedup" in out


@pytest.mark.parametrize(
    "extra,match",
    [
        (["--max-gamma", "0"], "gamma must be >= 1"),
        (["--gamma", "0"], "gamma must be >= 1"),
        (["--prompts", "does/not/exist.txt"], "does not exist"),
        (["--device", "mps"], "device"),
    ],
)
def test_cli_bad_inputs_exit_2(tmp_path, capsys, extra, match):
    path = costs.save_profile(synthetic_profile(), tmp_path / "p.json")
    code, out, err = run_cli(
        ["predict", "--verifier", "tiny", "--draft", DRAFT, "--profile", str(path), *extra], capsys
    )
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and match in err


def test_cli_unparseable_prompt_file_and_profile(tmp_path, capsys):
    bad = tmp_path / "prompts.txt"
    bad.write_bytes(b"\xff\xfe\x00broken")
    code, _, err = run_cli(["predict", "--draft", DRAFT, "--prompts", str(bad)], capsys)
    assert code == 2 and "not UTF-8" in err
    broken = tmp_path / "p.json"
    broken.write_text("[1, 2")
    code, _, err = run_cli(["predict", "--draft", DRAFT, "--profile", str(broken)], capsys)
    assert code == 2 and "not valid JSON" in err


def test_calibrate_stores_a_profile_on_20_prompts_and_predict_keeps_a_profiles_traces(monkeypatch, capsys):
    """`calibrate` (once, stored) defaults to 20 prompts over every category; `predict` without
    --prompts/--n-prompts passes None, so a profile's traces are reused rather than re-measured."""
    from specnb.predict import calibrate as C

    seen = {}

    def stop_as(key):
        def stop(*args, **kwargs):
            seen[key] = kwargs["prompts"]
            raise ParameterError("stopped before measuring")

        return stop

    monkeypatch.setattr(C, "calibrate", stop_as("calibrate"))
    monkeypatch.setattr(C, "ensure_calibrated", stop_as("predict"))
    assert run_cli(["calibrate", "--draft", DRAFT, "--out", "unused.json"], capsys)[0] == 2
    assert len(seen["calibrate"]) == 20 and seen["calibrate"]["category"].nunique() == 8
    assert run_cli(["predict", "--draft", DRAFT], capsys)[0] == 2 and seen["predict"] is None
    seen.clear()
    assert run_cli(["predict", "--draft", DRAFT, "--n-prompts", "5"], capsys)[0] == 2 and len(seen["predict"]) == 5


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_calibrate_on_a_missing_device(tmp_path, capsys):
    from specnb.predict.calibrate import CalibrationSettings, calibrate

    with pytest.raises(DeviceError):
        calibrate("smollm2-135m", ["prompt-lookup"], settings=CalibrationSettings(device="cuda"))
    code, _, err = run_cli(
        ["calibrate", "--draft", "prompt-lookup", "--device", "cuda", "--out", str(tmp_path / "p.json")], capsys
    )
    assert code == 2 and "not available" in err and len(err.strip().splitlines()) == 1
