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
