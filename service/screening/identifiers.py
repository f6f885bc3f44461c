"""The identifiers the service echoes back, and the one rule each obeys.

Whatever a client or a file sends as an identifier comes back in JSON answers, FHIR ``identifier`` values
and CSV cells, and from there into HL7 v2 interfaces and spreadsheets. So each is checked before it is
echoed, and refused rather than repaired:

- **Opaque ids from the client** (``study_id`` on ``/v1/predict``, ``exam_id`` and ``patient_ref`` on
  ``/v1/exams``, a document's ``study_id`` on ``/v1/fhir``): 1 to :data:`OPAQUE_ID_MAX` characters of ASCII
  letters, digits and ``. _ - : /``, starting with a letter or digit (:data:`OPAQUE_ID_PATTERN`). No blanks,
  control characters, quotes, angle brackets or the HL7 v2 delimiters ``| ^ ~ \\ &``.
- **DICOM UIDs** read from a file (StudyInstanceUID): the DICOM UID grammar, digits and dots with no empty
  component, at most :data:`UID_MAX` (64) characters (PS3.5 §9.1). The trailing NUL or space that pads a UI
  value to an even length is dropped first (:func:`normalised_uid`); anything else that breaks the grammar
  (a CR, a ``<script>``, 10 KB, letters) makes the file's identity unusable and is refused.

Neither rule ever quotes the offending value in its message: identifiers are never logged or echoed in an error.
"""

from __future__ import annotations

import re

OPAQUE_ID_MAX = 64
OPAQUE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,63}$"
OPAQUE_ID_RULE = (f"1-{OPAQUE_ID_MAX} characters: ASCII letters, digits and . _ - : / (starting with a letter "
                  "or digit)")
_OPAQUE_ID_RE = re.compile(OPAQUE_ID_PATTERN)

UID_MAX = 64
UID_RULE = (f"a DICOM UID is digits and dots, at most {UID_MAX} characters, no component empty or starting with 0 "
            "unless it is 0")
_UID_RE = re.compile(r"^(?:0|[1-9][0-9]*)(?:\.(?:0|[1-9][0-9]*))*$")  # PS3.5 9.1


def is_opaque_id(value: str) -> bool:
    """True when ``value`` obeys the opaque-id rule (module docstring)."""
    return _OPAQUE_ID_RE.fullmatch(value) is not None


def normalised_uid(raw: object) -> str | None:
    """A DICOM UI value without its padding (trailing NULs and spaces, leading spaces); ``None`` when empty."""
    if raw is None:
        return None
    text = str(raw).rstrip("\x00 ").lstrip(" ")
    return text or None


def is_dicom_uid(value: str) -> bool:
    """True for a UID in the DICOM grammar (PS3.5 9.1): digits and dots, at most 64 characters, no component empty
    or with a leading zero (``1..2`` and ``1.01`` are not UIDs)."""
    return len(value) <= UID_MAX and _UID_RE.fullmatch(value) is not None
