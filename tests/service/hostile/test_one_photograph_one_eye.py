"""One photograph cannot stand for both eyes, decided on the decoded pixels on every path that assembles an exam.

The finding: the rule compared whole-file sha256, so the same pixels sent as the right and the left eye in two
files that differ only in their metadata (DICOM ImageLaterality and SOPInstanceUID, one EXIF byte of a JPEG, the
same pixels as PNG and as TIFF) were answered for both eyes; the other eye was never photographed. Each case is
refused on ``POST /v1/exams`` (real uvicorn on 127.0.0.1, a 422 naming the parts), by the PACS worker's
``grade_study`` on a real spool (``ExamIdentityError``, nothing scored), and in the batch job's exam rows (a
``same-photograph-both-eyes`` error row); two different photographs of two eyes still pass everywhere.
"""

from __future__ import annotations

import asyncio
import csv
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image

from service.batch.job import BatchJobConfig, run_job
from service.inference.loading import load_scorer
from service.inference.scoring import Scorer
from service.inference.spec import ScorerSpec
from service.metrics import ServiceMetrics
from service.model_host import ModelHost
from service.pacs.grading import grade_study
from service.pacs.intake import Accepted, check_instance
from service.pacs.store import Spool
from service.screening.identity import ExamIdentityError
from support.images import encode, fundus_like
from support.live_server import live_server, settings_for
from tests.helpers.dicom_files import JPEG_BASELINE, op_dicom

STUDY = "1.2.826.0.1.3680043.8.498.4141"
SERIES = "1.2.826.0.1.3680043.8.498.4142"
PATIENT = "PID-SECRET-H4"
SOFTWARE = b"camera-A"  # an EXIF Software tag; the copy changes its last byte


def dicom_pair(rgb: np.ndarray, other: np.ndarray | None = None, *, syntax: str | None = None
               ) -> tuple[bytes, bytes]:
    """A right-eye and a left-eye instance of one study and series: of ``rgb`` both (differing only in
    ImageLaterality and SOPInstanceUID), or of ``rgb`` and ``other``."""
    fields: dict[str, Any] = {"study_uid": STUDY, "SeriesInstanceUID": SERIES, "PatientID": PATIENT}
    if syntax is not None:
        fields["syntax"] = syntax
    return (op_dicom(rgb, laterality="R", **fields),
            op_dicom(rgb if other is None else other, laterality="L", **fields))


def jpeg_with_exif(rgb: np.ndarray) -> bytes:
    exif = Image.Exif()
    exif[0x0131] = SOFTWARE.decode()  # Software
    return encode(rgb, "JPEG", quality=92, exif=exif.tobytes())


def one_exif_byte_changed(data: bytes) -> bytes:
    assert data.count(SOFTWARE) == 1
    return data.replace(SOFTWARE, SOFTWARE[:-1] + b"B")


def test_the_copies_differ_in_their_bytes_and_not_in_their_pixels() -> None:
    """The premise of every case below: the old rule (file sha256) could not see these copies."""
    from service.inference.prepare import pixel_digest  # here, so the other cases also run on the old code

    rgb = fundus_like(41, size=96)
    right, left = dicom_pair(rgb)
    assert right != left
    jpeg = jpeg_with_exif(rgb)
    assert one_exif_byte_changed(jpeg) != jpeg
    decoded = [np.asarray(Image.open(io.BytesIO(d)).convert("RGB")) for d in (jpeg, one_exif_byte_changed(jpeg))]
    assert pixel_digest(decoded[0]) == pixel_digest(decoded[1])
    assert pixel_digest(rgb) != pixel_digest(rgb[:, ::-1]) != pixel_digest(rgb.astype(np.uint16))


# -- POST /v1/exams ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tiny_artifact: Path) -> Iterator[str]:
    with live_server(settings_for(tiny_artifact, max_exam_images=6)) as base:
        yield base


def exam(server: str, parts: list[tuple[str, tuple[str, bytes, str]]]) -> httpx.Response:
    return httpx.post(f"{server}/v1/exams", files=parts, timeout=120)


def refused(response: httpx.Response, detail: str) -> None:
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["type"].endswith("/validation-error")
    assert detail in body["detail"], body["detail"]
    assert STUDY not in response.text and PATIENT not in response.text and SERIES not in response.text


