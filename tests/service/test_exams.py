"""POST /v1/exams through the real service: photographs of both eyes in, one patient outcome out.

The artifact is calibrated so that each per-image outcome occurs (tests.helpers.outcomes), so every exam
outcome can be produced by choosing which photograph stands for which eye; expected exam outcomes follow the
hand table of tests/models/test_decision.py. DICOM files are built around the same pixels (tests.helpers.dicom_files)
and must give the same numbers as the PNGs.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image

from support.images import encode
from support.shared_data import ODIR, missing_reason
from tests.helpers.dicom_files import CT_IMAGE, JPEG_BASELINE, odir_pair, op_dicom, rgb_of
from tests.helpers.outcomes import build_outcome_artifact
from tests.helpers.service_process import running_service

REFER, REVIEW, RETAKE, CLEAR = "refer_referable_dr", "grader_review_uncertain", "retake_ungradable", "no_referable_dr"
SECRET_EXAM = "EXAM-SECRET-7731"
SECRET_PATIENT = "PATIENT-SECRET-4410"


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    return build_outcome_artifact(tmp_path_factory.mktemp("exams") / "artifact")


@pytest.fixture(scope="module")
def log_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("exams-log") / "service.log"


@pytest.fixture(scope="module")
def service(calibrated: tuple[Path, dict[str, bytes]], log_path: Path) -> Iterator[str]:
    with running_service(calibrated[0], log_path, env={"RADSCREEN_MAX_EXAM_IMAGES": "4"}) as base:
        yield base


@pytest.fixture(scope="module")
def photos(calibrated: tuple[Path, dict[str, bytes]]) -> dict[str, bytes]:
    return calibrated[1]


def exam(service: str, parts: list[tuple[str, tuple[str, bytes, str]]], **kwargs: Any) -> httpx.Response:
    return httpx.post(f"{service}/v1/exams", files=parts, timeout=120, **kwargs)


def png(name: str, data: bytes) -> tuple[str, bytes, str]:
    return (name, data, "image/png")


def twin(data: bytes) -> bytes:
    """The photograph with its top-left background pixel one level brighter: another photograph to the exam
    identity rule, which refuses one photograph's bytes or decoded pixels as both eyes
    (tests/service/hostile/test_one_photograph_one_eye.py); its scores are compared with its own."""
    rgb = pixels(data).copy()
    rgb[0, 0] = np.minimum(rgb[0, 0].astype(np.int16) + 1, 255).astype(np.uint8)
    return encode(rgb)


def dcm(data: bytes) -> tuple[str, bytes, str]:
    return ("photo.dcm", data, "application/dicom")


def predict(service: str, data: bytes) -> dict[str, Any]:
    response = httpx.post(f"{service}/v1/predict", files={"image": ("x", data, "application/octet-stream")},
                          timeout=60)
    assert response.status_code == 200, response.text
    return dict(response.json())


def pixels(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as img:
        return np.asarray(img.convert("RGB"), dtype=np.uint8)


def same_numbers(a: dict[str, Any], b: dict[str, Any]) -> None:
    """The same pixels give the same answer; images scored in different micro-batches (another batch size or
    position) differ only by float32 batching noise (~1e-8), far below any threshold."""
    assert a["outcome"] == b["outcome"] and a["quality"] == b["quality"]
    assert a["diagnosis"]["label"] == b["diagnosis"]["label"]
    assert a["diagnosis"]["referable_dr_probability"] == pytest.approx(b["diagnosis"]["referable_dr_probability"],
                                                                       rel=1e-6)
    assert a["uncertainty"]["mutual_information"] == pytest.approx(b["uncertainty"]["mutual_information"],
                                                                   rel=1e-4, abs=1e-9)


@pytest.mark.parametrize(
    ("right", "left", "expected"),
    [(REFER, CLEAR, REFER), (CLEAR, CLEAR, CLEAR), (REVIEW, CLEAR, REVIEW), (CLEAR, RETAKE, RETAKE),
     (RETAKE, REFER, REFER), (REVIEW, RETAKE, REVIEW)],
)
def test_exam_outcome_follows_the_rule_and_each_image_matches_predict(
    service: str, photos: dict[str, bytes], right: str, left: str, expected: str
) -> None:
    sent = (photos[right], twin(photos[left]))
    response = exam(service, [("right", png("r.png", sent[0])), ("left", png("l.png", sent[1]))])
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["outcome"] == expected
    assert body["eyes"]["right"] == {"outcome": right, "outcome_reason": body["eyes"]["right"]["outcome_reason"],
                                     "photographs": 1}
    assert body["eyes"]["left"]["outcome"] == left and body["missing_eyes"] == []
    assert [im["eye"] for im in body["images"]] == ["right", "left"]
    for image, key, data in zip(body["images"], (right, left), sent, strict=True):
        alone = predict(service, data)
        assert image["result"]["outcome"] == key == alone["outcome"]
        same_numbers(image["result"], alone)
        assert image["format"] == "image"


def test_one_eye_is_never_clear_and_several_photographs_per_eye(service: str, photos: dict[str, bytes]) -> None:
    body = exam(service, [("left", png("l.png", photos[CLEAR]))]).json()
    assert body["outcome"] == RETAKE and body["missing_eyes"] == ["right"]
    assert body["eyes"]["right"]["photographs"] == 0 and "right eye" in body["outcome_reason"]
    # an ungradable photograph beside a gradable clear one of the same eye is outweighed
    body = exam(service, [("right", png("r1.png", photos[RETAKE])), ("right", png("r2.png", photos[CLEAR])),
                          ("left", png("l.png", twin(photos[CLEAR])))]).json()
    assert body["outcome"] == CLEAR and body["eyes"]["right"] == {
        "outcome": CLEAR, "outcome_reason": body["eyes"]["right"]["outcome_reason"], "photographs": 2}


def test_same_pair_as_dicom_gives_the_same_numbers(service: str, photos: dict[str, bytes]) -> None:
    as_png = exam(service, [("right", png("r.png", photos[REFER])), ("left", png("l.png", photos[CLEAR]))]).json()
    right = op_dicom(pixels(photos[REFER]), laterality="R", study_uid="1.2.3.99")
    left = op_dicom(pixels(photos[CLEAR]), laterality="L", study_uid="1.2.3.99")
    response = exam(service, [("image", dcm(left)), ("image", dcm(right))])  # eyes from the headers
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["outcome"] == as_png["outcome"] == REFER
    assert body["exam_id"] == "1.2.3.99"  # the DICOM study is the visit when no exam_id is given
    by_eye = {im["eye"]: im for im in body["images"]}
    for im in as_png["images"]:
        twin = by_eye[im["eye"]]
        assert twin["format"] == "dicom"
        same_numbers(twin["result"], im["result"])


def test_real_odir_pair_png_and_dicom_agree(service: str) -> None:
    pair = odir_pair()
    if pair is None:
        pytest.skip(missing_reason(ODIR))
    right, left = (rgb_of(p) for p in pair)
    as_jpeg = exam(service, [("right", ("r.jpg", encode(right, "JPEG", quality=95), "image/jpeg")),
                             ("left", ("l.jpg", encode(left, "JPEG", quality=95), "image/jpeg"))]).json()
    as_dicom = exam(service, [("right", dcm(op_dicom(right, syntax=JPEG_BASELINE, laterality="R"))),
                              ("left", dcm(op_dicom(left, syntax=JPEG_BASELINE, laterality="L")))]).json()
    assert as_jpeg["outcome"] == as_dicom["outcome"]
    assert as_jpeg["eyes"] == as_dicom["eyes"]
    for a, b in zip(as_jpeg["images"], as_dicom["images"], strict=True):
        same_numbers(a["result"], b["result"])


def test_opaque_ids_are_echoed_and_never_logged(service: str, photos: dict[str, bytes], log_path: Path) -> None:
    body = exam(service, [("right", png("r.png", photos[CLEAR])), ("left", png("l.png", twin(photos[CLEAR])))],
                data={"exam_id": SECRET_EXAM, "patient_ref": SECRET_PATIENT}).json()
    assert body["exam_id"] == SECRET_EXAM and body["patient_ref"] == SECRET_PATIENT
    exam(service, [("image", dcm(op_dicom(pixels(photos[CLEAR]), laterality="R", study_uid="9.8.7.4242")))])
    log = log_path.read_text(encoding="utf-8")
    assert SECRET_EXAM not in log and SECRET_PATIENT not in log and "9.8.7" not in log


def problem(response: httpx.Response, status: int, slug: str) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["type"].endswith("/" + slug)
    return str(body["detail"])


def test_refusals_are_problems(service: str, photos: dict[str, bytes]) -> None:
    clear = png("c.png", photos[CLEAR])
    problem(exam(service, [], data={"exam_id": "x"}), 415, "unsupported-media-type")  # url-encoded, no files
    only_text: Any = [("exam_id", (None, b"x"))]
    assert "at least one photograph" in problem(exam(service, only_text), 422, "validation-error")
    detail = problem(exam(service, [("right", clear)] * 5), 413, "payload-too-large")
    assert "at most 4" in detail and "RADSCREEN_MAX_EXAM_IMAGES" in detail
    detail = problem(exam(service, [("image", clear)]), 422, "validation-error")
    assert "eye is unknown" in detail
    left_dicom = op_dicom(pixels(photos[CLEAR]), laterality="L")
    assert "header says left" in problem(exam(service, [("right", dcm(left_dicom))]), 422, "validation-error")
    other = op_dicom(pixels(photos[CLEAR]), laterality="R", study_uid="5.5.5")
    detail = problem(exam(service, [("image", dcm(left_dicom)), ("image", dcm(other))]), 422, "validation-error")
    assert "2 different studies" in detail
    detail = problem(exam(service, [("right", clear), ("left", ("l.png", b"\x89PNG\r\n\x1a\n broken", "image/png"))]),
                     400, "undecodable-image")
    assert detail.startswith("The left-eye photograph (part 2) was refused")
    ct = op_dicom(pixels(photos[CLEAR]), SOPClassUID=CT_IMAGE)
    problem(exam(service, [("right", dcm(ct)), ("left", dcm(left_dicom))]), 415, "unsupported-media-type")
    huge = op_dicom(pixels(photos[CLEAR])[:32, :32], Rows=65535, Columns=65535)
    problem(exam(service, [("right", dcm(huge)), ("left", dcm(left_dicom))]), 413, "image-too-large")
    problem(exam(service, [("both", clear)]), 422, "validation-error")
    assert "text field" in problem(exam(service, [("right", clear), ("exam_id", clear)]), 422, "validation-error")
    assert "file part" in problem(exam(service, [("right", clear)], data={"left": "x"}), 422, "validation-error")
    problem(exam(service, [("right", clear)], data={"exam_id": "é" * 3}), 422, "validation-error")


def test_predict_accepts_dicom_multipart_and_raw(service: str, photos: dict[str, bytes]) -> None:
    data = op_dicom(pixels(photos[REVIEW]))
    as_png = predict(service, photos[REVIEW])
    raw = httpx.post(f"{service}/v1/predict", content=data, headers={"Content-Type": "application/dicom"}, timeout=60)
    assert raw.status_code == 200, raw.text
    assert raw.json()["diagnosis"] == as_png["diagnosis"] == predict(service, data)["diagnosis"]
    assert raw.json()["uncertainty"] == as_png["uncertainty"]


def test_fhir_exam_report_validates_with_one_observation_per_eye(service: str, photos: dict[str, bytes]) -> None:
    pytest.importorskip("fhir.resources.R4B", reason="fhir.resources (dev extra) validates the FHIR output")
    from fhir.resources.R4B.bundle import Bundle

    parts = [("right", png("r.png", photos[REFER])), ("left", png("l.png", photos[RETAKE]))]
    response = exam(service, parts, headers={"Accept": "application/fhir+json"}, data={"patient_ref": "P-1"})
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/fhir+json")
    bundle = response.json()
    Bundle.model_validate(bundle)
    kinds = [e["resource"]["resourceType"] for e in bundle["entry"]]
    assert kinds == ["DiagnosticReport", "Observation", "Observation", "Device"]
    report = bundle["entry"][0]["resource"]
    assert report["conclusionCode"][0]["coding"][0]["code"] == REFER
    assert report["subject"]["identifier"]["value"] == "P-1"
    observations = {e["resource"]["bodySite"]["coding"][0]["code"]: e["resource"] for e in bundle["entry"][1:3]}
    assert observations["right-eye"]["valueCodeableConcept"]["coding"][0]["code"] == REFER
    assert observations["left-eye"]["valueCodeableConcept"]["coding"][0]["code"] == RETAKE
    laterality = {k: o["component"][0]["valueCodeableConcept"]["coding"][0] for k, o in observations.items()}
    assert laterality["right-eye"]["code"] == "24028007" and laterality["left-eye"]["code"] == "7771000"
    assert all(c["system"] == "http://snomed.info/sct" for c in laterality.values())
    # the ungradable left photograph carries no probability component
    left_codes = [c["code"]["coding"][0]["code"] for c in observations["left-eye"]["component"]]
    assert "referable-dr-probability" not in left_codes


def test_an_exam_body_that_contradicts_its_photographs_is_not_rendered(
    service: str, photos: dict[str, bytes]
) -> None:
    from service.interop.fhir_exam import to_fhir_exam_bundle

    body = exam(service, [("right", png("r.png", photos[CLEAR])), ("left", png("l.png", twin(photos[CLEAR])))]).json()
    assert body["outcome"] == CLEAR and to_fhir_exam_bundle(body)["type"] == "collection"
    with pytest.raises(ValueError, match="contradicts its photographs"):
        to_fhir_exam_bundle({**body, "outcome": REFER})
    edited = {**body, "images": [{**body["images"][0], "result": {**body["images"][0]["result"], "outcome": REFER}},
                                 body["images"][1]]}
    with pytest.raises(ValueError, match="contradicts the response's own fields"):
        to_fhir_exam_bundle(edited)


def test_exam_metrics_count_outcomes_and_images(service: str, photos: dict[str, bytes]) -> None:
    def samples() -> dict[str, float]:
        text = httpx.get(f"{service}/metrics", timeout=30).text
        return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                if line.startswith(("radscreen_exams_total", "radscreen_exam_images_"))}

    before = samples()
    exam(service, [("right", png("r.png", photos[REVIEW])), ("left", png("l.png", photos[CLEAR])),
                   ("left", png("l2.png", photos[CLEAR]))])
    after = samples()
    key = 'radscreen_exams_total{outcome="grader_review_uncertain"}'
    assert after[key] - before[key] == 1
    assert after["radscreen_exam_images_sum"] - before["radscreen_exam_images_sum"] == 3
    assert after["radscreen_exam_images_count"] - before["radscreen_exam_images_count"] == 1
