"""DICOMweb STOW-RS into the service (``POST /dicomweb/studies``), the SR delivered to a real Orthanc over STOW-RS.

The service runs in uvicorn on 127.0.0.1 with the tiny artifact, an API key and a spool; its archive is Orthanc's
DICOMweb endpoint. A two-eye study with a CT slice and a garbage part beside it is answered 202 with the standard
response (the two photographs referenced, the two others failed with their reasons), and the SR appears in
Orthanc's study, stating the service's own answer. Resending yields no second result object.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Iterator
from pathlib import Path

import httpx
import pydicom
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydicom.uid import generate_uid

from service.pacs.intake import CANNOT_UNDERSTAND, SOP_CLASS_NOT_SUPPORTED
from service.pacs.settings import PacsSettings
from support.images import fundus_like
from support.live_server import live_server, settings_for
from tests.helpers.dicom_files import CT_IMAGE, op_dicom
from tests.helpers.dicom_listener import two_eye_study
from tests.helpers.orthanc import Orthanc, running_orthanc
from tests.helpers.pacs_checks import check_sr_against, expected_for, require_orthanc, sr_summary
from tests.helpers.stow import send_stow

pytestmark = pytest.mark.timeout(300)
API_KEY = "stow-test-key"
REFERENCED, FAILED, REASON, INSTANCE = "00081199", "00081198", "00081197", "00081155"


@pytest.fixture(scope="module")
def stack(tiny_artifact: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Orthanc]]:
    require_orthanc()
    folder = tmp_path_factory.mktemp("stow")
    pacs = PacsSettings(spool_dir=folder / "spool", archive_url="", settle_s=0.5, quiet_s=30, poll_s=0.2,
                        retry_base_s=0.5, retry_max_s=2)
    with running_orthanc(folder / "orthanc") as orthanc:
        pacs = pacs.model_copy(update={"archive_url": orthanc.dicomweb})
        settings = settings_for(tiny_artifact, api_key=API_KEY, max_upload_bytes=1024 * 1024, backend="torch")
        with live_server(settings, pacs=pacs) as base:
            yield base, orthanc


stow = functools.partial(send_stow, key=API_KEY)


def _sop(data: bytes) -> str:
    return str(pydicom.dcmread(io.BytesIO(data), stop_before_pixels=True).SOPInstanceUID)


def test_stow_study_graded_and_sr_in_orthanc(stack: tuple[str, Orthanc], tiny_scorer) -> None:
    base, orthanc = stack
    study_uid = generate_uid()
    right, left = two_eye_study(study_uid)
    ct = op_dicom(fundus_like(9, 64), SOPClassUID=CT_IMAGE, Modality="CT", study_uid=study_uid)
    response = stow(base, [right, ct, left, b"not dicom at all"])
    assert response.status_code == 202
    assert response.headers["content-type"] == "application/dicom+json"
    body = response.json()
    assert {item[INSTANCE]["Value"][0] for item in body[REFERENCED]["Value"]} == {_sop(right), _sop(left)}
    assert sorted(item[REASON]["Value"][0] for item in body[FAILED]["Value"]) == sorted(
        [SOP_CLASS_NOT_SUPPORTED, CANNOT_UNDERSTAND])
    expected = expected_for(tiny_scorer, [right, left])
    ids = orthanc.wait_for(90, StudyInstanceUID=study_uid, Modality="SR")
    assert len(ids) == 1
    check_sr_against(sr_summary(orthanc.instance_file(ids[0])), expected, {_sop(right): "right", _sop(left): "left"})

    again = stow(base, [right, left], path=f"/dicomweb/studies/{study_uid}")  # resent: stored, not graded again
    assert again.status_code == 200 and FAILED not in again.json()
    metrics = httpx.get(f"{base}/metrics", timeout=10).text
    assert 'radscreen_pacs_results_total{event="built"} 1.0' in metrics
    assert 'radscreen_pacs_instances_total{path="stow",result="refused"} 2.0' in metrics
    assert len(orthanc.find(StudyInstanceUID=study_uid, Modality="SR")) == 1


def test_stow_refusals(stack: tuple[str, Orthanc]) -> None:
    base, _ = stack
    right, _left = two_eye_study(generate_uid())
    assert stow(base, [right], key=None).status_code == 401
    assert stow(base, [right], key="wrong").status_code == 401
    refused = stow(base, [right], content_type="multipart/form-data; boundary=x")
    assert refused.status_code == 415 and refused.headers["content-type"] == "application/problem+json"
    assert stow(base, [right], content_type='multipart/related; type="image/jpeg"; boundary=x').status_code == 415
    assert stow(base, [b"garbage"]).status_code == 409
    other_study = stow(base, [right], path=f"/dicomweb/studies/{generate_uid()}")
    assert other_study.status_code == 409


def test_stow_off_without_a_spool(tiny_artifact: Path) -> None:
    right, _ = two_eye_study(generate_uid())
    with live_server(settings_for(tiny_artifact, backend="torch"), pacs=PacsSettings(spool_dir=None)) as base:
        response = stow(base, [right], key=None)
    assert response.status_code == 404
    assert "RADSCREEN_PACS_SPOOL_DIR" in response.json()["detail"]


def test_exam_fhir_of_dicom_photographs_names_their_study(stack: tuple[str, Orthanc]) -> None:
    """POST /v1/exams with the DICOM photographs of one study: the FHIR DiagnosticReport references that study."""
    base, _ = stack
    study_uid = generate_uid()
    right, left = two_eye_study(study_uid)
    files = [("image", ("r.dcm", right, "application/dicom")), ("image", ("l.dcm", left, "application/dicom"))]
    response = httpx.post(f"{base}/v1/exams?format=fhir", files=files, headers={"X-API-Key": API_KEY}, timeout=60)
    assert response.status_code == 200, response.text
    [report] = [e["resource"] for e in response.json()["entry"] if e["resource"]["resourceType"] == "DiagnosticReport"]
    assert report["imagingStudy"] == [{"identifier": {"system": "urn:dicom:uid", "value": f"urn:oid:{study_uid}"},
                                       "display": "The DICOM study of the photographs"}]


def test_stow_bounds_instance_size_and_photographs_per_study(stack: tuple[str, Orthanc]) -> None:
    """A part above RADSCREEN_MAX_UPLOAD_BYTES (1 MiB here) refuses the whole request (413, nothing stored);
    a ninth photograph of one study (RADSCREEN_MAX_EXAM_IMAGES = 8) is refused with 0xA700; a photograph the
    study already holds is not new."""
    from service.pacs.intake import OUT_OF_RESOURCES

    base, _ = stack
    study_uid = generate_uid()
    big = op_dicom(fundus_like(10, 640), study_uid=study_uid)  # 640 x 640 x 3 bytes uncompressed: 1.2 MB
    small = [op_dicom(fundus_like(20 + i, 64), study_uid=study_uid, laterality="RL"[i % 2]) for i in range(9)]
    too_large = stow(base, [small[0], big])
    assert too_large.status_code == 413, too_large.text
    assert "RADSCREEN_MAX_UPLOAD_BYTES" in too_large.json()["detail"]
    response = stow(base, small)  # small[0] was not stored by the refused request: nine are new
    assert response.status_code == 202
    body = response.json()
    assert len(body[REFERENCED]["Value"]) == 8
    failed = {item[INSTANCE]["Value"][0]: item[REASON]["Value"][0] for item in body[FAILED]["Value"]}
    assert failed == {_sop(small[8]): OUT_OF_RESOURCES}
    assert stow(base, small[:1]).status_code == 200  # held already: stored again, not a ninth


@given(body=st.binary(max_size=2048), boundary=st.sampled_from(["B", "xyz", ""]),
       media=st.sampled_from(['multipart/related; type="application/dicom"', "multipart/related",
                              'multipart/related; type="image/jpeg"', "application/dicom", ""]))
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_arbitrary_bodies_never_cause_a_server_error(stack: tuple[str, Orthanc], body: bytes, boundary: str,
                                                      media: str) -> None:
    base, _ = stack
    content_type = f"{media}; boundary={boundary}" if boundary and media else media
    headers = {"X-API-Key": API_KEY, **({"Content-Type": content_type} if content_type else {})}
    response = httpx.post(f"{base}/dicomweb/studies", content=body, headers=headers, timeout=30)
    assert response.status_code < 500, response.text
    if response.status_code == 409:  # a STOW answer: nothing stored, each part's Failure Reason
        assert response.headers["content-type"] == "application/dicom+json"
        assert all(item[REASON]["Value"] for item in response.json()[FAILED]["Value"])
    elif response.status_code >= 400:
        assert response.headers["content-type"].startswith("application/problem+json")
