"""nb04_draft_size: why a draft won or paid the speculation tax, in Leviathan's terms."""

from specnb.app.text.nb04_draft_size import explain_draft


def test_explain_draft_names_the_binding_comparison():
    row = {"c_wall": 0.3, "alpha_token": 0.2, "break_even_c": 0.1, "best_gamma": 2, "speedup": 0.7}
    assert "no γ can pay" in explain_draft(row) and "disagree" not in explain_draft(row)
    assert "measured 1.30x: measurement and formula disagree" in explain_draft({**row, "speedup": 1.3})
    row.update(alpha_token=0.5, break_even_c=0.25)
    assert "above the break-even c 0.250 at γ = 2" in explain_draft(row)
    row.update(break_even_c=0.4)
    assert "yet it lost" in explain_draft(row)
    row.update(speedup=1.2)
    assert "below the break-even c 0.400" in explain_draft(row) and "lost" not in explain_draft(row)
    row.update(c_wall=float("nan"))
    assert "no tokens" in explain_draft(row)


def test_the_conclusion_calls_best_only_a_draft_that_wins():
    import pandas as pd

    from specnb.app.text.nb04_draft_size import draft_size_conclusion

    table = pd.DataFrame({"draft": ["a", "b"], "best_gamma": [4, 1], "speedup": [1.4, 1.2], "speedup_lo": [0.8, 1.1],
                          "speedup_hi": [2.0, 1.3], "verdict": ["inconclusive", "wins"], "alpha": 0.5,
                          "alpha_token": 0.5, "c_wall": 0.1, "c_flops": 0.1, "break_even_c": 0.3,
                          "alpha_prompt_min": 0.4, "alpha_prompt_max": 0.6})
    spread = pd.DataFrame({"alpha_p05": 0.4, "alpha_p95": 0.6, "speedup_p05": 0.9, "speedup_p95": 1.5,
                           "share_faster": 0.8}, index=pd.Index(["a", "b"], name="draft"))
    report = draft_size_conclusion(table, spread, 2, "On cpu")
    assert report.markdown.startswith("- Best: **b** at γ = 1: 1.20x [1.10–1.30]") and report.values["winner"] == "b"
    report = draft_size_conclusion(table.assign(speedup_lo=0.9, verdict="inconclusive"), spread, 2, "On cpu")
    assert "Best" not in report.markdown and report.values["winner"] is None
    assert report.markdown.startswith("- No draft wins beyond noise; the closest: **a**")


def test_a_high_point_whose_ci_holds_one_does_not_contradict_the_formula():
    row = {"c_wall": 0.3, "alpha_token": 0.2, "break_even_c": 0.1, "best_gamma": 2, "speedup": 1.3,
           "speedup_lo": 0.9, "speedup_hi": 1.7}
    assert "disagree" not in explain_draft(row)
    assert "disagree" in explain_draft({**row, "speedup_lo": 1.1})


def test_with_no_winner_the_conclusion_does_not_list_the_winners_again():
    import pandas as pd

    from specnb.app.text.nb04_draft_size import draft_size_conclusion

    table = pd.DataFrame({"draft": ["a"], "best_gamma": [1], "speedup": [1.1], "speedup_lo": [0.9],
                          "speedup_hi": [1.3], "verdict": ["inconclusive"], "alpha": 0.5, "alpha_token": 0.5,
                          "c_wall": 0.1, "c_flops": 0.1, "break_even_c": 0.3, "alpha_prompt_min": 0.4,
                          "alpha_prompt_max": 0.6})
    spread = pd.DataFrame({"alpha_p05": 0.4, "alpha_p95": 0.6, "speedup_p05": 0.9, "speedup_p95": 1.5,
                           "share_faster": 0.8}, index=pd.Index(["a"], name="draft"))
    assert "Drafts faster beyond noise" not in draft_size_conclusion(table, spread, 2, "On cpu").markdown
