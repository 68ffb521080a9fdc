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


def test_rerank_ex_picks_the_highest_score_and_never_an_unscored_candidate():
    questions = [
        {"candidates": [{"sql": "a"}, {"sql": "b"}], "correct": [False, True]},
        {"candidates": [{"sql": "x"}, {"sql": "y"}], "correct": [True, False]},
    ]
    rows = [{"qi": 0, "r": {"sql": "a"}}, {"qi": 0, "r": {"sql": "b"}}, {"qi": 1, "r": {"sql": "y"}}]
    assert lm_verify.rerank_ex(questions, rows, [0.1, 0.9, -5.0]) == 50.0  # q1: y scored, x not
    assert lm_verify.rerank_ex(questions, rows, [0.9, 0.1, -5.0]) == 0.0
