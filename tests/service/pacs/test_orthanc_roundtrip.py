"""Round trips through a real PACS: a two-eye study goes into Orthanc, Orthanc forwards it (Lua
``OnStoredInstance``) to ``radscreen dicom-listen``, which grades it and stores its SR back into the same study.

- the study is pushed with Orthanc's own DICOMweb STOW-RS, as a camera gateway would; the SR read back from
  Orthanc states the service's own answer for the same photographs (scored independently in this process);
- dcmtk's ``storescu`` drives the C-STORE receiver directly and ``findscu`` finds the SR series in Orthanc;
- a study resent (to Orthanc and straight to the receiver) yields no second result object;
- patient identifiers and study UIDs never reach the receiver's log (at debug level) or its metrics.
"""

from __future__ import annotations

import io
import subprocess
import time
from pathlib import Path

import pydicom
import pytest
from pydicom.uid import generate_uid

from service.pacs.delivery import CStoreArchive
from tests.helpers.dicom_listener import AE_TITLE, PATIENT_ID, PATIENT_NAME, SETTLE_S, Listener, two_eye_study
from tests.helpers.orthanc import Orthanc
from tests.helpers.pacs_checks import Expected, check_sr_against, expected_for, require_dcmtk, sr_summary

pytestmark = pytest.mark.timeout(300)
DEADLINE_S = 90.0  # bounded wait for the SR (grading a tiny model takes well under a second once forwarded)
SENT_UIDS: list[str] = []  # every study and instance UID the tests used, for the PHI check


def _uids(instances: list[bytes]) -> dict[str, str]:
    eyes = {}
    for data in instances:
        header = pydicom.dcmread(io.BytesIO(data), stop_before_pixels=True)
        eyes[str(header.SOPInstanceUID)] = "right" if header.ImageLaterality == "R" else "left"
    SENT_UIDS.extend(eyes)
    return eyes


def _sr_ids(orthanc: Orthanc, study_uid: str, count: int = 1) -> list[str]:
    return orthanc.wait_for(DEADLINE_S, count=count, StudyInstanceUID=study_uid, Modality="SR")


def test_study_pushed_into_orthanc_comes_back_with_radscreen_sr(pacs: tuple[Orthanc, Listener], tiny_scorer,
                                                               ) -> None:
    orthanc, listener = pacs
    study_uid = generate_uid()
    SENT_UIDS.append(study_uid)
    instances = list(two_eye_study(study_uid))
    eyes = _uids(instances)
    expected: Expected = expected_for(tiny_scorer, instances)
    assert orthanc.stow(instances).status_code == 200
    ids = _sr_ids(orthanc, study_uid)
    assert len(ids) == 1, f"no SR in Orthanc's study within {DEADLINE_S} s:\n{listener.log.read_text()[-2000:]}"
    data = orthanc.instance_file(ids[0])
    summary = sr_summary(data)
    check_sr_against(summary, expected, eyes)
    ds = summary["dataset"]
    assert ds.StudyInstanceUID == study_uid  # into the same study, with the patient the archive files it under
    assert (ds.PatientID, str(ds.PatientName)) == (PATIENT_ID, PATIENT_NAME)
    assert listener.metric('radscreen_pacs_deliveries_total{result="delivered"}') >= 1

    # resent into Orthanc and straight to the receiver: still one result object
    assert orthanc.stow(instances).status_code == 200
    built = listener.metric('radscreen_pacs_results_total{event="built"}')
    duplicate = listener.metric('radscreen_pacs_results_total{event="duplicate"}')
    archive = CStoreArchive("127.0.0.1", listener.port, AE_TITLE, "RESENDER")
    for instance in instances:
        archive.send(instance)  # returns once the receiver has answered: stored (or refused) by then
    assert orthanc.wait_for_jobs(DEADLINE_S), "Orthanc's forward of the resent study did not finish"
    received = time.time()  # every copy, Orthanc's forward and the direct one, is in the spool
    # had a copy changed the study, it would be due SETTLE_S after it arrived: wait for a pass that judged it then
    assert listener.wait_for_grading_pass(received + SETTLE_S, DEADLINE_S), listener.log.read_text()[-2000:]
    assert listener.metric('radscreen_pacs_results_total{event="built"}') == built
    assert listener.metric('radscreen_pacs_results_total{event="duplicate"}') == duplicate  # not graded again
    assert listener.metric("radscreen_pacs_outbox ") == 0  # nothing new waits for the archive either
    assert len(orthanc.find(StudyInstanceUID=study_uid, Modality="SR")) == 1


