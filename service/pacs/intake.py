"""What an instance must be to be stored, for both network paths (STOW-RS and C-STORE), from its header only.

:func:`check_instance` reads a Part-10 instance with the service's bounded DICOM header reader
(:func:`service.inference.dicom_header.read_header`; it never logs a tag) and answers :class:`Accepted` or
:class:`Refused` with the DIMSE status the standard gives for the case, which the STOW-RS response carries as its
Failure Reason (PS3.18 §10.5.3) and the C-STORE SCP returns (PS3.4 Annex B.2.3):

| case                                                             | status |
| ---------------------------------------------------------------- | ------ |
| not an Ophthalmic Photography 8/16 bit instance                  | 0x0122 SOP Class not supported |
| a transfer syntax the decoder does not read                      | 0xC122 Transfer Syntax not supported |
| no Study / Series / SOP Instance UID, or one not a UID as sent   | 0xA900 Data Set does not match SOP Class |
| no ImageLaterality, or one not R or L (``r``, ``B``, ``U``)      | 0xA900 Data Set does not match SOP Class |
| not a parsable DICOM data set, or one pydicom had to repair      | 0xC000 Cannot understand |
| more than 1 MiB of header before the pixel data                  | 0xC000 Cannot understand |

**Identity, exactly as received.** StudyInstanceUID, SeriesInstanceUID and SOPInstanceUID (the SR references all
three) are read from the raw element value and must obey the DICOM UID grammar
(:func:`service.screening.identifiers.is_dicom_uid`: digits and dots, no component empty or with a leading
zero, at most 64 characters) as they are, a single trailing NUL (the UI padding) being the only padding
allowed: a UID with a trailing or leading space would file the photograph under another study key than the same
UID without it.

**Laterality.** Image Laterality (0020,0062) is Type 1 in the Ophthalmic Photography Image module, so its absence
is a data set that does not match its class; the series' Laterality (0020,0060) is not read in its place (it does
not name the eye of each image). Its value is read raw: a CS value is upper case, so ``R`` or ``L`` (space padding
allowed) and nothing else; ``r`` is refused, and an image of both eyes (``B``) or of an unknown one (``U``)
cannot be graded per eye. These rules are the intake's own: ``POST /v1/predict`` and ``/v1/exams`` read the eye
with :func:`service.inference.dicom.read_dicom_tags` (ImageLaterality, else Laterality, in either case) and do not
require it.

"Not parsable" includes a pixel data element written with a VR pixel data cannot have (not OB, OW or UN).
"Repaired": pydicom reads past corrupt bytes by guessing (another VR, a missing delimiter, an unknown character set)
and warns; a data set it had to guess at, or whose SOP Class UID is not a UID, is not understood rather than graded
on guesses. The pixels are decoded when the study is graded (a photograph that fails then is answered
``retake_ungradable``); at receipt only the sha256 of the raw PixelData element value is taken
(:attr:`Accepted.pixel_sha256`, the value as stored, encapsulated fragments included, up to the end of the
element), which :mod:`service.pacs.receive` compares between the eyes of a study.
The header is read with the service's bounds (``service.inference.dicom_header``): the transfer syntax from the file
meta first (a deflated data set is refused, never inflated), at most 1 MiB of elements before the pixel data.
The rules of a study (its bound, one patient, one photograph per eye) are :mod:`service.pacs.receive`'s.
"""

from __future__ import annotations

import hashlib
import io
import re
import struct
import threading
import warnings
from dataclasses import dataclass
from typing import Any

from models.outcome.decision import Eye
from service.inference.dicom import ACCEPTED_SYNTAXES
from service.inference.dicom_header import DicomHeader, corrupt_is_rejected, pixel_value, read_header
from service.inference.imaging import ImageRejected
from service.screening.identifiers import is_dicom_uid

OP_8BIT = "1.2.840.10008.5.1.4.1.1.77.1.5.1"
OP_16BIT = "1.2.840.10008.5.1.4.1.1.77.1.5.2"
OP_SOP_CLASSES = (OP_8BIT, OP_16BIT)
TRANSFER_SYNTAXES = tuple(sorted(ACCEPTED_SYNTAXES))  # what service.inference.dicom decodes

SOP_CLASS_NOT_SUPPORTED = 0x0122
TRANSFER_SYNTAX_NOT_SUPPORTED = 0xC122
DATASET_DOES_NOT_MATCH = 0xA900
CANNOT_UNDERSTAND = 0xC000
OUT_OF_RESOURCES = 0xA700
SUCCESS = 0x0000


