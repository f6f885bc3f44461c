"""One graded exam as a DICOM Comprehensive SR: highdicom's TID 1500 measurement report, into the same study.

The content tree (highdicom builds and validates every item; nothing here writes a tag by hand):

- observation context: the model as the observer *device* (name, version, manufacturer, sha256 as its serial
  number);
- one measurement group (TID 1501) for the exam (finding site: both eyes) with the exam outcome, and one per
  eye (finding site: the eye, SNOMED CT laterality) with the eye's outcome and, for each gradable photograph of
  it, the probability of referable DR (p̄, in percent, UCUM ``%``, four significant digits) and the mutual
  information (MI, nat, three significant digits) as NUM items that reference that photograph (SOP class and
  instance); every photograph of the eye is a source image of its group;
- each group's *finding* says what was found, from its outcome (:data:`FINDING_MEANING`): referable DR present,
  not found, not graded, or grader review (never "referable DR" over a healthy eye);
- each group also holds the two thresholds its numbers were compared with, as NUM items without an image
  reference: the referral (decision) threshold in ``%`` and the grader-review MI threshold in nat;
- algorithm identification (name, version, ``sha256=...``) on every group and measurement;
- TEXT items: the exam's reason, each eye's reason followed by each of its photographs' words
  (``models.outcome.wording``, the API's ``outcome_reason``: the probability beside the referral threshold, the
  uncertainty beside the grader-review threshold, a retake's failed checks), the intended use and the
  not-for-clinical-use note.

Codes of our own are in the private scheme ``99RADSCR`` (declared in the object's Coding Scheme Identification);
the outcome codes are the same slugs as the JSON and FHIR answers (``refer_referable_dr``...).

The object is UTF-8 (Specific Character Set ``ISO_IR 192``: the shared words use "—"). It is PRELIMINARY and
UNVERIFIED (``is_final=False``): a research prototype's finding for a clinician
to review. Patient and study attributes are copied from the source images by highdicom (the archive files the
result in the same study), each checked against its VR first and left empty when it does not conform
(:mod:`service.pacs.sr_header`); they go into the object only, never into logs.

**Deterministic identity.** :func:`result_uids` derives the SR's SOP Instance UID and Series Instance UID from
the sorted SOP Instance UIDs of its source images and the model's sha256 (``2.25.<uuid5 integer>``): the same
study graded twice, by one process or after a crash and restart, yields the same UID, so the archive keeps one
result object.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import highdicom as hd
from highdicom.coding_schemes import CodingSchemeIdentificationItem
from pydicom.dataset import Dataset
from pydicom.sr.codedict import codes

from models.outcome.decision import Eye, ScreeningOutcome
from service.pacs import sr_header
from service.screening.exam import ExamResult

SCHEME = "99RADSCR"
MANUFACTURER = "Radial Screen (research prototype)"
SERIES_NUMBER = 9901
SERIES_DESCRIPTION = "Radial Screen DR screening (research, not clinical)"
_UID_NAMESPACE = uuid.UUID("5b0c7e1e-7d0c-4a57-9a7e-2f1b7c3d9e10")  # fixed: changing it changes every result UID

# Code meanings are LO (at most 64 characters); the full plain-language lines are the TEXT items.
OUTCOME_MEANING: dict[ScreeningOutcome, str] = {
    ScreeningOutcome.REFER_REFERABLE_DR: "Refer: referable diabetic retinopathy",
    ScreeningOutcome.NO_REFERABLE_DR: "No referable diabetic retinopathy",
    ScreeningOutcome.GRADER_REVIEW_UNCERTAIN: "Human grader review: model uncertain",
    ScreeningOutcome.RETAKE_UNGRADABLE: "Retake: not gradable",
}
_LATERALITY = {Eye.RIGHT: codes.SCT.Right, Eye.LEFT: codes.SCT.Left}


def code(value: str, meaning: str) -> hd.sr.CodedConcept:
    """A concept of our private coding scheme."""
    return hd.sr.CodedConcept(value=value, scheme_designator=SCHEME, meaning=meaning)


# What a group's outcome found, as its TID 1501 finding (at most 64 characters each).
FINDING_MEANING: dict[ScreeningOutcome, tuple[str, str]] = {
    ScreeningOutcome.REFER_REFERABLE_DR: ("referable-dr-present",
                                          "Referable DR present (at or above referral threshold)"),
    ScreeningOutcome.NO_REFERABLE_DR: ("referable-dr-not-found", "Referable DR not found (below referral threshold)"),
    ScreeningOutcome.GRADER_REVIEW_UNCERTAIN: ("grader-review", "Grader review: model uncertain, no finding"),
    ScreeningOutcome.RETAKE_UNGRADABLE: ("not-graded", "Not graded: no gradable photograph"),
}

PROCEDURE = code("dr-screening", "Referable diabetic retinopathy screening")
PROBABILITY = code("p-referable-dr-percent", "Probability of referable DR (mean of draws)")
MUTUAL_INFORMATION = code("mutual-info-nat", "Mutual information over the weights (nat)")
DECISION_THRESHOLD = code("referral-threshold-percent", "Referral threshold: refer if probability >= this")
MI_THRESHOLD = code("grader-review-threshold-nat", "Grader-review threshold: review if MI > this (nat)")
NAT = hd.sr.CodedConcept(value="1", scheme_designator="UCUM", meaning="nat")  # a unit UCUM lacks: dimensionless
EXAM_OUTCOME = code("exam-outcome", "Screening outcome of the exam")
EYE_OUTCOME = code("eye-outcome", "Screening outcome of the eye")
EXAM_REASON = code("exam-reason", "Exam outcome reason")
INTENDED_USE = code("intended-use", "Intended use")
DISCLAIMER = code("disclaimer", "Not for clinical use")


def outcome_code(outcome: ScreeningOutcome) -> hd.sr.CodedConcept:
    return code(outcome.value, OUTCOME_MEANING[outcome])


def finding_code(outcome: ScreeningOutcome) -> hd.sr.CodedConcept:
    """What a group found, from its outcome (:data:`FINDING_MEANING`)."""
    return code(*FINDING_MEANING[outcome])


def percent_value(probability: float) -> float:
    """p̄ in percent, four significant digits (the JSON answer keeps the full float)."""
    return float(f"{100.0 * probability:.4g}")


def nat_value(mutual_information: float) -> float:
    """MI in nat, three significant digits."""
    return float(f"{mutual_information:.3g}")


def derived_uid(*parts: str) -> str:
    """``2.25.<integer of a uuid5>`` of the parts: the same parts give the same UID in any process."""
    return f"2.25.{uuid.uuid5(_UID_NAMESPACE, chr(31).join(parts)).int}"


def result_uids(instance_uids: Iterable[str], model_sha256: str) -> tuple[str, str]:
    """(SR SOP Instance UID, SR Series Instance UID) for these source instances graded by this model."""
    key = sorted(set(instance_uids))
    return derived_uid("sr", model_sha256, *key), derived_uid("series", model_sha256, *key)


@dataclass(frozen=True)
class GradedImage:
    """One source photograph: its DICOM header (pixels not needed), its eye, its outcome and its ``/v1/predict``
    result (``service.screening.grading.ScoredPhotograph.answer``: the numbers and words it renders)."""

    header: Dataset
    eye: Eye
    outcome: ScreeningOutcome
    result: dict[str, Any]


@dataclass(frozen=True)
class GradedExam:
    """A study's photographs with their typed exam result (``service.screening.exam``) and the model identity."""

    images: Sequence[GradedImage]
    result: ExamResult
    model: dict[str, Any]  # ScorerIdentity.to_dict()
    disclaimer: str
    # (referral threshold, grader-review MI threshold) of the model that graded it; None: read from the results
    thresholds: tuple[float, float] | None = None

    @property
    def uids(self) -> tuple[str, str]:
        return result_uids((str(im.header.SOPInstanceUID) for im in self.images), str(self.model["sha256"]))


