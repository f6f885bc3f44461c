"""The SR of an exam built from given results (no model): a missing eye and an ungradable photograph are stated as
such and carry no probability; the patient comes from the source images; the same exam gives the same object
identity; the exam record's FHIR DiagnosticReport names the DICOM study.
"""

from __future__ import annotations

import io
from typing import Any

import pydicom
import pytest
from pydicom.uid import generate_uid

from models.decision import Eye, ScreeningOutcome
from service.exams import exam_fields
from service.pacs.grading import exam_record
from service.pacs.sr import GradedExam, GradedImage, build_sr
from support.images import fundus_like
from tests.helpers.dicom_files import op_dicom
from tests.helpers.pacs_checks import sr_summary

MODEL = {"name": "m", "version": "9.9.9", "sha256": "c" * 64, "mc_samples": 16, "head_draws": 1,
         "training_data": "synthetic", "intended_use": "Tests only."}


def _result(outcome: ScreeningOutcome, p: float, mi: float) -> dict[str, Any]:
    return {"outcome": outcome.value, "diagnosis": {"referable_dr_probability": p},
            "uncertainty": {"mutual_information": mi}}


def _exam(study_uid: str) -> GradedExam:
    headers = [pydicom.dcmread(io.BytesIO(op_dicom(fundus_like(i, 32), laterality="R", study_uid=study_uid,
                                                   PatientID="P1")), stop_before_pixels=True) for i in (1, 2)]
    images = [GradedImage(headers[0], Eye.RIGHT, _result(ScreeningOutcome.REFER_REFERABLE_DR, 0.93, 0.0004)),
              GradedImage(headers[1], Eye.RIGHT, _result(ScreeningOutcome.RETAKE_UNGRADABLE, 0.2, 0.1))]
    exam = exam_fields([(im.eye, ScreeningOutcome(im.result["outcome"])) for im in images])
    return GradedExam(images, exam, MODEL, "Decision support only.")


def _bytes(exam: GradedExam) -> bytes:
    out = io.BytesIO()
    build_sr(exam).save_as(out, enforce_file_format=True)
    return out.getvalue()


def test_missing_eye_and_ungradable_photograph() -> None:
    study_uid = generate_uid()
    exam = _exam(study_uid)
    summary = sr_summary(_bytes(exam))
    graded, ungradable = (str(im.header.SOPInstanceUID) for im in exam.images)
    right, left = summary["eyes"]["right"], summary["eyes"]["left"]
    assert right["outcome"] == "refer_referable_dr"
    assert right["sources"] == {graded, ungradable}
    assert right["measures"] == {graded: {"p-referable-dr": 0.93, "mutual-info-nat": 0.0004}}
    assert left == {"outcome": exam.exam["eyes"]["left"]["outcome"], "laterality": "7771000", "sources": set(),
                    "measures": {}}
    assert summary["exam_outcome"] == "refer_referable_dr"  # one referable eye refers the patient
    assert "No photograph of this eye" in summary["texts"]["Left eye outcome reason"]
    ds = summary["dataset"]
    assert (ds.StudyInstanceUID, ds.PatientID, ds.Modality) == (study_uid, "P1", "SR")
    assert ds.PatientName == ""  # Type 2 left out by the camera: present and empty


def test_same_exam_same_identity() -> None:
    exam = _exam(generate_uid())
    first, second = pydicom.dcmread(io.BytesIO(_bytes(exam))), pydicom.dcmread(io.BytesIO(_bytes(exam)))
    assert first.SOPInstanceUID == second.SOPInstanceUID == exam.uids[0]
    assert first.SeriesInstanceUID == second.SeriesInstanceUID == exam.uids[1]


def test_fhir_report_names_the_study() -> None:
    study_uid = generate_uid()
    record = exam_record(_exam(study_uid), "k" * 32)
    report = record["fhir"]["entry"][0]["resource"]
    assert report["resourceType"] == "DiagnosticReport"
    assert report["imagingStudy"][0]["identifier"] == {"system": "urn:dicom:uid", "value": f"urn:oid:{study_uid}"}
    assert record["exam"]["outcome"] == "refer_referable_dr"
    bundle = pytest.importorskip("fhir.resources.R4B.bundle", reason="fhir.resources (dev extra) validates FHIR")
    bundle.Bundle.model_validate(record["fhir"])
