"""state: per-row outputs stop at EOS or the budget and never grow past either."""

import torch

from specnb.decode.state import Proposal, Rows


def test_a_row_stops_after_eos_and_at_its_budget():
    rows = Rows(batch=3, max_new_tokens=4, eos_token_id=[2, 7])
    rows.emit_all([[5, 2, 9], [5, 6, 7, 8], [1, 1, 1, 1, 1, 1]])
    assert rows.out == [[5, 2], [5, 6, 7], [1, 1, 1, 1]]  # EOS kept, nothing after it; the budget caps
    assert rows.done == [True, True, True] and rows.active() == [] and rows.max_remaining() == 0


def test_finished_rows_get_nothing_and_remaining_counts_live_rows():
    rows = Rows(batch=2, max_new_tokens=5, eos_token_id=None)  # no EOS: only the budget stops
    rows.emit(0, [3, 3, 3, 3, 3])
    rows.emit_all([[4], [4, 4]])
    assert rows.out == [[3, 3, 3, 3, 3], [4, 4]] and rows.active() == [1] and rows.max_remaining() == 3
    assert Rows(batch=1, max_new_tokens=3, eos_token_id=2).eos == {2}


def test_an_empty_proposal_drafts_nothing():
    empty = Proposal.empty(3, torch.device("cpu"))
    assert empty.tokens.shape == (3, 0) and empty.n_drafted.tolist() == [0, 0, 0] and empty.tree.size == 0
