"""CUDA check: the CUDA-event timer path and lossless speculative decoding, on a real GPU.

    python benchmarks/cuda_check.py [--dtype float16] [--prompts 4] [--max-new-tokens 48]

Prepared for the first machine with a GPU: the CPU suite covers this path only with the device
calls mocked. It checks, on the embedded pair:
  1. greedy speculative output == verifier-only output, token for token, for γ = 1..4 at batch 1
     and at batch = --prompts (ragged acceptance), with every distilled draft and prompt lookup;
  2. with CUDA-event timers on, the stage times sum to the end-to-end time within 2%;
and runs the GPU-only tests of the suite. The result goes into benchmarks/README.md between the
``cuda`` markers. Exit code 1 if a check fails, 2 if there is no CUDA device.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import torch
from engine import pick_prompts, write_readme_section  # benchmarks/engine.py

from specnb.app.runner import describe_environment
from specnb.decode.generate import generate
from specnb.decode.inputs import encode_prompts
from specnb.decode.pairs import load_pair
from specnb.decode.settings import Decoding
from specnb.decode.timing import StageTimer
from specnb.models.registry import embedded_draft_names


def lossless(pair, prompts: list[str], max_new_tokens: int) -> list[str]:
    """Failures as lines; empty when every (γ, batch) run matched verifier-only."""
    failures = []
    eos = pair.tokenizer.eos_token_id
    batches = [[p] for p in prompts] + [prompts]
    for batch in batches:
        ids, mask = encode_prompts(pair.tokenizer, batch, device=pair.device)
        alone = generate(pair.verifier, ids, mask, decoding=Decoding(max_new_tokens=max_new_tokens, eos_token_id=eos))
        for gamma in (1, 2, 3, 4):
            spec = generate(pair.verifier, ids, mask, draft=pair.draft,
                            decoding=Decoding(gamma=gamma, max_new_tokens=max_new_tokens, eos_token_id=eos,
                                              vocab_size=pair.vocab_size))
            if spec.tokens != alone.tokens:
                failures.append(f"{pair.draft_name} γ={gamma} batch {len(batch)}: output differs")
    return failures


def stage_sum_error(pair, prompt: str, max_new_tokens: int) -> float:
    ids, mask = encode_prompts(pair.tokenizer, [prompt], device=pair.device)
    timer = StageTimer(pair.device)
    result = generate(pair.verifier, ids, mask, draft=pair.draft,
                      decoding=Decoding(gamma=3, max_new_tokens=max_new_tokens,
                                        eos_token_id=pair.tokenizer.eos_token_id, vocab_size=pair.vocab_size,
                                        timer=timer))
    return abs(sum(result.stages_ms.values()) - result.wall_ms) / result.wall_ms


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", default="float16", choices=["float32", "float16", "bfloat16"])
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=48)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing checked", file=sys.stderr)
        return 2
    prompts = pick_prompts(args.prompts)
    failures, errors = [], {}
    for draft in [*embedded_draft_names(), "prompt-lookup"]:
        pair = load_pair("smollm2-135m", draft, device="cuda", dtype=args.dtype)
        failures += lossless(pair, prompts, args.max_new_tokens)
        errors[draft] = stage_sum_error(pair, prompts[0], args.max_new_tokens)
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "tests/decode/test_timing.py", "-k", "real_cuda"],
                           capture_output=True, text=True)
    env = describe_environment()
    ok = not failures and max(errors.values()) <= 0.02 and tests.returncode == 0
    lines = [f"GPU {env['gpu']}, torch {env['packages']['torch']}, {args.dtype}; {env['time_utc'][:10]}; "
             f"commit {str(env['git_commit'])[:7]}.",
             f"- greedy speculative == verifier-only for γ 1–4, batch 1 and {args.prompts}, drafts "
             f"{', '.join(errors)}: {'yes' if not failures else 'NO: ' + '; '.join(failures)}",
             "- stage sum vs wall (CUDA events): " + ", ".join(f"{d} {100 * e:.3f}%" for d, e in errors.items()),
             f"- GPU-only tests: {tests.stdout.strip().splitlines()[-1] if tests.stdout.strip() else tests.returncode}"]
    print("\n".join(lines))
    write_readme_section("\n".join(lines), name="cuda")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
