"""nb03_gamma: the sentences that say why a candidate won or lost, checked against the numbers."""

import pytest
from helpers import gamma_sweep

from specnb.app.text.nb03_gamma import gamma_reason, step_trend, with_reasons
from specnb.core.errors import ParameterError
from specnb.measure import acceptance, analysis, runs


@pytest.fixture
def sweep():
    return gamma_sweep()


def test_step_trend_reads_the_step_arithmetic_of_one_draft(sweep):
    steps, token_alpha = analysis.measured_steps(sweep), acceptance.token_alpha_by_candidate(sweep)
    trend = step_trend(steps, token_alpha, "d")
    assert "γ = 2 to γ = 6" in trend and "10 → 30 ms" in trend and "2.40 → 4.40 verifier-only tokens" in trend
    assert "2.50 → 2.00" in trend
    with pytest.raises(ParameterError, match="no batch-1 steps"):
        step_trend(steps, token_alpha, "other")


def test_gamma_reason_says_what_a_step_costs_and_yields(sweep):
    summary = runs.summarise(sweep, n_boot=200)
    verdicts = analysis.gamma_verdicts(summary, analysis.measured_steps(sweep)).set_index("candidate", drop=False)
    reason = gamma_reason(next(verdicts.loc[["d γ=2"]].itertuples()))
    assert "2.40 verifier-only tokens" in reason and "(α = 0.75, per token 0.75)" in reason
    assert "α = 0.17, per token 0.50" in gamma_reason(list(verdicts.itertuples())[1])  # per-token α always there
    assert "yields only 2.00 tokens" in gamma_reason(next(verdicts.loc[["d γ=6"]].itertuples()))
    assert with_reasons(verdicts)["reason"].tolist() == [gamma_reason(r) for r in verdicts.itertuples()]


def test_the_conclusion_calls_best_only_a_candidate_that_wins():
    import pandas as pd

    from specnb.app.text.nb03_gamma import gamma_sweep_conclusion

    summary = pd.DataFrame({"candidate": ["verifier-only", "a γ=1", "a γ=4"], "draft": ["", "a", "a"],
                            "gamma": [0, 1, 4], "tok_s": [10.0, 12.0, 14.0], "speedup": [1.0, 1.2, 1.4],
                            "speedup_lo": [1.0, 1.1, 0.8], "speedup_hi": [1.0, 1.3, 2.0], "alpha": 0.5,
                            "alpha_token": 0.5, "tau": 1.5})
    verdicts = summary[summary["gamma"] > 0].assign(verdict=["wins", "inconclusive"])
    predictions = pd.DataFrame({"candidate": [], "speedup": [], "kind": []})
    report = gamma_sweep_conclusion(summary, verdicts, {"a": "why"}, predictions, "On cpu")
    assert "Best: a γ=1" in report.markdown and report.values["best_candidate"] == "a γ=1"
    assert "a γ=4" not in report.markdown.split("Best:")[1].split("\n")[0]  # the inconclusive one is not "best"
    report = gamma_sweep_conclusion(summary.assign(speedup_lo=0.9), verdicts, {"a": "why"}, predictions, "On cpu")
    assert "Best:" not in report.markdown and "No winner: no candidate wins beyond noise" in report.markdown