def _algorithm(model: dict[str, Any]) -> hd.sr.AlgorithmIdentification:
    return hd.sr.AlgorithmIdentification(
        name=str(model["name"]), version=str(model["version"]),
        parameters=[f"sha256={model['sha256']}", f"draws={model['mc_samples']}x{model['head_draws']}"
                    + ("x2 (test-time flip)" if model.get("test_time_flip") else "")],
    )


def _source(header: Dataset) -> tuple[str, str]:
    return str(header.SOPClassUID), str(header.SOPInstanceUID)


def _eye_group(exam: GradedExam, eye: Eye, sr_uid: str) -> hd.sr.MeasurementsAndQualitativeEvaluations:
    algorithm = _algorithm(exam.model)
    measurements: list[hd.sr.Measurement] = []
    sources: list[hd.sr.SourceImageForMeasurementGroup] = []
    for image in (im for im in exam.images if im.eye is eye):
        sources.append(hd.sr.SourceImageForMeasurementGroup(*_source(image.header)))
        if image.outcome is ScreeningOutcome.RETAKE_UNGRADABLE:
            continue  # an ungradable photograph's probability is no finding
        reference = [hd.sr.SourceImageForMeasurement(*_source(image.header))]
        for name, value, unit in (
                (PROBABILITY, percent_value(float(image.result["diagnosis"]["referable_dr_probability"])),
                 codes.UCUM.Percent),
                (MUTUAL_INFORMATION, nat_value(float(image.result["uncertainty"]["mutual_information"])), NAT)):
            measurements.append(hd.sr.Measurement(
                name=name, value=value, unit=unit, algorithm_id=algorithm, referenced_images=reference,
            ))
    outcome = exam.result.eyes[eye].outcome
    return hd.sr.MeasurementsAndQualitativeEvaluations(
        tracking_identifier=hd.sr.TrackingIdentifier(uid=derived_uid("track", sr_uid, eye.value),
                                                     identifier=f"{eye.value} eye"),
        finding_type=finding_code(outcome),
        algorithm_id=algorithm,
        finding_sites=[hd.sr.FindingSite(codes.SCT.Eye, laterality=_LATERALITY[eye])],
        measurements=[*measurements, *_thresholds(exam, algorithm)] or None,
        qualitative_evaluations=[hd.sr.QualitativeEvaluation(EYE_OUTCOME, outcome_code(outcome))],
        source_images=sources or None,
    )


