"""Screening figures by truth, grade, category and patient, on records worked out by hand."""

from __future__ import annotations

import pytest

from training.evaluation.screening import EyeRecord, screening_summary

REFER, UNCERTAIN, RETAKE, NONE = "refer_referable_dr", "grader_review_uncertain", "retake_ungradable", "no_referable_dr"


def _eye(image: str, grade: int, outcome: str, *, p: float, mi: float = 0.01, gradable: bool = True,
         category: str = "dr_keyword", patient: str = "1", eye: str = "left") -> EyeRecord:
    return EyeRecord(image=image, probability=p, mutual_information=mi, gradable=gradable, outcome=outcome,
                     grade=grade, category=category, patient=patient, eye=eye)


def _worst(eyes: dict[str, list[str]]) -> str:
    """A stand-in exam rule for the test: refer > uncertain > retake > none, and a missing eye is a retake."""
    outcomes = [o for os in eyes.values() for o in os]
    for o in (REFER, UNCERTAIN, RETAKE):
        if o in outcomes:
            return o
    return NONE if len(eyes) == 2 else RETAKE


RECORDS = [
    _eye("1_l", 3, REFER, p=0.9, patient="1", eye="left"),
    _eye("1_r", 0, NONE, p=0.1, category="normal_fundus", patient="1", eye="right"),
    _eye("2_l", 2, NONE, p=0.2, patient="2", eye="left"),  # a missed referable eye
    _eye("2_r", 1, NONE, p=0.15, patient="2", eye="right"),
    _eye("3_l", 0, UNCERTAIN, p=0.4, mi=0.2, category="other_non_dr", patient="3", eye="left"),
    _eye("3_r", 0, REFER, p=0.6, category="other_non_dr", patient="3", eye="right"),  # a false referral
    _eye("4_l", 0, RETAKE, p=0.3, gradable=False, category="normal_fundus", patient="4", eye="left"),
    _eye("4_r", 4, UNCERTAIN, p=0.7, mi=0.3, patient="4", eye="right"),
    _eye("5_l", 0, NONE, p=0.05, category="normal_fundus", patient="5", eye="left"),
    _eye("5_r", 0, NONE, p=0.08, category="normal_fundus", patient="5", eye="right"),
]


def test_outcomes_by_truth_grade_and_category() -> None:
    s = screening_summary(RECORDS, n_bootstrap=50)
    assert (s["n_images"], s["n_gradable"], s["n_referable"], s["n_non_referable"]) == (10, 9, 3, 7)
    assert s["missed_share"] == pytest.approx(1 / 3)  # 2_l of the referable 1_l, 2_l, 4_r
    assert s["auto_negative_share"] == pytest.approx(4 / 7)  # 1_r, 2_r, 5_l, 5_r of seven non-referable eyes
    assert s["outcomes_referable"] == pytest.approx({REFER: 1 / 3, UNCERTAIN: 1 / 3, RETAKE: 0.0, NONE: 1 / 3})
    assert s["by_grade"]["0"]["n"] == 6 and s["by_grade"]["0"][REFER] == pytest.approx(1 / 6)
    assert s["by_category"]["other_non_dr"][REFER] == pytest.approx(0.5)  # 3_r
    assert s["gradable_by_category"]["normal_fundus"] == {"n": 4, "gradable": 3, "share": 0.75}
    # AUC on the 9 gradable eyes: referable p 0.9, 0.2, 0.7 against 0.1, 0.15, 0.4, 0.6, 0.05, 0.08
    pairs = [(a, b) for a in (0.9, 0.2, 0.7) for b in (0.1, 0.15, 0.4, 0.6, 0.05, 0.08)]
    assert s["auc_gradable"]["auc"] == pytest.approx(sum(a > b for a, b in pairs) / len(pairs))
    assert s["auc_gradable"]["ci_low"] <= s["auc_gradable"]["auc"] <= s["auc_gradable"]["ci_high"]
    mi = s["mi_other_vs_normal"]
    assert (mi["n_other"], mi["n_normal"]) == (2, 3) and mi["auroc"] == 0.75  # 0.2 beats all, 0.01 ties 0.01


def test_per_patient_figures_follow_the_exam_rule() -> None:
    s = screening_summary(RECORDS, exam_rule=_worst, n_bootstrap=10)["per_patient"]
    # referable patients 1 (refer), 2 (both eyes none: missed), 4 (retake+uncertain -> uncertain)
    assert (s["n_patients"], s["n_referable"], s["n_non_referable"]) == (5, 3, 2)
    assert s["missed_share"] == pytest.approx(1 / 3)
    assert s["outcomes_referable"] == {REFER: 1, UNCERTAIN: 1, RETAKE: 0, NONE: 1}
    # non-referable patients 3 (refer: a false referral) and 5 (none)
    assert s["auto_negative_share"] == pytest.approx(1 / 2)


def test_an_unlabelled_set_gets_outcomes_and_mi_only() -> None:
    unlabelled = [EyeRecord(image=f"i{i}", probability=0.5, mutual_information=0.01 * i, gradable=True,
                            outcome=UNCERTAIN) for i in range(5)]
    s = screening_summary(unlabelled)
    assert s["outcomes"][UNCERTAIN] == 5 and s["mi_median"] == pytest.approx(0.02) and "missed_share" not in s
