"""The Markdown the repository ships: every relative link reaches a file (and a heading, where it names
one), and the two READMEs stay within their sizes (README.md ≤ 10 KB, benchmarks/README.md ≤ 40 KB)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "benchmarks" / "README.md", *(ROOT / "docs").rglob("*.md")])
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE = re.compile(r"`[^`\n]*`")


def links_of(text: str) -> list[str]:
    """Markdown link and image targets outside code blocks and inline code."""
    return LINK.findall(CODE.sub("", FENCE.sub("", text)))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (word characters, spaces and hyphens
    kept), spaces to hyphens; inline Markdown marks go with the punctuation."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors_of(text: str) -> set[str]:
    """Every heading's anchor, the second of two equal headings suffixed ``-1`` as GitHub does."""
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", FENCE.sub("", text), re.M):
        base = slug(heading)
        found.add(base if base not in seen else f"{base}-{seen[base]}")
        seen[base] = seen.get(base, 0) + 1
    return found


def broken_links(page: Path) -> list[str]:
    """Relative links of ``page`` whose file, or whose heading in a Markdown file, does not exist."""
    broken = []
    for target in links_of(page.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
            continue
        path_part, _, anchor = target.partition("#")
        file = (page.parent / path_part).resolve() if path_part else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in anchors_of(file.read_text()):
            broken.append(target)
    return broken


def test_the_checker_finds_a_broken_file_and_a_broken_anchor(tmp_path):
    (tmp_path / "other.md").write_text("# Other page\n\n## Its `code` section: yes!\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md) [ok](other.md#its-code-section-yes) [gone](missing.md) "
                    "[bad](other.md#no-such) [web](https://example.org/x.md) `[code](nope.md)`\n"
                    "```\n[fenced](nope.md)\n```\n")
    assert broken_links(page) == ["missing.md", "other.md#no-such"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


def test_the_pages_link_somewhere():
    """The docs are reachable from the README and link each other: the link check has links to check."""
    readme_links = links_of((ROOT / "README.md").read_text())
    assert len(PAGES) >= 8 and sum(t.startswith("docs/") for t in readme_links) >= 5


def test_the_readmes_stay_within_their_sizes():
    assert (ROOT / "README.md").stat().st_size <= 10 * 1024
    assert (ROOT / "benchmarks" / "README.md").stat().st_size <= 40 * 1024
