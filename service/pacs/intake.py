"""What an instance must be to be stored, for both network paths (STOW-RS and C-STORE), from its header only.

:func:`check_instance` reads a Part-10 instance with the service's DICOM reader
(:func:`service.inference.dicom.read_dicom_tags`; it never logs a tag) and answers :class:`Accepted` or
:class:`Refused` with the DIMSE status the standard gives for the case, which the STOW-RS response carries as its
Failure Reason (PS3.18 §10.5.3) and the C-STORE SCP returns (PS3.4 Annex B.2.3):

| case                                                       | status |
| ---------------------------------------------------------- | ------ |
| not an Ophthalmic Photography 8/16 bit instance            | 0x0122 SOP Class not supported |
| a transfer syntax the decoder does not read                | 0xC122 Transfer Syntax not supported |
| no StudyInstanceUID / SOPInstanceUID, no or B/U laterality | 0xA900 Data Set does not match SOP Class |
| not a parsable DICOM data set, or one pydicom had to repair | 0xC000 Cannot understand |
| more than 1 MiB of header before the pixel data             | 0xC000 Cannot understand |

Image Laterality is Type 1 in the Ophthalmic Photography Image module, so its absence is a data set that does not
match its class; an image of both eyes (``B``) cannot be graded per eye and is refused the same way. "Repair": pydicom
reads past corrupt bytes by guessing (another VR, a missing delimiter, an unknown character set) and warns; a data
set it had to guess at, or whose SOP Class UID is not a UID, is not understood rather than graded on guesses. The
pixels are decoded when the study is graded (a photograph that fails then is answered ``retake_ungradable``).
The header is read with the service's bounds (``service.inference.dicom_header``): the transfer syntax from the file
meta first (a deflated data set is refused, never inflated), at most 1 MiB of elements before the pixel data.
"""

from __future__ import annotations

import io
import re
import warnings
from dataclasses import dataclass
from typing import Any

from models.decision import Eye
from service.inference.dicom import ACCEPTED_SYNTAXES, read_dicom_tags
from service.inference.imaging import ImageRejected

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


@dataclass(frozen=True)
class Refused:
    status: int
    reason: str  # plain words, no identifier
    sop_instance_uid: str | None = None  # for the STOW response's FailedSOPSequence
    sop_class_uid: str | None = None


_UID = re.compile(r"^[0-9][0-9.]{0,63}$")


def _header(data: bytes) -> tuple[Any, bool]:
    """The header, every element converted, and whether pydicom had to repair anything while reading it (a
    warning: it guesses past corrupt bytes; the warnings are kept out of the logs, they may quote values)."""
    import pydicom

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
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
        tags = read_dicom_tags(data)  # quiets pydicom first; corrupt -> ImageRejected
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
    if not sop_instance or not tags.study_uid:
        return Refused(DATASET_DOES_NOT_MATCH, "SOPInstanceUID or StudyInstanceUID missing", **ids)
    if tags.laterality is None:
        return Refused(DATASET_DOES_NOT_MATCH, "ImageLaterality is not R or L: the eye is unknown", **ids)
    return Accepted(tags.study_uid, sop_instance, sop_class, tags.laterality, tags.patient_id)
