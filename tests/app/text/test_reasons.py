"""reasons: the sentences that say why a candidate won or lost, checked against the numbers."""

import pytest
from helpers import gamma_sweep

from specnb.app.text.reasons import explain_draft, gamma_reason, step_trend, with_reasons
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
