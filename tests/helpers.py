"""What several test modules share: the one tiny-model factory, the EAGLE-3 head the engine tests run,
a word-level tokenizer, a synthetic hardware profile (``synthetic_profile``), drafts that agree with their
verifier often but not always, ragged prompts, synthetic run records, and checks (a trace replays the
engine's steps; confidence stopping is lossless and stops chains; an HTML page fetches nothing from the
network), executed notebooks as nbformat stores them, an alternatives notebook summary, and a fake
OpenAI streaming server on loopback (``FakeEngine``, ``fake_server``).

Test modules import it as ``helpers`` (``tests/`` is on ``sys.path`` through its ``conftest.py``);
fixtures live in ``conftest.py``.
"""

import contextlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

ARCHS = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}
WORDS = [f"w{i}" for i in range(60)]  # the word-level tokenizer's words (ids 3..62)


# ---------------------------------------------------------------------------- tiny models


def tiny_config(arch: str = "llama", vocab: int = 200, hidden: int = 64, layers: int = 2, **overrides):
    """A transformers config of a tiny decoder: 4 heads over 2 KV heads, MLP twice the hidden size."""
    config_cls = ARCHS[arch][0]
    settings = dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                    intermediate_size=2 * hidden, vocab_size=vocab, tie_word_embeddings=False)
    return config_cls(**{**settings, **overrides})


def tiny_model(arch: str = "llama", vocab: int = 200, hidden: int = 64, layers: int = 2, seed: int = 0,
               peaked: float = 1.0, **overrides):
    """A random-init tiny causal LM in eval mode; ``peaked`` scales its lm_head (peaked logits: no argmax
    near-ties, which would make acceptance arbitrary)."""
    torch.manual_seed(seed)
    model = ARCHS[arch][1](tiny_config(arch, vocab, hidden, layers, **overrides)).eval()
    if peaked != 1.0:
        with torch.no_grad():
            model.lm_head.weight.mul_(peaked)
    return model


def engine_eagle3_head(folder) -> str:
    """The EAGLE-3 head the engine tests run (a name or a folder, as ``engines.EAGLE3_HEAD`` takes
    either): the embedded ``smollm2-eagle3`` once that folder holds the standard layout, else an untrained
    head started from the embedded verifier (``Eagle3Draft.init_from_verifier``), saved in ``folder``,
    which gets some drafts accepted all the same."""
    from specnb.core import paths
    from specnb.models.eagle3 import Eagle3Config, Eagle3Draft, is_eagle3
    from specnb.models.heads import read_config
    from specnb.models.training.head_corpus import embedded_verifier

    if is_eagle3(read_config(paths.DRAFTS_DIR / "smollm2-eagle3")):
        return "smollm2-eagle3"
    verifier, _ = embedded_verifier(1)
    config = Eagle3Config.from_verifier(verifier.config, draft_vocab_size=8192, aux_layer_ids=(2, 15, 27))
    draft = Eagle3Draft(config)
    draft.set_vocabulary(torch.arange(8192))
    draft.init_from_verifier(verifier, 0)
    draft.save(folder)
    return str(folder)


def word_model(seed: int, layers: int = 2):
    """A tiny verifier over ``tiny_tokenizer``'s vocabulary, with peaked logits."""
    return tiny_model(vocab=len(WORDS) + 3, layers=layers, seed=seed, peaked=8.0, max_position_embeddings=256,
                      eos_token_id=2, pad_token_id=0)


def word_pair(seed: int = 0):
    """``word_model`` and ``tiny_tokenizer`` as ``load_pair`` returns a verifier without a draft."""
    from specnb.models.load import Pair

    return Pair(verifier=word_model(seed), tokenizer=tiny_tokenizer(), device=torch.device("cpu"), dtype=torch.float32,
                verifier_name="tiny")


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """Word-level: ``<pad>`` 0, ``<unk>`` 1, ``<eos>`` 2, then ``WORDS``."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {w: i for i, w in enumerate(["<pad>", "<unk>", "<eos>", *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token="<eos>")


def perturbed_copy(model, scale: float, seed: int):
    """A draft that agrees with the verifier often but not always: its weights plus noise of ``scale``
    times each tensor's spread."""
    torch.manual_seed(seed)
    draft = type(model)(model.config).eval()
    draft.load_state_dict(model.state_dict())
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(scale * p.std() * torch.randn_like(p))
    return draft


