"""docs/notebooks: every parameter a page's table names exists in that notebook's ``parameters`` cell with the
default the page gives, and every declared parameter is on its page (``-p NAME`` is refused for any other)."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs" / "notebooks").glob("0*.md"))
ROW = re.compile(r"^\| `(\w+)` \| `(.*?)` \| .* \|$", re.M)


def declared(notebook: Path) -> dict[str, str]:
    """The parameters cell's names with their default's source (papermill's reading: one ``name = value``
    per line, a trailing comment its help)."""
    cell = next(c for c in json.loads(notebook.read_text())["cells"] if "parameters" in c["metadata"].get("tags", []))
    found = {}
    for line in "".join(cell["source"]).splitlines():
        match = re.match(r"^(\w+) = (.*?)(?:\s+#.*)?$", line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def documented(page: Path) -> dict[str, str]:
    """The page's parameter table: name and default as written."""
    return dict(ROW.findall(page.read_text()))


def test_every_notebook_has_a_page_with_a_table():
    assert [p.stem for p in PAGES] == sorted(p.stem for p in (ROOT / "notebooks").glob("0*.ipynb"))
    assert all(len(documented(p)) >= 5 for p in PAGES)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_every_parameter_on_the_page_exists_in_its_notebook_with_that_default(page):
    params = declared(ROOT / "notebooks" / f"{page.stem}.ipynb")
    table = documented(page)
    assert sorted(set(table) - set(params)) == [], f"{page.name} names parameters {page.stem} does not declare"
    assert sorted(set(params) - set(table)) == [], f"{page.name} leaves out parameters {page.stem} declares"
    assert {name: table[name] for name in params} == params


def test_the_checker_sees_a_parameter_the_notebook_lacks(tmp_path):
    page = tmp_path / "07_alternatives.md"
    page.write_text("| parameter | default | meaning |\n|---|---|---|\n| `device` | `\"cpu\"` | a device |\n"
                    "| `verifier` | `\"smollm2-135m\"` | the verifier |\n")
    assert set(documented(page)) - set(declared(ROOT / "notebooks" / "07_alternatives.ipynb")) == {"device"}
