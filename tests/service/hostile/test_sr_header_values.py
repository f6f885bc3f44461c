"""Header values that pass intake but not their VR: the SR is still built, valid, and carries each value as it was
or empty.

Each case is a real OP file (``op_dicom``) whose header carries one hostile value; the SR is built as the worker
builds it, written as a Part-10 file, read back, and checked: the attribute is present and empty, every other carried
attribute is the source's value, every element passes pydicom's VR validation, and dciodvfy (dicom3tools) reports
no error that the SR of the clean header does not.
"""

from __future__ import annotations

import io
import logging
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pydicom
import pytest
from pydicom import config
from pydicom.dataset import Dataset
from pydicom.multival import MultiValue
from pydicom.uid import generate_uid
from pydicom.valuerep import validate_value

from models.outcome.decision import Eye, ScreeningOutcome
from service.pacs.intake import Accepted, check_instance
from service.pacs.sr import GradedExam, GradedImage, build_sr
from service.pacs.sr_header import CARRIED, EQUIPMENT, NOT_CARRIED, TYPE2, EvidenceUidInvalid, emptied, invalid_uids
from service.screening.exam import exam_result
from support.images import fundus_like
from tests.helpers.dicom_files import op_dicom
from tests.helpers.pacs_checks import graded_result

ACQUISITION_EQUIPMENT = "109101"  # DCM code of the Contributing Equipment item highdicom makes of the camera
MODEL = {"name": "m", "version": "9.9.9", "sha256": "c" * 64, "mc_samples": 16, "head_draws": 1,
         "training_data": "synthetic", "intended_use": "Tests only."}

# A complete, conforming header: every case changes one value of it.
CLEAN: dict[str, Any] = {
    "PatientName": "Doe^Jane", "PatientID": "P-001", "PatientBirthDate": "19700101", "PatientSex": "F",
    "AccessionNumber": "ACC1", "StudyID": "S1", "StudyDate": "20261204", "StudyTime": "101500",
    "ReferringPhysicianName": "Who^Doctor", "StudyDescription": "DR screening", "PatientAge": "056Y",
    "SmokingStatus": "NO", "PatientComments": "line one\r\nline two", "Manufacturer": "Topcon",
    "ManufacturerModelName": "TRC-NW8",
}

# (keyword, value): each passes intake today and does not conform to the attribute's VR or enumerated values.
HOSTILE = [
    ("PatientSex", "X"), ("PatientSex", "U"), ("PatientSex", "f"), ("PatientSex", "FEMALE"),
    ("PatientBirthDate", "19991332"), ("PatientBirthDate", "1999-"), ("PatientBirthDate", "19990231"),
    ("StudyDate", "2026"), ("StudyTime", "25:99"),
    ("PatientName", "N" * 65), ("PatientName", "Doe^Jane\x07"), ("PatientName", "Doe\\Roe"),
    ("PatientID", "I" * 65), ("PatientID", "P\x00001"), ("AccessionNumber", "A" * 17), ("StudyID", "S" * 17),
    ("ReferringPhysicianName", "R" * 65), ("StudyDescription", "D" * 65), ("PatientAge", "56 years"),
    ("SmokingStatus", "MAYBE"), ("PatientComments", "x\x07y"), ("Manufacturer", "M" * 65),
]


def _header(**fields: Any) -> Dataset:
    data = op_dicom(fundus_like(3, 32), laterality="R", study_uid=generate_uid(), **{**CLEAN, **fields})
    assert isinstance(check_instance(data), Accepted)  # intake takes it: the SR must be built for it
    return pydicom.dcmread(io.BytesIO(data), stop_before_pixels=True)


def _sr(header: Dataset) -> Dataset:
    """The SR as the worker builds it, written as a Part-10 file and read back."""
    clear = ScreeningOutcome.NO_REFERABLE_DR
    image = GradedImage(header, Eye.RIGHT, clear, graded_result(clear, 0.01, 0.0001))
    exam = GradedExam([image], exam_result([(Eye.RIGHT, clear)]), MODEL, "Tests.")
    out = io.BytesIO()
    build_sr(exam).save_as(out, enforce_file_format=True)
    return pydicom.dcmread(io.BytesIO(out.getvalue()))


def _text(value: Any) -> Any:
    return [str(v) for v in value] if isinstance(value, MultiValue) else str(value)


