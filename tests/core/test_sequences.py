from specnb.core.sequences import first_mismatch


def test_first_mismatch_is_the_common_prefix_length():
    assert first_mismatch([1, 2, 3], [1, 2, 9]) == 2
    assert first_mismatch([1, 2, 3], [1, 2, 3]) == 3
    assert first_mismatch([1, 2], [1, 2, 3, 4]) == 2  # one ends first: all of it is common
    assert first_mismatch([], [5]) == 0 and first_mismatch([7], [5]) == 0
