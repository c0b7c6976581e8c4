"""Relevance and agreement metrics on cases small enough to check by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from r3edge.core.metrics import agreement_metrics, ndcg_at_k, paired_bootstrap, relevance_metrics, seed_mean

ONE_HOT = np.eye(3)


def test_accuracy_f1_and_auc_by_hand():
    gold = [0, 1, 2, 2]
    # The last pair is predicted 1 instead of 2.
    probs = np.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8], [0.1, 0.6, 0.3]])
    m = relevance_metrics(gold, probs, ["q"] * 4)
    assert m["n"] == 4
    assert m["accuracy"] == pytest.approx(0.75)
    # class 0: P=R=1 -> 1; class 1: P=1/2, R=1 -> 2/3; class 2: P=1, R=1/2 -> 2/3
    assert m["f1_per_class"] == pytest.approx({"0": 1.0, "1": 2 / 3, "2": 2 / 3})
    assert m["f1_macro"] == pytest.approx((1 + 2 / 3 + 2 / 3) / 3)
    # 0 vs {1,2} by P(1)+P(2): the one negative (0.2) is below every positive (0.9, 0.9, 0.9).
    assert m["auc_0_12"] == pytest.approx(1.0)
    # {0,1} vs 2 by P(2): positives 0.8, 0.3; negatives 0.1, 0.1 -> perfectly separated.
    assert m["auc_01_2"] == pytest.approx(1.0)
    # Expected scores 0.3, 1.0, 1.7, 1.2 rank the gains 2,2,1,0 ideally.
    assert m["ndcg@10"] == pytest.approx(1.0)


def test_auc_with_a_partial_overlap():
    gold = [0, 0, 1, 1]
    probs = np.array([[0.9, 0.1, 0], [0.3, 0.7, 0], [0.5, 0.5, 0], [0.2, 0.8, 0]])
    # Relevance scores: negatives 0.1, 0.7; positives 0.5, 0.8 -> 3 of 4 pairs ordered -> 0.75.
    m = relevance_metrics(gold, probs, ["a", "a", "b", "b"])
    assert m["auc_0_12"] == pytest.approx(0.75)
    assert m["auc_01_2"] is None  # no gold 2 at all


def test_absent_classes_give_none_not_a_crash():
    m = relevance_metrics([0, 0, 0], ONE_HOT[[0, 1, 2]], ["q1", "q1", "q2"])
    assert m["auc_0_12"] is None and m["auc_01_2"] is None
    assert m["accuracy"] == pytest.approx(1 / 3)
    assert m["gold_counts"] == {"0": 3, "1": 0, "2": 0}
    # Both queries are undefined for nDCG: q2 has one candidate, q1 has no relevant one.
    assert m["ndcg@10"] is None
    assert m["ndcg_skipped_single_candidate"] == 1
    assert m["ndcg_skipped_no_relevant"] == 1


def test_ndcg_reversed_ranking_by_hand():
    gains = np.array([2.0, 0.0, 1.0, 0.0, 5.0])
    scores = np.array([0.0, 1.0, 0.0, 1.0, 3.0])
    qids = ["a", "a", "b", "b", "c"]
    m = ndcg_at_k(gains, scores, qids)
    # a: DCG = 0/log2(2) + 2/log2(3); IDCG = 2/log2(2) = 2 -> 1/log2(3). b likewise with gain 1.
    assert m["ndcg@10"] == pytest.approx(1 / math.log2(3))
    assert m["ndcg_queries"] == 2
    assert m["ndcg_skipped_single_candidate"] == 1


def test_ndcg_per_query_values_make_the_mean():
    gains = np.array([2.0, 0.0, 1.0, 0.0, 0.0, 0.0, 5.0])
    scores = np.array([0.0, 1.0, 1.0, 0.0, 1.0, 2.0, 3.0])
    m = ndcg_at_k(gains, scores, ["a", "a", "b", "b", "z", "z", "c"], per_query=True)
    # a reversed (1/log2(3)), b in order (1); z has no relevant candidate and c one candidate: both left out
    assert m["ndcg@10_per_query"] == pytest.approx({"a": 1 / math.log2(3), "b": 1.0})
    assert m["ndcg@10"] == pytest.approx(np.mean(list(m["ndcg@10_per_query"].values())))
    assert "ndcg@10_per_query" not in ndcg_at_k(gains, scores, ["a"] * 7)


def test_paired_bootstrap_by_hand():
    base = {f"q{i}": 0.5 for i in range(10)}
    # one question 0.3 worse, nine the same: mean -0.03; a resample misses it with p 0.9^10 = 0.35
    system = {**base, "q0": 0.2}
    p = paired_bootstrap(system, base, boot=20000, seed=1)
    assert p["mean_diff"] == pytest.approx(-0.03)
    assert (p["better"], p["same"], p["worse"]) == (0, 9, 1)
    assert p["ci95"][1] == pytest.approx(0.0)
    assert p["ci95"][0] < -0.03
    assert p["p_below_minus_0.01"] == pytest.approx(1 - 0.9 ** 10, abs=0.02)
    # only the questions both systems define are paired
    assert paired_bootstrap({**system, "extra": 1.0}, base)["queries"] == 10
    with pytest.raises(ValueError, match="paired_bootstrap needs >= 2 questions"):
        paired_bootstrap({"q0": 1.0}, base)


def test_seed_mean_averages_each_question_over_the_seeds_that_all_define_it():
    seeds = [{"q0": 0.2, "q1": 0.6, "only0": 1.0}, {"q0": 0.4, "q1": 0.9}, {"q0": 0.6, "q1": 0.3, "only2": 0.0}]
    assert seed_mean(seeds) == pytest.approx({"q0": 0.4, "q1": 0.6})
    assert seed_mean(seeds[:1]) == seeds[0]
    with pytest.raises(ValueError, match="at least one seed"):
        seed_mean([])


def test_ndcg_respects_k():
    gains = np.array([0.0, 0.0, 1.0])
    scores = np.array([3.0, 2.0, 1.0])
    assert ndcg_at_k(gains, scores, ["q"] * 3, k=2)["ndcg@2"] == pytest.approx(0.0)
    assert ndcg_at_k(gains, scores, ["q"] * 3, k=3)["ndcg@3"] == pytest.approx(0.5)


def test_gold_outside_the_label_space_is_refused():
    with pytest.raises(ValueError, match="class indices"):
        relevance_metrics([0, 3], ONE_HOT[[0, 1]], ["q", "q"])


def test_agreement_identical_and_by_hand():
    t = np.array([[0.7, 0.2, 0.1], [0.1, 0.2, 0.7], [0.2, 0.6, 0.2]])
    same = agreement_metrics(t, t)
    assert same["accuracy_vs_teacher"] == 1.0
    assert same["kl_teacher_student"] == pytest.approx(0.0, abs=1e-12)
    assert same["spearman_expected_score"] == pytest.approx(1.0)

    teacher = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    student = np.array([[0.5, 0.25, 0.25], [0.5, 0.25, 0.25]])
    m = agreement_metrics(teacher, student)
    assert m["accuracy_vs_teacher"] == pytest.approx(0.5)
    assert m["kl_teacher_student"] == pytest.approx((math.log(2) + math.log(4)) / 2)
    assert m["spearman_expected_score"] is None  # the student's scores are constant


def test_agreement_zero_student_probability_is_finite():
    m = agreement_metrics([[0.0, 1.0, 0.0]], [[1.0, 0.0, 0.0]])
    assert math.isfinite(m["kl_teacher_student"]) and m["kl_teacher_student"] > 20
