"""The exam rule, spelled out by hand: every combination of per-eye photographs -> one visit outcome.

Letters stand for one photograph's outcome: R = refer_referable_dr (gradable, certain, referable),
U = grader_review_uncertain, X = retake_ungradable, N = no_referable_dr (gradable, certain, not referable).
An eye is written as the string of its photographs ("" = no photograph of that eye). Every expected value
below was worked out from the rule as the issue states it, not recomputed with the code.
"""

from __future__ import annotations

import itertools

import pytest

from models.outcome.decision import (
    EXAM_OUTCOME_TEXT,
    Eye,
    ScreeningOutcome,
    exam_decision,
    eye_outcome,
    screening_outcome,
)

PHOTO = {"R": ScreeningOutcome.REFER_REFERABLE_DR, "U": ScreeningOutcome.GRADER_REVIEW_UNCERTAIN,
     "X": ScreeningOutcome.RETAKE_UNGRADABLE, "N": ScreeningOutcome.NO_REFERABLE_DR}
REFER, REVIEW, RETAKE, CLEAR = "refer_referable_dr", "grader_review_uncertain", "retake_ungradable", "no_referable_dr"

# One photograph per eye: all 5 x 5 combinations of (nothing, R, U, X, N), by hand.
ONE_PER_EYE = [
    # right, left, exam outcome
    ("", "", RETAKE),
    ("", "R", REFER), ("", "U", REVIEW), ("", "X", RETAKE), ("", "N", RETAKE),
    ("R", "", REFER), ("U", "", REVIEW), ("X", "", RETAKE), ("N", "", RETAKE),
    ("R", "R", REFER), ("R", "U", REFER), ("R", "X", REFER), ("R", "N", REFER),
    ("U", "R", REFER), ("U", "U", REVIEW), ("U", "X", REVIEW), ("U", "N", REVIEW),
    ("X", "R", REFER), ("X", "U", REVIEW), ("X", "X", RETAKE), ("X", "N", RETAKE),
    ("N", "R", REFER), ("N", "U", REVIEW), ("N", "X", RETAKE), ("N", "N", CLEAR),
]

# Several photographs of one eye (the most severe certain result wins; an ungradable one is outweighed
# by a gradable one of the same eye; an uncertain one is never outweighed by a certain non-referable one).
SEVERAL_PER_EYE = [
    ("NX", "N", CLEAR),  # the right eye was screened by its gradable photograph
    ("XN", "XN", CLEAR),
    ("XX", "N", RETAKE),  # no gradable photograph of the right eye
    ("NU", "N", REVIEW),  # an uncertain photograph of a clear eye still goes to a grader
    ("NR", "N", REFER),  # one certain referable photograph is enough
    ("UR", "NN", REFER),
    ("XR", "XX", REFER),  # a referable right eye, an ungradable left eye: refer, not retake
    ("UX", "XX", REVIEW),
    ("NN", "NNNN", CLEAR),
    ("NN", "", RETAKE),  # a visit with one eye is never clear, however many photographs it has
    ("RR", "", REFER),
]

EYE_TABLE = [  # one eye's photographs -> that eye's outcome
    ("", RETAKE), ("R", REFER), ("U", REVIEW), ("X", RETAKE), ("N", CLEAR),
    ("NX", CLEAR), ("XN", CLEAR), ("XX", RETAKE), ("NU", REVIEW), ("UN", REVIEW), ("NR", REFER),
    ("UR", REFER), ("RU", REFER), ("XU", REVIEW), ("XR", REFER), ("NNX", CLEAR),
]


def _eyes(right: str, left: str) -> dict[Eye, list[ScreeningOutcome]]:
    return {Eye.RIGHT: [PHOTO[c] for c in right], Eye.LEFT: [PHOTO[c] for c in left]}


@pytest.mark.parametrize(("right", "left", "expected"), ONE_PER_EYE + SEVERAL_PER_EYE)
def test_exam_outcome_table(right: str, left: str, expected: str) -> None:
    decision = exam_decision(_eyes(right, left))
    assert decision.outcome.value == expected
    assert decision.reason.startswith(EXAM_OUTCOME_TEXT[decision.outcome])


def test_one_per_eye_table_is_complete() -> None:
    """The hand table covers every pair of (no photograph, R, U, X, N) exactly once."""
    pairs = {(r, left) for r, left, _ in ONE_PER_EYE}
    assert pairs == set(itertools.product(["", "R", "U", "X", "N"], repeat=2))
    assert len(ONE_PER_EYE) == 25


