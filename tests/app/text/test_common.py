"""common: a prediction's one-line recommendation, for each way a prediction can fall."""

from types import SimpleNamespace

from specnb.app.text.common import prediction_verdict


def prediction(recommended, speedup, lo, hi, best=3):
    return SimpleNamespace(recommended_gamma=recommended, best_gamma=best, predicted_speedup=speedup,
                           speedup_lo=lo, speedup_hi=hi)


def test_prediction_verdict_says_speculate_or_why_not():
    assert prediction_verdict(prediction(3, 1.4, 1.2, 1.6)) == "speculate with γ = 3 (1.40x, band 1.20–1.60)"
    assert prediction_verdict(prediction(None, 0.9, 0.8, 1.0)).startswith("don't speculate: no γ beats verifier-only")
    assert "band 0.95–1.10x includes 1.0" in prediction_verdict(prediction(None, 1.02, 0.95, 1.10))