def peaked_pair(arch, noise=0.004, scale=8.0, vocab=200):
    """Verifier with peaked logits (no argmax near-ties) and a draft that is a perturbed copy of it."""
    verifier = tiny_model(arch, vocab, peaked=scale)
    draft = tiny_model(arch, vocab)
    draft.load_state_dict(verifier.state_dict())
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * noise)
    return verifier, draft


def ragged_prompts(batch=4, width=12, vocab=200, seed=0):
    """Left-padded random prompts of lengths width, width-3, width-6, ..."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (batch, width), generator=gen)
    mask = torch.ones_like(ids)
    for i in range(batch):
        mask[i, : (3 * i) % (width - 2)] = 0
    return ids.masked_fill(mask == 0, 0), mask


# ---------------------------------------------------------------------------- records and checks


def record(candidate, prompt, tokens, wall, draft="", gamma=0, accepted_by_position=(), drafted_by_position=(),
           steps=None, draft_ms=0.0, verify_ms=None, verifier_forwards=None, repeat=0, category="c"):
    """One synthetic run record, as ``specnb.measure.runs.run_interleaved`` writes them."""
    accepted, drafted = sum(accepted_by_position), sum(drafted_by_position)
    steps = tokens if steps is None else steps
    return {"repeat": repeat, "prompt_ids": prompt, "categories": category, "candidate": candidate, "draft": draft,
            "gamma": gamma, "batch_size": 1, "new_tokens": tokens, "wall_ms": wall, "prefill_ms": 0.0,
            "draft_ms": draft_ms, "verify_ms": wall - draft_ms if verify_ms is None else verify_ms, "accept_ms": 0.0,
            "rollback_ms": 0.0, "other_ms": 0.0, "accepted": accepted, "drafted": drafted, "steps": steps,
            "verifier_forwards": steps + 1 if verifier_forwards is None else verifier_forwards, "draft_forwards": 0,
            "accept_lengths": [], "accepted_by_position": list(accepted_by_position),
            "drafted_by_position": list(drafted_by_position)}


def synthetic(candidate, tokens, walls, accepted=0, drafted=0, steps=1, gamma=0):
    """Records of one candidate on prompts p0, p1, ...: ``tokens`` and ``walls`` per prompt."""
    return [{"repeat": 0, "prompt_ids": f"p{i}", "categories": "c", "candidate": candidate, "draft": "", "gamma": gamma,
             "batch_size": 1, "new_tokens": t, "wall_ms": w, "prefill_ms": 0.1 * w, "draft_ms": 0.0,
             "verify_ms": 0.9 * w, "accept_ms": 0.0, "rollback_ms": 0.0, "other_ms": 0.0, "accepted": accepted,
             "drafted": drafted, "steps": steps, "verifier_forwards": steps, "draft_forwards": 0,
             "accept_lengths": [], "accepted_by_position": [], "drafted_by_position": []}
            for i, (t, w) in enumerate(zip(tokens, walls))]


def sweep_record(candidate, gamma, prompt="p0", *, tokens, forwards, draft_ms=0.0, verify_ms=0.0, overhead_ms=0.0,
           accepted=0, drafted=0, steps=0, batch_size=1, ragged=0, idle=0, accept_lengths=(), repeat=0):
    """One run_interleaved-style record; ``overhead_ms`` is split over accept and rollback; per-position
    counts follow from ``accept_lengths`` with every step drafting γ."""
    wall = draft_ms + verify_ms + overhead_ms + 5.0
    return {"repeat": repeat, "prompt_ids": prompt, "categories": "c", "candidate": candidate,
            "draft": "d" if gamma else "", "gamma": gamma, "batch_size": batch_size, "new_tokens": tokens,
            "wall_ms": wall, "prefill_ms": 5.0, "draft_ms": draft_ms, "verify_ms": verify_ms,
            "accept_ms": overhead_ms / 2, "rollback_ms": overhead_ms / 2, "other_ms": 0.0, "drafted": drafted,
            "accepted": accepted, "steps": steps, "verifier_forwards": forwards, "draft_forwards": 0,
            "accept_lengths": list(accept_lengths),
            "accepted_by_position": [sum(n > i for n in accept_lengths) for i in range(gamma)],
            "drafted_by_position": [len(accept_lengths)] * gamma, "ragged_slots": ragged, "idle_row_steps": idle}


def gamma_sweep():
    """Verifier-only decodes 10 tokens at 10 ms each. γ=2: 4 steps of 24 ms (10 draft, 12 verify,
    2 bookkeeping) yield 2.5 tokens each: wins. γ=6: 5 steps of 44 ms yield 2 tokens each: loses."""
    rows = []
    for p, scale in (("p0", 1.0), ("p1", 1.02), ("p2", 0.98)):
        rows += [sweep_record("verifier-only", 0, p, tokens=11, forwards=11, verify_ms=100 * scale),
                 sweep_record("d γ=2", 2, p, tokens=11, forwards=5, draft_ms=40 * scale, verify_ms=48 * scale,
                        overhead_ms=8 * scale, accepted=6, drafted=8, steps=4, accept_lengths=[2, 2, 1, 1]),
                 sweep_record("d γ=6", 6, p, tokens=11, forwards=6, draft_ms=150 * scale, verify_ms=60 * scale,
                        overhead_ms=10 * scale, accepted=5, drafted=30, steps=5, accept_lengths=[1, 1, 1, 1, 1])]
    import pandas as pd

    return pd.DataFrame(rows)


def check_replay(verifier, draft, ids, mask, gamma: int, confidence: float = 0.0) -> list[int]:
    """Assert that each row's trace, replayed at ``gamma`` (and a ``confidence`` threshold), accepts and
    drafts what the engine does step by step; returns the tokens each row's trace accepted (so a
    caller can check the draft did anything)."""
    import numpy as np

    from specnb.decode.generate import generate
    from specnb.decode.settings import Decoding
    from specnb.predict.drafts import draft_traits
    from specnb.predict.traces import AcceptanceTrace, pack, replay, verifier_features

    accepted, layers = [], draft_traits(draft).feature_layers
    for row in range(len(ids)):
        context = ids[row, mask[row].bool()].tolist()
        generated = generate(verifier, torch.tensor([context]), decoding=Decoding(max_new_tokens=14)).tokens[0]
        runs, proposed, confidences = draft_traits(draft).trace(
            context, generated, 16, verifier_features(verifier, context + generated[:-1], layers))
        trace = AcceptanceTrace(prompt_id="p", runs=runs, proposed=proposed, cap=16, hit_budget=True,
                                confidence=confidences)
        packed = pack([trace], len(generated), confidence)
        got = replay(packed, np.zeros((1, 1), dtype=int), gamma, len(generated), draft_traits(draft).catch_up)
        result = generate(verifier, torch.tensor([context]), draft=draft,
                          decoding=Decoding(gamma=gamma, max_new_tokens=14, confidence=confidence))
        live = got.active[:, 0, 0]
        assert got.accepted[live, 0, 0].tolist() == result.accepted_per_step[0], row
        assert got.drafted[live, 0, 0].tolist() == result.drafted_per_step[0], row
        accepted.append(sum(runs))
    return accepted


def check_confidence_stops(verifier, draft, ids, mask, gamma: int, threshold: float, max_new_tokens: int = 16):
    """Assert that drafting with a confidence ``threshold`` is token-identical to verifier-only, and that
    it did stop chains: some steps drafted fewer than ``gamma`` and some all of them, and, in a batch,
    rows of one step stopped at different depths (ragged). Returns the result."""
    from specnb.decode.generate import generate
    from specnb.decode.settings import Decoding

    expected = generate(verifier, ids, mask, decoding=Decoding(max_new_tokens=max_new_tokens)).tokens
    result = generate(verifier, ids, mask, draft=draft,
                      decoding=Decoding(gamma=gamma, max_new_tokens=max_new_tokens, confidence=threshold))
    assert result.tokens == expected
    drafted = [n for row in result.drafted_per_step for n in row]
    assert min(drafted) < gamma and max(drafted) == gamma, drafted
    if len(ids) > 1:
        steps = max(map(len, result.drafted_per_step))
        by_step = [{row[t] for row in result.drafted_per_step if len(row) > t} for t in range(steps)]
        assert any(len(depths) > 1 for depths in by_step), by_step
    assert sum(map(sum, result.accepted_per_step)) > 0
    return result


def assert_offline(html: str) -> None:
    """No script, stylesheet or image is fetched from the network."""
    remote = re.findall(r"""<(?:script|link|img|iframe)[^>]+(?:src|href)=["'](https?:)?//""", html)
    assert remote == []
    assert "cdn" not in " ".join(re.findall(r"<script[^>]*>", html)).lower()


