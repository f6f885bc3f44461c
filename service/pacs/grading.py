"""A spooled study -> its graded exam: the one exam assembly of ``POST /v1/exams`` (``service.screening``).

The study's instances go through :func:`service.screening.grading.grade_exam` in the reserved lane: admitted as a
whole, then the same decoder, quality gate, micro-batcher and draws as every HTTP answer, and the exam rule's typed
:class:`~service.screening.exam.ExamResult`. The exam identity rules run on the headers and file bytes before
anything is decoded, and "one photograph, one eye" again on the decoded pixels before anything is scored (two
instances of one photograph that differ only in laterality or SOPInstanceUID). A photograph the decoder refuses
(corrupt pixel data, a frame beyond the pixel limit) cannot be graded: it is answered ``retake_ungradable`` with
the decoder's reason, never dropped (it has no pixel digest and is compared by its bytes only).

:func:`exam_record` is what the spool keeps beside the SR: the exam without any identifier, and its FHIR
DiagnosticReport, which names the same study (``imagingStudy`` by Study Instance UID).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pydicom

from models.outcome.decision import Eye
from service.inference.imaging import ImageRejected
from service.inference.prepare import PreparedImage
from service.model_host import ModelHost
from service.pacs.intake import Accepted, check_instance
from service.pacs.sr import GradedExam, GradedImage
from service.pacs.store import StudyFolder
from service.screening.grading import grade_exam
from service.screening.identity import PartIdentity, check_exam_identity, check_one_photograph_per_eye, content_hash


async def grade_study(host: ModelHost, study: StudyFolder) -> GradedExam | None:
    """Score every instance of ``study`` and apply the exam rule; None when no instance is usable any more.

    The instances must pass the exam identity rules of ``POST /v1/exams`` (:mod:`service.screening.identity`: one
    study, one PatientID, no photograph as both eyes, by its bytes or its decoded pixels), else
    :class:`~service.screening.identity.ExamIdentityError` (its message names instances by number, never an
    identifier) and nothing is scored. The study is admitted as a whole (``ModelHost.admit``) before decoding."""
    headers: list[Any] = []
    eyes: list[Eye] = []
    payloads: list[bytes] = []
    identities: list[PartIdentity] = []
    for path in study.instances:
        data = path.read_bytes()
        verdict = check_instance(data)
        if not isinstance(verdict, Accepted):  # refused at receipt, so only a file damaged on disk lands here
            continue
        headers.append(pydicom.dcmread(io.BytesIO(data), stop_before_pixels=True))
        eyes.append(verdict.eye)
        payloads.append(data)
        identities.append(PartIdentity(len(identities) + 1, verdict.eye, content_hash(data), True,
                                       verdict.study_uid, verdict.patient_id))
    if not payloads:
        return None
    check_exam_identity(identities)  # headers and bytes: nothing is decoded for a study that breaks them

    def eyes_of(prepared: Sequence[PreparedImage | ImageRejected]) -> list[Eye]:
        check_one_photograph_per_eye([
            replace(part, pixel_sha256=None if isinstance(image, ImageRejected) else image.pixel_sha256)
            for part, image in zip(identities, prepared, strict=True)])
        return eyes

    visit = await grade_exam(host, payloads, eyes_of, reserved=True)  # the reserved lane (service.admission)
    cal = visit.scorer.calibration
    images = [GradedImage(header, photo.eye, photo.outcome, photo.answer(visit.scorer))
              for header, photo in zip(headers, visit.photographs, strict=True)]
    return GradedExam(images, visit.result, visit.scorer.model_identity.to_dict(), visit.scorer.disclaimer,
                      thresholds=(cal.decision_threshold, cal.referral_threshold_mi))


def exam_record(graded: GradedExam, result_key: str) -> dict[str, Any]:
    """The exam JSON (``/v1/exams`` fields, no identifier) and its FHIR bundle, kept beside the SR."""
    from service.interop.fhir_exam import to_fhir_exam_bundle

    study_uid = str(graded.images[0].header.StudyInstanceUID)
    body = {
        "request_id": result_key,
        "exam_id": None,
        "patient_ref": None,
        "model": graded.model,
        **graded.result.to_fields(),
        "images": [{"index": i, "eye": im.eye.value, "format": "dicom", "result": im.result}
                   for i, im in enumerate(graded.images)],
        "disclaimer": graded.disclaimer,
    }
    fhir = to_fhir_exam_bundle({**body, "study_uid": study_uid}, exam=graded.result)
    return {"exam": body, "fhir": fhir, "sr_sop_instance_uid": graded.uids[0]}
