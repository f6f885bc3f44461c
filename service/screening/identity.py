"""Whether the photographs sent as one exam can be one patient's visit: the identity rules of an exam.

An exam's outcome speaks for one patient, so its photographs must not be able to come from two patients, two
visits, or one eye photographed once and sent twice. Plain Python (no FastAPI): ``POST /v1/exams`` turns an
:class:`ExamIdentityError` into a 422, the PACS worker's grading (``service.pacs.grading``) raises it for a
spooled study, and the batch job's exam rows use :func:`cross_eye_duplicate` and :func:`distinct` for its error
rows.

The rules, checked in this order over the parts of one exam:

1. A DICOM part's StudyInstanceUID must obey the DICOM UID grammar (:mod:`service.screening.identifiers`), since it
   becomes the exam's id.
2. **One study**: the DICOM parts carry at most one StudyInstanceUID.
3. **One patient**: the DICOM parts carry at most one PatientID (an absent one counts as a value of its own
   when another part has one: the parts cannot be shown to be the same patient's).
4. **No part outside the study**: once one part carries a DICOM identity (a StudyInstanceUID or a PatientID),
   every part must be DICOM with the same one. A JPEG or PNG, or a DICOM file without those tags, cannot be
   shown to belong to that study, so it is refused rather than joined to it (send every photograph of the visit
   as DICOM of the one study, or none as DICOM: plain photographs carry no identity and the client vouches for
   them by sending them together).
5. **One photograph, one eye** (:func:`check_one_photograph_per_eye`): the same photograph sent as both the
   right and the left eye is refused: the visit would be answered for an eye that was never photographed. The
   same photograph is identical bytes (sha256 of the file) or, once decoded, identical pixels
   (``PreparedImage.pixel_sha256``, ``service.inference.prepare.pixel_digest``): two DICOM files that differ
   only in ImageLaterality or SOPInstanceUID, or a JPEG and its copy with other EXIF bytes, are one photograph.
   The pixel comparison is exact (no false matches); the same photograph re-encoded, resized, cropped, rotated
   or mirrored is not caught by it. A part the decoder refused has no pixel digest and is compared by its bytes
   only. The same photograph twice for one eye is harmless to the outcome and allowed.

Where the pixels are compared: ``POST /v1/exams`` checks every rule once its parts are decoded (each part is
read and its header parsed in the decode worker), before the forward; the PACS worker checks rules 1-5 on the
headers and bytes before decoding anything, then rule 5 again on the decoded pixels before scoring; the batch
job compares the decoded pixels of the photographs of each exam with both eyes.

Messages name parts by their position and never quote a UID or a PatientID.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from models.outcome.decision import Eye
from service.screening.identifiers import UID_RULE, is_dicom_uid

T = TypeVar("T", bound=Hashable)


class ExamIdentityError(ValueError):
    """The parts of an exam cannot be one patient's visit; the message says why, naming parts by number."""


@dataclass(frozen=True)
class PartIdentity:
    """What one part of an exam says about whose visit it is. ``number`` counts from 1 in request order."""

    number: int
    eye: Eye
    sha256: str
    dicom: bool
    study_uid: str | None = None  # normalised (service.screening.identifiers.normalised_uid)
    patient_id: str | None = None
    pixel_sha256: str | None = None  # PreparedImage.pixel_sha256 once decoded; None before, or when refused


def content_hash(data: bytes) -> str:
    """sha256 hex of a photograph's bytes: two parts with the same hash are the same photograph."""
    return hashlib.sha256(data).hexdigest()


def distinct(values: Iterable[T]) -> list[T]:
    """The distinct values in order of first appearance."""
    return list(dict.fromkeys(values))


def cross_eye_duplicate(photos: Iterable[tuple[str, Eye, str | None]]) -> tuple[str, str] | None:
    """The first (right, left) pair of labels whose digests are equal, among ``(label, eye, digest)``: content
    hashes or pixel digests, never the two mixed; a photograph without a digest (``None``) is not compared."""
    first_of: dict[Eye, dict[str, str]] = {Eye.RIGHT: {}, Eye.LEFT: {}}
    for label, eye, sha in photos:
        if sha is not None:
            first_of[Eye(eye)].setdefault(sha, label)
    for sha, right in first_of[Eye.RIGHT].items():
        if sha in first_of[Eye.LEFT]:
            return right, first_of[Eye.LEFT][sha]
    return None


def _parts(numbers: Sequence[int]) -> str:
    return ("part " if len(numbers) == 1 else "parts ") + ", ".join(str(n) for n in numbers)


def check_exam_identity(parts: Sequence[PartIdentity]) -> str | None:
    """The exam's DICOM StudyInstanceUID (``None`` when no part carries one) once every rule of the module
    docstring holds; raises :class:`ExamIdentityError` naming the first rule broken."""
    for part in parts:
        if part.study_uid is not None and not is_dicom_uid(part.study_uid):
            raise ExamIdentityError(f"part {part.number}: the DICOM StudyInstanceUID is not valid ({UID_RULE})")
    studies = distinct(p.study_uid for p in parts if p.study_uid is not None)
    if len(studies) > 1:
        raise ExamIdentityError(f"the DICOM files belong to {len(studies)} different studies; send one visit per "
                                "exam")
    identified = [p for p in parts if p.dicom and (p.study_uid is not None or p.patient_id is not None)]
    if identified:
        patients = distinct(p.patient_id for p in parts if p.dicom)
        if len(patients) > 1:
            raise ExamIdentityError(
                f"the DICOM files carry {len(patients)} different PatientIDs (an absent one counts); an exam is "
                "one patient's visit")
        anchor = identified[0]
        outside = [p.number for p in parts if not p.dicom or (p.study_uid, p.patient_id) != (anchor.study_uid,
                                                                                           anchor.patient_id)]
        if outside:
            raise ExamIdentityError(
                f"{_parts(outside)} cannot be shown to belong to the DICOM study of part {anchor.number} (not DICOM, "
                "or without its StudyInstanceUID); send every photograph of the visit as DICOM of one study, or "
                "none as DICOM")
    check_one_photograph_per_eye(parts)
    return studies[0] if studies else None


def check_one_photograph_per_eye(parts: Sequence[PartIdentity]) -> None:
    """Rule 5 alone: raises :class:`ExamIdentityError` when a right-eye and a left-eye part are the same photograph,
    by identical bytes, else by identical decoded pixels (parts without a pixel digest are compared by bytes)."""
    by_bytes: list[str | None] = [p.sha256 for p in parts]
    for what, digests in (("identical bytes", by_bytes), ("identical decoded pixels", [p.pixel_sha256 for p in parts])):
        pair = cross_eye_duplicate((str(p.number), p.eye, d) for p, d in zip(parts, digests, strict=True))
        if pair is not None:
            raise ExamIdentityError(
                f"parts {pair[0]} (right eye) and {pair[1]} (left eye) are the same photograph ({what}); "
                "one photograph cannot stand for both eyes")