DRAFT = "tiny-draft"


def synthetic_profile(t_v=(60.0, 3.0), t_d=(10.0, 1.0), alpha=0.7, prefill=(20.0, 0.5), overhead=(0.5, 1.0),
                      n_new=48):
    """A ``HardwareProfile`` built from known numbers: linear costs and i.i.d. acceptance α (synthetic traces)."""
    from specnb.decode.kinds.kind import FORWARDS
    from specnb.predict import costs, what_if

    profile = costs.HardwareProfile(
        verifier="tiny",
        device="cpu",
        machine={},
        verifier_decode=costs.CostModel(t0_ms=t_v[0], ms_per_token=t_v[1]),
        verifier_prefill=costs.CostModel(t0_ms=prefill[0], ms_per_token=prefill[1]),
        verifier_flops_per_token=1e9,
        drafts={
            DRAFT: costs.DraftCosts(kind=FORWARDS, decode=costs.CostModel(t0_ms=t_d[0], ms_per_token=t_d[1]),
                                    prefill=costs.CostModel(t0_ms=prefill[0] / 4,
                                                            ms_per_token=prefill[1] / 4), flops_per_token=1e8)
        },
        acceptance={},
        traces={},
        overhead_ms={"verifier-only": overhead[0], DRAFT: overhead[1]},
        max_new_tokens=n_new,
        prompt_tokens=40.0,
    )
    what_if.set_flat_acceptance(profile, DRAFT, alpha, n_new)
    return profile


