"""A notebook's parameters, checked before it runs.

papermill finds the ``parameters`` cell and injects values after it, but it only *warns* about a
name the notebook does not declare and injects any value of any type: ``-p gama 8`` would silently
run the defaults, ``-p gammas notalist`` would fail minutes later inside a cell. Here an unknown name
or a value whose type does not match the declared default is a one-line ``ParameterError`` before
any notebook starts. A default of None declares no type (the notebook accepts several forms).

``check_values`` then reads the values a user passed the way the notebooks will (a model folder, a
prompt file, an engine, a GGUF, a device), with the same functions the notebooks call, so a missing
folder or an unknown engine is one line naming it before a kernel starts and before a run folder
exists, not a failure in cell 4 that leaves a partial run behind (and not a message about what
followed from it, such as "no default draft" for a verifier folder that is not there).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from specnb.core.errors import ParameterError
from specnb.measure.prompts import select_prompts
from specnb.models.gguf import check_precision
from specnb.serve.engines import engine_named
from specnb.serve.llama import verifier_gguf


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


def check_values(paths: list[Path], parameters: dict[str, Any]) -> None:
    """Raise the one-line error a notebook would raise minutes in, for each value the user passed
    (``parameters``, already ``check_parameters``'d) that the notebooks among ``paths`` read: the
    prompts, models (``check_models``), the serving engine and its GGUF (``check_serving``), the device."""
    declared = {path.stem: declared_parameters(path) for path in paths}
    given = {name: value for name, value in parameters.items() if value is not None}
    if isinstance(given.get("prompts"), str):
        select_prompts(given["prompts"])
    for stem, names in declared.items():
        if stem.startswith("08_"):
            check_serving({**{k: ast.literal_eval(v["default"]) for k, v in names.items()}, **given}, given)
    check_models(given, [stem for stem in declared if not stem.startswith("08_")])
    for precision in given.get("llama") or []:  # notebook 07's GGUFs
        check_precision(precision)
    if given.get("device", "auto") != "auto":
        from specnb.core.devices import resolve_device  # imports torch: only when a device is named

        resolve_device(given["device"])


def check_models(given: dict[str, Any], stems: list[str]) -> None:
    """For the notebooks that load models (``stems``, 01–07): the verifier and every draft the user
    named must be where the notebook will look (``models.load.locate``: a folder with config.json,
    the cache, the hub; an embedded name or ``exit:K`` is known without looking); a verifier of the
    user's own with no draft named fails as the notebooks would (``defaults.default_draft``;
    notebook 07: ``alternative_speculation``)."""
    drafts = given.get("drafts") or []
    names = [given.get("verifier"), given.get("draft"), *([drafts] if isinstance(drafts, str) else drafts)]
    if not stems or not any(names) and "speculation" not in given:
        return
    from specnb.app import defaults  # these import torch: only when a model is named
    from specnb.models.load import locate
    from specnb.models.registry import embedded_names

    for name in names:
        if isinstance(name, str) and name not in embedded_names() and not name.startswith("exit:"):
            locate(name)
    verifier = given.get("verifier", defaults.EMBEDDED_VERIFIER)
    if any(stem != "07_alternatives" for stem in stems) and "draft" not in given and "drafts" not in given \
            and verifier != defaults.EMBEDDED_VERIFIER:
        defaults.default_draft(verifier)
    if "07_alternatives" in stems:
        defaults.alternative_speculation(verifier, given.get("speculation"))


def check_serving(params: dict[str, Any], given: dict[str, Any]) -> None:
    """Notebook 08's engine must be a known one, its GGUF precision a known one, and where the user
    asked llama-server to serve a GGUF here (``-p engine llama.cpp``, or a ``.gguf`` verifier), that
    file must be there (``specnb.serve.llama.verifier_gguf``: a ``.gguf`` file, or a name it can export).
    Without ``-p engine`` the run may pick vLLM for notebook 08 (``runner.variant``), which reads a
    verifier of another form; an embedded name (``smollm2-…``) is left to the notebook, whose export of
    it takes a while."""
    engine_named(params["engine"])
    check_precision(params["precision"])
    verifier = str(params["verifier"])
    asked = "engine" in given or verifier.lower().endswith(".gguf")
    if params["engine"] == "llama.cpp" and not params.get("endpoint") and asked and not verifier.startswith("smollm2-"):
        verifier_gguf(verifier, params["precision"])