@pytest.mark.parametrize(("photographs", "expected"), EYE_TABLE)
def test_eye_outcome_table(photographs: str, expected: str) -> None:
    assert eye_outcome([PHOTO[c] for c in photographs]).value == expected


def test_missing_eye_is_named_and_counts_as_retake() -> None:
    decision = exam_decision({Eye.LEFT: [PHOTO["N"]]})
    assert decision.outcome is ScreeningOutcome.RETAKE_UNGRADABLE
    assert decision.missing == (Eye.RIGHT,)
    assert decision.eyes == {Eye.RIGHT: ScreeningOutcome.RETAKE_UNGRADABLE, Eye.LEFT: ScreeningOutcome.NO_REFERABLE_DR}
    assert decision.deciding == (Eye.RIGHT,)
    assert "no photograph of the right eye" in decision.reason


def test_deciding_eyes_and_reason_name_the_referable_eye() -> None:
    decision = exam_decision(_eyes("N", "XR"))
    assert decision.deciding == (Eye.LEFT,)
    assert decision.reason.endswith("(left eye).")
    both = exam_decision(_eyes("N", "N"))
    assert both.deciding == (Eye.RIGHT, Eye.LEFT) and both.missing == ()


def test_ungradable_and_missing_eyes_are_told_apart_in_the_reason() -> None:
    decision = exam_decision(_eyes("X", ""))
    assert decision.outcome is ScreeningOutcome.RETAKE_UNGRADABLE
    assert "no photograph of the left eye" in decision.reason
    assert "no gradable photograph of the right eye" in decision.reason


@pytest.mark.parametrize(("right", "left", "needed"), [
    ("U", "X", "; retake the left-eye photograph (not gradable)."),
    ("X", "U", "; retake the right-eye photograph (not gradable)."),
    ("U", "", "; photograph the left eye (none was sent)."),
    ("R", "X", "; retake the left-eye photograph (not gradable)."),
    ("", "R", "; photograph the right eye (none was sent)."),
])
def test_referral_or_review_names_the_retake_still_needed(right: str, left: str, needed: str) -> None:
    """The headline line never hides an eye that must still be photographed (issue: a patient could leave)."""
    decision = exam_decision(_eyes(right, left))
    assert decision.outcome in (ScreeningOutcome.GRADER_REVIEW_UNCERTAIN, ScreeningOutcome.REFER_REFERABLE_DR)
    assert decision.reason.endswith(needed)


@pytest.mark.parametrize(("right", "left"), [("U", "N"), ("R", "N"), ("R", "U"), ("XU", "N"), ("U", "U")])
def test_no_retake_is_named_when_every_eye_is_screened(right: str, left: str) -> None:
    assert "retake" not in exam_decision(_eyes(right, left)).reason
    assert "photograph the" not in exam_decision(_eyes(right, left)).reason


def test_unknown_eye_is_refused() -> None:
    with pytest.raises(ValueError, match="expected one of: right, left"):
        exam_decision({"both": [PHOTO["N"]]})  # type: ignore[dict-item]


def test_photograph_rule_feeds_the_exam_rule() -> None:
    """Photograph numbers -> outcomes -> exam, end to end through the one rule (thresholds 1e-3 nat, 0.5)."""
    def photo(gradable: bool, mi: float, p: float) -> ScreeningOutcome:
        return screening_outcome(gradable=gradable, mutual_information=mi, probability=p,
                                 referral_threshold_mi=1e-3, decision_threshold=0.5)

    clear_right, clear_left = photo(True, 1e-4, 0.2), photo(True, 0.0, 0.49)
    assert exam_decision({Eye.RIGHT: [clear_right], Eye.LEFT: [clear_left]}).outcome is ScreeningOutcome.NO_REFERABLE_DR
    dark_referable = photo(False, 0.0, 0.99)  # ungradable: its probability is not a finding
    assert exam_decision({Eye.RIGHT: [clear_right], Eye.LEFT: [dark_referable]}).outcome is (
        ScreeningOutcome.RETAKE_UNGRADABLE)
    uncertain_referable = photo(True, 2e-3, 0.99)
    assert exam_decision({Eye.RIGHT: [clear_right], Eye.LEFT: [uncertain_referable]}).outcome is (
        ScreeningOutcome.GRADER_REVIEW_UNCERTAIN)