def _exam_group(exam: GradedExam, sr_uid: str) -> hd.sr.MeasurementsAndQualitativeEvaluations:
    outcome = exam.result.outcome
    algorithm = _algorithm(exam.model)
    return hd.sr.MeasurementsAndQualitativeEvaluations(
        tracking_identifier=hd.sr.TrackingIdentifier(uid=derived_uid("track", sr_uid, "exam"), identifier="exam"),
        finding_type=finding_code(outcome),
        algorithm_id=algorithm,
        finding_sites=[hd.sr.FindingSite(codes.SCT.Eye, laterality=codes.SCT.RightAndLeft)],
        measurements=_thresholds(exam, algorithm) or None,
        qualitative_evaluations=[hd.sr.QualitativeEvaluation(EXAM_OUTCOME, outcome_code(outcome))],
        source_images=[hd.sr.SourceImageForMeasurementGroup(*_source(im.header)) for im in exam.images],
    )


def _thresholds(exam: GradedExam, algorithm: hd.sr.AlgorithmIdentification) -> list[hd.sr.Measurement]:
    """The referral threshold (%) and the grader-review MI threshold (nat) the exam's numbers were compared with
    (every result of one exam states the same two: one model graded them)."""
    thresholds = exam.thresholds
    if thresholds is None:  # a photograph the decoder refused has no numbers; a scored one states both
        scored = [im.result for im in exam.images if "diagnosis" in im.result and "uncertainty" in im.result]
        if not scored:
            return []
        thresholds = (float(scored[0]["diagnosis"]["decision_threshold"]),
                      float(scored[0]["uncertainty"]["referral_threshold_mi"]))
    decision, mi = thresholds
    return [
        hd.sr.Measurement(name=DECISION_THRESHOLD, unit=codes.UCUM.Percent, algorithm_id=algorithm,
                          value=percent_value(decision)),
        hd.sr.Measurement(name=MI_THRESHOLD, unit=NAT, algorithm_id=algorithm, value=nat_value(mi)),
    ]