_TEXT_VRS = frozenset({"AE", "AS", "CS", "DA", "DS", "DT", "IS", "LO", "LT", "PN", "SH", "ST", "TM", "UC", "UI",
                       "UR", "UT"})  # values pydicom holds as str subclasses (PersonName, IS, DSfloat): checked as text


def _vr_errors(ds: Dataset) -> list[str]:
    """Keywords of the elements pydicom's own VR validation refuses, at any depth."""
    bad = []
    for element in ds.iterall():
        if element.VR == "SQ" or element.value is None:
            continue
        for value in element.value if isinstance(element.value, MultiValue) else [element.value]:
            try:
                validate_value(element.VR, str(value) if element.VR in _TEXT_VRS else value, config.RAISE)
            except ValueError:
                bad.append(element.keyword)
    return bad


def _equipment(sr: Dataset) -> Dataset | None:
    items = [item for item in sr.ContributingEquipmentSequence  # the camera's, not highdicom's
             if item.PurposeOfReferenceCodeSequence[0].CodeValue == ACQUISITION_EQUIPMENT]
    return items[0] if items else None


@pytest.mark.parametrize(("keyword", "value"), HOSTILE, ids=[f"{k}-{i}" for i, (k, _) in enumerate(HOSTILE)])
def test_non_conforming_value_is_left_empty(keyword: str, value: str) -> None:
    header = _header(**{keyword: value})
    assert emptied(header) == (keyword,)
    sr = _sr(header)
    assert _vr_errors(sr) == []
    equipment = _equipment(sr)
    for name in (*CARRIED, *EQUIPMENT):
        holder = equipment if name in EQUIPMENT else sr  # the SR's own equipment is ours, not the camera's
        if name == keyword:
            assert holder is None or holder.get(name) in (None, ""), name  # emptied, not repaired
            if name in TYPE2:
                assert name in sr and sr[name].value in (None, ""), name  # Type 2: present and empty
        elif name in CLEAN:
            if holder is None:  # highdicom describes the camera only when it has a manufacturer
                assert keyword == "Manufacturer", name
            else:
                assert _text(holder[name].value) == CLEAN[name], name
        else:
            assert holder is None or name not in holder or (name in TYPE2 and not holder[name].value), name


def test_values_are_carried_as_data() -> None:
    """Markup and formula text is kept character for character (it is valid LO/SH text), never escaped."""
    values = {"StudyDescription": "<script>alert(1)</script>", "PatientID": '=HYPERLINK("http://x","y")',
              "AccessionNumber": "=1+1", "Manufacturer": "<b>cam</b>", "PatientName": "Müller^Jürgen",
              "SpecificCharacterSet": "ISO_IR 100"}
    header = _header(**values)
    assert emptied(header) == ()
    sr = _sr(header)
    assert _vr_errors(sr) == []
    assert sr.SpecificCharacterSet == "ISO_IR 192"  # the SR is UTF-8 whatever the source's
    for name in ("StudyDescription", "PatientID", "AccessionNumber", "PatientName"):
        assert str(sr[name].value) == values[name]
    equipment = _equipment(sr)
    assert equipment is not None and equipment.Manufacturer == "<b>cam</b>"


@pytest.mark.parametrize(("charset", "name", "expected"), [
    (["", "ISO 2022 IR 149"], "Hong^Gildong=洪^吉洞=홍^길동", "ISO_IR 192"),  # Korean, as PS3.5 Annex I writes it
    ("ISO 2022 IR 6", "Doe^John", "ISO_IR 192"),  # the default repertoire with code extensions
    (["ISO 2022 IR 6", "ISO 2022 IR 87"], "Yamada^Tarou=山田^太郎=やまだ^たろう", "ISO_IR 192"),
    ("ISO_IR 100", "Müller^Jörg", "ISO_IR 192"), ("GB18030", "王^小东", "ISO_IR 192"),  # the SR is UTF-8 anyway
], ids=["korean-iso2022", "iso2022-ir6", "japanese-iso2022", "latin1", "gb18030"])
def test_character_sets_highdicom_refuses_are_carried_as_utf8(charset: Any, name: str, expected: str) -> None:
    """highdicom raises on valid character sets it does not take (``\\ISO 2022 IR 149``, ``ISO 2022 IR 6``); the
    values are text by then, so the evidence declares UTF-8; the SR is UTF-8 whatever the source's, and every
    character is kept."""
    sr = _sr(_header(SpecificCharacterSet=charset, PatientName=name))
    assert sr.SpecificCharacterSet == expected
    assert str(sr.PatientName) == name
    assert _vr_errors(sr) == []


