"""engine_choice: which rows a verdict names, from the alternatives notebook's summary."""

from helpers import alternatives_summary

from specnb.measure.alternatives import BASELINE_METHOD
from specnb.predict.engine_choice import best, choices

EAGER_LOOKUP = "prompt-lookup γ=4 · PyTorch eager · fp32"
F32 = "verifier-only · llama.cpp · F32"
Q4 = "verifier-only · llama.cpp · Q4_1"


def summary():
    return alternatives_summary([
        {"method": BASELINE_METHOD, "speedup": 1.0},
        {"method": EAGER_LOOKUP, "speculation": "prompt-lookup γ=4", "speedup": 1.2},
        {"method": "lookup · llama.cpp · F32", "speculation": "lookup", "engine": "llama.cpp", "precision": "F32",
         "speedup": 1.4},
        {"method": F32, "engine": "llama.cpp", "precision": "F32", "speedup": 1.5},
        {"method": Q4, "engine": "llama.cpp", "precision": "Q4_1", "speedup": 3.0, "identical_prompts": 1}])


def test_choices_name_eager_speculation_the_best_lossless_and_the_fastest():
    pick = choices(summary())
    assert pick["speculation"].method == EAGER_LOOKUP  # speculation on another engine is not the eager one
    assert pick["lossless"].method == F32  # Q4_1 is faster but changed the output
    assert pick["fastest"].method == Q4


def test_the_baseline_is_never_the_lossless_choice_and_missing_rows_are_none():
    only_baseline = alternatives_summary([{"method": BASELINE_METHOD, "speedup": 1.0}])
    pick = choices(only_baseline)
    assert pick["speculation"] is None and pick["lossless"] is None
    assert pick["fastest"].method == BASELINE_METHOD
    assert best(only_baseline.iloc[:0]) is None
