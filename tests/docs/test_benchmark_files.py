"""benchmarks/README.md cites only files the repository has: every script, raw result and test file it names in
code spans (``<tag>`` and ``*`` standing for any part of a name) resolves from the repository root or from
benchmarks/, so a figure's raw records can be found; its Markdown links are checked by test_links_and_sizes."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "benchmarks" / "README.md"
CITED = re.compile(r"^[\w./<>*~-]+\.(?:py|csv|json)$")


def cited(text: str) -> list[str]:
    """File names in code spans: words ending .py, .csv or .json (an all-caps placeholder like RUN.json is none)."""
    words = [w.strip("[](),;") for span in re.findall(r"`([^`\n]+)`", text) for w in span.split()]
    return sorted({w for w in words if CITED.match(w) and not Path(w).stem.isupper()})


def resolves(name: str) -> bool:
    pattern = re.sub(r"<[^>]+>", "*", name)
    return any(any(base.glob(pattern)) if "*" in pattern else (base / pattern).is_file()
               for base in (ROOT, ROOT / "benchmarks"))


def test_every_cited_script_and_raw_file_exists():
    names = cited(PAGE.read_text())
    assert sum(n.startswith("results/") for n in names) >= 4 and sum(n.endswith(".py") for n in names) >= 10
    assert [n for n in names if not resolves(n)] == []


def test_the_checker_finds_a_missing_raw_file():
    text = "raw `results/vllm_k0.csv`, `results/drafts_<tag>_records.csv`; `results/gone.csv` and `RUN_DIR.json`"
    assert [n for n in cited(text) if not resolves(n)] == ["results/gone.csv"]
