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
