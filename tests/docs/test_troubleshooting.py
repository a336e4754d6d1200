"""docs/troubleshooting.md quotes the one-line messages the code writes: each line of its code blocks, `…`
standing for what differs per run, is found in a string the package (or the Makefile) builds."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "troubleshooting.md"
GAP = "…"


def quoted(page: Path = PAGE) -> list[str]:
    """Every non-empty line of the page's fenced code blocks."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", page.read_text(), re.S | re.M)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def text_of(node: ast.AST) -> str | None:
    """A string literal or f-string as text, each placeholder a gap."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else GAP for v in node.values)
    return None


def templates() -> list[str]:
    """Every string the package's source builds, and every Makefile line (``$(VAR)`` a gap)."""
    found = []
    for path in (ROOT / "specnb").rglob("*.py"):
        found += [t for node in ast.walk(ast.parse(path.read_text())) if (t := text_of(node))]
    found += [re.sub(r"\$\([^)]*\)", GAP, line) for line in (ROOT / "Makefile").read_text().splitlines()]
    return [normal(t) for t in found]


def normal(text: str) -> str:
    """A gap and a quoted gap read alike (``{name!r}`` prints the quotes the page leaves out)."""
    return re.sub(rf"'{GAP}'|\"{GAP}\"", GAP, text)


def found_in(message: str, candidates: list[str]) -> bool:
    """Whether some template holds the message's fixed parts in order (a gap matches anything)."""
    parts = [p for p in normal(message).split(GAP) if p.strip()]
    for template in candidates:
        at = 0
        for part in parts:
            at = template.find(part, at)
            if at < 0:
                break
            at += len(part)
        else:
            return True
    return False


TEMPLATES = templates()


def test_the_page_quotes_the_cases_a_newcomer_meets():
    text = PAGE.read_text()
    for heading in ("llama.cpp left out", "vLLM absent", "unknown or mistyped parameter", "gated", "port in use",
                    "server that does not start"):
        assert heading in text
    assert len(quoted()) >= 15


@pytest.mark.parametrize("message", quoted())
def test_each_quoted_message_is_in_the_code(message):
    assert found_in(message, TEMPLATES), f"docs/troubleshooting.md quotes a message no code writes: {message}"


def test_the_checker_refuses_a_message_the_code_does_not_write():
    assert found_in("vLLM left out: … (at setup); pass a running vLLM with -p endpoint URL", TEMPLATES)
    assert not found_in("vLLM left out: … (at setup); reinstall vLLM", TEMPLATES)
    assert not found_in("pass a running vLLM … vLLM left out", TEMPLATES)  # the parts, out of order
