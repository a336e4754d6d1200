"""Every name a benchmark script imports from specnb exists: the scripts import inside their functions (a
benchmark pays for torch only when it runs), so a module moved in the package would otherwise surface only
when someone next runs the benchmark, as it did for `kernels.py --forward` and `predictor.py --held-out`."""

import ast
import importlib
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).resolve().parents[2] / "benchmarks").glob("*.py"))


def specnb_imports(path: Path) -> list[tuple[int, str, str]]:
    tree = ast.parse(path.read_text())
    return [(node.lineno, node.module, alias.name) for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("specnb")
            for alias in node.names]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_specnb_name_a_benchmark_imports_exists(script):
    missing = []
    for line, module, name in specnb_imports(script):
        found = importlib.import_module(module)
        if not hasattr(found, name) and importlib.util.find_spec(f"{module}.{name}") is None:
            missing.append(f"line {line}: from {module} import {name}")
    assert not missing, missing


def test_the_scripts_are_found():
    assert {"kernels.py", "predictor.py", "serving.py"} <= {p.name for p in SCRIPTS}
