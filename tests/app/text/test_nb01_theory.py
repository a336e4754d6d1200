"""nb01_theory: the FLOPs table rows notebook 01 reads as model drafts."""

import pandas as pd

from specnb.app.text.nb01_theory import model_draft_rows


def test_model_draft_rows_keep_drafts_with_flops_only():
    flops = pd.DataFrame({"model": ["v", "d", "prompt-lookup"], "role": ["verifier", "draft", "draft"],
                          "flops_per_token": [1e9, 1e8, 0.0]})
    assert model_draft_rows(flops)["model"].tolist() == ["d"]
