"""Build llama.cpp so it runs on the CPU it was built on: the shared libraries llama-cpp-python
loads and ``llama-server``, from one cmake build of the source that llama-cpp-python's sdist pins.

Why not ``pip install llama-cpp-python`` as it comes: its build is ``GGML_NATIVE=ON``, i.e.
``-march=native``, which on an Intel Xeon with AMX (Sapphire Rapids and later) defines
``__AMX_INT8__`` and compiles ggml's AMX kernels in — and ``-DGGML_AMX_*=OFF`` cannot take them
out again, because a native build ignores those options. ggml's AMX matmul
(``ggml/src/ggml-cpu/amx/mmq.cpp``) serves the quantized types (Q4_0, Q4_1, Q8_0, …;
``qtype_has_amx_kernels`` in ``amx/common.h``) through an extra buffer type that claims their
weights at model load. On a Sapphire Rapids Xeon the embedded Q4_1 model's first batched eval
died there with SIGILL on ``tileloadd`` (in ``tinygemm_kernel_amx``), with the AMX permission
granted and although a small program that configures and loads tiles runs on the same machine —
in notebook 07 that took the Jupyter kernel down. The build leaves AMX out rather than depend on
why. ``GGML_BACKEND_DL`` with ``GGML_CPU_ALL_VARIANTS`` is no way out either: its runtime choice
picks the Sapphire Rapids variant, AMX included, on exactly that machine.

So the build is non-native (``GGML_NATIVE=OFF``) with the instruction sets read from this CPU at
setup time — SSE4.2, AVX, AVX2, FMA, F16C, BMI2, AVX-VNNI and the AVX-512 family only where
``/proc/cpuinfo`` lists them — and AMX always off. At batch 1 nothing is lost: ggml's single-row
path is AVX-512-VNNI, not AMX (the comment above ``ggml_tile_config_init``), and the measured
tok/s against the native build is in benchmarks/README.md.

The build lives in specnb's cache (``home()``), keyed by version and options: a new clone or
virtual environment on the same machine reuses it. After the build a self-test evaluates a few
tokens of the embedded Q4_1 GGUF in a child process. If the child dies on a signal (or the build
failed), the status file says so in one line and specnb treats llama.cpp as absent
(``specnb.native.llama_cpp.missing_note``) instead of failing later.

    python -m specnb.native.llama_build          # build (once per machine; cached), install, self-test
    python -m specnb.native.llama_build --flags  # print the cmake flags this CPU gets
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from specnb.models.cache import build_lock, cache_dir
from specnb.native.isolation import describe_exit

VERSION = "0.3.36"  # llama-cpp-python, whose sdist vendors the llama.cpp source we build
TARGETS = ("llama", "llama-server")

# /proc/cpuinfo flag(s) -> the ggml option they allow. AVX-512 needs all five of its base subsets.
ISA_OPTIONS = {
    "GGML_SSE42": ("sse4_2",),
    "GGML_AVX": ("avx",),
    "GGML_AVX2": ("avx2",),
    "GGML_FMA": ("fma",),
    "GGML_F16C": ("f16c",),
    "GGML_BMI2": ("bmi2",),
    "GGML_AVX_VNNI": ("avx_vnni",),
    "GGML_AVX512": ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"),
    "GGML_AVX512_VBMI": ("avx512f", "avx512vbmi"),
    "GGML_AVX512_VNNI": ("avx512f", "avx512_vnni"),
    "GGML_AVX512_BF16": ("avx512f", "avx512_bf16"),
}
FIXED_OPTIONS = {
    "GGML_NATIVE": "OFF", "GGML_BACKEND_DL": "OFF", "GGML_CPU_ALL_VARIANTS": "OFF",
    "GGML_AMX_TILE": "OFF", "GGML_AMX_INT8": "OFF", "GGML_AMX_BF16": "OFF",
    "BUILD_SHARED_LIBS": "ON", "CMAKE_BUILD_TYPE": "Release",
    "LLAMA_BUILD_TESTS": "OFF", "LLAMA_BUILD_EXAMPLES": "OFF", "LLAMA_BUILD_TOOLS": "ON",
    "LLAMA_BUILD_SERVER": "ON", "LLAMA_BUILD_COMMON": "ON", "LLAMA_BUILD_APP": "OFF",
    "LLAMA_USE_PREBUILT_UI": "OFF", "LLAMA_BUILD_UI": "OFF", "LLAMA_OPENSSL": "OFF", "LLAMA_CURL": "OFF",
}


def home() -> Path:
    """Where this CPU's build lives: in specnb's cache (``$SPECNB_CACHE``, default ``~/.cache/specnb``),
    keyed by the pinned version and the cmake options, so a fresh clone or a new virtual
    environment on the same machine reuses it instead of compiling for minutes again."""
    options = cmake_options(cpu_flags())
    key = hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()[:10]
    return cache_dir() / "llama.cpp" / f"{VERSION}-{key}"


def lib_dir() -> Path:
    return home() / "build" / "bin"


def server_path() -> Path:
    return lib_dir() / "llama-server"


def status_path() -> Path:
    return home() / "selftest.json"


def converter_path() -> Path:
    """llama.cpp's ``convert_hf_to_gguf.py`` in the pinned source (``fetch_source`` unpacks it at setup),
    with its own ``gguf-py`` beside it: the GGUF writer the built server reads."""
    return home() / "src" / f"llama_cpp_python-{VERSION}" / "vendor" / "llama.cpp" / "convert_hf_to_gguf.py"


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The instruction-set flags of this CPU as the kernel reports them (empty where it does not)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def cmake_options(flags: set[str], machine: str | None = None) -> dict[str, str]:
    """The cmake cache entries for a build that uses exactly the instruction sets in ``flags``.

    On x86-64 every ISA option is set explicitly (ON where the CPU has it, OFF where it does not;
    AMX always OFF). Elsewhere (ARM, where ggml reads the features at run time) the build stays
    native: the AMX problem is x86's alone.
    """
    options = dict(FIXED_OPTIONS)
    if (machine or platform.machine()).lower() not in ("x86_64", "amd64"):
        options["GGML_NATIVE"] = "ON"
        return options
    for option, needs in ISA_OPTIONS.items():
        options[option] = "ON" if all(f in flags for f in needs) else "OFF"
    return options


def run(cmd: list[str], log: Path | None = None, **kwargs) -> None:
    """Run a build step; with ``log``, its output goes there (a compiler's warnings are thousands of
    lines) and a failure prints the last lines of it."""
    if log is None:
        subprocess.run(cmd, check=True, **kwargs)
        return
    with open(log, "a") as out:
        out.write("+ " + " ".join(cmd) + "\n")
        out.flush()
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, **kwargs)
    if done.returncode != 0:
        tail = Path(log).read_text(errors="replace").splitlines()[-20:]
        raise SystemExit("\n".join(tail) + f"\nllama.cpp: build step failed ({cmd[0]}); full log in {log}")


def fetch_source(dest: Path, log: Path | None = None) -> Path:
    """llama-cpp-python's sdist (pip's cache makes this quick after the first time), unpacked;
    returns its root, whose ``vendor/llama.cpp`` is the source both the binding and we build."""
    root = dest / f"llama_cpp_python-{VERSION}"
    if (root / "vendor" / "llama.cpp" / "CMakeLists.txt").exists():
        return root
    with tempfile.TemporaryDirectory() as tmp:
        run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
             f"llama-cpp-python=={VERSION}", "-d", tmp], log)
        (sdist,) = Path(tmp).glob("*.tar.gz")
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(sdist) as tar:
            tar.extractall(dest, filter="data")
    return root


def build(jobs: int | None = None) -> Path:
    """Configure and build the shared libraries and ``llama-server``; returns the folder with both.
    A build whose options match is kept (cmake rebuilds nothing), so setup runs it once per machine."""
    with build_lock(home()):
        return _build(jobs)


def _build(jobs: int | None) -> Path:
    out, log = home() / "build", home() / "build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    root = fetch_source(home() / "src", log)
    options = cmake_options(cpu_flags())
    on = [k.removeprefix("GGML_") for k, v in options.items() if k.startswith("GGML_") and v == "ON"]
    print(f"llama.cpp: building {', '.join(TARGETS)} for this CPU ({' '.join(on) or 'no SIMD'}; AMX off); "
          f"log in {log}", flush=True)
    run(["cmake", "-S", str(root / "vendor" / "llama.cpp"), "-B", str(out), "-Wno-dev",
         *[f"-D{k}={v}" for k, v in options.items()]], log)
    run(["cmake", "--build", str(out), "-j", str(jobs or os.cpu_count() or 2), "--target", *TARGETS], log)
    return lib_dir()


def install_binding(libs: Path) -> None:
    """Install the Python binding without compiling llama.cpp again (``LLAMA_BUILD=OFF``), and link
    its ``lib/`` to the libraries just built, so ``import llama_cpp`` loads them anywhere."""
    env = dict(os.environ, CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF")
    log = home() / "build.log"
    run([sys.executable, "-m", "pip", "install", "-q", "--no-cache-dir", "--force-reinstall", "--no-deps",
         str(next((home() / "src").glob(f"llama_cpp_python-{VERSION}")))], log, env=env)
    run([sys.executable, "-m", "pip", "install", "-q", "typing-extensions", "diskcache", "jinja2", "numpy"], log)
    import importlib.util

    package = Path(importlib.util.find_spec("llama_cpp").origin).parent
    target = package / "lib"
    target.mkdir(exist_ok=True)
    for lib in libs.glob("lib*.so*"):
        link = target / lib.name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(lib)


SELF_TEST = """
import sys
from specnb.native.isolation import report_native_faults
report_native_faults()
import llama_cpp
llm = llama_cpp.Llama(model_path=sys.argv[1], n_threads=2, n_ctx=256, verbose=False)
llm.eval(list(range(1, 10)))   # 9 tokens: the batched matmul path, where AMX faulted
llm.eval([10])                 # and one token, the decoding path
print("ok")
"""


def self_test(gguf: Path | None = None, timeout_s: float = 300) -> dict:
    """Evaluate a few tokens of the embedded Q4_1 GGUF in a child process; the verdict is kept in
    ``status_path()`` for ``missing_note``. A child killed by a signal is a failed test, not a crash."""
    if gguf is None:
        from specnb.models.embedded import find_embedded_gguf  # deferred: loads torch

        gguf = find_embedded_gguf()
    proc = subprocess.run([sys.executable, "-c", SELF_TEST, str(gguf)], capture_output=True, text=True,
                          timeout=timeout_s)
    ok = proc.returncode == 0 and proc.stdout.strip().endswith("ok")
    status = {"ok": ok, "gguf": str(gguf), "options": cmake_options(cpu_flags())}
    if not ok:
        status["error"] = describe_exit("llama.cpp self-test", proc.returncode, proc.stderr)
    write_status(status)
    return status


def write_status(status: dict) -> None:
    status_path().parent.mkdir(parents=True, exist_ok=True)
    status_path().write_text(json.dumps(status, indent=1))


def read_status() -> dict | None:
    """The last self-test's verdict, or None where setup never ran one (a binding installed by hand)."""
    try:
        return json.loads(status_path().read_text())
    except (OSError, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specnb.native.llama_build", description=__doc__.split("\n\n")[0])
    parser.add_argument("--flags", action="store_true", help="print this CPU's cmake options and exit")
    parser.add_argument("--self-test", action="store_true", help="only run the self-test")
    parser.add_argument("--jobs", type=int, default=None)
    args = parser.parse_args(argv)
    if args.flags:
        print(" ".join(f"-D{k}={v}" for k, v in cmake_options(cpu_flags()).items()))
        return 0
    if not args.self_test:
        failure = None
        if not shutil.which("cmake") or not shutil.which("c++"):
            failure = "cmake or a C++ compiler is missing; install both, then run make setup again"
        else:
            try:
                install_binding(build(args.jobs))
            except (SystemExit, subprocess.CalledProcessError, OSError) as err:
                print(err if isinstance(err, SystemExit) else "", file=sys.stderr)
                failure = f"the build failed (log: {home() / 'build.log'})"
        if failure:  # the project runs without llama.cpp: say so once, here and in notebook 07
            write_status({"ok": False, "error": f"llama.cpp: {failure}"})
            print(f"llama.cpp: {failure}; notebook 07 leaves llama.cpp out")
            return 0
    status = self_test()
    if status["ok"]:
        print(f"llama.cpp: self-test passed ({lib_dir()})")
    else:
        print(f"llama.cpp: {status['error']}; notebook 07 leaves llama.cpp out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
