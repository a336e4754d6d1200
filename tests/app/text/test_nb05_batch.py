"""nb05_batch: the conclusion's verdict per batch size reads the CI, never the point estimate alone."""

import pandas as pd

from specnb.app.text.nb05_batch import batch_conclusion


def conclusion(best: pd.DataFrame) -> str:
    grid = pd.DataFrame({"n_tokens": [1, 3, 1, 3], "batch_size": [1, 1, 2, 2], "median_ms": [10.0, 11.0, 12.0, 30.0]})
    fixed = best.assign(gamma=2)
    ragged = pd.DataFrame({"gamma": 2, "batch_size": [1, 2], "masked_slot_share": 0.1, "idle_row_share": 0.2})
    return batch_conclusion(fixed, best, ragged, grid, 2, "cpu").markdown


def test_the_best_gamma_beats_verifier_only_only_where_its_ci_says_so():
    best = pd.DataFrame({"batch_size": [1, 2], "gamma": 2, "speedup": [1.3, 1.05], "speedup_lo": [1.2, 0.9],
                         "speedup_hi": [1.4, 1.2]})
    text = conclusion(best)
    assert "beats verifier-only at every batch size" not in text
    assert "The best γ beats verifier-only at batch 1; no γ beats it beyond noise at batch 2." in text
    assert "batch 2: γ = 2, 1.05x [0.90–1.20], inconclusive" in text
    assert "every batch size up to 2" in conclusion(best.assign(speedup_lo=1.01))
    assert "even the best γ is slower at batch 2" in conclusion(best.assign(speedup=[1.3, 0.8], speedup_hi=[1.4, 0.95]))
