"""benchmarks/drafts.py: the README section it writes (markers replaced, other sections kept) and its table."""

import importlib.util

import pandas as pd
import pytest
from helpers import record

from specnb.core.paths import REPO_ROOT
from specnb.measure import analysis, runs


@pytest.fixture
def script(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("drafts_benchmark", REPO_ROOT / "benchmarks" / "drafts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "HERE", tmp_path)
    return module


def fake_result():
    rows = []
    for p in ("p1", "p2"):
        rows.append(record("verifier-only", p, 10, 100.0, verify_ms=90.0, verifier_forwards=10))
        rows.append(record("big γ=1", p, 10, 50.0, "big", 1, [2], [4], steps=4, draft_ms=4.0))
    records = pd.DataFrame(rows)
    flops = pd.DataFrame({"model": ["v", "big"], "params": [135_000_000, 14_000_000],
                          "flops_per_token": [2.7e8, 2.8e7], "c_flops": [1.0, 0.104]})
    summary = runs.summarise(records)
    env = {"cpu": "CPU", "cpu_count": 2, "gpu": None, "packages": {"torch": "2", "transformers": "5"},
           "time_utc": "2026-01-02T03:04:05Z", "git_commit": "abcdef123"}
    return {
        "records": records,
        "summary": summary,
        "flops": flops,
        "table": analysis.draft_table(records, flops, summary),
        "device": "cpu",
        "dtype": "torch.float32",
        "kernels": {"v": {"model": "v", "path": "default", "reason": "timed"}},
        "categories": ["c"],
        "environment": env,
        "seconds": 90.0,
        "config": {"verifier": "v", "repeats": 1, "max_new_tokens": 10, "gammas": [1]},
    }


def test_markdown_table_has_every_draft_and_the_machine(script):
    markdown = script.render_markdown(fake_result())
    assert "CPU (2 cores)" in markdown and "2026-01-02" in markdown and "135M parameters" in markdown
    row = [line for line in markdown.splitlines() if line.startswith("| `big`")][0]
    assert "| 14M | 28M | 0.104 |" in row and "| 1 | 2.00x [2.00–2.00] | wins |" in row


def test_readme_section_replaced_between_markers_only(script, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# Benchmarks\n\n<!-- engine:start -->\nengine table\n<!-- engine:end -->\n")
    script.write_readme_section("first")
    script.write_readme_section("second")
    text = readme.read_text()
    assert "engine table" in text and "second" in text and "first" not in text
    assert text.count("<!-- drafts:start -->") == 1 and text.index("engine:end") < text.index("drafts:start")


def test_quick_results_stay_out_of_the_readme(script, tmp_path):
    result = fake_result()
    folder = script.write_results(result, "quick table", quick=True)
    assert folder == tmp_path / "results" / "quick" and (folder / "drafts.json").exists()
    assert not (tmp_path / "README.md").exists()
    script.write_results(result, "full table", quick=False)
    assert "full table" in (tmp_path / "README.md").read_text() and (tmp_path / "results" / "drafts.json").exists()


def test_quick_flag_shrinks_the_run(script):
    args = script.parse_args(["--quick", "--drafts", "a, b"])
    assert args.drafts == ["a", "b"] and args.prompts == 2 and args.gammas == [1, 2]
    assert script.parse_args(["--gammas", "2,4"]).gammas == [2, 4]
