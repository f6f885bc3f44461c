"""Round three, echoed identifiers: what comes back in JSON, a FHIR identifier or a CSV cell is checked first.

The finding: a DICOM StudyInstanceUID came back as ``exam_id`` as it was (10 KB, NUL/ESC/CRLF, ``<script>``,
mojibake; a CR that reaches an HL7 v2 interface is segment injection), and an ``exam_id`` of blanks was
accepted. Now client ids obey one strict rule (``service.screening.identifiers``: ASCII letters, digits and
``. _ - : /``, 1-64 characters) on every route, and a StudyInstanceUID the DICOM UID grammar (digits and dots,
at most 64 characters); neither is ever quoted in the refusal. Real uvicorn on 127.0.0.1.
"""

from __future__ import annotations

import csv
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.batch.job import BatchJobConfig, run_job
from service.inference.loading import load_scorer
from service.inference.spec import ScorerSpec
from service.screening.identifiers import UID_RULE
from support.images import encode, fundus_like
from support.live_server import live_server, settings_for
from tests.helpers.dicom_files import op_dicom

HOSTILE_IDS = ["   ", "", " EXAM-1", "<script>alert(1)</script>", "A|B^C~D\\E&F", "x\r\nPID|1", "a\x00b", "a\x1b[31m",
               "Ã©tude", "x" * 65, "-leading-dash", "'quoted'"]
GOOD_IDS = ["EXAM-2026.11:42/a_b", "1.2.840.113619.2.55.3", "x" * 64]
HOSTILE_UIDS = ["1" * 10_000, "1.2.3\r\nPID|||evil", "1.2.3\x1b[2J", "<script>alert(1)</script>", "1.2.3.abc",
                "1.2..3", "1" * 65, "1.2.3Ã©"]


@pytest.fixture(scope="module")
def server(tiny_artifact: Path) -> Iterator[str]:
    with live_server(settings_for(tiny_artifact)) as base:
        yield base


@pytest.fixture(scope="module")
def photos() -> tuple[bytes, bytes]:
    return encode(fundus_like(1, size=96)), encode(fundus_like(2, size=96))


def exam(server: str, photos: tuple[bytes, bytes], **kw: Any) -> httpx.Response:
    files = [("right", ("r.png", photos[0], "image/png")), ("left", ("l.png", photos[1], "image/png"))]
    return httpx.post(f"{server}/v1/exams", files=files, timeout=120, **kw)


def refused(response: httpx.Response, field: str, secret: str = "") -> str:
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["type"].endswith("/validation-error") and field in body["detail"], body["detail"]
    if len(secret.strip()) > 2:
        assert secret not in response.text
    return str(body["detail"])


def uid_dicom(uid: str, side: str) -> bytes:
    from pydicom import config

    config.settings.writing_validation_mode = config.IGNORE  # write the hostile UID as it is
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return op_dicom(fundus_like(3 if side == "R" else 4, size=96), laterality=side, study_uid=uid)
    finally:
        config.settings.writing_validation_mode = config.WARN


@pytest.mark.parametrize("value", HOSTILE_IDS)
def test_client_ids_are_refused_on_every_route(server: str, photos: tuple[bytes, bytes], value: str) -> None:
    for field in ("exam_id", "patient_ref"):
        refused(exam(server, photos, data={field: value}), field, value)
    predict = httpx.post(f"{server}/v1/predict", files={"image": ("e.png", photos[0], "image/png")},
                         data={"study_id": value}, timeout=60)
    refused(predict, "study_id", value)
    doc = httpx.post(f"{server}/v1/predict", files={"image": ("e.png", photos[0], "image/png")}, timeout=60).json()
    rendered = httpx.post(f"{server}/v1/fhir", content=json.dumps({**doc, "study_id": value}),
                          headers={"Content-Type": "application/json"}, timeout=30)
    refused(rendered, "study_id", value)


@pytest.mark.parametrize("value", GOOD_IDS)
def test_ids_within_the_rule_come_back_as_sent(server: str, photos: tuple[bytes, bytes], value: str) -> None:
    body = exam(server, photos, data={"exam_id": value, "patient_ref": value}).json()
    assert body["exam_id"] == value and body["patient_ref"] == value
    fhir = exam(server, photos, data={"exam_id": value}, params={"format": "fhir"}).json()
    report = fhir["entry"][0]["resource"]
    assert {"system": "urn:radial-screen:exam-id", "value": value} in report["identifier"]


@pytest.mark.parametrize("uid", HOSTILE_UIDS)
def test_a_hostile_study_uid_is_never_echoed(server: str, uid: str) -> None:
    parts = [("image", ("r.dcm", uid_dicom(uid, "R"), "application/dicom")),
             ("image", ("l.dcm", uid_dicom(uid, "L"), "application/dicom"))]
    for params in ({}, {"format": "fhir"}):
        response = httpx.post(f"{server}/v1/exams", files=parts, params=params, timeout=120)
        detail = refused(response, "StudyInstanceUID is not valid", uid)
        assert "digits and dots, at most 64 characters" in detail


def test_a_padded_uid_is_normalised_and_echoed(server: str) -> None:
    uid = "1.2.826.0.1.3680043.8.498.1234567"  # odd length: written with a trailing NUL pad
    parts = [("image", ("r.dcm", uid_dicom(uid, "R"), "application/dicom")),
             ("image", ("l.dcm", uid_dicom(uid, "L"), "application/dicom"))]
    response = httpx.post(f"{server}/v1/exams", files=parts, timeout=120)
    assert response.status_code == 200, response.text
    assert response.json()["exam_id"] == uid


def test_batch_study_grouping_never_writes_a_hostile_uid(tmp_path: Path, tiny_artifact: Path) -> None:
    folder = tmp_path / "dicom"
    folder.mkdir()
    for k, uid in enumerate(HOSTILE_UIDS[1:5]):
        (folder / f"{k}-R.dcm").write_bytes(uid_dicom(uid, "R"))
    (folder / "ok-R.dcm").write_bytes(uid_dicom("1.2.3.4", "R"))
    (folder / "ok-L.dcm").write_bytes(uid_dicom("1.2.3.4", "L"))
    cfg = BatchJobConfig(input=folder, output=tmp_path / "out.csv", group_by="study", progress=False,
                         spec=ScorerSpec(model_dir=tiny_artifact, device="cpu"), batch_size=4)
    run_job(cfg, scorer=load_scorer(ScorerSpec(model_dir=tiny_artifact, device="cpu")))
    text = (tmp_path / "out.exams.csv").read_text(encoding="utf-8")
    with (tmp_path / "out.exams.csv").open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["exam_id"] for r in rows] == ["1.2.3.4", "", "", "", ""]
    assert all(r["error"].endswith(f"the DICOM StudyInstanceUID is not valid ({UID_RULE})") for r in rows[1:])
    for fragment in ("PID|||evil", "\x1b", "\\x1b", "<script>", "1.2.3.abc"):
        assert fragment not in text
