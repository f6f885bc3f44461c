"""One photograph's rules: the two comparisons (MI vs its threshold, p̄ vs its threshold), the diagnosis label,
and the artifact's ``Calibration`` applying them with its own thresholds."""

from __future__ import annotations

import numpy as np
import pytest

from models.artifact import Calibration
from models.outcome.decision import (
    DiagnosisLabel,
    ScreeningOutcome,
    diagnosis_label,
    is_referable,
    is_uncertain,
    screening_outcome,
)

CAL = Calibration(referral_threshold_mi=1e-3, decision_threshold=0.4, target_referral_rate=0.2, dataset="constructed")


def test_mi_at_the_threshold_is_certain_and_one_float_above_is_uncertain() -> None:
    t = CAL.referral_threshold_mi
    assert is_uncertain(t, t) is False
    assert is_uncertain(float(np.nextafter(t, 1.0)), t) is True
    assert is_uncertain(float(np.nextafter(t, 0.0)), t) is False


def test_probability_at_the_threshold_is_referable_and_one_float_below_is_not() -> None:
    t = CAL.decision_threshold
    assert is_referable(t, t) is True
    assert is_referable(float(np.nextafter(t, 0.0)), t) is False


def test_array_rule_is_the_scalar_rule_elementwise() -> None:
    rng = np.random.default_rng(0)
    t = 1e-3
    mi = np.concatenate([rng.uniform(0, 2e-3, 200), [t, np.nextafter(t, 1.0)]])  # [N]
    p = np.concatenate([rng.uniform(0, 1, 200), [0.4, np.nextafter(0.4, 0.0)]])  # [N]
    assert is_uncertain(mi, t).tolist() == [is_uncertain(float(v), t) for v in mi]
    assert is_referable(p, 0.4).tolist() == [is_referable(float(v), 0.4) for v in p]


@pytest.mark.parametrize("p", [0.0, 0.01, 0.4, 0.99, 1.0])
@pytest.mark.parametrize("mi", [0.0, 0.5])
def test_an_ungradable_photograph_is_never_labelled_either_way(p: float, mi: float) -> None:
    outcome = CAL.outcome(gradable=False, mutual_information=mi, probability=p)
    assert outcome is ScreeningOutcome.RETAKE_UNGRADABLE
    assert CAL.label(outcome, p) is DiagnosisLabel.NOT_GRADED


@pytest.mark.parametrize(
    ("mi", "p", "outcome", "label"),
    [
        (0.0, 0.9, "refer_referable_dr", "referable"),
        (0.0, 0.1, "no_referable_dr", "non_referable"),
        (0.01, 0.9, "grader_review_uncertain", "referable"),  # uncertain: the label still reads its probability
        (0.01, 0.1, "grader_review_uncertain", "non_referable"),
    ],
)
def test_gradable_photographs_get_their_outcome_and_label(mi: float, p: float, outcome: str, label: str) -> None:
    got = CAL.outcome(gradable=True, mutual_information=mi, probability=p)
    assert got.value == outcome and CAL.label(got, p).value == label
    assert got is screening_outcome(gradable=True, mutual_information=mi, probability=p,
                                    referral_threshold_mi=CAL.referral_threshold_mi,
                                    decision_threshold=CAL.decision_threshold)
    assert diagnosis_label(got, probability=p, decision_threshold=CAL.decision_threshold).value == label
    assert CAL.is_uncertain(mi) is (outcome == "grader_review_uncertain")
