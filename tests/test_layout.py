"""The package's layout: folders follow the data flow, imports only go downwards, no cycles.

core → models → native → decode → serve → measure → predict → app: a module may import its own folder and the
folders before it, never one after it (lazy imports inside functions included: they are
dependencies all the same). The package docstring is the map and names every folder.

The tests mirror it: ``tests/<layer>/test_<module>[_<aspect>].py`` tests ``specnb/<layer>/<module>``
(subpackages mirrored the same way), ``tests/notebooks``, ``tests/benchmarks`` and ``tests/docs`` the
repository's folders of those names; shared helpers live in ``tests/helpers.py``, fixtures in
``tests/conftest.py``.
"""

import ast
import re
from pathlib import Path

import pytest

import specnb

PACKAGE = Path(specnb.__file__).parent
LAYERS = ("core", "models", "native", "decode", "serve", "measure", "predict", "app")
TESTS = Path(__file__).parent
OTHER_FOLDERS = ("notebooks", "benchmarks", "docs")  # the repository's other folders, tested beside the package
SHARED = ("conftest.py", "helpers.py", "test_layout.py")  # the only files at the top of tests/


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(path: Path) -> set[str]:
    """specnb modules ``path`` imports anywhere in its body (``from a import b`` counts as ``a.b``
    when that is a module, else as ``a``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("specnb")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("specnb"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in MODULES else node.module)
    return found - {"specnb"}


GRAPH = {name: imports_of(path) for name, path in MODULES.items()}


def layer(name: str) -> int | None:
    parts = name.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def test_every_module_lives_in_a_layer():
    loose = [n for n in MODULES if layer(n) is None and n not in ("specnb", "specnb.__main__")]
    assert loose == []


@pytest.mark.parametrize("name", sorted(GRAPH))
def test_imports_only_go_downwards(name):
    if layer(name) is None:
        return
    upwards = sorted(dep for dep in GRAPH[name] if layer(dep) is not None and layer(dep) > layer(name))
    assert upwards == [], f"{name} imports from a later folder"


def test_the_three_halves_of_running_a_model_stand_apart():
    """decode (the loop) never reaches a serving engine, native (builds) never reaches the loop: a
    reader of one folder needs neither of the others above it."""
    def reaches(source, target):
        return sorted(f"{n} -> {d}" for n, deps in GRAPH.items() if n.startswith(f"specnb.{source}")
                      for d in deps if d.startswith(f"specnb.{target}"))

    assert reaches("decode", "serve") == [] and reaches("decode", "measure") == []
    assert reaches("native", "decode") == [] and reaches("native", "serve") == []


def test_no_import_cycle():
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name, path):
        state[name] = 1
        for dep in sorted(GRAPH.get(name, ())):
            if state.get(dep) == 1:
                cycle = path[path.index(dep):] + [dep]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if dep in GRAPH and not state.get(dep):
                visit(dep, path + [dep])
        state[name] = 2

    for name in sorted(GRAPH):
        if not state.get(name):
            visit(name, [name])


def test_the_map_names_every_folder():
    folders = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    assert folders == sorted(LAYERS) and all(f"{f}/" in specnb.__doc__ for f in folders)


def test_the_public_api_resolves():
    for name in specnb.__all__:
        assert getattr(specnb, name) is not None, name


def test_no_two_modules_share_a_name():
    """A module's name says which one it is, whatever folder it lives in."""
    stems: dict[str, list[str]] = {}
    for name in MODULES:
        if not name.endswith("__init__") and name.count(".") >= 2:
            stems.setdefault(name.rsplit(".", 1)[1], []).append(name)
    assert {stem: names for stem, names in stems.items() if len(names) > 1} == {}


def mirror_names(folder: Path) -> set[str]:
    """What a test file in the mirror of ``folder`` may be named after: its modules and subpackages."""
    return {p.stem for p in folder.glob("*.py") if p.name != "__init__.py"} | {
        p.name for p in folder.iterdir() if (p / "__init__.py").exists()}


def test_the_test_tree_mirrors_the_package():
    folders = sorted(p.name for p in TESTS.iterdir() if p.is_dir() and p.name not in ("fixtures", "__pycache__"))
    assert folders == sorted([*LAYERS, *OTHER_FOLDERS])
    assert sorted(p.name for p in TESTS.glob("*.py")) == sorted(SHARED)
    for path in sorted(TESTS.glob("*/**/*.py")):
        where = path.parent.relative_to(TESTS)
        if where.parts[0] == "fixtures":
            continue
        source = (PACKAGE if where.parts[0] in LAYERS else PACKAGE.parent) / where
        assert path.name.startswith("test_") and source.is_dir(), f"{path.relative_to(TESTS)}: mirrors no folder"
        if where.parts[0] in LAYERS or where.parts[0] == "benchmarks":
            stem = path.stem.removeprefix("test_")
            names = mirror_names(source) | {source.name}  # or the folder itself: a test of every module in it
            assert any(stem == n or stem.startswith(n + "_") for n in names), (
                f"tests/{path.relative_to(TESTS)} names no module of {source.relative_to(PACKAGE.parent)}")


def dataclass_decorator(node: ast.ClassDef):
    for d in node.decorator_list:
        f = d.func if isinstance(d, ast.Call) else d
        if (f.id if isinstance(f, ast.Name) else getattr(f, "attr", "")) == "dataclass":
            return d
    return None


def test_records_of_more_than_three_fields_are_built_by_keyword():
    """A record read by field names is written by field names: ``@dataclass(kw_only=True)``."""
    positional = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            deco = dataclass_decorator(node) if isinstance(node, ast.ClassDef) else None
            if deco is None:
                continue
            fields = [s for s in node.body
                      if isinstance(s, ast.AnnAssign) and "ClassVar" not in ast.unparse(s.annotation)]
            kw_only = isinstance(deco, ast.Call) and any(
                k.arg == "kw_only" and getattr(k.value, "value", False) for k in deco.keywords)
            if len(fields) > 3 and not kw_only:
                positional.append(f"{name}.{node.name}")
    assert positional == []


def keyword_records() -> set[str]:
    return {node.name for path in MODULES.values() for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ClassDef) and isinstance(deco := dataclass_decorator(node), ast.Call)
            and any(k.arg == "kw_only" for k in deco.keywords)}


def test_the_notebooks_build_keyword_records_by_keyword():
    """A notebook is code no import checks: a positional field there fails only when the cell runs."""
    import json

    records, positional = keyword_records(), []
    for path in sorted((PACKAGE.parent / "notebooks").glob("*.ipynb")):
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            if cell["cell_type"] != "code":
                continue
            for node in ast.walk(ast.parse("".join(cell["source"]))):
                func = node.func if isinstance(node, ast.Call) and node.args else None
                name = getattr(func, "id", None) or getattr(func, "attr", None)
                if name in records:
                    positional.append(f"{path.name} cell {i}: {name}")
    assert positional == []


BENCHMARKS = sorted((PACKAGE.parent / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.name)
def test_every_specnb_name_a_benchmark_imports_exists(script):
    """The scripts import inside their functions (a benchmark pays for torch only when it runs), so a
    module moved in the package would surface only when someone next runs that benchmark — as it did
    for ``kernel_paths.py --forward`` and ``predictor.py --held-out``."""
    import importlib

    missing = []
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("specnb"):
            found = importlib.import_module(node.module)
            missing += [f"line {node.lineno}: from {node.module} import {a.name}" for a in node.names
                        if not hasattr(found, a.name) and importlib.util.find_spec(f"{node.module}.{a.name}") is None]
    assert BENCHMARKS and not missing, missing


def test_every_module_the_map_names_exists():
    """The package map (its docstring) names modules in double backticks: each must be one (or a
    folder, or a record/name the map explains: ``ServingEngine``, ``Speculation``, ``gamma="auto"``)."""
    stems = {name.rsplit(".", 1)[1] for name in MODULES if "." in name}
    named = re.findall(r"``([A-Za-z_][\w/]*)``", specnb.__doc__.split("What a user's own notebook")[0])
    records = {"ServingEngine", "Speculation", "specnb"}
    missing = [n for n in named if n.rstrip("/").rsplit("/", 1)[-1] not in stems and n not in records]
    assert missing == []


# Where an engine's name may be compared: the engines' own modules, their processes and builds.
ENGINE_HOMES = ("specnb.serve", "specnb.native.llama_", "specnb.native.vllm_")


def compared_strings(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, string) of every string constant a comparison (==, !=, in, not in) tests against."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                found += [(node.lineno, c.value) for c in ast.walk(side)
                          if isinstance(c, ast.Constant) and isinstance(c.value, str)]
    return found


def notebook_sources() -> dict[str, str]:
    import json

    def code(cell) -> bool:
        return cell["cell_type"] == "code" and "parameters" not in cell.get("metadata", {}).get("tags", [])

    return {path.name: "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"] if code(c))
            for path in sorted((PACKAGE.parent / "notebooks").glob("*.ipynb"))}


def test_the_serving_notebook_only_displays_its_study():
    """Notebook 08's orchestration (which engine, which phases run, what a missing part means) lives in
    ``specnb.app.serving_study``, tested there; its cells past the parameters hold no branch or loop."""
    source = notebook_sources()["08_serving.ipynb"]
    control = (ast.If, ast.IfExp, ast.For, ast.While, ast.Try, ast.With, ast.comprehension, ast.FunctionDef,
               ast.Lambda, ast.Match)
    found = sorted({type(node).__name__ for node in ast.walk(ast.parse(source)) if isinstance(node, control)})
    assert found == [], found


def test_engines_and_load_shapes_are_seams_not_string_branches():
    """The serving seam's bar: outside the engine modules at most 3 comparisons against an engine's
    name; no test of a load mode's name, no column-name inference of a load shape; no configuration's
    identity parsed back out of its display name (a regex on "k=", a startswith on a name)."""
    from specnb.serve.engines import engines

    names = set(engines())
    sources = {name: path.read_text() for name, path in MODULES.items() if not name.startswith(ENGINE_HOMES)}
    sources |= notebook_sources()
    engine_compares, mode_compares = [], []
    for name, text in sources.items():
        for line, value in compared_strings(ast.parse(text)):
            engine_compares += [f"{name}:{line} {value!r}"] if value in names else []
            mode_compares += [f"{name}:{line} {value!r}"] if value in ("closed", "poisson", "open") else []
    assert len(engine_compares) <= 3, engine_compares
    assert mode_compares == []
    inferred = [name for name, text in sources.items() if re.search(r"\blevel_column\b|\bmode\s*[!=]=", text)]
    assert inferred == []
    parsed = [name for name, text in sources.items()
              if re.search(r"k=\(\\d|\.startswith\(FREE|\bconfig\w*\.startswith\(|\[\"config\"\]\.str\.", text)]
    assert parsed == []
