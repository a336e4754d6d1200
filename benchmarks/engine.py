"""Engine benchmarks: specnb's loops against Hugging Face, loop efficiency, timer overhead.

Every figure is a ratio of two methods measured side by side in one run, on the same prompts,
interleaved (the order rotates per prompt), because absolute times on a shared machine are noise.

    python benchmarks/engine.py [--verifier smollm2-135m] [--draft NAME] [--gamma 3] [--prompts 8]

Targets (from the engine issue):
  1. specnb verifier-only tok/s >= 1.0x HF ``generate`` greedy;
  2. specnb speculative tok/s >= 1.1x HF assisted generation at the same fixed gamma (greedy);
  3. loop efficiency: measured speculative tok/s >= 0.95x the tok/s predicted from the measured
     per-forward costs of draft and verifier (the loop adds <= 5% beyond forwards);
  4. per-stage timers enabled cost <= 2% of end-to-end time.

Results are written to benchmarks/results/engine.json and into benchmarks/README.md between the
``engine`` markers, with the machine and date.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from specnb.app.runner import describe_environment, write_marked_section
from specnb.decode.generate import generate
from specnb.decode.inputs import encode_prompts
from specnb.decode.pairs import load_drafts
from specnb.decode.settings import Decoding
from specnb.measure.forward import ForwardShape, measure_forward_ms
from specnb.measure.hf_baseline import compare_with_hf, tok_s_by_method
from specnb.measure.prompts import load_prompts

HERE = Path(__file__).parent


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--verifier", default="smollm2-135m")
    p.add_argument("--draft", default="smollm2-draft-s", help="the pair the README's figures use")
    p.add_argument("--gamma", type=int, default=3)
    p.add_argument("--prompts", type=int, default=8, help="prompts (one per category, cycling)")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--device", default="auto")
    p.add_argument("--no-write", action="store_true", help="print only; do not touch README/results")
    return p.parse_args(argv)


def pick_prompts(n: int) -> list[str]:
    """One prompt per category in turn, so every kind of text is represented."""
    frame = load_prompts()
    frame = frame.assign(rank=frame.groupby("category").cumcount()).sort_values(["rank", "category"])
    return frame["prompt"].head(n).tolist()


def encode_each(tokenizer, prompts, device) -> list[torch.Tensor]:
    """Unpadded [1, S] ids per prompt (HF assisted generation takes batch 1 only)."""
    return [encode_prompts(tokenizer, [p], device=device)[0] for p in prompts]


def compare_hf(pair, draft, ids, args) -> dict:
    """Targets 1 and 2: all four methods interleaved; outputs must agree token for token."""
    eos = pair.tokenizer.eos_token_id
    decoding = Decoding(gamma=args.gamma, max_new_tokens=args.max_new_tokens, eos_token_id=eos)
    records = compare_with_hf(pair.verifier, draft, ids, decoding, repeats=args.repeats)
    tok_s = tok_s_by_method(records)
    by_prompt = {}
    for r in records:
        by_prompt.setdefault((r["repeat"], r["prompt"]), {})[r["method"]] = r["tokens"]
    identical = all(len({tuple(t) for t in methods.values()}) == 1 for methods in by_prompt.values())
    return {"tok_s": tok_s, "outputs_identical": identical,
            "verifier_vs_hf_greedy": tok_s["specnb_verifier"] / tok_s["hf_greedy"],
            "speculative_vs_hf_assisted": tok_s["specnb_speculative"] / tok_s["hf_assisted"]}


def timed_runs(pair, draft, ids, args, timer: bool) -> list:
    return [generate(pair.verifier, x, draft=draft,
                     decoding=Decoding(gamma=args.gamma, max_new_tokens=args.max_new_tokens,
                                       eos_token_id=pair.tokenizer.eos_token_id, timer=timer)) for x in ids]


def loop_efficiency(pair, draft, ids, args) -> dict:
    """Target 3: predicted time = the run's forwards priced at their separately measured cost.

    Prefill is priced by the run's own prefill stage (it is pure forwards); each verification
    step costs one verifier forward of gamma+1 tokens, each draft forward one 1-token forward
    (the catch-up forward feeds 1-2 tokens; we price it as 2 when the step was fully accepted).
    Context length: the mean of prompt length and prompt + generated length.
    """
    results = timed_runs(pair, draft, ids, args, timer=True)
    context = int(statistics.mean(r.prompt_lengths[0] + r.new_tokens / 2 for r in results))
    g = args.gamma
    t_v = measure_forward_ms(pair.verifier, ForwardShape(n_tokens=g + 1, context_len=context)).median_ms
    t_d1 = measure_forward_ms(draft, ForwardShape(n_tokens=1, context_len=context)).median_ms
    t_d2 = measure_forward_ms(draft, ForwardShape(n_tokens=2, context_len=context)).median_ms
    predicted_ms = measured_ms = tokens = 0.0
    for r in results:
        steps = len(r.accepted_per_step[0])
        full = sum(a == d for a, d in zip(r.accepted_per_step[0], r.drafted_per_step[0]))
        decode_draft_forwards = r.draft_forwards - 1  # minus the draft's prefill
        predicted_ms += r.stages_ms["prefill"] + steps * t_v + (decode_draft_forwards - full) * t_d1 + full * t_d2
        measured_ms += r.wall_ms
        tokens += r.new_tokens
    return {"context_len": context, "t_verify_ms": t_v, "t_draft_1_ms": t_d1, "t_draft_2_ms": t_d2,
            "predicted_tok_s": tokens / predicted_ms * 1e3, "measured_tok_s": tokens / measured_ms * 1e3,
            "efficiency": predicted_ms / measured_ms,
            "alpha": statistics.mean(r.acceptance_rate for r in results)}


def timer_overhead(pair, draft, ids, args) -> dict:
    """Target 4: the same generations with timers on and off, alternating, several rounds."""
    on_ms, off_ms, sums_ok = [], [], []
    for round_ in range(2 * args.repeats):
        for timer in ((True, False) if round_ % 2 == 0 else (False, True)):
            runs = timed_runs(pair, draft, ids, args, timer=timer)
            (on_ms if timer else off_ms).append(sum(r.wall_ms for r in runs))
            if timer:
                sums_ok += [abs(sum(r.stages_ms.values()) - r.wall_ms) / r.wall_ms for r in runs]
    return {"timers_on_ms": sum(on_ms), "timers_off_ms": sum(off_ms),
            "overhead": sum(on_ms) / sum(off_ms) - 1, "max_stage_sum_error": max(sums_ok)}


def render_markdown(result: dict) -> str:
    env, cfg, hf = result["environment"], result["config"], result["hf"]
    eff, tim = result["efficiency"], result["timers"]
    ok = lambda cond: "met" if cond else "**missed**"  # noqa: E731
    return "\n".join(
        [
            f"Machine: {env['cpu']} ({env['cpu_count']} cores), {env['gpu'] or 'no GPU'}, torch "
            f"{env['packages']['torch']}, "
            f"transformers {env['packages']['transformers']}; {env['time_utc'][:10]}; "
            f"commit {str(env['git_commit'])[:7]}.",
            f"Pair: verifier `{cfg['verifier']}`, draft `{cfg['draft']}`, γ = {cfg['gamma']}, greedy, {cfg['prompts']} "
            "prompts "
            f"× {cfg['repeats']} repeats, {cfg['max_new_tokens']} new tokens, batch 1.",
            "",
            "| measure | value | target | status |",
            "|---|---|---|---|",
            f"| specnb verifier-only ÷ HF `generate` greedy (tok/s) | {hf['verifier_vs_hf_greedy']:.2f}x | ≥ 1.0x | "
            f"{ok(hf['verifier_vs_hf_greedy'] >= 1.0)} |",
            f"| specnb speculative ÷ HF assisted generation, same γ (tok/s) | "
            f"{hf['speculative_vs_hf_assisted']:.2f}x | ≥ 1.1x | {ok(hf['speculative_vs_hf_assisted'] >= 1.1)} |",
            f"| loop efficiency (tok/s measured ÷ predicted from per-forward costs) | {eff['efficiency']:.3f} | "
            f"≥ 0.95 | {ok(eff['efficiency'] >= 0.95)} |",
            f"| timer overhead when enabled | {100 * tim['overhead']:+.2f}% | ≤ 2% | {ok(tim['overhead'] <= 0.02)} |",
            f"| max abs(stage sum − wall) ÷ wall | {100 * tim['max_stage_sum_error']:.3f}% | ≤ 2% | "
            f"{ok(tim['max_stage_sum_error'] <= 0.02)} |",
            f"| four methods' outputs token-identical | {hf['outputs_identical']} | True | "
            f"{ok(hf['outputs_identical'])} |",
            "",
            "tok/s: "
            + ", ".join(f"{k} {v:.1f}" for k, v in hf["tok_s"].items())
            + f"; α = {eff['alpha']:.2f}; per-forward ms at context {eff['context_len']}: verifier (γ+1 tokens) "
            f"{eff['t_verify_ms']:.1f}, draft 1 token {eff['t_draft_1_ms']:.1f}, 2 tokens {eff['t_draft_2_ms']:.1f}.",
        ]
    )


def write_readme_section(markdown: str, name: str = "engine") -> None:
    write_marked_section(HERE / "README.md", name, markdown)


def add_tag_argument(parser: argparse.ArgumentParser) -> None:
    """``--tag``: a CPU kind's own README section and results files, beside another CPU's (``tagged``)."""
    parser.add_argument("--tag", default="", help="a CPU kind's own README section and results (e.g. xeon)")


def tagged(name: str, tag: str, sep: str = "_") -> str:
    """``name`` with ``--tag``'s value appended (files take "_", README sections "-"); ``name`` without one."""
    return f"{name}{sep}{tag}" if tag else name


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.manual_seed(0)
    draft_name = args.draft
    pair, drafts = load_drafts(args.verifier, [draft_name], device=args.device)
    draft = drafts[draft_name]
    ids = encode_each(pair.tokenizer, pick_prompts(args.prompts), pair.device)
    started = time.time()
    result = {
        "config": {**vars(args), "draft": draft_name},
        "hf": compare_hf(pair, draft, ids, args),
        "efficiency": loop_efficiency(pair, draft, ids, args),
        "timers": timer_overhead(pair, draft, ids, args),
        "environment": describe_environment(),
        "kernels": pair.kernels,
        "seconds": time.time() - started,
    }
    markdown = render_markdown(result)
    print(markdown)
    if not args.no_write:
        (HERE / "results").mkdir(exist_ok=True)
        (HERE / "results" / "engine.json").write_text(json.dumps(result, indent=1, default=str))
        write_readme_section(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
