"""POST /v1/exams: the photographs of one patient visit in, one patient-level outcome out.

Multipart parts ``right`` and ``left`` (repeatable: several photographs per eye), and ``image`` for DICOM
files that carry their laterality (ImageLaterality / Laterality); optional text fields ``exam_id`` and
``patient_ref`` (opaque ids: ``service.screening.identifiers``), echoed back and never logged. A DICOM file sent as
``right``/``left`` must not contradict its own laterality, and the parts must pass the exam identity rules
(``service.screening.identity``: one StudyInstanceUID, one PatientID, no plain photograph joining a DICOM study, no
photograph as both eyes, by identical bytes or identical decoded pixels).

Every photograph goes through the same path as ``/v1/predict`` (decode, quality gate, batched K-draw
forward) by the one exam assembly the PACS worker also calls (:func:`service.screening.grading.grade_exam`);
the exam is its typed :class:`~service.screening.exam.ExamResult`, rendered here as JSON or FHIR. A photograph
the service refuses fails the whole exam with that photograph's problem (status and type as on
``/v1/predict``), its detail naming the eye and part: an exam is never answered from some of its photographs
silently.

Admission before work: the form is parsed (parts above 1 MiB spool to disk) and its fields checked, then the
exam is admitted as a whole (``ModelHost.admit``) before any part is read into memory or any DICOM header is
parsed. Each part is read by the decode worker that decodes it (a part over the upload limit is refused by its
size, unread), and a DICOM header is parsed once, in that worker, under the decode deadline; its laterality,
study and patient come back with the decoded image (``PreparedImage.dicom``), with the digest of its decoded
pixels (``PreparedImage.pixel_sha256``), and the eye and identity rules are checked before the batched forward: two
parts of one photograph as both eyes are a 422 however their headers or metadata differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.datastructures import FormData, UploadFile

from models.outcome.decision import Eye
from service.api.responses import FHIR_MEDIA_TYPE, FormatQuery, fhir_response, image_result, wants_fhir
from service.api.uploads import (
    PHOTO_SCHEMA,
    _field_error,
    _media_type,
    _read_form,
    check_opaque_id,
    read_spooled,
    request_body,
)
from service.http.deps import ApiKeyDep, ModelHostDep, SettingsDep
from service.http.errors import ServiceProblem, request_id_of
from service.http.schemas import ExamResponse, problem_responses
from service.inference.imaging import ImageRejected
from service.inference.prepare import PreparedImage
from service.screening.exam import ExamResult
from service.screening.grading import grade_exam
from service.screening.identifiers import OPAQUE_ID_MAX, OPAQUE_ID_PATTERN, normalised_uid
from service.screening.identity import ExamIdentityError, PartIdentity, check_exam_identity, content_hash

router = APIRouter(tags=["exams"], dependencies=[ApiKeyDep])

FILE_FIELDS = ("right", "left", "image")
TEXT_FIELDS = ("exam_id", "patient_ref")
EXAM_LIMIT = "RADSCREEN_MAX_EXAM_IMAGES"

_EXAM_BODY = request_body({
    "right": {"type": "array", "items": PHOTO_SCHEMA, "description": "Photographs of the right eye."},
    "left": {"type": "array", "items": PHOTO_SCHEMA, "description": "Photographs of the left eye."},
    "image": {"type": "array", "items": PHOTO_SCHEMA,
              "description": "DICOM photographs whose header gives the eye (R/L)."},
    "exam_id": {"type": "string", "maxLength": OPAQUE_ID_MAX, "pattern": OPAQUE_ID_PATTERN},
    "patient_ref": {"type": "string", "maxLength": OPAQUE_ID_MAX, "pattern": OPAQUE_ID_PATTERN},
})


@dataclass
class ExamPart:
    """One file part of the form, not yet read: the bytes stay in the spooled upload until a worker reads them."""

    index: int
    key: str  # right | left | image
    upload: UploadFile
    max_bytes: int  # RADSCREEN_MAX_UPLOAD_BYTES: a larger part is refused unread
    sha256: str | None = None  # of the bytes, once read (the same photograph as both eyes is refused)

    def read(self) -> bytes:
        """The part's bytes (blocking: called in the decode worker); at most ``max_bytes`` are ever held."""
        data = read_spooled(self.upload, self.max_bytes)
        self.sha256 = content_hash(data)
        return data

    def where(self) -> str:
        eye = "" if self.key == "image" else f"{self.key}-eye "
        return f"{eye}photograph (part {self.index + 1})"


@dataclass(frozen=True)
class Photograph:
    index: int
    eye: Eye
    filename: str | None
    dicom: bool


def _check_fields(form: FormData) -> None:
    """Every field is known and of its kind (a file where a photograph goes, text where an id goes)."""
    for key, value in form.multi_items():
        if key not in FILE_FIELDS + TEXT_FIELDS:
            raise _field_error(key, "unknown field; expected 'right', 'left', 'image', 'exam_id' or 'patient_ref'")
        if key in FILE_FIELDS and not isinstance(value, UploadFile):
            raise _field_error(key, "must be a file part (filename=...) holding a photograph, not a text field")
        if key in TEXT_FIELDS and isinstance(value, UploadFile):
            raise _field_error(key, "must be a text field, not a file part")


