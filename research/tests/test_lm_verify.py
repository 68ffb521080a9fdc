import lm_verify


def test_auroc_orders_and_counts_ties_as_half():
    assert lm_verify.auroc([1, 1, 0, 0], [3, 4, 1, 2]) == 1.0
    assert lm_verify.auroc([1, 0], [1, 2]) == 0.0
    assert lm_verify.auroc([1, 0], [5, 5]) == 0.5
    assert lm_verify.auroc([1, 1, 0], [2, 1, 1]) == 0.75


def test_distinct_candidates_keep_the_first_verdict_and_skip_unscored():
    q = {"candidates": [{"sql": "a", "units": [1]}, {"sql": "b", "units": []}, {"sql": "a", "units": [1]}, {"sql": "c", "units": [1]}],
         "correct": [True, False, True, False]}
    assert lm_verify.distinct_candidates(q) == [("a", True), ("c", False)]


def test_rank01_spreads_values_over_0_1():
    assert lm_verify.rank01([10, -1, 3]) == [1.0, 0.0, 0.5]