def test_same_result_delivered_twice_is_one_object_in_orthanc(pacs: tuple[Orthanc, Listener], tiny_scorer) -> None:
    """A crash after delivery but before the receipt was recorded resends the same SR: the archive keeps one."""
    orthanc, _ = pacs
    study_uid = generate_uid()
    SENT_UIDS.append(study_uid)
    instances = list(two_eye_study(study_uid))
    _uids(instances)
    assert orthanc.stow(instances).status_code == 200
    [sr_id] = _sr_ids(orthanc, study_uid)
    data = orthanc.instance_file(sr_id)
    CStoreArchive("127.0.0.1", orthanc.dicom_port, orthanc.ae_title, AE_TITLE).send(data)
    assert orthanc.find(StudyInstanceUID=study_uid, Modality="SR") == [sr_id]


def test_storescu_to_receiver_and_findscu_finds_the_sr(pacs: tuple[Orthanc, Listener], tiny_scorer,
                                                       tmp_path: Path) -> None:
    require_dcmtk()
    orthanc, listener = pacs
    study_uid = generate_uid()
    SENT_UIDS.append(study_uid)
    instances = list(two_eye_study(study_uid))
    eyes = _uids(instances)
    expected = expected_for(tiny_scorer, instances)
    files = []
    for i, data in enumerate(instances):
        files.append(tmp_path / f"eye{i}.dcm")
        files[-1].write_bytes(data)
    sent = subprocess.run(["storescu", "--propose-jpeg8", "-aet", "CAMERA", "-aec", AE_TITLE, "127.0.0.1",
                           str(listener.port), *map(str, files)], capture_output=True, text=True, timeout=60)
    assert sent.returncode == 0, sent.stderr
    out = tmp_path / "found"
    out.mkdir()
    deadline = time.monotonic() + DEADLINE_S
    while not list(out.glob("rsp*.dcm")) and time.monotonic() < deadline:
        found = subprocess.run(
            ["findscu", "-S", "-aet", "FINDSCU", "-aec", orthanc.ae_title, "-X", "-od", str(out),
             "-k", "QueryRetrieveLevel=SERIES", "-k", f"StudyInstanceUID={study_uid}", "-k", "Modality=SR",
             "-k", "SeriesInstanceUID", "-k", "SeriesDescription", "127.0.0.1", str(orthanc.dicom_port)],
            capture_output=True, text=True, timeout=60)
        assert found.returncode == 0, found.stderr
        time.sleep(0.5)
    [response] = list(out.glob("rsp*.dcm"))
    series = pydicom.dcmread(response)
    assert series.SeriesInstanceUID == expected.series_uid
    [sr_id] = orthanc.find(StudyInstanceUID=study_uid, Modality="SR")
    check_sr_against(sr_summary(orthanc.instance_file(sr_id)), expected, eyes)


def test_no_identifier_in_logs_or_metrics(pacs: tuple[Orthanc, Listener]) -> None:
    """A study's identifiers (and those of every study this module sent before) never show in the receiver's log,
    at debug level, nor in its metrics, while its SR, in Orthanc, carries the patient."""
    orthanc, listener = pacs
    study_uid = generate_uid()
    SENT_UIDS.append(study_uid)
    instances = list(two_eye_study(study_uid))
    _uids(instances)
    assert orthanc.stow(instances).status_code == 200
    [sr_id] = _sr_ids(orthanc, study_uid)
    assert pydicom.dcmread(io.BytesIO(orthanc.instance_file(sr_id))).PatientID == PATIENT_ID
    text = listener.log.read_text(errors="replace") + listener.metrics()
    assert "exam graded" in text  # the log is the receiver's, and it did log the grading
    for secret in (PATIENT_ID, PATIENT_NAME, *PATIENT_NAME.split("^"), *SENT_UIDS):
        assert secret not in text