SAME_1_2 = ("parts 1 (right eye) and 2 (left eye) are the same photograph (identical decoded pixels); one "
            "photograph cannot stand for both eyes")


def test_one_photograph_as_two_dicom_parts_of_both_lateralities_is_refused(server: str) -> None:
    for syntax in (None, JPEG_BASELINE):  # raw pixels, and the same JPEG frame in both files
        right, left = dicom_pair(fundus_like(42, size=96), syntax=syntax)
        refused(exam(server, [("image", ("r.dcm", right, "application/dicom")),
                              ("image", ("l.dcm", left, "application/dicom"))]), SAME_1_2)
        # named as right/left parts (each agrees with its own header) it is the same photograph too
        refused(exam(server, [("right", ("r.dcm", right, "application/dicom")),
                              ("left", ("l.dcm", left, "application/dicom"))]), SAME_1_2)


def test_one_photograph_as_a_jpeg_and_its_copy_with_other_exif_bytes_is_refused(server: str) -> None:
    rgb = fundus_like(43, size=96)
    jpeg = jpeg_with_exif(rgb)
    refused(exam(server, [("right", ("r.jpg", jpeg, "image/jpeg")),
                          ("left", ("l.jpg", one_exif_byte_changed(jpeg), "image/jpeg"))]), SAME_1_2)
    # the same pixels as PNG and as TIFF (lossless): one photograph, whatever the container
    refused(exam(server, [("right", ("r.png", encode(rgb), "image/png")),
                          ("left", ("l.tif", encode(rgb, "TIFF"), "image/tiff"))]), SAME_1_2)
    # named by the later duplicate: parts 3 (right) and 2 (left)
    refused(exam(server, [("right", ("a.png", encode(fundus_like(44, size=96)), "image/png")),
                          ("left", ("l.jpg", jpeg, "image/jpeg")),
                          ("right", ("r.jpg", one_exif_byte_changed(jpeg), "image/jpeg"))]),
            "parts 3 (right eye) and 2 (left eye) are the same photograph (identical decoded pixels)")


def test_two_photographs_of_two_eyes_and_one_photograph_twice_for_one_eye_still_pass(server: str) -> None:
    right, left = dicom_pair(fundus_like(45, size=96), fundus_like(46, size=96))
    answer = exam(server, [("image", ("r.dcm", right, "application/dicom")),
                           ("image", ("l.dcm", left, "application/dicom"))])
    assert answer.status_code == 200, answer.text
    assert answer.json()["exam_id"] == STUDY and set(answer.json()["eyes"]) == {"right", "left"}
    rgb = fundus_like(47, size=96)
    jpeg = jpeg_with_exif(rgb)
    twice = exam(server, [("right", ("r.jpg", jpeg, "image/jpeg")),
                          ("right", ("r2.jpg", one_exif_byte_changed(jpeg), "image/jpeg")),
                          ("left", ("l.jpg", jpeg_with_exif(rgb[:, ::-1].copy()), "image/jpeg"))])
    assert twice.status_code == 200, twice.text  # a mirrored copy is other pixels: not this rule's to catch
    assert len(twice.json()["images"]) == 3


# -- the PACS worker's grading -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def host(tiny_artifact: Path) -> Iterator[tuple[ModelHost, asyncio.AbstractEventLoop]]:
    loop = asyncio.new_event_loop()  # the batcher runs on the loop that loaded the host
    model_host = ModelHost(settings_for(tiny_artifact, backend="torch"), ServiceMetrics())
    loop.run_until_complete(model_host.load())
    assert model_host.state == "ready", model_host.error
    yield model_host, loop
    loop.run_until_complete(model_host.stop())
    loop.close()


def spooled(root: Path, *instances: bytes) -> Any:
    spool = Spool(root)
    for data in instances:
        verdict = check_instance(data)
        assert isinstance(verdict, Accepted)
        spool.put_instance(verdict.study_uid, verdict.sop_instance_uid, verdict.eye, data)
    [study] = spool.studies()
    return study


