"""benchmarks/prune_eval.py: the configurations swept, the AUC with ties, the paired AUC difference, outcomes."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from tests.helpers.scripts import load_script

prune_eval = load_script("benchmarks/prune_eval.py")
auc, configs, outcomes = prune_eval.auc, prune_eval.configs, prune_eval.outcomes
paired_auc, refit_decision = prune_eval.paired_auc, prune_eval.refit_decision


def test_configs_are_the_parent_then_each_method_at_each_share() -> None:
    assert configs([0.5, 0.05], ["snr", "magnitude"]) == [
        ("parent", "none", 1.0), ("snr-50", "snr", 0.5), ("snr-5", "snr", 0.05),
        ("magnitude-50", "magnitude", 0.5), ("magnitude-5", "magnitude", 0.05)]


def test_auc_counts_ties_half_as_sklearn_does() -> None:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 300)
    scores = np.round(rng.random(300) + 0.3 * labels, 1)  # many ties
    assert auc(scores, labels) == pytest.approx(roc_auc_score(labels, scores))


def test_paired_difference_is_zero_for_the_same_scores_and_signed_for_better_ones() -> None:
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, 200)
    a = rng.random(200) + 0.5 * labels
    assert paired_auc(a, a, labels, 100) == (0.0, 0.0, 0.0)
    diff, lo, hi = paired_auc(a, a + 0.5 * labels, labels, 200)
    assert diff > 0 and 0 < lo <= diff <= hi


def test_outcomes_follow_the_gate_then_mi_then_probability() -> None:
    got = outcomes(np.array([0.9, 0.9, 0.9, 0.1]), np.array([0.0, 0.5, 0.0, 0.0]), [False, True, True, True],
                   mi_threshold=0.1, decision=0.5)
    assert got == ["retake_ungradable", "grader_review_uncertain", "refer_referable_dr", "no_referable_dr"]


def test_refit_decision_answers_the_parents_count_automatically() -> None:
    p = np.array([0.4, 0.1, 0.3, 0.2])
    t = refit_decision(p, 2)
    assert int((p < t).sum()) == 2 and t == pytest.approx(0.25)
    assert int((p < refit_decision(p, 0)).sum()) == 0 and int((p < refit_decision(p, 4)).sum()) == 4
