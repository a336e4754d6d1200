"""An EAGLE-3 head exported to the two serving engines' formats: the folder vLLM's ``"method": "eagle3"``
loads, and the GGUF that llama-server's ``--spec-type draft-eagle3 -md FILE`` loads.

The vLLM folder is the standard layout itself (``config.json`` + ``model.safetensors``, what
``specnb.models.eagle3`` saves), so that export is a checked copy. The GGUF is made by llama.cpp's own
converter from the pinned source (``llama_build.converter_path``), not by a writer of ours as
``specnb.models.gguf`` writes the plain Llama files: an EAGLE-3 GGUF holds what only that converter and
the server built from the same source agree on (architecture ``eagle3``, the target layers and hidden
size, ``d2t`` as absolute token ids in I64, ``hidden_norm`` as ``attn_norm_2``, q/k rows permuted per
head), so the two stay in step when the pin moves. The converter reads the verifier's HF folder
(``--target-model-dir``: its tokenizer, vocabulary size and layer count) and runs in a child process on
this interpreter with torch, transformers and sentencepiece (which it imports before it looks for a
``tokenizer.model``, even for SmolLM2's BPE tokenizer) and with its own ``gguf-py``.

Everything is checked before anything is written, each failure one line: a name that is no EAGLE-3
head in the standard layout (a distilled draft, a Medusa head, an EAGLE head in specnb's older layout,
any other folder), a head made for another verifier (``specnb.models.heads.check_fits``), a GGUF of a
head that does not read three verifier layers (llama-server reads exactly three), an unknown format,
an output folder that holds files. The export is built in a temporary sibling and renamed into place
(``publish_atomically``), so a failure leaves nothing half-written. ``head_gguf`` caches the GGUF per
head file hash for llama-server's configurations (notebook 08), as ``embedded_gguf`` caches its files.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from specnb.core.configs import resolve_config
from specnb.core.errors import (
    ConversionError,
    IncompatibleModelsError,
    ModelNotFoundError,
    ParameterError,
    SpecnbError,
    last_line,
)
from specnb.models.cache import build_lock, cache_dir, cache_is_valid, file_sha256, publish_atomically
from specnb.models.eagle3 import CONFIG_FILE, WEIGHTS_FILE, Eagle3Draft, is_eagle3
from specnb.models.embedded import hf_folder
from specnb.models.gguf import GGUF_FILE
from specnb.models.heads import check_fits, head_kind, read_config
from specnb.models.registry import EMBEDDED_VERIFIER, draft_folder
from specnb.native import llama_build

FORMATS = ("eagle3", "gguf")  # vLLM's folder, llama-server's GGUF
LLAMA_LAYERS = 3  # verifier layers llama-server's draft-eagle3 reads (common/speculative.cpp refuses others)
CONVERTER_NEEDS = ("torch", "transformers", "numpy", "sentencepiece")
CONVERT_TIMEOUT_S = 600


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise ParameterError(f"unknown export format {fmt!r}; use eagle3 (vLLM's folder) or gguf (llama-server's "
                             "draft-eagle3 file)")
    return fmt


def check_out(out) -> Path:
    """The output folder: new, or empty (an export never mixes with files already there)."""
    out = Path(out).expanduser()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ParameterError(f"output {out} exists and is not an empty folder; pass a new folder")
    return out


def is_standard_head(folder: Path) -> bool:
    """Whether ``folder`` holds an EAGLE-3 head in the standard layout: its config and its weights."""
    return is_eagle3(read_config(folder)) and (folder / WEIGHTS_FILE).is_file()


def head_folder(name: str) -> Path:
    """The folder of an embedded EAGLE-3 head or of a head folder, in the standard layout."""
    folder = draft_folder(name)
    if is_standard_head(folder):
        return folder
    raise ModelNotFoundError(f"{name!r} is not an EAGLE-3 head in the standard layout ({what_it_is(folder)}); "
                             f"pass an embedded EAGLE-3 head or a folder with its {CONFIG_FILE} and {WEIGHTS_FILE}")


def what_it_is(folder: Path) -> str:
    """What a folder that is no standard EAGLE-3 head holds instead, in a few words."""
    if not folder.is_dir():
        return "no embedded head or folder of that name"
    config = read_config(folder)
    if config is None:
        return f"no {CONFIG_FILE} there"
    if is_eagle3(config):
        return f"no {WEIGHTS_FILE} beside its {CONFIG_FILE}"
    kind = head_kind(folder)
    if kind == "eagle":
        return "an EAGLE head in specnb's own layout or EAGLE-1/-2's, not EAGLE-3's"
    return f"a {kind.capitalize()} head" if kind else "a model checkpoint, not a head"


def check_head(name: str, verifier: str = EMBEDDED_VERIFIER, fmt: str = "eagle3") -> Path:
    """The head's folder once it is known to load in the standard layout, to fit ``verifier`` and,
    for a GGUF, to read the three layers llama-server reads."""
    folder = head_folder(name)
    check_fits(folder, resolve_config(verifier), name)
    try:
        head = Eagle3Draft.load(folder)
    except SpecnbError:
        raise
    except Exception as err:  # a damaged file or a config without a needed key
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ModelNotFoundError(f"head {name!r} does not load in the standard layout: {first}") from None
    layers = head.config.aux_layer_ids
    if fmt == "gguf" and len(layers) != LLAMA_LAYERS:
        raise IncompatibleModelsError(f"head {name!r} reads verifier layers {list(layers)}; llama-server's "
                                      f"draft-eagle3 reads exactly {LLAMA_LAYERS}")
    return folder


def verifier_folder(verifier: str) -> Path:
    """The verifier's HF folder: a local checkpoint as it is, an embedded model's cache (built on first use)."""
    path = hf_folder(verifier)
    if path is None:
        raise ModelNotFoundError(f"verifier {verifier!r} has no HF folder of its own; pass a checkpoint folder")
    return path


def converter() -> Path:
    """llama.cpp's converter, once it and what it imports are known to be here."""
    script = llama_build.converter_path()
    if not script.is_file():
        raise ConversionError(f"llama.cpp's converter is not here ({script}); `make setup` fetches the pinned "
                              "llama.cpp source (python -m specnb.native.llama_build)")
    if not (script.parent / "gguf-py" / "gguf").is_dir():
        raise ConversionError(f"llama.cpp's gguf package (gguf-py) is missing beside {script}; run `make setup` again")
    missing = [name for name in CONVERTER_NEEDS if importlib.util.find_spec(name) is None]
    if missing:
        raise ConversionError(f"llama.cpp's converter needs the Python package(s) {', '.join(missing)}: "
                              f"pip install {' '.join(missing)} (make setup installs them)")
    return script


