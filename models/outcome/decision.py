"""The screening decision, written once: one photograph's outcome, and one patient visit's (the exam).

Every surface (the JSON answer, the clinician page, FHIR, the batch rows and summary, the metrics) calls
these two functions; none restates them.

**The two comparisons**, each written once and used by serving, evaluation, FHIR and the batch summary
alike (elementwise on numpy arrays as on one float): :func:`is_uncertain` (mutual information strictly
above the calibrated ``referral_threshold_mi``, nats) and :func:`is_referable` (probability at or above the
``decision_threshold``). ``models.artifact.Calibration`` applies them with the artifact's thresholds.

**One photograph** (:func:`screening_outcome`), fixed precedence: an ungradable image is never graded
(``retake_ungradable``: its probability is not a finding); an uncertain one goes to a human whatever its
probability (``grader_review_uncertain``); only a gradable, certain answer is a referral decision
(``refer_referable_dr`` when referable, else ``no_referable_dr``). Its diagnosis label
(:func:`diagnosis_label`) follows the outcome: ``not_graded`` for an ungradable photograph (never
``non_referable``: nothing was graded), else ``referable`` / ``non_referable`` by the probability alone.

**One visit** (:func:`exam_decision`): the eyes of a patient, each with one or more photographs, give one
outcome, in this precedence:

1. ``refer_referable_dr`` if any gradable photograph of any eye is referable and certain (one certain
   referable finding is enough: the patient is referred whatever the other photographs say);
2. ``grader_review_uncertain`` if no photograph is referable-and-certain but some photograph is uncertain
   (an uncertain photograph is never outweighed by a certain non-referable one of the same eye: the model
   has not excluded referable disease in what it saw);
3. ``retake_ungradable`` if some eye has no gradable photograph, **or is missing**: a visit with only one
   eye can never be answered ``no_referable_dr``;
4. ``no_referable_dr`` only when both eyes were photographed, no photograph is referable-and-certain or
   uncertain, and each eye has at least one gradable, certain, non-referable photograph.

Several photographs of one eye (:func:`eye_outcome`): a certain referable photograph wins, then an
uncertain one, then a gradable certain non-referable one; only when none is gradable is the eye
``retake_ungradable``. So an ungradable photograph beside a gradable certain one of the same eye is
outweighed (the eye was screened; the retake was not needed). The exam outcome is then the most severe
per-eye outcome in the exam precedence above, a missing eye counting as ``retake_ungradable``; this is the
photograph-level rule of 1-4 exactly (an uncertain photograph is always a gradable one).

Note the two precedences differ on purpose: for one photograph "ungradable" comes first (nothing to
grade), for a visit "a certain referable eye" comes first (a finding in one eye is not cancelled by a bad
photograph of the other).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, overload

import numpy as np
from numpy.typing import NDArray


class ScreeningOutcome(StrEnum):
    """What a clinic acts on, for one photograph or for one visit (see the module docstring)."""

    RETAKE_UNGRADABLE = "retake_ungradable"
    GRADER_REVIEW_UNCERTAIN = "grader_review_uncertain"
    REFER_REFERABLE_DR = "refer_referable_dr"
    NO_REFERABLE_DR = "no_referable_dr"


class DiagnosisLabel(StrEnum):
    """The diagnosis label of one photograph (``diagnosis.label`` in the answer, the batch CSV, the metrics)."""

    REFERABLE = "referable"
    NON_REFERABLE = "non_referable"
    NOT_GRADED = "not_graded"  # ungradable: the probability is not a finding, so no label either way


class Eye(StrEnum):
    """Which eye a photograph shows (DICOM laterality R / L)."""

    RIGHT = "right"
    LEFT = "left"


# The one plain-language line per outcome of ONE photograph, shared by the page, FHIR and the batch summary.
OUTCOME_TEXT: dict[ScreeningOutcome, str] = {
    ScreeningOutcome.RETAKE_UNGRADABLE: "Retake the photograph: the image cannot be graded",
    ScreeningOutcome.GRADER_REVIEW_UNCERTAIN: "Human grader review: the model is uncertain about this image",
    ScreeningOutcome.REFER_REFERABLE_DR: "Refer to an eye-care professional: referable diabetic retinopathy",
    ScreeningOutcome.NO_REFERABLE_DR: "No referable diabetic retinopathy found: rescreen at the routine interval",
}

# The one plain-language line per outcome of ONE VISIT (both eyes), for the patient headline.
EXAM_OUTCOME_TEXT: dict[ScreeningOutcome, str] = {
    ScreeningOutcome.REFER_REFERABLE_DR: (
        "Refer the patient to an eye-care professional: referable diabetic retinopathy in at least one eye"
    ),
    ScreeningOutcome.GRADER_REVIEW_UNCERTAIN: (
        "Human grader review: the model is uncertain about at least one photograph"
    ),
    ScreeningOutcome.RETAKE_UNGRADABLE: (
        "Retake: at least one eye has no gradable photograph, so the patient cannot be screened yet"
    ),
    ScreeningOutcome.NO_REFERABLE_DR: (
        "No referable diabetic retinopathy found in either eye: rescreen at the routine interval"
    ),
}

# Most severe first, across the eyes of a visit.
EXAM_PRECEDENCE: tuple[ScreeningOutcome, ...] = (
    ScreeningOutcome.REFER_REFERABLE_DR,
    ScreeningOutcome.GRADER_REVIEW_UNCERTAIN,
    ScreeningOutcome.RETAKE_UNGRADABLE,
    ScreeningOutcome.NO_REFERABLE_DR,
)
# Most severe first, across the photographs of one eye: one gradable certain photograph screens the eye.
EYE_PRECEDENCE: tuple[ScreeningOutcome, ...] = (
    ScreeningOutcome.REFER_REFERABLE_DR,
    ScreeningOutcome.GRADER_REVIEW_UNCERTAIN,
    ScreeningOutcome.NO_REFERABLE_DR,
    ScreeningOutcome.RETAKE_UNGRADABLE,
)


@overload
def is_uncertain(mutual_information: float, referral_threshold_mi: float) -> bool: ...
@overload
def is_uncertain(mutual_information: NDArray[Any], referral_threshold_mi: float) -> NDArray[np.bool_]: ...
def is_uncertain(mutual_information: Any, referral_threshold_mi: float) -> Any:
    """The uncertainty rule: mutual information (nats) strictly above the calibrated threshold; a human grader
    then reviews the image. Elementwise on arrays ``[N]``; a plain ``bool`` for one float."""
    above = np.asarray(mutual_information) > referral_threshold_mi
    return bool(above) if np.ndim(above) == 0 else above


def defers_by_uncertainty(referral_threshold_mi: float) -> bool:
    """Whether any image can be deferred by MI: a threshold at ln 2 nat, the largest MI a binary answer can have,
    is the operating point's way of saying that deferring by MI was no measured benefit on validation. JSON
    round-trips of ln 2 count as ln 2."""
    return referral_threshold_mi < math.log(2) * (1 - 1e-9)


@overload
def is_referable(probability: float, decision_threshold: float) -> bool: ...
@overload
def is_referable(probability: NDArray[Any], decision_threshold: float) -> NDArray[np.bool_]: ...
def is_referable(probability: Any, decision_threshold: float) -> Any:
    """The probability rule: p̄ at or above the decision threshold reads "referable". Elementwise on arrays."""
    at_or_above = np.asarray(probability) >= decision_threshold
    return bool(at_or_above) if np.ndim(at_or_above) == 0 else at_or_above


def screening_outcome(
    *,
    gradable: bool,
    mutual_information: float,
    probability: float,
    referral_threshold_mi: float,
    decision_threshold: float,
) -> ScreeningOutcome:
    """One photograph's outcome: ungradable, then uncertain (:func:`is_uncertain`), then the probability."""
    if not gradable:
        return ScreeningOutcome.RETAKE_UNGRADABLE
    if is_uncertain(mutual_information, referral_threshold_mi):
        return ScreeningOutcome.GRADER_REVIEW_UNCERTAIN
    if is_referable(probability, decision_threshold):
        return ScreeningOutcome.REFER_REFERABLE_DR
    return ScreeningOutcome.NO_REFERABLE_DR