async def read_exam(request: Request, max_images: int, max_bytes: int
                    ) -> tuple[list[ExamPart], dict[str, str | None]]:
    """The file parts (unread) and the opaque fields of an exam form."""
    if _media_type(request) != "multipart/form-data":
        raise ServiceProblem(
            "unsupported-media-type", 415,
            "Send the exam as multipart/form-data with 'right' and 'left' file parts (or DICOM 'image' parts).",
        )
    form = await _read_form(request, max_images, limit_name=EXAM_LIMIT,
                            text_fields="optional 'exam_id' and 'patient_ref' fields")
    parts = [(key, value) for key, value in form.multi_items() if isinstance(value, UploadFile)]
    if len(parts) > max_images:
        await form.close()
        raise ServiceProblem(
            "payload-too-large", 413,
            f"The exam has {len(parts)} photographs; at most {max_images} are accepted per exam "
            f"({EXAM_LIMIT}={max_images}).",
        )
    _check_fields(form)
    if not parts:
        raise _field_error("right", "an exam needs at least one photograph: send 'right' and 'left' file parts")
    fields = {name: check_opaque_id(name, v if isinstance(v := form.get(name), str) else None)
              for name in TEXT_FIELDS}
    return [ExamPart(index, key, part, max_bytes) for index, (key, part) in enumerate(parts)], fields


def exam_photographs(parts: Sequence[ExamPart], prepared: Sequence[PreparedImage | ImageRejected]
                     ) -> tuple[list[Photograph], str | None]:
    """Each part's eye (its field, or its DICOM laterality), then the exam identity rules
    (``service.screening.identity``: one study, one patient, no photograph outside the DICOM study, no photograph as
    both eyes by its bytes or its decoded pixels; a breach is a 422 naming the parts); returns the photographs
    and the exam's DICOM study UID (if any). A refused photograph fails the exam, naming its part."""
    photographs: list[Photograph] = []
    identities: list[PartIdentity] = []
    for part, image in zip(parts, prepared, strict=True):
        if isinstance(image, ImageRejected):
            raise ImageRejected(image.problem_type, f"The {part.where()} was refused: {image.detail}")
        tags = image.dicom
        eye = Eye(part.key) if part.key != "image" else None
        study_uid = patient_id = None
        if tags is not None:
            study_uid, patient_id = normalised_uid(tags.study_uid), tags.patient_id
            if eye is not None and tags.laterality is not None and tags.laterality is not eye:
                raise _field_error(part.key, f"part {part.index + 1} was sent as the {eye.value} eye but its DICOM "
                                   f"header says {tags.laterality.value}")
            eye = eye or tags.laterality
        if eye is None:
            raise _field_error(
                "image", f"part {part.index + 1}: the eye is unknown (no DICOM ImageLaterality/Laterality R or L); "
                "send it as a 'right' or 'left' part",
            )
        assert part.sha256 is not None  # set when the decode worker read the part
        photographs.append(Photograph(part.index, eye, part.upload.filename, tags is not None))
        identities.append(PartIdentity(part.index + 1, eye, part.sha256, tags is not None, study_uid, patient_id,
                                       image.pixel_sha256))
    try:
        study_uid = check_exam_identity(identities)
    except ExamIdentityError as exc:
        raise _field_error("image" if any(p.key == "image" for p in parts) else "right", str(exc)) from None
    return photographs, study_uid


@dataclass
class ExamForm:
    """An exam form's parts; once decoded, its photographs and DICOM study (:meth:`eyes_of`)."""

    parts: list[ExamPart]
    photographs: list[Photograph] = field(default_factory=list)
    study_uid: str | None = None

    def eyes_of(self, prepared: Sequence[PreparedImage | ImageRejected]) -> list[Eye]:
        """The eye and identity rules (:func:`exam_photographs`): each part's eye, or the exam's 422."""
        self.photographs, self.study_uid = exam_photographs(self.parts, prepared)
        return [photo.eye for photo in self.photographs]


@router.post(
    "/v1/exams",
    response_model=ExamResponse,
    summary="Score one patient visit (both eyes) into one outcome",
    description=(
        "Photographs tagged with their eye (`right`, `left`, repeatable; DICOM files may come as `image` and "
        "carry their laterality). Returns the patient's outcome with its reason, each eye's outcome, and each "
        "photograph's result in the shape of `/v1/predict`. A visit with one eye is never `no_referable_dr`. "
        "`Accept: application/fhir+json` (or `?format=fhir`) returns one DiagnosticReport with one Observation "
        "per eye."
    ),
    responses={200: {"content": {FHIR_MEDIA_TYPE: {"schema": {"type": "object"}}}},
               **problem_responses(400, 401, 406, 413, 415, 422, 503)},
    openapi_extra=_EXAM_BODY,
)
async def score_exam(request: Request, host: ModelHostDep, settings: SettingsDep, format: FormatQuery = None) -> Any:
    host.require_ready()
    parts, fields = await read_exam(request, settings.max_exam_images, settings.max_upload_bytes)
    form = ExamForm(parts)
    visit = await grade_exam(host, [part.read for part in parts], form.eyes_of)
    images: list[dict[str, Any]] = []
    for photo, scored in zip(form.photographs, visit.photographs, strict=True):
        assert not isinstance(scored.scored, ImageRejected)  # exam_photographs raised for every refused part
        images.append({"index": photo.index, "eye": photo.eye.value, "filename": photo.filename,
                       "format": "dicom" if photo.dicom else "image",
                       "result": image_result(scored.scored, visit.scorer, None)})
    body = {
        "request_id": request_id_of(request),
        "exam_id": fields["exam_id"] or form.study_uid,
        "patient_ref": fields["patient_ref"],
        "model": visit.scorer.model_identity.to_dict(),
        **visit.result.to_fields(),
        "images": images,
        "disclaimer": visit.scorer.disclaimer,
    }
    if wants_fhir(request, format):
        return _fhir({**body, "study_uid": form.study_uid}, visit.result)
    return ExamResponse(**body)


def _fhir(body: dict[str, Any], exam: ExamResult) -> Response:
    def render() -> dict[str, Any]:
        from service.interop.fhir_exam import to_fhir_exam_bundle

        return to_fhir_exam_bundle(body, exam=exam)

    return fhir_response(render)
