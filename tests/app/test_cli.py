"""CLI contract of `specnb flops`, `specnb ratio` and `specnb theory`: keys, figures, one-line errors."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import specnb
from specnb.app.cli import main


def run_json(capsys, *argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_flops_json(capsys):
    data = run_json(capsys, "flops", "Qwen/Qwen2.5-3B-Instruct", "--context", "100")
    assert data["flops_per_token"] == 6_171_394_048
    assert data["flops_per_token_at_context"] == 6_171_394_048 + 100 * data["attention_flops_per_position"]
    assert data["params"] == 3_085_938_688
    assert data["bias_flops_per_token"] > 0 and data["layers"] == 36 and data["hidden_size"] == 2048


def test_flops_table(capsys):
    assert main(["flops", "smollm2-135m"]) == 0
    out = capsys.readouterr().out
    assert "flops_per_token" in out and "268,959,744" in out and "134,515,008" in out


def test_ratio(capsys):
    data = run_json(capsys, "ratio", "Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-3B-Instruct")
    assert f"{data['c']:.4f}" == "0.5002"
    assert (data["draft_flops_per_token"], data["verifier_flops_per_token"]) == (3_087_138_816, 6_171_394_048)
    assert main(["ratio", "Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-3B-Instruct"]) == 0
    assert "0.1601" in capsys.readouterr().out


def test_ratio_prices_a_head_as_the_draft_table_does(capsys):
    from specnb.core.configs import resolve_config
    from specnb.decode.kinds.by_name import flops_table
    from specnb.models import heads, registry

    verifier = resolve_config("smollm2-135m")
    for head in ("smollm2-eagle", "smollm2-eagle3", "smollm2-medusa"):
        data = run_json(capsys, "ratio", head, "smollm2-135m", "--context", "64")
        table = flops_table("smollm2-135m", [head], context=64).set_index("model")
        assert data["c"] == pytest.approx(table.loc[head, "c_flops_at_context"])
        count = heads.medusa_flops if head.endswith("medusa") else heads.eagle_flops
        expected = count(heads.read_config(registry.paths.DRAFTS_DIR / head), verifier)
        assert data["draft_flops_per_token"] == expected.flops_per_token_at_context
        assert 0 < data["c"] < 0.15  # one layer and a trimmed head against 30 layers and the full head
    assert run_json(capsys, "ratio", "prompt-lookup", "smollm2-135m")["c"] == 0


def test_the_loading_commands_take_kernels():
    from specnb.app.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["generate"]).kernels == "auto"
    assert parser.parse_args(["generate", "--kernels", "onednn", "--gamma", "auto"]).gamma == "auto"
    assert parser.parse_args(["generate", "--tree", "dynamic"]).tree == "dynamic"
    assert parser.parse_args(["generate", "--tree", "3,2"]).tree == (3, 2)
    calibrate = parser.parse_args(["calibrate", "--draft", "d", "--out", "p.json", "--kernels", "default"])
    assert calibrate.kernels == "default"


def test_calibrate_and_predict_pass_kernels_to_the_library(monkeypatch, capsys, tmp_path):
    from specnb.core.errors import ParameterError
    from specnb.predict import calibrate

    seen = {}

    def stop(*args, **kwargs):
        seen.update(kwargs)
        raise ParameterError("stopped before measuring")

    monkeypatch.setattr(calibrate, "calibrate", stop)
    out = str(tmp_path / "p.json")
    assert main(["calibrate", "--draft", "prompt-lookup", "--out", out, "--kernels", "onednn"]) == 2
    assert seen["settings"].kernels == "onednn" and "stopped before measuring" in capsys.readouterr().err
    seen.clear()
    monkeypatch.setattr(calibrate, "ensure_calibrated", stop)  # `predict` calibrates when given no profile
    assert main(["predict", "--draft", "prompt-lookup", "--kernels", "default"]) == 2
    assert seen["settings"].kernels == "default"


def test_theory_json(capsys):
    data = run_json(capsys, "theory", "--alpha", "0.392", "--gamma", "4", "--c", "0.1601")
    assert f"{data['speedup']:.2f}" == "0.99" and data["speedup_text"] == "0.99x"
    assert data["tokens_per_step"] == pytest.approx((1 - 0.392**5) / (1 - 0.392))
    assert 0.392 < data["break_even_alpha"] < 0.40  # just short of break-even
    assert data["optimal_gamma"] >= 1 and data["optimal_speedup"] >= data["speedup"]


def test_theory_table_and_no_break_even(capsys):
    assert main(["theory", "--alpha", "0.392", "--gamma", "4", "--c", "0.1601"]) == 0
    assert "0.99x" in capsys.readouterr().out
    data = run_json(capsys, "theory", "--alpha", "0.5", "--gamma", "3", "--c", "1.2")
    assert data["break_even_alpha"] is None and "c >= 1" in data["note"]


@pytest.mark.parametrize("argv", [
    ["theory", "--alpha", "1.0", "--gamma", "4", "--c", "0.1"],
    ["theory", "--alpha", "-0.2", "--gamma", "4", "--c", "0.1"],
    ["theory", "--alpha", "nan", "--gamma", "4", "--c", "0.1"],
    ["theory", "--alpha", "0.5", "--gamma", "0", "--c", "0.1"],
    ["theory", "--alpha", "0.5", "--gamma", "2.5", "--c", "0.1"],
    ["theory", "--alpha", "0.5", "--gamma", "4", "--c", "-1"],
    ["theory", "--alpha", "0.5", "--gamma", "4", "--c", "nan"],
    ["flops", "Qwen/Qwen2.5-3B-Instruct", "--context", "-5"],
    ["flops", "nobody/no-such-model-xyz"],
    ["ratio", "nobody/no-such-model-xyz", "Qwen/Qwen2.5-3B-Instruct"],
])
def test_bad_input_is_one_line_and_exit_2(capsys, monkeypatch, argv):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"specnb {argv[0]}: error:")
    assert "Traceback" not in captured.err and "nan" not in lines[0].split("error:")[1].replace("NaN", "")


def test_missing_config_field_exit_2(capsys, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "num_attention_heads": "many"}))
    assert main(["flops", str(tmp_path)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def modules_loaded(code: str) -> set[str]:
    """The modules a fresh interpreter holds after ``code``: this repository's specnb, counted not timed."""
    root = str(Path(specnb.__file__).parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print('\\n'.join(sys.modules))"],
                         capture_output=True, text=True, env=env, check=True).stdout
    return set(out.split())


