"""Round three, exam identity: an exam is one patient's visit, or it is refused.

Each case first reproduces the finding (what used to be answered as one exam) and then checks the refusal:
a 422 naming the parts on ``POST /v1/exams`` (real uvicorn on 127.0.0.1), an error row in the batch job's
``<output>.exams.csv``. Identifiers (PatientIDs, StudyInstanceUIDs) never appear in a refusal.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.batch.job import BatchJobConfig, run_job
from service.inference.loading import load_scorer
from service.inference.scoring import Scorer
from service.inference.spec import ScorerSpec
from support.images import encode, fundus_like
from support.live_server import live_server, settings_for
from tests.helpers.dicom_files import op_dicom

STUDY = "1.2.826.0.1.3680043.8.498.77"
PATIENT_A, PATIENT_B = "PID-SECRET-A41", "PID-SECRET-B52"


@pytest.fixture(scope="module")
def server(tiny_artifact: Path) -> Iterator[str]:
    with live_server(settings_for(tiny_artifact, max_exam_images=6)) as base:
        yield base


@pytest.fixture(scope="module")
def scorer(tiny_artifact: Path) -> Scorer:
    return load_scorer(ScorerSpec(model_dir=tiny_artifact, device="cpu"))


def png(seed: int) -> bytes:
    return encode(fundus_like(seed, size=96))


def dicom(seed: int, side: str | None, **fields: Any) -> bytes:
    return op_dicom(fundus_like(seed, size=96), laterality=side, **fields)


def exam(server: str, parts: list[tuple[str, tuple[str, bytes, str]]], **kw: Any) -> httpx.Response:
    return httpx.post(f"{server}/v1/exams", files=parts, timeout=120, **kw)


def refused(response: httpx.Response, *needles: str) -> str:
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["type"].endswith("/validation-error")
    for secret in (PATIENT_A, PATIENT_B, STUDY):
        assert secret not in response.text
    for needle in needles:
        assert needle in body["detail"], body["detail"]
    return str(body["detail"])


def as_dcm(data: bytes) -> tuple[str, bytes, str]:
    return ("p.dcm", data, "application/dicom")


def as_png(data: bytes) -> tuple[str, bytes, str]:
    return ("p.png", data, "image/png")


def test_two_patient_ids_in_one_study_are_refused(server: str) -> None:
    right = dicom(1, "R", study_uid=STUDY, PatientID=PATIENT_A)
    left = dicom(2, "L", study_uid=STUDY, PatientID=PATIENT_B)
    refused(exam(server, [("image", as_dcm(right)), ("image", as_dcm(left))]), "2 different PatientIDs")
    # a PatientID beside none: the parts cannot be shown to be one patient's
    unnamed = dicom(2, "L", study_uid=STUDY, PatientID="")
    refused(exam(server, [("image", as_dcm(right)), ("image", as_dcm(unnamed))]), "PatientIDs")
    same = dicom(2, "L", study_uid=STUDY, PatientID=PATIENT_A)
    ok = exam(server, [("image", as_dcm(right)), ("image", as_dcm(same))])
    assert ok.status_code == 200, ok.text
    assert ok.json()["exam_id"] == STUDY


def test_a_plain_photograph_or_a_uidless_dicom_does_not_join_a_dicom_study(server: str) -> None:
    right = dicom(1, "R", study_uid=STUDY, PatientID=PATIENT_A)
    refused(exam(server, [("image", as_dcm(right)), ("left", as_png(png(3)))]),
            "part 2 cannot be shown to belong to the DICOM study of part 1")
    uidless = dicom(2, "L", study_uid="", PatientID=PATIENT_A)
    refused(exam(server, [("image", as_dcm(right)), ("image", as_dcm(uidless))]), "part 2 cannot be shown")
    # the order does not matter: the JPEG first, the DICOM study second
    refused(exam(server, [("right", ("r.jpg", encode(fundus_like(4, size=96), "JPEG"), "image/jpeg")),
                          ("image", as_dcm(dicom(2, "L", study_uid=STUDY, PatientID=PATIENT_A)))]),
            "part 1 cannot be shown to belong to the DICOM study of part 2")
    # plain photographs carry no identity: the client vouches for them by sending them together
    plain = exam(server, [("right", as_png(png(5))), ("left", as_png(png(6)))])
    assert plain.status_code == 200 and plain.json()["exam_id"] is None


def test_the_same_photograph_as_both_eyes_is_refused(server: str) -> None:
    photo = png(7)
    refused(exam(server, [("right", as_png(photo)), ("left", as_png(photo))]),
            "parts 1 (right eye) and 2 (left eye) are the same photograph")
    refused(exam(server, [("right", as_png(png(8))), ("left", as_png(photo)), ("right", as_png(photo))]),
            "parts 3 (right eye) and 2 (left eye)")
    twice_one_eye = exam(server, [("right", as_png(photo)), ("right", as_png(photo)), ("left", as_png(png(8)))])
    assert twice_one_eye.status_code == 200, twice_one_eye.text
    same_dicom = dicom(9, "R", study_uid=STUDY, PatientID=PATIENT_A)
    refused(exam(server, [("right", as_dcm(same_dicom)), ("left", as_dcm(same_dicom))]), "header says right")
    no_side = dicom(9, None, study_uid=STUDY, PatientID=PATIENT_A)  # its eye comes from the part's name
    refused(exam(server, [("right", as_dcm(no_side)), ("left", as_dcm(no_side))]), "same photograph")


def _config(source: Path, output: Path, artifact: Path, **kw: Any) -> BatchJobConfig:
    return BatchJobConfig(input=source, output=output, spec=ScorerSpec(model_dir=artifact, device="cpu"),
                          batch_size=4, chunk_size=4, progress=False, **kw)


def _exams(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return {row["exam_id"]: row for row in csv.DictReader(fh)}


def test_filename_grouping_with_an_id_column_keeps_sites_apart(tmp_path: Path, tiny_artifact: Path,
                                                               scorer: Scorer) -> None:
    root = tmp_path / "m"
    lines = ["image,id"]
    for k, (site, eye) in enumerate([("siteA", "left"), ("siteA", "right"), ("siteB", "left"), ("siteB", "right")]):
        (root / site).mkdir(parents=True, exist_ok=True)
        (root / site / f"10_{eye}.png").write_bytes(png(20 + k))
        lines.append(f"{site}/10_{eye}.png,img-{k}")
    (root / "manifest.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    run_job(_config(root / "manifest.csv", tmp_path / "out.csv", tiny_artifact, group_by="filename",
                    id_column="id"), scorer=scorer)
    exams = _exams(tmp_path / "out.exams.csv")
    assert set(exams) == {"siteA/10", "siteB/10"}  # was one exam "10" of four photographs: two patients merged
    assert exams["siteA/10"]["image_ids"] == "img-0;img-1" and exams["siteB/10"]["image_ids"] == "img-2;img-3"
    assert all(e["images"] == "2" and e["error"] == "" for e in exams.values())


def test_study_grouping_never_merges_two_patients_and_refuses_one_photograph_as_both_eyes(
    tmp_path: Path, tiny_artifact: Path, scorer: Scorer
) -> None:
    folder = tmp_path / "dicom"
    folder.mkdir()
    (folder / "a-R.dcm").write_bytes(dicom(1, "R", study_uid=STUDY, PatientID=PATIENT_A))
    (folder / "b-L.dcm").write_bytes(dicom(2, "L", study_uid=STUDY, PatientID=PATIENT_B))
    (folder / "c-R.dcm").write_bytes(dicom(3, "R", study_uid="1.2.3.4", PatientID=PATIENT_A))
    (folder / "c-L.dcm").write_bytes(dicom(4, "L", study_uid="1.2.3.4", PatientID=PATIENT_A))
    photo = png(30)
    (folder / "11_right.png").write_bytes(photo)
    (folder / "11_left.png").write_bytes(photo)
    run_job(_config(folder, tmp_path / "d.csv", tiny_artifact, group_by="study"), scorer=scorer)
    text = (tmp_path / "d.exams.csv").read_text(encoding="utf-8")
    assert PATIENT_A not in text and PATIENT_B not in text
    exams = _exams(tmp_path / "d.exams.csv")
    mixed = exams[STUDY]
    assert mixed["outcome"] == "" and mixed["error"].startswith("mixed-patients: the study's DICOM files carry 2 "
                                                                "different PatientIDs")
    assert exams["1.2.3.4"]["outcome"] and exams["1.2.3.4"]["error"] == ""

    run_job(_config(folder, tmp_path / "f.csv", tiny_artifact, group_by="filename"), scorer=scorer)
    same = _exams(tmp_path / "f.exams.csv")["11"]
    assert same["outcome"] == ""  # was no_referable_dr or another outcome for an eye never photographed
    assert same["error"].startswith("same-photograph-both-eyes: 11_right.png (right eye) and 11_left.png (left eye)")