def write_gguf(folder: Path, target: Path, out_file: Path) -> Path:
    """Run llama.cpp's converter on the head in ``folder`` for the verifier in HF folder ``target``:
    an F32 GGUF at ``out_file``; a failure is one line, the converter's last."""
    script = converter()
    env = {k: v for k, v in os.environ.items() if k != "NO_LOCAL_GGUF"}  # its own gguf-py, not the installed one
    command = [sys.executable, str(script), str(folder), "--target-model-dir", str(target), "--outtype", "f32",
               "--outfile", str(out_file)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=CONVERT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ConversionError(f"llama.cpp's converter took over {CONVERT_TIMEOUT_S} s on {folder.name}") from None
    if done.returncode != 0 or not Path(out_file).is_file():
        raise ConversionError(f"llama.cpp's converter failed on {folder.name} (exit {done.returncode}): "
                              f"{last_line(done.stderr or done.stdout)[:300]}")
    return Path(out_file)


def export_head(name: str, fmt: str, out, verifier: str = EMBEDDED_VERIFIER) -> dict:
    """Export head ``name`` (an embedded head or a folder) for ``verifier`` as ``fmt`` into the new
    folder ``out``; returns what was written and the path an engine takes (vLLM the folder,
    llama-server's ``-md`` the GGUF)."""
    fmt, out = check_format(fmt), check_out(out)
    folder = check_head(name, verifier, fmt)
    if fmt == "gguf":
        converter()  # a missing converter is one line before the verifier's folder is built
        target = verifier_folder(verifier)

    def build(tmp: Path) -> None:
        tmp.chmod(0o777 & ~current_umask())  # a user's folder, not mkdtemp's private 0700
        if fmt == "eagle3":
            for file in (CONFIG_FILE, WEIGHTS_FILE):
                shutil.copy2(folder / file, tmp / file)
        else:
            write_gguf(folder, target, tmp / GGUF_FILE)

    publish_atomically(build, out, manifest=False)
    files = sorted(p.name for p in out.iterdir())
    return {"head": name, "format": fmt, "verifier": verifier, "out": str(out),
            "path": str(out if fmt == "eagle3" else out / GGUF_FILE), "files": ", ".join(files),
            "bytes": sum((out / f).stat().st_size for f in files)}


def head_gguf(name: str, verifier: str = EMBEDDED_VERIFIER) -> Path:
    """The head's GGUF for llama-server, converted once per head file hash (and verifier) and cached."""
    folder = head_folder(name)
    digest = hashlib.sha256(" ".join([verifier, *(file_sha256(folder / f) for f in (CONFIG_FILE, WEIGHTS_FILE))])
                            .encode()).hexdigest()[:16]
    target = cache_dir() / "gguf" / f"{folder.name}-eagle3-{digest}"
    if cache_is_valid(target, full_hash=False):
        return target / GGUF_FILE
    check_head(name, verifier, "gguf")
    converter()
    source = verifier_folder(verifier)
    with build_lock(target):
        if not cache_is_valid(target, full_hash=False):
            publish_atomically(lambda tmp: write_gguf(folder, source, tmp / GGUF_FILE), target)
    return target / GGUF_FILE


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask

