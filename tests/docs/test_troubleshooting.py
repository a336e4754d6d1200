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
    for heading in ("llama.cpp left out", "vLLM absent", "refuses before it starts", "fails while it runs", "gated",
                    "port in use", "server that does not start"):
        assert heading in text
    assert len(quoted()) >= 15


@pytest.mark.parametrize("message", quoted())
def test_each_quoted_message_is_in_the_code(message):
    assert found_in(message, TEMPLATES), f"docs/troubleshooting.md quotes a message no code writes: {message}"


def test_the_checker_refuses_a_message_the_code_does_not_write():
    assert found_in("vLLM left out: … (at setup); pass a running vLLM with -p endpoint URL", TEMPLATES)
    assert not found_in("vLLM left out: … (at setup); reinstall vLLM", TEMPLATES)
    assert not found_in("pass a running vLLM … vLLM left out", TEMPLATES)  # the parts, out of order


# What `specnb run` checks before any kernel starts, and every specnb function those checks call, however deep:
# each typed error one of them raises is a one-line message the page must quote.
PRE_RUN = ("specnb.app.runner:select_notebooks", "specnb.app.runner:check_jobs",
           "specnb.app.parameters:check_parameters", "specnb.app.parameters:check_values")
# Not walked into: what the checks reach only with the package's own files and figures (the embedded drafts'
# FLOPs behind the default draft, the export of the embedded verifier's GGUF), never with a user's value.
INTERNAL = ("specnb.core.theory.", "specnb.core.flops.", "specnb.core.configs.", "specnb.decode.kinds.",
            "specnb.models.gguf.export_gguf", "specnb.models.gguf.quantize_gguf", "specnb.models.embedded.build_draft")


def resolve(name: str, scope: dict):
    """The object a dotted name in a function's body stands for, or None."""
    head, *rest = name.split(".")
    obj = scope.get(head)
    for part in rest:
        obj = getattr(obj, part, None)
    return obj


def dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and (base := dotted(node.value)):
        return f"{base}.{node.attr}"
    return None


def local_imports(tree: ast.AST) -> dict:
    """The names a function imports in its body (deferred imports of heavy modules)."""
    import importlib

    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("specnb"):
            module = importlib.import_module(node.module)
            for alias in node.names:  # a name, or a submodule (``from specnb.app import defaults``)
                found[alias.asname or alias.name] = getattr(module, alias.name, None) or \
                    importlib.import_module(f"{node.module}.{alias.name}")
    return found


def raised_messages(roots=PRE_RUN) -> dict[str, str]:
    """Every message template a typed specnb error is raised with in the functions reachable from ``roots``
    (by name, through module globals and function-local imports), each with the function that raises it."""
    import importlib
    import inspect
    import textwrap

    from specnb.core.errors import SpecnbError

    todo = [getattr(importlib.import_module(m), f) for m, f in (r.split(":") for r in roots)]
    seen, messages = set(), {}
    while todo:
        function = inspect.unwrap(todo.pop())
        where = f"{getattr(function, '__module__', '')}.{function.__name__}"
        if function in seen or not where.startswith("specnb") or where.startswith(INTERNAL):
            continue
        seen.add(function)
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
        scope = {**function.__globals__, **local_imports(tree)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and (name := dotted(node.func)):
                target = resolve(name, scope)
                if inspect.isfunction(target):
                    todo.append(target)
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
                error = resolve(dotted(node.exc.func) or "", scope)
                text = text_of(node.exc.args[0])
                if isinstance(error, type) and issubclass(error, SpecnbError) and text:
                    messages[normal(text)] = where
    return messages


def test_every_message_specnb_run_can_refuse_with_is_quoted():
    """A new message on `specnb run`'s checks fails here until the page quotes it."""
    messages = raised_messages()
    assert len(messages) >= 20  # the walk reaches the prompt, model, engine and GGUF checks
    missing = [f"{where}: {m}" for m, where in messages.items() if not found_in(m, quoted())]
    assert not missing, "docs/troubleshooting.md does not quote:\n" + "\n".join(missing)
