"""Side-by-side runs against Hugging Face ``generate``: greedy baseline and assisted generation.

Why: our loops must be at least as fast as what people already use, so each comparison runs HF
greedy, HF assisted generation (fixed gamma), and our verifier-only and speculative loops on the
same prompts, interleaved in one run (so drift in machine load hits all methods alike).

Fixed gamma in HF: ``AssistedCandidateGenerator`` deep-copies the *assistant's*
``generation_config`` and reads ``num_assistant_tokens``, ``num_assistant_tokens_schedule`` and
``assistant_confidence_threshold`` from it (transformers 5.x ``generation/candidate_generator.py``);
passing them to ``generate()`` does not reach it. We set them there and restore them afterwards.
HF assisted generation supports batch size 1 only, so every run here is one prompt at a time.

Reference: Leviathan et al. 2023; Spec-Bench (tidy per-prompt records).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import replace

import torch

from specnb.decode.generate import generate
from specnb.decode.settings import Decoding
from specnb.decode.timing import synchronize

METHODS = ("hf_greedy", "hf_assisted", "specnb_verifier", "specnb_speculative")


@contextmanager
def fixed_gamma(assistant, gamma: int):
    """Make HF assisted generation draft exactly ``gamma`` tokens per step (no schedule, no early stop)."""
    config = assistant.generation_config
    names = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")
    saved = {name: getattr(config, name, None) for name in names}
    config.num_assistant_tokens = gamma
    config.num_assistant_tokens_schedule = "constant"
    config.assistant_confidence_threshold = 0.0
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(config, name, value)


def run_hf(model, input_ids, *, assistant=None, gamma: int = 4, max_new_tokens: int = 64,
           eos_token_id=None) -> tuple[list[int], float]:
    """One HF greedy (or assisted, when ``assistant`` is given) generation; returns (new tokens, wall ms)."""
    kwargs = dict(do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id,
                  pad_token_id=eos_token_id if isinstance(eos_token_id, int) else 0,
                  attention_mask=torch.ones_like(input_ids))
    device = input_ids.device
    with torch.inference_mode():
        if assistant is None:
            synchronize(device)
            t0 = time.perf_counter()
            out = model.generate(input_ids, **kwargs)
        else:
            with fixed_gamma(assistant, gamma):
                synchronize(device)
                t0 = time.perf_counter()
                out = model.generate(input_ids, assistant_model=assistant, **kwargs)
        synchronize(device)
        wall_ms = (time.perf_counter() - t0) * 1e3
    return out[0, input_ids.shape[1]:].tolist(), wall_ms


def run_method(method: str, verifier, draft, input_ids, decoding: Decoding):
    """(tokens, wall ms) of one method on one unpadded prompt ``input_ids`` [1, S]; HF reads the same
    ``decoding`` (γ, token budget, EOS) as specnb's loop, so both sides are asked the same thing."""
    budget, eos = decoding.max_new_tokens, decoding.eos_token_id
    if method == "hf_greedy":
        return run_hf(verifier, input_ids, max_new_tokens=budget, eos_token_id=eos)
    if method == "hf_assisted":
        return run_hf(verifier, input_ids, assistant=draft, gamma=decoding.gamma, max_new_tokens=budget,
                      eos_token_id=eos)
    result = generate(verifier, input_ids, draft=draft if method == "specnb_speculative" else None, decoding=decoding)
    return result.tokens[0], result.wall_ms


def compare_with_hf(verifier, draft, prompts: list, decoding: Decoding | None = None, *, repeats: int = 1,
                    warmup: bool = True, methods=METHODS) -> list[dict]:
    """Run every method on every prompt (each a 1D or [1, S] tensor of ids), interleaved; ``decoding``
    (None: γ 4, 64 tokens) is what every method is asked, ``repeats`` how often, after one short untimed
    run of each method (``warmup``).

    The method order rotates per prompt so no method always runs first. Returns one record per
    (repeat, prompt, method): tokens (generated ids), new_tokens, wall_ms, tok_s. Speedups are
    ratios of summed tokens over summed time, computed by the caller from these records.
    """
    decoding = decoding if decoding is not None else Decoding(gamma=4)
    device = next(verifier.parameters()).device
    prompts = [p.view(1, -1).to(device) for p in prompts]
    methods = [m for m in methods if draft is not None or m in ("hf_greedy", "specnb_verifier")]
    if warmup:
        for method in methods:
            warm = replace(decoding, max_new_tokens=min(decoding.max_new_tokens, 4))
            run_method(method, verifier, draft, prompts[0], warm)
    records = []
    for repeat in range(repeats):
        for index, input_ids in enumerate(prompts):
            shift = (repeat * len(prompts) + index) % len(methods)
            for method in methods[shift:] + methods[:shift]:
                tokens, wall_ms = run_method(method, verifier, draft, input_ids, decoding)
                records.append({"repeat": repeat, "prompt": index, "method": method, "gamma": decoding.gamma,
                                "tokens": tokens, "new_tokens": len(tokens), "wall_ms": wall_ms,
                                "tok_s": len(tokens) / (wall_ms / 1e3)})
    return records


def tok_s_by_method(records: list[dict]) -> dict[str, float]:
    """tok/s per method: total generated tokens over total wall time."""
    totals: dict[str, list[float]] = {}
    for r in records:
        tokens_ms = totals.setdefault(r["method"], [0.0, 0.0])
        tokens_ms[0] += r["new_tokens"]
        tokens_ms[1] += r["wall_ms"]
    return {method: tokens / (ms / 1e3) for method, (tokens, ms) in totals.items()}
