"""nb07_alternatives: the alternatives notebook's conclusion; nb06_decision: the "do X instead" line."""

from helpers import alternatives_summary

from specnb.app.text import nb06_decision, nb07_alternatives
from specnb.measure.alternatives import BASELINE_METHOD


def test_the_verdict_names_the_winner_and_by_how_much():
    summary = alternatives_summary([
        {"method": BASELINE_METHOD, "speedup": 1.0},
        {"method": "prompt-lookup γ=4 · PyTorch eager · fp32", "speculation": "prompt-lookup γ=4", "speedup": 1.2},
        {"method": "verifier-only · llama.cpp · F32", "engine": "llama.cpp", "precision": "F32", "speedup": 1.5},
        {"method": "verifier-only · llama.cpp · Q4_1", "engine": "llama.cpp", "precision": "Q4_1", "speedup": 3.0,
         "identical_prompts": 1, "prefix_share": 0.5, "median_first_divergence": 6.0}])
    report = nb07_alternatives.alternatives_conclusion(summary, ["a note"], "this CPU")
    assert "do something else:** verifier-only · llama.cpp · F32 is 1.50x against speculation's 1.20x (1.25x better)" \
        in report.markdown
    assert "Fastest of all: **verifier-only · llama.cpp · Q4_1** 3.00x" in report.markdown
    assert "1/8 identical, 50% of tokens before the first divergence (median token 6)" in report.markdown
    assert report.values["lossless_speedup"] == 1.5 and "Not measured: a note" in report.markdown
    line = nb06_decision.instead_line({"created_utc": "2026-11-30T20:00:00", "rows": summary.to_dict("records")})
    assert line.startswith("notebook 07's last table from this machine (saved 2026-11-30, read from the specnb "
                           "cache): speculation (prompt-lookup γ=4) 1.20x; "
                           "verifier-only · llama.cpp · F32 1.50x (8/8 identical)")
    assert "notebook 07" in nb06_decision.instead_line(None)
    summary.loc[1, "speedup"] = 2.0  # now speculation is the best lossless option
    assert "speculate:** it is the best lossless option measured (2.00x)" in \
        nb07_alternatives.alternatives_conclusion(summary, [], "this CPU").markdown


def test_speculation_that_does_not_beat_verifier_only_is_not_recommended():
    summary = alternatives_summary([
        {"method": BASELINE_METHOD, "speedup": 1.0},
        {"method": "prompt-lookup γ=4 · PyTorch eager · fp32", "speculation": "prompt-lookup γ=4", "speedup": 1.1,
         "speedup_lo": 0.9, "speedup_hi": 1.3},
        {"method": "exit:2 γ=2 · PyTorch eager · fp32", "speculation": "exit:2 γ=2", "speedup": 1.05,
         "speedup_lo": 1.01, "speedup_hi": 1.09}])
    text = nb07_alternatives.alternatives_conclusion(summary, [], "this CPU").markdown
    assert "Best speculation on the PyTorch fp32 verifier: **exit:2 γ=2" in text  # the one that wins
    assert "speculate:** it is the best lossless option measured (1.05x)" in text
    summary.loc[2, ["speedup", "speedup_lo", "speedup_hi"]] = [0.8, 0.7, 0.9]
    text = nb07_alternatives.alternatives_conclusion(summary, [], "this CPU").markdown
    assert "speculate:**" not in text and "keep verifier-only:**" in text and "1.10x [0.90–1.30], inconclusive" in text


def test_the_tax_split_writes_a_negative_slope_with_a_minus():
    from types import SimpleNamespace

    import pandas as pd

    fits = pd.DataFrame({"engine": ["PyTorch eager · fp32"], "t0_ms": [202.9], "ms_per_token": [-20.6], "r2": [1.0],
                         "t2_over_t1": [0.89], "step_mb": [538.0], "floor_tok_s": [11.0]})
    summary = pd.DataFrame({"speculation": [""], "engine": ["PyTorch eager"], "precision": ["fp32"], "tok_s": [4.8]})
    text = nb07_alternatives.tax_text(fits, summary, SimpleNamespace(threads=1, matvec_gbs=6.1, copy_gbs=4.6)).markdown
    assert "t = 202.9 ms − 20.6 ms·n" in text and "+ -" not in text
