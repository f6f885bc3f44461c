"""What the result SR carries of a source photograph's header: each value checked against its VR, kept or empty.

highdicom 0.28.2's ``ComprehensiveSR`` takes the patient and study from the first evidence data set
(``highdicom/sr/sop.py``, ``base.py``, ``base_content.py``): the nine Type 2 attributes of :data:`TYPE2`, which it
converts itself and on which it *raises* (PatientSex not M/F/O, a date that is no date); every root attribute of the
Patient and Study modules of the evidence's IOD that is present, copied element for element with the source's VR
(sequences and the clinical trial modules included); Specific Character Set, raising on valid ones it does not
take (``\\ISO 2022 IR 149``, ``ISO 2022 IR 6``); the acquisition equipment
(Manufacturer... AcquisitionDateTime) as a Contributing Equipment item; and, from every evidence data set, the
Study, Series and SOP Instance UIDs and the SOP Class UID of the evidence references.

:func:`evidence` therefore gives highdicom a new data set holding only what the SR is meant to carry:

- the four UIDs, which must be valid UIDs (``0|[1-9][0-9]*`` components, at most 64 characters); an invalid or
  missing one raises :class:`EvidenceUidInvalid` naming the attribute (the SR cannot reference such an image, and
  an SR of another study is no answer); intake is where such an instance belongs refused (:func:`invalid_uids`);
- the scalar attributes of :data:`CARRIED`: the Patient, General Study and Patient Study attributes highdicom would
  copy, less the sequences (coded items and issuers, whose macros are not checked here), the clinical trial modules
  (Type 1 attributes once present), the non-human-patient, alternative-calendar and de-identification attributes
  (their presence sets conditions on others); and the acquisition equipment attributes of :data:`EQUIPMENT`.
  A value is kept exactly as decoded when it conforms to its VR and multiplicity (pydicom's
  ``validate_value(..., RAISE)``, the DA/TM/DT grammars with no range and a real calendar date, the
  enumerated values of :data:`ENUMERATED`, no control character (a text VR's TAB/LF/FF/CR aside), no backslash
  in a single value, the VR's maximum length); otherwise the attribute is **present and empty**, never repaired
  or guessed (``f`` is not turned into ``F``: DICOM's code strings are upper case and ``f`` is not one). The
  :data:`TYPE2` attributes are present (empty) when the source leaves them out; the others are absent then.
  Characters are carried as DICOM data (``<script>`` stays those characters in an LO), never escaped.
- Specific Character Set of the evidence handed to highdicom: the source's when it is one character set without
  code extensions that highdicom and pydicom take and every carried value encodes in it, otherwise ``ISO_IR 192``
  (UTF-8: the values are text decoded by pydicom by then, so nothing is lost); highdicom refuses the others. The
  SR itself is then written in UTF-8 whatever the source's (``service.pacs.sr``: its words hold "—").

Nothing here logs or raises a value: :func:`emptied` and :func:`invalid_uids` name attributes (keywords) only, for
intake or a log line to count. Building the evidence also silences highdicom's logger once per process
(:func:`quiet_highdicom`): highdicom logs the patient name it finds suspect and the source SOP Instance UID.
"""

from __future__ import annotations

import datetime
import functools
import logging
import re
import unicodedata
from collections.abc import Iterable
from typing import Any

from highdicom.enum import SpecificCharacterSetValues
from pydicom import config
from pydicom.charset import python_encoding
from pydicom.datadict import dictionary_VM, dictionary_VR
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.multival import MultiValue
from pydicom.valuerep import MAX_VALUE_LEN, validate_value

# Type 2 in the SR's Patient and General Study modules: always present, empty when absent or non-conforming.
TYPE2 = ("PatientName", "PatientID", "PatientBirthDate", "PatientSex", "AccessionNumber", "StudyID", "StudyDate",
         "StudyTime", "ReferringPhysicianName")

