"""DICOMweb STOW-RS without HTTP: the ``multipart/related`` body split into instances, and the standard response.

``split_related(content_type, body)`` parses the request body with python-multipart's ``MultipartParser`` (the
parser behind Starlette's forms) and returns each part's bytes; a body that is not ``multipart/related`` with
``application/dicom`` parts raises :class:`StowRefused` (the router answers 415 / 400).

``store_all(parts, spool, ...)`` receives each part (:func:`service.pacs.receive.receive`: bounded, checked,
written durably to the spool), and returns a :class:`StowOutcome`: the HTTP status PS3.18 §10.5.3 prescribes
(200 every instance stored, 202 some failed, 409 none stored) and the response body in the DICOM JSON model
(PS3.18 Annex F), built by pydicom: Referenced SOP Sequence (0008,1199) for the stored instances, Failed SOP
Sequence (0008,1198) with each Failure Reason (0008,1197).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydicom.dataset import Dataset
from python_multipart import MultipartParser
from python_multipart.multipart import parse_options_header

from service.pacs.intake import Accepted, Refused
from service.pacs.receive import receive
from service.pacs.store import Spool

DICOM_MEDIA_TYPE = "application/dicom"
DICOM_JSON_MEDIA_TYPE = "application/dicom+json"


class StowRefused(Exception):  # noqa: N818 (a refusal, not a bug)
    """The request as a whole is not a STOW-RS body; ``status`` is 415 (media type) or 400 (malformed)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


def split_related(content_type: str, body: bytes) -> list[bytes]:
    """The bytes of each ``application/dicom`` part of a ``multipart/related`` body (module docstring)."""
    media, params = parse_options_header(content_type)
    if media != b"multipart/related":
        raise StowRefused(415, "Send multipart/related; type=\"application/dicom\" (DICOMweb STOW-RS).")
    declared = params.get(b"type", b"application/dicom").decode("latin-1").lower()
    if declared != DICOM_MEDIA_TYPE:
        raise StowRefused(415, f"Only application/dicom parts are stored (the body declares {declared[:64]!r}).")
    boundary = params.get(b"boundary")
    if not boundary:
        raise StowRefused(400, "The multipart/related Content-Type has no boundary.")
    parts: list[bytearray] = []
    types: list[str] = []
    header: dict[str, bytearray] = {"field": bytearray(), "value": bytearray()}

    def on_part_begin() -> None:
        parts.append(bytearray())
        types.append(DICOM_MEDIA_TYPE)

    def on_part_data(data: bytes, start: int, end: int) -> None:
        parts[-1] += data[start:end]

    def on_header_field(data: bytes, start: int, end: int) -> None:
        header["field"] += data[start:end]

    def on_header_value(data: bytes, start: int, end: int) -> None:
        header["value"] += data[start:end]

    def on_header_end() -> None:
        if bytes(header["field"]).strip().lower() == b"content-type":
            types[-1] = parse_options_header(bytes(header["value"]))[0].decode("latin-1").lower()
        header["field"], header["value"] = bytearray(), bytearray()

    parser = MultipartParser(boundary, {
        "on_part_begin": on_part_begin, "on_part_data": on_part_data, "on_header_field": on_header_field,
        "on_header_value": on_header_value, "on_header_end": on_header_end,
    })
    try:
        parser.write(body)
        parser.finalize()
    except Exception as exc:  # python-multipart's errors on a malformed body
        raise StowRefused(400, "The multipart/related body is malformed.") from exc
    if not parts:
        raise StowRefused(400, "The multipart/related body holds no part.")
    wrong = sorted({t for t in types if t != DICOM_MEDIA_TYPE})
    if wrong:
        raise StowRefused(415, f"Only application/dicom parts are stored; the body has {', '.join(wrong)[:128]}.")
    return [bytes(p) for p in parts]


@dataclass
class StowOutcome:
    stored: list[Accepted] = field(default_factory=list)
    failed: list[Refused] = field(default_factory=list)

    @property
    def status(self) -> int:
        if not self.failed:
            return 200
        return 202 if self.stored else 409

    def body(self) -> dict[str, Any]:
        """The STOW-RS response in the DICOM JSON model."""
        ds = Dataset()
        if self.stored:
            ds.ReferencedSOPSequence = [_reference(a.sop_class_uid, a.sop_instance_uid) for a in self.stored]
        if self.failed:
            items = []
            for refused in self.failed:
                item = _reference(refused.sop_class_uid or "", refused.sop_instance_uid or "")
                item.FailureReason = refused.status
                items.append(item)
            ds.FailedSOPSequence = items
        return ds.to_json_dict()


def _reference(sop_class: str, sop_instance: str) -> Dataset:
    item = Dataset()
    item.ReferencedSOPClassUID = sop_class
    item.ReferencedSOPInstanceUID = sop_instance
    return item


def store_all(parts: list[bytes], spool: Spool, *, max_bytes: int, max_instances: int,
              study_uid: str | None = None) -> StowOutcome:
    """Receive each part (:func:`service.pacs.receive.receive`: blocking, one fsync per instance); ``study_uid``
    from the URL, when given, must be each instance's."""
    outcome = StowOutcome()
    for data in parts:
        verdict = receive(data, spool, max_bytes=max_bytes, max_instances=max_instances, study_uid=study_uid)
        if isinstance(verdict, Refused):
            outcome.failed.append(verdict)
        else:
            outcome.stored.append(verdict)
    return outcome
