"""FHIR R4 rendering of one screening exam (a patient visit): one DiagnosticReport, one Observation per eye.

The ``POST /v1/exams`` JSON in, a ``Bundle`` of type ``collection`` out (the same shape choice as the
single-image rendering in :mod:`service.interop.fhir`):

- ``DiagnosticReport`` — status ``preliminary``; ``conclusionCode`` = the exam outcome (our code system, as
  for one image), ``conclusion`` = the exam's reason in plain words plus the not-for-clinical-use note;
  ``result`` = the two eye Observations; ``identifier`` = request id and, if given, the caller's opaque
  ``exam_id``; ``subject`` = a logical reference by identifier to the caller's opaque ``patient_ref`` (when given);
  ``imagingStudy`` = a logical reference to the DICOM study by its Study Instance UID (``urn:dicom:uid``,
  ``urn:oid:<uid>``), when the photographs came as DICOM of one study (``study_uid`` in the body).
- ``Observation`` per eye (right, left, always both: a missing eye is reported as such) — ``valueCodeableConcept``
  = the eye's outcome; ``bodySite`` = the eye, coded in our code system (``right-eye`` / ``left-eye``) with
  its text; a ``laterality`` component whose value is the SNOMED CT laterality qualifier **24028007 Right**
  / **7771000 Left** (qualifier value), the codes of HL7's ``bodysite-laterality`` value set and of the HL7
  Eyecare IG's ``BodyStructure.locationQualifier``. R4's ``Observation.bodySite`` is a single concept with no
  qualifier slot, so the qualifier is carried as that component rather than inside ``bodySite``. Then one
  ``photograph`` component per photograph of the eye (its outcome), and the referable-DR probability of each
  *graded* photograph in %.
- ``Device`` — the model, as for one image.

For a body from outside, the exam it states is re-derived by the rule (each photograph's outcome is first
checked against its own numbers by :func:`service.screening.payload.checked_outcome`, then the exam rule is applied,
:func:`service.screening.exam.exam_result`): a body whose stated outcome contradicts it raises ``ValueError`` and
is never rendered into a clinical document. An exam just graded by the service passes its typed
:class:`~service.screening.exam.ExamResult` instead, and the eyes are rendered from that value.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from models.outcome.decision import EXAM_OUTCOME_TEXT, OUTCOME_TEXT, Eye, ScreeningOutcome
from service.interop.fhir import (
    NOT_FOR_CLINICAL_USE,
    REQUEST_ID_SYSTEM,
    SNOMED,
    UCUM,
    _code,
    _observation,
    _percent,
    _urn,
    collection_bundle,
    screening_report,
    stamp_of,
)
from service.screening.exam import ExamResult, EyeResult, exam_result
from service.screening.payload import checked_outcome

EXAM_ID_SYSTEM = "urn:radial-screen:exam-id"
PATIENT_REF_SYSTEM = "urn:radial-screen:patient-ref"
DICOM_UID_SYSTEM = "urn:dicom:uid"  # FHIR's system for DICOM UIDs (ImagingStudy.identifier)
LATERALITY: dict[Eye, tuple[str, str]] = {  # SNOMED CT laterality qualifier values
    Eye.RIGHT: ("24028007", "Right (qualifier value)"),
    Eye.LEFT: ("7771000", "Left (qualifier value)"),
}


def checked_exam(body: dict[str, Any]) -> ExamResult:
    """The exam re-derived from its photographs; ``ValueError`` if the body states another outcome."""
    images = body.get("images")
    if not isinstance(images, list):
        raise ValueError("exam response lacks 'images'; expected the /v1/exams JSON")
    exam = exam_result((Eye(im["eye"]), checked_outcome(im["result"])) for im in images)
    stated = body.get("outcome")
    if stated != exam.outcome.value:
        raise ValueError(f"exam outcome {stated!r} contradicts its photographs, which give {exam.outcome.value!r}")
    return exam


def _eye_observation(entry: EyeResult, body: dict[str, Any], device_ref: str, issued: str) -> dict[str, Any]:
    eye = entry.eye
    code, display = LATERALITY[eye]
    components: list[dict[str, Any]] = [
        {
            "code": _code("laterality", "Laterality of the eye photographed"),
            "valueCodeableConcept": {"coding": [{"system": SNOMED, "code": code, "display": display}],
                                     "text": f"{eye.value} eye"},
        },
        {
            "code": _code("photographs", "Photographs of this eye in the exam"),
            "valueQuantity": {"value": entry.photographs, "unit": "1", "system": UCUM, "code": "1"},
        },
    ]
    for image in body["images"]:
        if image["eye"] != eye.value:
            continue
        result = image["result"]
        photo = ScreeningOutcome(result["outcome"])
        components.append({"code": _code("photograph-outcome", f"Outcome of photograph {image['index'] + 1}"),
                           "valueCodeableConcept": _code(photo.value, OUTCOME_TEXT[photo])})
        if photo is not ScreeningOutcome.RETAKE_UNGRADABLE:  # an ungradable photograph's probability is no finding
            number = image["index"] + 1
            components.append({
                "code": _code("referable-dr-probability", f"Probability of referable DR, photograph {number}"),
                "valueQuantity": _percent(float(result["diagnosis"]["referable_dr_probability"])),
            })
    return _observation(
        _code("eye-screening-outcome", "Diabetic retinopathy screening outcome of one eye"),
        device_ref,
        issued,
        bodySite=_code(f"{eye.value}-eye", f"{eye.value.capitalize()} eye"),
        valueCodeableConcept=_code(entry.outcome.value, entry.reason),
        component=components,
    )


def to_fhir_exam_bundle(body: dict[str, Any], *, exam: ExamResult | None = None,
                        issued: datetime | None = None) -> dict[str, Any]:
    """Render one ``/v1/exams`` response dict as a FHIR R4 ``Bundle`` (module docstring).

    ``exam``: the exam just graded in this process; ``None`` (a body from outside) re-derives it from the body's
    photographs and checks the stated outcome (:func:`checked_exam`, ``ValueError`` on a contradiction).
    """
    request_id = str(body.get("request_id") or uuid.uuid4())
    stamp = stamp_of(issued)
    exam = checked_exam(body) if exam is None else exam
    outcome = exam.outcome
    device_ref = _urn(request_id, "device")
    observations = {f"eye-{eye.value}": _eye_observation(exam.eyes[eye], body, device_ref, stamp) for eye in Eye}
    model = body.get("model") or {}
    conclusion = (
        f"{exam.reason} Model {model.get('name', '?')} {model.get('version', '?')} "
        f"(sha256 {str(model.get('sha256', ''))[:12]}), trained on {model.get('training_data', 'unstated')} data. "
        f"{NOT_FOR_CLINICAL_USE}"
    )
    identifiers = [{"system": REQUEST_ID_SYSTEM, "value": request_id}]
    if body.get("exam_id"):
        identifiers.append({"system": EXAM_ID_SYSTEM, "value": str(body["exam_id"])})
    report = screening_report(
        request_id, stamp, identifiers, observations,
        code=("referable-dr-screening-exam", "Referable DR screening exam (both eyes)"),
        text="Automated referable diabetic retinopathy screening of one visit, both eyes (research prototype)",
        conclusion=conclusion, conclusion_code=_code(outcome.value, EXAM_OUTCOME_TEXT[outcome]),
    )
    if body.get("study_uid"):
        report["imagingStudy"] = [{"identifier": {"system": DICOM_UID_SYSTEM, "value": f"urn:oid:{body['study_uid']}"},
                                   "display": "The DICOM study of the photographs"}]
    if body.get("patient_ref"):
        report["subject"] = {"identifier": {"system": PATIENT_REF_SYSTEM, "value": str(body["patient_ref"])}}
    return collection_bundle(request_id, stamp, report, observations, model)