def _photograph_words(image: GradedImage) -> str:
    """A photograph's words: its outcome, probability beside the referral threshold and uncertainty beside the
    grader-review threshold (``service.screening.payload``'s ``words``); a refused photograph's reason as it stands."""
    words = image.result.get("words")
    if not words:
        return str(image.result["outcome_reason"])
    if image.outcome is ScreeningOutcome.RETAKE_UNGRADABLE:
        return f"{words['outcome']}."
    return f"{words['outcome']}; probability {words['probability']}; uncertainty {words['uncertainty']}."


def _eye_text(exam: GradedExam, eye: Eye) -> str:
    """The eye's outcome line, then each of its photographs' words (``outcome_reason``), numbered."""
    photographs = [im for im in exam.images if im.eye is eye]
    words = [f"Photograph {i}: {_photograph_words(im)}"
             for i, im in enumerate(photographs, start=1) if im.result.get("outcome_reason")]
    return " ".join([f"{exam.result.eyes[eye].reason.rstrip('.')}.", *words])


def _texts(exam: GradedExam) -> list[hd.sr.TextContentItem]:
    lines = [(EXAM_REASON, exam.result.reason)]
    for eye in Eye:
        lines.append((code(f"{eye.value}-eye-reason", f"{eye.value.capitalize()} eye outcome reason"),
                      _eye_text(exam, eye)))
    lines += [(INTENDED_USE, str(exam.model["intended_use"])), (DISCLAIMER, exam.disclaimer)]
    return [hd.sr.TextContentItem(name=name, value=value, relationship_type=hd.sr.RelationshipTypeValues.CONTAINS)
            for name, value in lines]


def build_sr(exam: GradedExam) -> hd.sr.ComprehensiveSR:
    """The exam's Comprehensive SR (module docstring), in the source images' study."""
    if not exam.images:
        raise ValueError("an exam SR needs at least one source image")
    sr_uid, series_uid = exam.uids
    model = exam.model
    observer = hd.sr.ObserverContext(
        observer_type=codes.DCM.Device,
        observer_identifying_attributes=hd.sr.DeviceObserverIdentifyingAttributes(
            uid=derived_uid("device", str(model["sha256"])), name=str(model["name"])[:64],
            manufacturer_name=MANUFACTURER, model_name=f"{model['name']} {model['version']}"[:64],
            serial_number=str(model["sha256"])[:64],
        ),
    )
    with warnings.catch_warnings():  # highdicom's warnings may quote header values (identifiers)
        warnings.simplefilter("ignore")
        sr = _build(exam, sr_uid, series_uid, observer)
    sr.SpecificCharacterSet = "ISO_IR 192"  # UTF-8: the words hold "—", "≥" and the like; names keep their text
    return sr


def _build(exam: GradedExam, sr_uid: str, series_uid: str, observer: hd.sr.ObserverContext) -> hd.sr.ComprehensiveSR:
    model = exam.model
    report = hd.sr.MeasurementReport(
        observation_context=hd.sr.ObservationContext(observer_device_context=observer),
        procedure_reported=PROCEDURE,
        imaging_measurements=[_exam_group(exam, sr_uid), *(_eye_group(exam, eye, sr_uid) for eye in Eye)],
    )
    report[0].ContentSequence.extend(_texts(exam))
    return hd.sr.ComprehensiveSR(
        evidence=[sr_header.evidence(im.header) for im in exam.images],
        content=report[0],
        series_instance_uid=series_uid,
        series_number=SERIES_NUMBER,
        sop_instance_uid=sr_uid,
        instance_number=1,
        manufacturer=MANUFACTURER,
        is_complete=True,
        is_final=False,
        is_verified=False,
        series_description=SERIES_DESCRIPTION,
        manufacturer_model_name=str(model["name"])[:64],
        software_versions=str(model["version"])[:64],
        device_serial_number=str(model["sha256"])[:64],
        coding_schemes=[CodingSchemeIdentificationItem(
            designator=SCHEME, name="Radial Screen codes", responsible_organization="Radial Screen")],
    )