def test_absent_type2_attributes_are_present_and_empty() -> None:
    header = _header()
    for keyword in TYPE2:
        del header[keyword]
    sr = _sr(header)
    assert all(keyword in sr and sr[keyword].value in (None, "") for keyword in TYPE2)


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_highdicom_logs_no_identifier() -> None:
    """A name without a caret is valid PN; highdicom warns about it quoting it, and logs the source UID at info.
    The service's log handler sits on the root logger (service.logs): nothing of highdicom's may reach it."""
    header = _header(PatientName="Doeuniquename")
    root, collect = logging.getLogger(), _Collect()
    level = root.level
    root.addHandler(collect)
    root.setLevel(logging.DEBUG)
    try:
        _sr(header)
    finally:
        root.removeHandler(collect)
        root.setLevel(level)
    text = "\n".join(collect.messages)
    for identifier in ("Doeuniquename", str(header.SOPInstanceUID), str(header.StudyInstanceUID), "P-001"):
        assert identifier not in text


@pytest.mark.parametrize(("keyword", "value"), [("StudyInstanceUID", "1.01.2"), ("SOPInstanceUID", "1..2"),
                                                ("SeriesInstanceUID", "abc")])
def test_invalid_source_uid_is_named_not_written(keyword: str, value: str) -> None:
    """Intake does not refuse these today (its UID check is looser, or absent): the SR refuses to reference them,
    naming the attribute and not the value, instead of writing an object with an invalid reference."""
    fields: dict[str, Any] = {"study_uid": value} if keyword == "StudyInstanceUID" else {keyword: value}
    data = op_dicom(fundus_like(3, 32), laterality="R", **fields)
    header = pydicom.dcmread(io.BytesIO(data), stop_before_pixels=True)
    assert invalid_uids(header) == (keyword,)
    with pytest.raises(EvidenceUidInvalid) as caught:
        _sr(header)
    assert keyword in str(caught.value) and value not in str(caught.value)


def test_every_attribute_highdicom_copies_is_accounted_for() -> None:
    """The Patient and Study module attributes highdicom copies from an OP image (its own tables) are the carried
    ones, the ones left out on purpose, the sequences and the clinical trial modules: none slips through unchecked."""
    from highdicom._standard_utils import get_iod_module_map, get_module_attribute_map, get_sop_class_iod_map
    from pydicom.datadict import dictionary_VR

    copied = set()
    for sop_class in ("1.2.840.10008.5.1.4.1.1.77.1.5.1", "1.2.840.10008.5.1.4.1.1.77.1.5.2"):
        for module in get_iod_module_map()[get_sop_class_iod_map()[sop_class]]:
            if module["ie"] in ("Patient", "Study") and not module["key"].startswith("clinical-trial"):
                copied |= {str(item["keyword"]) for item in get_module_attribute_map()[module["key"]]
                           if not item["path"]}
    scalars = {k for k in copied if dictionary_VR(k) != "SQ"} - {"StudyInstanceUID"}
    assert scalars == set(CARRIED) | set(NOT_CARRIED)
    assert set(TYPE2) <= set(CARRIED)


def _dciodvfy(sr: Dataset, tmp_path: Path) -> set[str]:
    path = tmp_path / "sr.dcm"
    sr.save_as(path, enforce_file_format=True)
    done = subprocess.run(["dciodvfy", str(path)], capture_output=True, text=True, timeout=60, check=False)
    return {line for line in (done.stdout + done.stderr).splitlines() if line.startswith("Error")}


@pytest.mark.skipif(shutil.which("dciodvfy") is None,
                    reason="dciodvfy not found: Debian package dicom3tools (scripts/install-system-deps.sh)")
@pytest.mark.parametrize(("keyword", "value"), HOSTILE, ids=[f"{k}-{i}" for i, (k, _) in enumerate(HOSTILE)])
def test_dciodvfy_finds_no_error_a_clean_sr_has_not(keyword: str, value: str, tmp_path: Path) -> None:
    clean = _dciodvfy(_sr(_header()), tmp_path)
    assert _dciodvfy(_sr(_header(**{keyword: value})), tmp_path) <= clean
