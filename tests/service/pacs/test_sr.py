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

from models.outcome.decision import Eye, ScreeningOutcome
from service.pacs.grading import exam_record
from service.pacs.sr import GradedExam, GradedImage, build_sr
from service.screening.exam import exam_result
from support.images import fundus_like
from tests.helpers.dicom_files import op_dicom
from tests.helpers.pacs_checks import graded_result, sr_summary

MODEL = {"name": "m", "version": "9.9.9", "sha256": "c" * 64, "mc_samples": 16, "head_draws": 1,
         "training_data": "synthetic", "intended_use": "Tests only."}


DECISION, MI_THRESHOLD = 0.0558, 0.0028


def _result(outcome: ScreeningOutcome, p: float, mi: float, issues: tuple[str, ...] = ()) -> dict[str, Any]:
    return graded_result(outcome, p, mi, issues, DECISION, MI_THRESHOLD)


def _exam(study_uid: str) -> GradedExam:
    headers = [pydicom.dcmread(io.BytesIO(op_dicom(fundus_like(i, 32), laterality="R", study_uid=study_uid,
                                                   PatientID="P1")), stop_before_pixels=True) for i in (1, 2)]
    refer, retake = ScreeningOutcome.REFER_REFERABLE_DR, ScreeningOutcome.RETAKE_UNGRADABLE
    images = [GradedImage(headers[0], Eye.RIGHT, refer, _result(refer, 0.93, 0.0004)),
              GradedImage(headers[1], Eye.RIGHT, retake, _result(retake, 0.2, 0.1, ("too_dark",)))]
    exam = exam_result((im.eye, im.outcome) for im in images)
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
    assert right["measures"] == {graded: {"p-referable-dr-percent": 93.0, "mutual-info-nat": 0.0004}}
    assert left["outcome"] == exam.result.eyes[Eye.LEFT].outcome.value and left["laterality"] == "7771000"
    assert left["sources"] == set() and left["measures"] == {} and left["finding"].startswith("Not graded")
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


def _two_eyes(right: tuple[ScreeningOutcome, float, float], left: tuple[ScreeningOutcome, float, float]
              ) -> GradedExam:
    study_uid = generate_uid()
    images = [GradedImage(pydicom.dcmread(io.BytesIO(op_dicom(fundus_like(i, 32), laterality=lat[0].upper(),
                                                             study_uid=study_uid, PatientID="P1")),
                                          stop_before_pixels=True), eye, answer[0], _result(*answer))
              for i, (eye, lat, answer) in enumerate(((Eye.RIGHT, "r", right), (Eye.LEFT, "l", left)), start=1)]
    exam = exam_result((im.eye, im.outcome) for im in images)
    return GradedExam(images, exam, MODEL, "Decision support only.")


def test_each_eye_says_what_was_found_with_its_probability_in_percent_and_both_thresholds() -> None:
    """A referral near the threshold in the right eye, a healthy left eye: each group's finding says which, the
    probability is a percentage (UCUM %), MI is in nat, and both thresholds stand in every group."""
    exam = _two_eyes((ScreeningOutcome.REFER_REFERABLE_DR, 0.0812345678901234, 0.00041234567),
                     (ScreeningOutcome.NO_REFERABLE_DR, 0.012, 0.0001))
    summary = sr_summary(_bytes(exam))
    right, left = summary["eyes"]["right"], summary["eyes"]["left"]
    assert right["finding"] == "Referable DR present (at or above referral threshold)"
    assert left["finding"] == "Referable DR not found (below referral threshold)"
    assert summary["exam_finding"].startswith("Referable DR present")
    [right_p] = right["measures"].values()
    assert right_p == {"p-referable-dr-percent": 8.123, "mutual-info-nat": 0.000412}  # no 14-digit fractions
    assert right["units"] == {"p-referable-dr-percent:%", "mutual-info-nat:1"}
    for eye in (right, left):
        assert eye["thresholds"] == {"referral-threshold-percent": (5.58, "%"), "grader-review-threshold-nat": (
            0.0028, "1")}
    texts = summary["texts"]
    assert "8.1 % — above the referral threshold of 5.6 %" in texts["Right eye outcome reason"]
    assert "1.2 % — below the referral threshold of 5.6 %" in texts["Left eye outcome reason"]
    assert "likely" not in texts["Right eye outcome reason"]
    algorithm = dict(summary["algorithm"])
    assert algorithm["111001"] == "m" and algorithm["111003"] == "9.9.9"  # the model identity on the exam group
    assert summary["dataset"].DeviceSerialNumber == "c" * 64


def test_an_uncertain_eye_is_a_grader_review_not_a_finding() -> None:
    exam = _two_eyes((ScreeningOutcome.GRADER_REVIEW_UNCERTAIN, 0.3, 0.01), (ScreeningOutcome.NO_REFERABLE_DR, 0.01,
                                                                              0.0001))
    summary = sr_summary(_bytes(exam))
    assert summary["eyes"]["right"]["finding"] == "Grader review: model uncertain, no finding"
    assert "not a finding" in summary["texts"]["Right eye outcome reason"]


def _dcmtk(tool: str) -> str:
    import shutil

    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} not installed: run scripts/install-system-deps.sh (Debian package dcmtk)")
    return path


@pytest.mark.parametrize("healthy", [True, False], ids=["healthy-eyes", "referable-eye"])
def test_dsr2html_reads_the_findings_and_dciodvfy_finds_no_error(healthy: bool, tmp_path: Any) -> None:
    """What dcmtk's dsr2html shows a reader: per eye what was found, the probability with its unit, both
    thresholds; dciodvfy (dicom3tools) reports no error in the object."""
    import subprocess

    right = ((ScreeningOutcome.NO_REFERABLE_DR, 0.012, 0.0001) if healthy
             else (ScreeningOutcome.REFER_REFERABLE_DR, 0.081, 0.0004))
    path = tmp_path / "sr.dcm"
    path.write_bytes(_bytes(_two_eyes(right, (ScreeningOutcome.NO_REFERABLE_DR, 0.02, 0.0002))))
    html = subprocess.run([_dcmtk("dsr2html"), str(path)], capture_output=True, text=True, timeout=60, check=True
                          ).stdout
    assert html.count("Referable DR not found (below referral threshold)") == (3 if healthy else 1)
    assert ("Referable DR present (at or above referral threshold)" in html) is (not healthy)
    # the NUM items show as value and unit under the finding (5.58 % is the referral threshold, 0.0028 the MI
    # one); the eye's text item words each number beside its threshold
    assert "5.58 %" in html and "0.0028 1" in html
    words = ("1.2 % — below the referral threshold of 5.6 %" if healthy
             else "8.1 % — above the referral threshold of 5.6 %")
    assert words in html and "at or below the grader-review threshold of 0.0028 nat" in html
    verify = subprocess.run([_dcmtk("dciodvfy"), str(path)], capture_output=True, text=True, timeout=60)
    errors = [line for line in (verify.stdout + verify.stderr).splitlines() if line.startswith("Error")]
    assert errors == [], errors
