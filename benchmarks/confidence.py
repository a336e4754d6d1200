"""Confidence stopping and EAGLE-2 dynamic trees on the embedded EAGLE head, against fixed chains.

    python benchmarks/confidence.py [--prompts 4] [--max-new-tokens 32] [--repeats 2] [--profile PATH]

For the embedded verifier and ``smollm2-eagle``, batch 1, greedy, on validation prompts round-robin
over the categories, all interleaved prompt by prompt: verifier-only, chains at γ 4 and 6 with
confidence thresholds 0 (off), 0.3 and 0.5 (``specnb.decode.confidence``), the static tree 3x2 and
two dynamic trees (``specnb.decode.trees.DynamicTree``). Per candidate: α, τ, drafted tokens and
draft forwards per step, tok/s and speedup with a 95% CI over prompts. With ``--profile`` (a
calibrated ``HardwareProfile`` JSON) it also prints the predictor's speedup and drafted tokens per
step for the same chains, thresholds and budget. Prints markdown; writes nothing.
"""

from __future__ import annotations

import argparse

import pandas as pd
import torch

from specnb.decode.pairs import load_drafts
from specnb.decode.trees import DynamicTree
from specnb.measure import runs
from specnb.measure.prompts import split_prompts

EAGLE = "smollm2-eagle"
GAMMAS, THRESHOLDS = (4, 6), (0.0, 0.3, 0.5)
TREES = [(3, 2), DynamicTree(4, 3, 8), DynamicTree(4, 4, 16)]


def measured(records: pd.DataFrame) -> pd.DataFrame:
    summary = runs.summarise(records).set_index("candidate")
    forwards = records.groupby("candidate")[["draft_forwards", "steps"]].sum()
    summary["draft_forwards_per_step"] = forwards["draft_forwards"] / forwards["steps"].where(forwards["steps"] > 0)
    summary["speedup [95% CI]"] = [f"{r.speedup:.2f}x [{r.speedup_lo:.2f}–{r.speedup_hi:.2f}]"
                                   for r in summary.itertuples()]
    columns = ["alpha", "tau", "drafted_per_step", "draft_forwards_per_step", "tok_s", "speedup [95% CI]"]
    return summary[columns].round(3)


def predicted(profile_path: str, max_new_tokens: int) -> pd.DataFrame:
    from specnb.predict.costs import load_profile
    from specnb.predict.predictor import Workload, predict

    profile = load_profile(profile_path)
    rows = []
    for c in THRESHOLDS:
        table = predict(profile, EAGLE, list(GAMMAS), Workload(max_new_tokens=max_new_tokens, confidence=c)).table
        rows += [{"gamma": int(r.gamma), "confidence": c, "predicted_speedup": r.predicted_speedup,
                  "predicted_tau": r.tokens_per_step, "predicted_drafted_per_step": r.drafted_per_step}
                 for r in table.itertuples()]
    return pd.DataFrame(rows).round(3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--profile", help="a calibrated profile JSON to compare the predictor with")
    args = parser.parse_args()
    torch.manual_seed(0)
    _, prompts = split_prompts("all", 3, args.prompts)
    pair, drafts = load_drafts("smollm2-135m", [EAGLE], device="cpu")
    candidates = runs.make_candidates(drafts, GAMMAS, confidences=THRESHOLDS)
    candidates += runs.make_candidates(drafts, [], baseline=False, trees=TREES)
    records = runs.run_interleaved(pair, prompts, candidates, repeats=args.repeats,
                                   max_new_tokens=args.max_new_tokens, progress=False)
    print(f"torch threads {torch.get_num_threads()}, prompts {', '.join(prompts['id'].astype(str))}\n")
    print(measured(records).to_markdown())
    if args.profile:
        print()
        print(predicted(args.profile, args.max_new_tokens).to_markdown(index=False))


if __name__ == "__main__":
    main()