def diagnosis_label(outcome: ScreeningOutcome, *, probability: float, decision_threshold: float) -> DiagnosisLabel:
    """One photograph's label: ``not_graded`` when its outcome is ``retake_ungradable``, else by the probability
    (an uncertain photograph keeps its probability's label; its outcome says a human decides)."""
    if outcome is ScreeningOutcome.RETAKE_UNGRADABLE:
        return DiagnosisLabel.NOT_GRADED
    return DiagnosisLabel.REFERABLE if is_referable(probability, decision_threshold) else DiagnosisLabel.NON_REFERABLE


def _most_severe(outcomes: Sequence[ScreeningOutcome], precedence: tuple[ScreeningOutcome, ...]) -> ScreeningOutcome:
    return min(outcomes, key=precedence.index)


def eye_outcome(photographs: Sequence[ScreeningOutcome]) -> ScreeningOutcome:
    """One eye's outcome from its photographs' outcomes; an eye without photographs is ``retake_ungradable``."""
    if not photographs:
        return ScreeningOutcome.RETAKE_UNGRADABLE
    return _most_severe(photographs, EYE_PRECEDENCE)


@dataclass(frozen=True)
class ExamDecision:
    """One visit's outcome, each eye's outcome, the eyes that decided it, and the reason in plain words."""

    outcome: ScreeningOutcome
    eyes: dict[Eye, ScreeningOutcome]  # both eyes, a missing one as retake_ungradable
    missing: tuple[Eye, ...]  # eyes without any photograph
    deciding: tuple[Eye, ...]  # the eyes whose outcome is the exam's (both for no_referable_dr)
    # e.g. "Human grader review: ... at least one photograph (right eye); retake the left-eye photograph
    # (not gradable)." A referral or a grader review names every eye still to be (re)photographed.
    reason: str