# The root attributes of the Patient, General Study and Patient Study modules (highdicom's tables for the OP 8 and
# 16 bit IODs) that the SR carries, TYPE2 among them; the rest of those modules is listed in NOT_CARRIED.
CARRIED = (
    # Patient
    "PatientName", "PatientID", "IssuerOfPatientID", "TypeOfPatientID", "PatientBirthDate", "PatientBirthTime",
    "PatientSex", "QualityControlSubject", "OtherPatientNames", "PatientComments",
    # General Study
    "StudyDate", "StudyTime", "AccessionNumber", "ReferringPhysicianName", "ConsultingPhysicianName",
    "StudyDescription", "PhysiciansOfRecord", "NameOfPhysiciansReadingStudy", "StudyID", "RequestingService",
    # Patient Study
    "AdmittingDiagnosesDescription", "PatientAge", "PatientSize", "PatientBodyMassIndex", "MeasuredAPDimension",
    "MeasuredLateralDimension", "PatientWeight", "MedicalAlerts", "Allergies", "Occupation", "SmokingStatus",
    "AdditionalPatientHistory", "PregnancyStatus", "LastMenstrualDate", "ReasonForVisit", "AdmissionID",
    "ServiceEpisodeID", "ServiceEpisodeDescription", "PatientState",
)
# Scalar attributes of those modules left out on purpose (module docstring); every sequence is left out too.
NOT_CARRIED = (
    "PatientBirthDateInAlternativeCalendar", "PatientDeathDateInAlternativeCalendar", "PatientAlternativeCalendar",
    "StrainDescription", "StrainNomenclature", "StrainAdditionalInformation", "PatientSpeciesDescription",
    "PatientBreedDescription", "ResponsiblePerson", "ResponsiblePersonRole", "ResponsibleOrganization",
    "PatientSexNeutered", "PatientIdentityRemoved", "DeidentificationMethod",
)
# What highdicom's Contributing Equipment item for the image acquisition reads.
EQUIPMENT = ("Manufacturer", "ManufacturerModelName", "SoftwareVersions", "DeviceSerialNumber", "InstitutionName",
             "InstitutionalDepartmentName", "InstitutionAddress", "StationName", "AcquisitionDateTime")
UIDS = ("SOPClassUID", "SOPInstanceUID", "StudyInstanceUID", "SeriesInstanceUID")

# Enumerated Values (PS3.3) of the carried attributes that have them; a value outside is non-conforming.
ENUMERATED: dict[str, frozenset[Any]] = {
    "PatientSex": frozenset({"M", "F", "O"}),
    "QualityControlSubject": frozenset({"YES", "NO"}),
    "SmokingStatus": frozenset({"YES", "NO", "UNKNOWN"}),
    "PregnancyStatus": frozenset({1, 2, 3, 4}),
}
UTF8 = "ISO_IR 192"
# Single-valued character sets without code extensions that both highdicom and pydicom take.
_SINGLE_CHARSETS = frozenset(v.value for v in SpecificCharacterSetValues
                             if not v.value.startswith("ISO 2022") and v.value in python_encoding)

_UID = re.compile(r"(0|[1-9][0-9]*)(\.(0|[1-9][0-9]*))*")
_DATE = re.compile(r"\d{8}")
_TIME = re.compile(r"([01]\d|2[0-3])([0-5]\d((60|[0-5]\d)(\.\d{1,6})?)?)?")
_DATETIME = re.compile(r"\d{4}((0[1-9]|1[0-2])(([0-2]\d|3[01])(([01]\d|2[0-3])"
                       r"([0-5]\d((60|[0-5]\d)(\.\d{1,6})?)?)?)?)?)?([+-][01]\d[0-5]\d)?")
_TEXT_VRS = frozenset({"ST", "LT", "UT"})  # one value each; may hold TAB, LF, FF, CR and backslashes
_TEXT_CONTROLS = frozenset("\t\n\f\r")
_STRING_VRS = frozenset({"AE", "AS", "CS", "DA", "DS", "DT", "IS", "LO", "LT", "PN", "SH", "ST", "TM", "UC", "UI",
                         "UR", "UT"})


class EvidenceUidInvalid(ValueError):  # noqa: N818 (an outcome of the header, not a bug)
    """A source image's UID is missing or not a UID: the SR cannot reference it (attributes named, no value)."""

    def __init__(self, keywords: Iterable[str]) -> None:
        self.keywords = tuple(keywords)
        super().__init__(f"source image UID missing or invalid: {', '.join(self.keywords)}")


@functools.cache
def quiet_highdicom() -> None:
    """highdicom logs a patient name it finds suspect (warning) and the source SOP Instance UID (info): none of
    it may reach our logs."""
    log = logging.getLogger("highdicom")
    log.propagate = False
    log.handlers[:] = [logging.NullHandler()]


def is_uid(value: Any) -> bool:
    """A UID as PS3.5 §9.1 defines one: digits in components without leading zeros, at most 64 characters."""
    return isinstance(value, str) and len(value) <= 64 and _UID.fullmatch(value) is not None


def invalid_uids(header: Dataset) -> tuple[str, ...]:
    """The keywords of :data:`UIDS` that are missing from the header or not valid UIDs."""
    return tuple(k for k in UIDS if not is_uid(header.get(k)))


def _date(text: str) -> bool:
    """A calendar date ``YYYYMMDD`` (the DA grammar admits 20260231)."""
    try:
        datetime.datetime.strptime(text, "%Y%m%d")
    except ValueError:
        return False
    return True


