"""gamma: the default γ, a tree's depth in its place, and "auto" passed on, settled in one place."""

from specnb.decode.gamma import settle_gamma


def test_gamma_is_settled_in_one_place():
    assert settle_gamma(None) == 4 and settle_gamma(None, draft_name="smollm2-eagle") == 2  # the draft's own
    assert settle_gamma(7, (3, 2, 1)) == 3  # a static tree's depth replaces γ
    assert settle_gamma(None, "dynamic", "smollm2-eagle") == 4  # a tree's depth is not the chain's γ
    assert settle_gamma("auto") == "auto" and settle_gamma(5) == 5
