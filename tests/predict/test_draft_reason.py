"""draft_reason: which of Leviathan's comparisons decides a draft's fate, and when the measurement
disagrees with the formula."""

from specnb.predict.draft_reason import DraftOutcome, DraftReason, draft_reason


def test_the_binding_comparison_decides_the_outcome():
    row = {"c_wall": 0.3, "alpha_token": 0.2, "break_even_c": 0.1, "best_gamma": 2, "speedup": 0.7}
    assert draft_reason(row) == DraftReason(outcome=DraftOutcome.NO_GAMMA_PAYS, disagrees=False)
    assert draft_reason({**row, "speedup": 1.3}) == DraftReason(outcome=DraftOutcome.NO_GAMMA_PAYS, disagrees=True)
    row.update(alpha_token=0.5, break_even_c=0.25)
    assert draft_reason(row).outcome is DraftOutcome.ABOVE_BREAK_EVEN and not draft_reason(row).disagrees
    assert draft_reason({**row, "speedup": 1.1}).disagrees
    row.update(break_even_c=0.4)
    assert draft_reason(row) == DraftReason(outcome=DraftOutcome.LOST_TO_OVERHEAD)
    row.update(speedup=1.2)
    assert draft_reason(row) == DraftReason(outcome=DraftOutcome.BELOW_BREAK_EVEN)
    assert draft_reason({**row, "speedup": 1.0}).outcome is DraftOutcome.BELOW_BREAK_EVEN  # 1x is not a loss


def test_a_draft_that_drafted_nothing_has_no_outcome():
    row = {"c_wall": float("nan"), "alpha_token": 0.5, "break_even_c": 0.4, "best_gamma": 2, "speedup": 1.2}
    assert draft_reason(row).outcome is DraftOutcome.UNKNOWN
    assert draft_reason({**row, "c_wall": 0.1, "alpha_token": float("nan")}).outcome is DraftOutcome.UNKNOWN