def _text_conforms(vr: str, text: str) -> bool:
    """The character, length and grammar rules pydicom's validators leave out (module docstring)."""
    allowed = _TEXT_CONTROLS if vr in _TEXT_VRS else frozenset()
    if any(unicodedata.category(ch) == "Cc" and ch not in allowed for ch in text):
        return False
    if (vr not in _TEXT_VRS and "\\" in text) or len(text) > MAX_VALUE_LEN.get(vr, 1 << 32):
        return False
    if vr == "DA":
        return _DATE.fullmatch(text) is not None and _date(text)
    if vr == "TM":
        return _TIME.fullmatch(text) is not None
    if vr == "DT":
        return _DATETIME.fullmatch(text) is not None and (len(text) < 8 or not text[:8].isdigit() or _date(text[:8]))
    if vr == "PN":
        return all(group.count("^") <= 4 for group in text.split("="))
    if vr == "IS":
        return text.strip().lstrip("+-").isdigit() and -(2**31) <= int(text) <= 2**31 - 1
    return True


def _one_conforms(keyword: str, vr: str, value: Any) -> bool:
    """One value (not a multi-value) of ``keyword`` against its dictionary VR (module docstring)."""
    if vr in _STRING_VRS:
        if isinstance(value, bytes | bytearray) or (not isinstance(value, str) and vr not in {"PN", "DS", "IS"}):
            return False
        value = str(value)  # a PersonName, DSfloat or IS: its original text
        if not _text_conforms(vr, value):
            return False
    elif vr in {"US", "SS", "UL", "SL"} and (isinstance(value, bool) or not isinstance(value, int)):
        return False
    try:
        validate_value(vr, value, config.RAISE)  # its message may quote the value: never kept
    except (ValueError, TypeError):
        return False
    allowed_values = ENUMERATED.get(keyword)
    return allowed_values is None or value in allowed_values


def conforms(keyword: str, value: Any) -> bool:
    """Whether the header value of ``keyword`` may be carried as it is (module docstring); empty conforms."""
    if isinstance(value, bytes | bytearray):
        return False
    if value is None or value == "":
        return True
    vr, vm = dictionary_VR(keyword), dictionary_VM(keyword)
    values = list(value) if isinstance(value, MultiValue | list | tuple) else [value]
    if len(values) > 1 and vm == "1":
        return False  # a backslash in a single-valued string
    return all(_one_conforms(keyword, vr, v) for v in values)


def emptied(header: Dataset) -> tuple[str, ...]:
    """The keywords of :data:`CARRIED` and :data:`EQUIPMENT` whose value in ``header`` the SR leaves empty."""
    return tuple(k for k in (*CARRIED, *EQUIPMENT) if k in header and not conforms(k, _value(header, k)))


def _value(header: Dataset, keyword: str) -> Any:
    """The element's value, or ``b""`` (never conforming) when its VR is not of the attribute's kind (a number
    for a name, undecoded UN bytes): such a value is not reinterpreted."""
    element, expected = header[keyword], dictionary_VR(keyword)
    same_kind = expected == element.VR or (element.VR in _STRING_VRS and expected in _STRING_VRS)
    return element.value if same_kind else b""


def _charset(header: Dataset, values: Iterable[Any]) -> str | None:
    """The SR's Specific Character Set (module docstring); None for the default repertoire."""
    source = header.get("SpecificCharacterSet")
    if isinstance(source, MultiValue | list | tuple):
        source = source[0] if len(source) == 1 else UTF8
    source = None if source in (None, "", "ISO_IR 6") else str(source)
    if source is not None and (source.startswith("ISO 2022") or source not in _SINGLE_CHARSETS):
        return UTF8
    codec = "ascii" if source is None else python_encoding[source]
    for value in values:
        for item in value if isinstance(value, MultiValue | list | tuple) else [value]:
            try:
                str(item).encode(codec)
            except (UnicodeError, LookupError):
                return UTF8
    return source


def evidence(header: Dataset) -> Dataset:
    """The data set highdicom builds the SR's patient, study and evidence from (module docstring).

    Raises :class:`EvidenceUidInvalid` for a missing or invalid UID of :data:`UIDS`.
    """
    quiet_highdicom()
    bad = invalid_uids(header)
    if bad:
        raise EvidenceUidInvalid(bad)
    out = Dataset()
    out.file_meta = header.file_meta if hasattr(header, "file_meta") else FileMetaDataset()
    for keyword in UIDS:
        out.add_new(keyword, "UI", str(header.get(keyword)))
    carried: dict[str, Any] = {}
    for keyword in (*CARRIED, *EQUIPMENT):
        if keyword in header:
            value = _value(header, keyword)
            carried[keyword] = value if conforms(keyword, value) else None
        elif keyword in TYPE2:
            carried[keyword] = None
    charset = _charset(header, (v for v in carried.values() if v is not None))
    if charset is not None:
        out.SpecificCharacterSet = charset
    for keyword, value in carried.items():
        out.add_new(keyword, dictionary_VR(keyword), _plain(value))
    return out


def _plain(value: Any) -> Any:
    """A conforming value as the new element holds it: text as its original text, an integer VR as the integer."""
    if value is None or value == "":
        return None
    if isinstance(value, MultiValue | list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, int) and type(value).__name__ != "IS":  # US (PregnancyStatus); an IS keeps its text
        return value
    return str(value)