def _eye_list(eyes: Sequence[Eye]) -> str:
    return " and ".join(f"{e.value} eye" for e in eyes)


def _retakes_left(eyes: Mapping[Eye, ScreeningOutcome], missing: tuple[Eye, ...]) -> str:
    """What a referral or a grader review leaves to do, so that the headline never hides it: the eyes
    without a gradable photograph, e.g. "; retake the left-eye photograph (not gradable)"."""
    todo = [f"photograph the {eye.value} eye (none was sent)" if eye in missing
            else f"retake the {eye.value}-eye photograph (not gradable)"
            for eye in Eye if eyes[eye] is ScreeningOutcome.RETAKE_UNGRADABLE]
    return "".join(f"; {item}" for item in todo)


def _reason(outcome: ScreeningOutcome, eyes: Mapping[Eye, ScreeningOutcome], deciding: tuple[Eye, ...],
            missing: tuple[Eye, ...]) -> str:
    """The exam's plain line: its outcome, the eyes that decided it, and any retake still needed."""
    text = EXAM_OUTCOME_TEXT[outcome]
    if outcome is ScreeningOutcome.NO_REFERABLE_DR:
        return f"{text}."
    if outcome is ScreeningOutcome.RETAKE_UNGRADABLE:
        parts = []
        if missing:
            parts.append(f"no photograph of the {_eye_list(missing)}")
        ungradable = tuple(e for e in deciding if e not in missing)
        if ungradable:
            parts.append(f"no gradable photograph of the {_eye_list(ungradable)}")
        return f"{text} ({'; '.join(parts)})."
    return f"{text} ({_eye_list(deciding)}){_retakes_left(eyes, missing)}."


def exam_decision(photographs: Mapping[Eye, Sequence[ScreeningOutcome]]) -> ExamDecision:
    """The visit's outcome from each eye's photograph outcomes (module docstring). Eyes absent from the
    mapping, or mapped to no photographs, are missing."""
    unknown = set(photographs) - set(Eye)
    if unknown:
        raise ValueError(f"unknown eye(s) {sorted(map(str, unknown))}; expected one of: right, left")
    eyes = {eye: eye_outcome(photographs.get(eye, ())) for eye in Eye}
    missing = tuple(eye for eye in Eye if not photographs.get(eye))
    outcome = _most_severe(list(eyes.values()), EXAM_PRECEDENCE)
    deciding = tuple(eye for eye in Eye if eyes[eye] is outcome)
    return ExamDecision(outcome=outcome, eyes=eyes, missing=missing, deciding=deciding,
                        reason=_reason(outcome, eyes, deciding, missing))