def alternatives_summary(rows: list[dict]):
    """An alternatives notebook summary (``specnb.measure.alternatives``): every row the eager fp32
    verifier-only at 10 tok/s with all 8 prompts identical, unless a row says otherwise."""
    import numpy as np
    import pandas as pd

    base = {"engine": "PyTorch eager", "precision": "fp32", "speculation": "", "lossless": True, "tok_s": 10.0,
            "speedup_lo": np.nan, "speedup_hi": np.nan, "tokens_per_forward": 1.0, "prompts": 8,
            "identical_prompts": 8, "prefix_share": 1.0, "median_first_divergence": None}
    return pd.DataFrame([{**base, **r} for r in rows])


def gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie that is not reaped yet counts as gone)."""
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    status = open(f"/proc/{pid}/status").read() if os.path.exists(f"/proc/{pid}/status") else ""
    return "zombie" in status


def spec(entry: str = "", k: int = 0, family: str | None = None, uses_model: bool = False):
    """A configuration's ``Speculation`` record (``entry`` "" for spec-off); its display name is
    ``f"{entry} k={k}"``."""
    from specnb.serve.engines import Speculation

    if not entry:
        return Speculation()
    return Speculation(entry=entry, k=k, method=family or entry, family=family or entry, uses_model=uses_model)


def closed(*levels, tokens: int = 32, range_ratio: float = 0.0, seed: int = 0) -> list:
    """Closed-loop loads at each concurrency, every request ``tokens`` long (or drawn by ``range_ratio``)."""
    from specnb.measure.serving_load import Closed, Lengths

    return [Closed(concurrency=c, lengths=Lengths(tokens=tokens, range_ratio=range_ratio), seed=seed) for c in levels]


def open_loop(*rates, tokens: int = 32, burstiness: float = 1.0, seed: int = 0) -> list:
    """Open-loop loads at each rate (requests/s)."""
    from specnb.measure.serving_load import Lengths, Open

    return [Open(rate=r, burstiness=burstiness, lengths=Lengths(tokens=tokens), seed=seed) for r in rates]


# ---------------------------------------------------------------------------- executed notebooks

PNG_1PX = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def executed_notebook(question: str, outputs: list[dict]) -> dict:
    """An executed notebook as nbformat stores it: a title cell with the question, then one code cell."""
    title = {"cell_type": "markdown", "metadata": {}, "source": ["# 01 · Title\n", "\n", question]}
    code = {"cell_type": "code", "metadata": {}, "source": "x", "execution_count": 1, "outputs": outputs}
    return {"cells": [title, code], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def displayed(mime: str, payload) -> dict:
    """One ``display_data`` output of ``mime``."""
    return {"output_type": "display_data", "metadata": {}, "data": {mime: payload, "text/plain": "<...>"}}


# ---------------------------------------------------------------------------- simulated serving sweeps


def sim_sweep(cost, speculations: list, levels: list[int], rounds: int = 3, tokens: int = 48,
              per_worker: int = 3, prompt_len: int = 4):
    """(records, summary) of a closed-loop sweep on the simulated engine in virtual time: every
    configuration at every concurrency in ``levels``, ``rounds`` rounds, each its own acceptance draws
    (the cost's seed) and output lengths (drawn around ``tokens``, the same for every configuration, so
    requests pair), every prompt ``prompt_len`` tokens. Records carry the sweep's columns; the summary
    per (configuration, level) its mean TPOT and TTFT, request throughput (Little's law: concurrency ÷
    mean latency), the engine's time-weighted mean running batch (``mean_batch``), as a gauge gives
    it, and the spec-decode counters as the engine's would difference them (one verification per
    streamed chunk after the first: drafted k each, accepted what it emitted beyond one)."""
    from dataclasses import replace

    import numpy as np
    import pandas as pd

    from specnb.measure.serving_sweep import mean_batch
    from specnb.serve.simulated import run_closed

    records, batches = [], []
    for round_index in range(rounds):
        for c in levels:
            n = max(12, per_worker * c)
            lengths = np.random.default_rng([round_index, c]).integers(tokens // 2, 3 * tokens // 2 + 1, n)
            for spec in speculations:
                rows, trace = run_closed(replace(cost, seed=round_index), spec, [prompt_len] * n, list(lengths), c,
                                         with_batch_trace=True)
                records += [{"engine": "simulated", **spec.columns(), "load": "closed", "concurrency": c,
                             "round": round_index, "prompt_index": i, "prompt_id": str(i), "partial": False, **r}
                            for i, r in enumerate(rows)]
                batches.append({"config": spec.name, "concurrency": c, "mean_batch": mean_batch(trace)})
    records = pd.DataFrame(records)
    steps = records["itl"].map(len)  # verifications: one streamed chunk each after the first token's
    counted = records.assign(tokens_predicted=records["output_tokens"] - 1, steps=steps,
                             spec_decode_draft_tokens=steps * records["k"])
    summary = (counted.groupby(["config", "concurrency"], as_index=False)
               .agg(k=("k", "first"), family=("family", "first"), uses_model=("uses_model", "first"),
                    load=("load", "first"), mean_tpot_ms=("tpot", "mean"), mean_ttft_ms=("ttft", "mean"),
                    mean_latency=("latency", "mean"), tokens_predicted=("tokens_predicted", "sum"),
                    steps=("steps", "sum"), spec_decode_draft_tokens=("spec_decode_draft_tokens", "sum")))
    summary["mean_tpot_ms"] *= 1e3
    summary["mean_ttft_ms"] *= 1e3
    summary["request_throughput"] = summary["concurrency"] / summary.pop("mean_latency")
    summary["spec_decode_accepted_tokens"] = summary["tokens_predicted"] - summary.pop("steps")
    mean = pd.DataFrame(batches).groupby(["config", "concurrency"], as_index=False)["mean_batch"].mean()
    return records, summary.merge(mean, on=["config", "concurrency"])


def sim_trace(cost, speculations: list, arrivals_s: list[float], output_lens: list[int], prompt_len: int = 4,
              round_index: int = 0):
    """(records, runs) of one open-loop trace per configuration on the simulated engine in virtual
    time, each run row with the engine's ``batch_trace`` ([t_s, batch] as JSON); every prompt
    ``prompt_len`` tokens, the rows marked as ``round_index``."""
    import json

    import pandas as pd

    from specnb.serve.simulated import run_open

    rate = len(arrivals_s) / max(arrivals_s)
    records, runs = [], []
    for spec in speculations:
        rows, trace = run_open(cost, spec, arrivals_s, [prompt_len] * len(arrivals_s), output_lens,
                               with_batch_trace=True)
        level = {"load": "open", "request_rate": rate, "round": round_index}
        records += [{"engine": "simulated", **spec.columns(), **level, "prompt_index": i, "prompt_id": str(i),
                     "partial": False, **r} for i, r in enumerate(rows)]
        runs.append({"config": spec.name, **level, "batch_trace": json.dumps(trace)})
    return pd.DataFrame(records), pd.DataFrame(runs)


# ---------------------------------------------------------------------------- a fake OpenAI streaming server


@contextlib.contextmanager
def fake_server(handler: type):
    """``handler`` served on loopback from a thread while the block runs: its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class FakeEngine(BaseHTTPRequestHandler):
    """Streams ``max_tokens`` one-word chunks, 2 ms apart, then usage; counts like a speculative
    engine (one draft of 2 tokens per request, 1 accepted) once a request finishes."""

    drafts = 0
    counting = threading.Lock()  # handler threads finish together: a bare += can lose a count
    die_after = None  # requests served before every later one is refused (a dying server)
    served = 0
    refused = 0

    def stream_words(self, n: int, pause_s: float = 0.0) -> None:
        """The response's head, then ``n`` one-word chunks, ``pause_s`` apart."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for i in range(n):
            chunk = {"choices": [{"index": 0, "delta": {"content": f"w{i} "}}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            if pause_s:
                self.wfile.flush()
                time.sleep(pause_s)

    def log_message(self, *args):
        pass

    def reply(self, status, body: bytes, kind="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/v1/models":
            self.reply(200, json.dumps({"data": [{"id": "fake"}]}).encode())
        elif self.path == "/metrics":
            n = type(self).drafts
            text = (f"llamacpp:spec_decode_num_drafts_total {n}\nllamacpp:spec_decode_num_draft_tokens_total {2 * n}\n"
                    f"llamacpp:spec_decode_num_accepted_tokens_total {n}\n"
                    f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="0"}} {n}\n')
            self.reply(200, text.encode(), "text/plain")
        else:
            self.reply(200, b"<html>not an API</html>", "text/html")

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        cls = type(self)
        if cls.die_after is not None and cls.served >= cls.die_after:
            cls.refused += 1
            self.connection.close()  # the client sees the connection drop
            return
        cls.served += 1
        n = body["max_tokens"]
        self.stream_words(n, pause_s=0.002)
        usage = {"choices": [], "usage": {"prompt_tokens": len(body["messages"][0]["content"]), "completion_tokens": n},
                 "timings": {"draft_n": 2, "draft_n_accepted": 1}}
        with cls.counting:
            cls.drafts += 1
        self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        self.wfile.flush()
        self.close_connection = True


# SGLang samples (this scrape, the serving tests' meta_info) are hand-written in the shapes its source gives:
# its metrics collector registers sglang:spec_accept_length and sglang:spec_accept_rate as Gauges
# (multiprocess_mode "mostrecent"), set at each decode log; its native /generate returns meta_info
# with completion_tokens and spec_verify_ct per request (its own tests read them there);
# spec_accept_token_num / spec_draft_token_num are the names code that reads newer SGLang uses; its
# OpenAI chat endpoint returns meta_info only when asked (return_meta_info) and refuses that for a
# streamed request (entrypoints/openai/serving_chat.py).
SGLANG_SCRAPE = """# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{model_name="m"} 2.8
# TYPE sglang:spec_accept_rate gauge
sglang:spec_accept_rate{model_name="m"} 0.6
sglang:generation_tokens_total{model_name="m"} 120
"""