def test_grade_study_refuses_one_photograph_spooled_as_both_eyes(
    host: tuple[ModelHost, asyncio.AbstractEventLoop], tmp_path: Path
) -> None:
    model_host, loop = host
    for k, syntax in enumerate((None, JPEG_BASELINE)):
        study = spooled(tmp_path / str(k), *dicom_pair(fundus_like(48, size=96), syntax=syntax))
        assert len(study.instances) == 2
        scored_before = model_host.metrics.registry.get_sample_value("radscreen_exams_total",
                                                                     {"outcome": "no_referable_dr"})
        with pytest.raises(ExamIdentityError, match=r"are the same photograph \(identical decoded pixels\)") as err:
            loop.run_until_complete(grade_study(model_host, study))
        assert STUDY not in str(err.value) and PATIENT not in str(err.value)
        assert model_host.metrics.registry.get_sample_value(
            "radscreen_exams_total", {"outcome": "no_referable_dr"}) == scored_before  # nothing was graded


def test_grade_study_grades_two_photographs_of_two_eyes(
    host: tuple[ModelHost, asyncio.AbstractEventLoop], tmp_path: Path
) -> None:
    model_host, loop = host
    study = spooled(tmp_path, *dicom_pair(fundus_like(49, size=96), fundus_like(50, size=96)))
    graded = loop.run_until_complete(grade_study(model_host, study))
    assert graded is not None and sorted(im.eye.value for im in graded.images) == ["left", "right"]
    assert graded.result.outcome


# -- the batch job's exam rows -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scorer(tiny_artifact: Path) -> Scorer:
    return load_scorer(ScorerSpec(model_dir=tiny_artifact, device="cpu"))


def _exams(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return {row["exam_id"]: row for row in csv.DictReader(fh)}


def _run(folder: Path, output: Path, artifact: Path, scorer: Scorer, group_by: str) -> dict[str, dict[str, str]]:
    run_job(BatchJobConfig(input=folder, output=output, spec=ScorerSpec(model_dir=artifact, device="cpu"),
                           batch_size=4, chunk_size=4, progress=False, group_by=group_by),  # type: ignore[arg-type]
            scorer=scorer)
    return _exams(output.with_name(f"{output.stem}.exams.csv"))


def test_batch_exam_rows_report_one_photograph_as_both_eyes(tmp_path: Path, tiny_artifact: Path,
                                                            scorer: Scorer) -> None:
    named = tmp_path / "named"
    named.mkdir()
    jpeg = jpeg_with_exif(fundus_like(51, size=96))
    (named / "11_right.jpg").write_bytes(jpeg)
    (named / "11_left.jpg").write_bytes(one_exif_byte_changed(jpeg))
    (named / "12_right.png").write_bytes(encode(fundus_like(52, size=96)))
    (named / "12_left.tif").write_bytes(encode(fundus_like(52, size=96), "TIFF"))
    (named / "13_right.jpg").write_bytes(jpeg_with_exif(fundus_like(53, size=96)))
    (named / "13_left.jpg").write_bytes(jpeg_with_exif(fundus_like(54, size=96)))
    exams = _run(named, tmp_path / "f.csv", tiny_artifact, scorer, "filename")
    pairs = {"11": ("11_right.jpg", "11_left.jpg"), "12": ("12_right.png", "12_left.tif")}
    for patient, (right_name, left_name) in pairs.items():
        row = exams[patient]
        assert row["outcome"] == "", row  # was an outcome for an eye never photographed
        assert row["error"] == (f"same-photograph-both-eyes: {right_name} (right eye) and {left_name} (left eye) are "
                                "the same photograph (identical decoded pixels); one photograph cannot stand for "
                                "both eyes, the exam is not decided")
    assert exams["13"]["outcome"] and exams["13"]["error"] == ""

    studies = tmp_path / "studies"
    studies.mkdir()
    right, left = dicom_pair(fundus_like(55, size=96))
    (studies / "a-R.dcm").write_bytes(right)
    (studies / "a-L.dcm").write_bytes(left)
    exams = _run(studies, tmp_path / "s.csv", tiny_artifact, scorer, "study")
    assert exams[STUDY]["outcome"] == "" and exams[STUDY]["error"].startswith("same-photograph-both-eyes: ")
    assert PATIENT not in (tmp_path / "s.exams.csv").read_text(encoding="utf-8")
    other = tmp_path / "other"
    other.mkdir()
    right, left = dicom_pair(fundus_like(56, size=96), fundus_like(57, size=96))
    (other / "b-R.dcm").write_bytes(right)
    (other / "b-L.dcm").write_bytes(left)
    exams = _run(other, tmp_path / "o.csv", tiny_artifact, scorer, "study")
    assert exams[STUDY]["outcome"] and exams[STUDY]["error"] == ""
