"""nb02_dispatch: notebook 02's text, checked against the numbers it states."""

import pandas as pd

from specnb.app.text.nb02_dispatch import tree_width_text
from specnb.measure import forward


def test_tree_widths_worked_by_hand():
    grid = pd.DataFrame({"model": "v", "batch_size": 1, "n_tokens": [1, 2, 4, 8, 16],
                         "median_ms": [10.0, 17.0, 18.0, 19.0, 30.0]})
    widths = forward.tree_widths(grid, chain_tokens=(2, 4), tolerance=0.1).set_index("chain_tokens")
    assert widths.loc[2, "widest_tokens"] == 4 and widths.loc[2, "next_tokens"] == 8  # 18 <= 18.7 < 19
    assert widths.loc[4, "widest_tokens"] == 8 and widths.loc[4, "next_tokens"] == 16  # 19 <= 19.8 < 30
    text = tree_width_text(widths.reset_index(), "v")
    assert "a tree of up to 3 candidate nodes" in text.markdown and text.values["tree_tokens_at_chain_4"] == 8


def test_tree_widths_when_the_largest_forward_measured_fits():
    """One chain whose widest affordable forward is the largest measured (no next size: NaN in a
    column the other chain fills) still gets its sentence; a grid like notebook 02's smoke run."""
    grid = pd.DataFrame({"model": "v", "batch_size": 1, "n_tokens": [1, 2, 4, 8],
                         "median_ms": [103.2, 175.2, 193.4, 199.5]})
    widths = forward.tree_widths(grid, chain_tokens=(2, 4), tolerance=0.1)
    assert widths["widest_tokens"].tolist() == [2, 8] and widths["next_tokens"].isna().tolist() == [False, True]
    text = tree_width_text(widths, "v").markdown
    assert "4 tokens cost 193.4 ms" in text and "no larger forward was measured" in text


def test_a_draft_faster_than_its_flops_promise_is_not_said_with_but():
    from specnb.app.text.nb02_dispatch import dispatch_conclusion

    grid = pd.DataFrame({"model": "v", "batch_size": 1, "n_tokens": [1, 4], "median_ms": [20.0, 24.0]})
    fit = forward.DispatchFit(t0_ms=5.0, ms_per_gflop=50.0, r2=0.99, n_points=3)
    ratios = pd.DataFrame({"draft": ["slow", "fast"], "flops_smaller": [10.0, 10.0], "times_faster": [3.0, 12.0],
                           "flops_c": 0.1, "wall_clock_c": [0.33, 0.08]})
    text = dispatch_conclusion(grid, fit, ratios, 0.3e9, "v", "cpu").markdown
    assert "slow: 10.0x fewer FLOPs but only 3.00x faster" in text
    assert "fast: 10.0x fewer FLOPs and 12.00x faster" in text and "but 12.00x" not in text
