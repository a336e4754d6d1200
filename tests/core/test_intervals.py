import math

from specnb.core.intervals import PAYS, VERDICTS, rank, verdict


def test_verdict_reads_the_ci_not_the_point():
    assert verdict(1.3, 1.1, 1.5) == "wins"
    assert verdict(0.8, 0.7, 0.9) == "loses"
    assert verdict(1.4, 0.9, 1.9) == "inconclusive"  # a high point whose CI holds 1x
    assert verdict(0.9, math.nan, math.nan) == "loses"  # no CI: the point decides
    assert verdict(1.0) == "inconclusive"


def test_verdict_says_pays_in_the_same_place():
    assert [verdict(v, lo, hi, PAYS) for v, lo, hi in [(1.2, 1.1, 1.3), (1.1, 0.9, 1.3), (0.8, 0.7, 0.9)]] == \
        ["pays", "no measurable difference", "loses"]


def test_rank_puts_wins_first():
    assert sorted(["loses", "wins", "inconclusive"], key=rank) == list(VERDICTS)
