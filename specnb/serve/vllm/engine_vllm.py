"""vLLM behind the engine seam: its configurations from speculation entries (n-gram, suffix decoding,
a distilled draft as ``draft_model``, the EAGLE-3 head), its server, its forward probe (the client's
time for a one-token completion: vLLM reports no per-request timings) and ``--speculative-config``
as a user pastes it, per-batch-size schedule included. Also what an OpenAI-compatible vLLM someone
else runs is (``-p endpoint``): the same counters and probe. The process is ``vllm_server``'s."""

from __future__ import annotations

import json
from dataclasses import replace

from specnb.native import vllm_build
from specnb.serve.eagle3_heads import eagle3_folder, eagle3_missing, wants_head
from specnb.serve.engines import EngineDefaults, register
from specnb.serve.speculation import FREE_FAMILIES, Launch, model_drafts, parse_entry
from specnb.serve.vllm.vllm_server import VllmConfig, VllmServer, missing_note, speculative_config

HEAD_METHODS = ("eagle3",)  # drafting heads named as a method, loaded from the verifier's head folder
DEFAULT_HEAD = "eagle3:3"  # the head's k with the best TPOT speedup at one request (2026-12-02, benchmarks/README.md)
MAX_MODEL_LEN = 1024  # tokens per request: prompt and output


def hf_folder(name: str):
    """An embedded model's HF folder (built into the cache on first use), or a local checkpoint folder."""
    from specnb.models.embedded import hf_folder as folder_of

    return folder_of(name)


class VllmEngine(EngineDefaults):
    """vLLM: launched here or met at an endpoint, one server per configuration, not relaunched each
    round (a start takes minutes); one launch changes k with the batch size (``scheduled``)."""

    name = "vllm"
    label = "vLLM"
    version = vllm_build.VERSION
    metrics_prefix = "vllm"
    launched = True
    batch_gauge = "num_requests_running"
    context = MAX_MODEL_LEN
    relaunch_each_round = False

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
        from specnb.core.devices import cpu_name
        from specnb.native.vllm_build import VERSION
        from specnb.serve.vllm.vllm_server import default_threads

        threads = f"{configs[0].threads} unbound" if configs[0].threads else f"{default_threads()} bound"
        return f"{cpu_name()}, vLLM {VERSION} (CPU) with {threads} torch thread(s)"

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
