"""registry: draft names, the verifier a draft was made for, γ by default."""



from specnb.models import registry


def test_default_gamma_is_the_drafts_own_else_four():
    assert registry.default_gamma("smollm2-eagle") == 2
    assert registry.default_gamma("smollm2-medusa") == registry.default_gamma(None) == registry.DEFAULT_GAMMA == 4
    assert registry.default_gamma("smollm2-eagle", tree="dynamic") == 4  # a tree's depth is not the chain's γ