@dataclass(frozen=True)
class Accepted:
    study_uid: str
    sop_instance_uid: str
    sop_class_uid: str
    eye: Eye
    patient_id: str | None = None  # compared between the instances of a study, never shown or logged
    pixel_sha256: str | None = None  # sha256 of the raw PixelData value; None without pixel data


@dataclass(frozen=True)
class Refused:
    status: int
    reason: str  # plain words, no identifier
    sop_instance_uid: str | None = None  # for the STOW response's FailedSOPSequence
    sop_class_uid: str | None = None


_UID = re.compile(r"^[0-9][0-9.]{0,63}$")
STUDY_INSTANCE_UID = 0x0020000D
SOP_INSTANCE_UID = 0x00080018
SERIES_INSTANCE_UID = 0x0020000E
IMAGE_LATERALITY = 0x00200062
SERIES_LATERALITY = 0x00200060
_EYES = {"R": Eye.RIGHT, "L": Eye.LEFT}
_SEQUENCE_END = struct.pack("<HHI", 0xFFFE, 0xE0DD, 0)  # (FFFE,E0DD) Sequence Delimitation Item, length 0
_ITEM = 0xFFFEE000


@dataclass(frozen=True)
class _Raw:
    """What the intake reads from the bounded header: raw values (None when the element is absent)."""

    study_uid: str | None
    sop_instance_uid: str | None
    series_uid: str | None
    image_laterality: str | None
    series_laterality: bool
    patient_id: str | None
    pixel_sha256: str | None


def _raw_text(dataset: Any, tag: int) -> str | None:
    """The element's value bytes as sent (latin-1: one character per byte), before pydicom strips or converts."""
    elem = dataset.get_item(tag)
    if elem is None:
        return None
    value = elem.value
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return None if value is None else str(value)  # already converted (not on a fresh read)


def _encapsulated_end(value: memoryview) -> int:
    """Where encapsulated pixel data ends: after its Sequence Delimitation Item (items walked by their lengths),
    or at the end of the file when the items run past it."""
    at = 0
    while at + 8 <= len(value):
        group, element, length = struct.unpack_from("<HHI", value, at)
        at += 8
        if (group << 16 | element) != _ITEM:
            return at if bytes(value[at - 8 : at]) == _SEQUENCE_END else len(value)
        at += length
    return len(value)


def _pixel_sha256(data: bytes, header: DicomHeader) -> str | None:
    if header.pixel_at is None:
        return None
    value, encapsulated = pixel_value(data, header)
    if encapsulated:
        value = value[: _encapsulated_end(value)]
    return hashlib.sha256(value).hexdigest()


def _read_raw(data: bytes) -> _Raw:
    """The intake's reading of the header, bounded as the decoder's (``ImageRejected`` on a bad syntax, a bomb, or
    bytes that do not parse)."""
    with corrupt_is_rejected():
        header = read_header(data, accepted=ACCEPTED_SYNTAXES, hint="a transfer syntax the service decodes")
        ds = header.dataset
        raw = {tag: _raw_text(ds, tag)
               for tag in (STUDY_INSTANCE_UID, SOP_INSTANCE_UID, SERIES_INSTANCE_UID, IMAGE_LATERALITY)}
        patient = ds.get("PatientID")
        return _Raw(raw[STUDY_INSTANCE_UID], raw[SOP_INSTANCE_UID], raw[SERIES_INSTANCE_UID], raw[IMAGE_LATERALITY],
                    SERIES_LATERALITY in ds, str(patient).strip() or None if patient is not None else None,
                    _pixel_sha256(data, header))


def _exact_uid(raw: str) -> str | None:
    """The UID of a raw UI value that is one exactly as sent (one trailing NUL pad allowed), else None."""
    uid = raw[:-1] if raw.endswith("\x00") else raw
    return uid if is_dicom_uid(uid) else None


def _laterality(raw: _Raw) -> Eye | str:
    """The eye, or why there is none (module docstring: Type 1, upper case R or L)."""
    if raw.image_laterality is None or not raw.image_laterality.strip(" "):
        if raw.series_laterality:
            return ("ImageLaterality (0020,0062) missing: it is Type 1 in the Ophthalmic Photography Image module, "
                    "and the series' Laterality (0020,0060) does not name the eye of an image")
        return "ImageLaterality (0020,0062) missing (Type 1): the eye is unknown"
    side = raw.image_laterality.strip(" ")
    if side in _EYES:
        return _EYES[side]
    if side.upper() in _EYES:
        return "ImageLaterality must be R or L in upper case (a code string): lower case is refused"
    return "ImageLaterality is not R or L: an image of both eyes, or of an unknown eye, cannot be graded per eye"


