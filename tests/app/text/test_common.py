"""common: a prediction's one-line recommendation, for each way a prediction can fall."""

from types import SimpleNamespace

from specnb.app.text.common import prediction_verdict


def prediction(recommended, speedup, lo, hi, best=3):
    return SimpleNamespace(recommended_gamma=recommended, best_gamma=best, predicted_speedup=speedup,
                           speedup_lo=lo, speedup_hi=hi)


def test_prediction_verdict_says_speculate_or_why_not():
    assert prediction_verdict(prediction(3, 1.4, 1.2, 1.6)) == "speculate with γ = 3 (1.40x, band 1.20–1.60)"
    assert prediction_verdict(prediction(None, 0.9, 0.8, 0.95)).startswith("don't speculate: no γ beats verifier-only")
    assert "band 0.95–1.10x holds 1x: inconclusive" in prediction_verdict(prediction(None, 1.02, 0.95, 1.10))
    # a point below 1x whose band reaches above it is inconclusive, not "no γ beats verifier-only"
    assert prediction_verdict(prediction(None, 0.98, 0.90, 1.05)).endswith("holds 1x: inconclusive")


def test_a_column_with_one_value_on_every_row_moves_into_the_setting_line():
    import pandas as pd

    from specnb.app.text.common import table

    shown = table(pd.DataFrame({"candidate": ["a", "b"], "speedup": [1.23456, 0.9], "verifier_kernels": "default"}))
    assert list(shown.frame.columns) == ["candidate", "speedup"] and shown.frame["speedup"].iloc[0] == 1.235
    assert shown.setting_line() == "every row: verifier_kernels default"
    assert shown._repr_html_().startswith("<p><em>every row: verifier_kernels default</em></p>")
    one = table(pd.DataFrame({"candidate": ["a"], "verifier_kernels": ["default"]}))
    assert list(one.frame.columns) == ["candidate", "verifier_kernels"] and "every row" not in one._repr_html_()


def test_prompts_text_names_the_categories_once_each():
    import pandas as pd

    from specnb.app.text.common import prompts_text

    chosen = pd.DataFrame({"category": ["code", "math", "code"]})
    assert prompts_text(chosen) == "3 prompts (code, math)" and prompts_text(chosen[:1]) == "1 prompt (code)"
