"""A notebook's parameters, checked before it runs.

papermill finds the ``parameters`` cell and injects values after it, but it only *warns* about a
name the notebook does not declare and injects any value of any type: ``-p gama 8`` would silently
run the defaults, ``-p gammas notalist`` would fail minutes later inside a cell. Here an unknown name
or a value whose type does not match the declared default is a one-line ``ParameterError`` before
any notebook starts. A default of None declares no type (the notebook accepts several forms).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from specnb.core.errors import ParameterError


def parse_value(text: str) -> Any:
    """``-p KEY VALUE`` values: Python literals (``4``, ``0.5``, ``[1, 2]``, ``True``) or plain strings."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def declared_parameters(path: Path) -> dict[str, dict]:
    """The names papermill finds in the notebook's ``parameters`` cell, with their default's source."""
    import papermill

    return papermill.inspect_notebook(str(path))


def declared_defaults(path: Path) -> dict[str, Any]:
    """The notebook's parameters with their default values (as the parameters cell writes them)."""
    return {name: ast.literal_eval(p["default"]) for name, p in declared_parameters(path).items()}


def type_name(value: Any) -> str:
    names = {bool: "True or False", int: "an integer", float: "a number", str: "a string", list: "a list",
             dict: "a dict"}
    return names.get(type(value), type(value).__name__)


def fits(value: Any, default: Any) -> bool:
    """Whether ``value`` has the type of ``default``: an int is a float too, never a bool an int; a
    list's items must fit the default's items (of any of their types) when it has any."""
    if default is None:
        return True
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    if isinstance(default, list):
        items = [type(d) for d in default]
        return isinstance(value, list) and all(any(fits(v, t()) for t in set(items)) for v in value) if items \
            else isinstance(value, list)
    return isinstance(value, type(default))


def check_value(notebook: str, name: str, value: Any, default_source: str) -> Any:
    """``value`` if it fits the declared default (a tuple counts as a list), else a one-line error
    naming the parameter, the expected type and an example."""
    default = ast.literal_eval(default_source)
    if isinstance(value, tuple) and isinstance(default, list):
        value = list(value)
    if not fits(value, default):
        raise ParameterError(f"parameter {name} of {notebook} must be {type_name(default)} like its default, got "
                             f"{type(value).__name__} {value!r}; e.g. -p {name} \"{default_source}\"")
    return value


def check_parameters(paths: list[Path], parameters: dict[str, Any]) -> dict[str, Any]:
    """The parameters, each checked against every selected notebook that declares it; unknown names
    are refused. With several notebooks a parameter needs only one of them to declare it
    (``-p gamma_max 6`` applies to the notebooks that sweep gamma)."""
    declared = {path.stem: declared_parameters(path) for path in paths}
    unknown = sorted(set(parameters) - {name for names in declared.values() for name in names})
    if unknown:
        where = paths[0].stem if len(paths) == 1 else "the selected notebooks"
        known = sorted({name for names in declared.values() for name in names})
        raise ParameterError(f"unknown parameter(s) {', '.join(unknown)} for {where}; declared: {', '.join(known)}")
    checked = dict(parameters)
    for notebook, names in declared.items():
        for name, value in parameters.items():
            if name in names:
                checked[name] = check_value(notebook, name, value, names[name]["default"])
    return checked


def parameters_for(path: Path, user: dict[str, Any], smoke: bool, output_dir: Path, run_name: str) -> dict[str, Any]:
    """User parameters plus what the runner sets: ``smoke``, ``output_dir``, ``interactive`` and,
    where the notebook declares it, ``run_name`` (the stem of its files, which ``runner.run_one`` picks)."""
    declared = declared_parameters(path)
    runner_set = {"smoke": smoke, "output_dir": str(output_dir), "interactive": False, "run_name": run_name}
    params = {k: v for k, v in runner_set.items() if k in declared}
    params.update({k: v for k, v in user.items() if k in declared})
    return params