_WARNINGS = threading.Lock()  # the warnings machinery is process-wide: one intake reading holds it at a time


def _header(data: bytes) -> tuple[Any, bool]:
    """The header, every element converted, and whether pydicom had to repair anything while reading it (a
    warning: it guesses past corrupt bytes; the warnings are kept out of the logs, they may quote values).

    Only this thread's warnings count: receivers run in threads (C-STORE associations, STOW-RS parts, the decode
    pool), and a warning another thread raises meanwhile must not refuse this instance. Theirs are dropped while
    the reading lasts (never shown: they may quote values too)."""
    import pydicom

    me = threading.get_ident()
    caught: list[object] = []

    def record(message: object, *args: object, **kwargs: object) -> None:
        if threading.get_ident() == me:
            caught.append(message)

    with _WARNINGS, warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        header = pydicom.dcmread(io.BytesIO(data), stop_before_pixels=True)
        for _ in header.iterall():  # values are converted lazily: convert them all now
            pass
    return header, bool(caught)


def _uid(value: Any) -> str:
    """A UID to echo back (STOW response), or '' for a value that is not one."""
    text = str(value or "").strip()
    return text if _UID.match(text) else ""


def check_instance(data: bytes) -> Accepted | Refused:
    """The verdict on one received Part-10 instance (module docstring)."""
    try:
        raw = _read_raw(data)  # quiets pydicom first; bad syntax, bomb or corrupt -> ImageRejected
        header, repaired = _header(data)
        sop_class = _uid(header.get("SOPClassUID") or header.file_meta.get("MediaStorageSOPClassUID"))
        sop_instance = _uid(header.get("SOPInstanceUID"))
        syntax = _uid(header.file_meta.get("TransferSyntaxUID"))
    except ImageRejected as exc:
        if exc.problem_type == "unsupported-media-type":  # the file meta's syntax, refused before the data set is read
            return Refused(TRANSFER_SYNTAX_NOT_SUPPORTED, "transfer syntax not decoded by this service")
        return Refused(CANNOT_UNDERSTAND, "not a readable DICOM data set")
    except Exception:  # pydicom's failure modes on hostile bytes are open-ended (see service.inference.dicom)
        return Refused(CANNOT_UNDERSTAND, "not a readable DICOM data set")
    ids = {"sop_instance_uid": sop_instance or None, "sop_class_uid": sop_class or None}
    if repaired or (header.get("SOPClassUID") is not None and not sop_class):
        return Refused(CANNOT_UNDERSTAND, "the data set does not parse cleanly (corrupt or not DICOM)", **ids)
    if sop_class not in OP_SOP_CLASSES:
        return Refused(SOP_CLASS_NOT_SUPPORTED, "only Ophthalmic Photography 8/16 bit images are graded", **ids)
    if syntax not in ACCEPTED_SYNTAXES:
        return Refused(TRANSFER_SYNTAX_NOT_SUPPORTED, "transfer syntax not decoded by this service", **ids)
    if not (raw.sop_instance_uid or "").strip("\x00 ") or not (raw.study_uid or "").strip("\x00 "):
        return Refused(DATASET_DOES_NOT_MATCH, "SOPInstanceUID or StudyInstanceUID missing", **ids)
    for name, value in (("StudyInstanceUID", raw.study_uid), ("SOPInstanceUID", raw.sop_instance_uid),
                        ("SeriesInstanceUID", raw.series_uid)):  # each is referenced by the SR
        if _exact_uid(value or "") is None:
            return Refused(DATASET_DOES_NOT_MATCH, f"{name} missing or not a valid UID as received: digits and dots, "
                           "at most 64 characters, no component with a leading zero, a trailing NUL the only "
                           "padding allowed", **ids)
    eye = _laterality(raw)
    if not isinstance(eye, Eye):
        return Refused(DATASET_DOES_NOT_MATCH, eye, **ids)
    study_uid, sop_uid = _exact_uid(raw.study_uid or ""), _exact_uid(raw.sop_instance_uid or "")
    assert study_uid is not None and sop_uid is not None  # checked above
    return Accepted(study_uid, sop_uid, sop_class, eye, raw.patient_id, raw.pixel_sha256)