def outside_the_standard_library(modules: set[str]) -> list[str]:
    """Top-level packages neither the standard library nor specnb (import hooks, ``_``-prefixed, aside)."""
    return sorted({m.split(".")[0] for m in modules} - set(sys.stdlib_module_names) - {"specnb", "__main__"}
                  - {m for m in modules if m.startswith("_")})


def test_import_specnb_loads_the_map_alone():
    """The root's names load on first use (``specnb.__getattr__``): importing the package loads none of
    its folders and no third-party package."""
    loaded = modules_loaded("import specnb")
    assert sorted(m for m in loaded if m.startswith("specnb.")) == []
    assert outside_the_standard_library(loaded) == []


def test_help_loads_the_command_table_alone():
    """``specnb --help`` (and building the parser for any command) imports the CLI, its command table and
    the typed errors, as it did before the commands became one module; whatever a command runs (torch,
    transformers, pandas, jupyter, and the light modules behind them too) waits for that command."""
    loaded = modules_loaded("import contextlib, io\nfrom specnb.app.cli import main\n"
                            "with contextlib.redirect_stdout(io.StringIO()):\n"
                            "    try:\n        main(['--help'])\n    except SystemExit:\n        pass")
    assert sorted(m for m in loaded if m.startswith("specnb")) == [
        "specnb", "specnb.app", "specnb.app.cli", "specnb.app.commands", "specnb.core", "specnb.core.errors"]
    assert outside_the_standard_library(loaded) == []
