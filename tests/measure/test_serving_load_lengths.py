"""The load's own numbers: a trace's arrivals span exactly n/rate seconds, and a request's token count
comes from the server's usage, never from counting streamed chunks."""

import numpy as np
import pytest

from specnb.measure.serving_load import arrival_gaps


@pytest.mark.parametrize("burstiness", [1.0, 0.25])
def test_arrivals_are_rescaled_to_the_nominal_rate(burstiness):
    # seeds 0-3 drew 1.47, 0.89, 1.11, 0.93 req/s for a nominal 1.14 before the rescaling
    for seed in range(4):
        gaps = arrival_gaps(16, 1.14, burstiness, seed)
        assert 16 / gaps.sum() == pytest.approx(1.14, rel=1e-9, abs=1e-9)


def test_rescaled_bursts_still_bunch_up():
    # coefficient of variation: 1 for exponential gaps, 1/sqrt(shape) = 2 for gamma(0.25); a common
    # factor leaves it as drawn
    cv = [np.std(g) / np.mean(g) for g in (arrival_gaps(2000, 2.0, 1.0, 3), arrival_gaps(2000, 2.0, 0.25, 3))]
    assert cv[0] == pytest.approx(1.0, rel=0.1) and cv[1] > 1.6
