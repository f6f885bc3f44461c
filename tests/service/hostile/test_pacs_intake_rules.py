"""What the PACS intake (STOW-RS and C-STORE both: ``service.pacs.receive.receive``) refuses at receipt, so the
sender learns it, and how the spool holds what it accepts.

Findings of the red-team pass, each reproduced on real Part-10 bytes and a real spool:

- the per-study bound (``RADSCREEN_MAX_EXAM_IMAGES``) was a count-then-write: 24 concurrent senders into one
  study stored 11 of a bound of 8 (threads, processes, and real HTTP STOW requests);
- a lower-case ImageLaterality ``r``, or the series Laterality alone, was accepted as the eye;
- a StudyInstanceUID with a trailing space was accepted (and filed under another key than the same UID);
- a resent identical instance was rewritten, so a study resent every 1.2 s never settled;
- a second patient in a study was acknowledged, then refused at grading with nothing sent back;
- one photograph (the same PixelData) sent as both eyes was acknowledged;
- two over-long rows of a batch CSV were both reported as ``line-3``.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from pydicom.uid import generate_uid

from models.outcome.decision import Eye
from service.batch.inputs import MALFORMED_ROW, discover_manifest
from service.pacs.intake import DATASET_DOES_NOT_MATCH, OUT_OF_RESOURCES, Accepted, Refused, check_instance
from service.pacs.receive import receive
from service.pacs.settings import PacsSettings
from service.pacs.store import Spool, key_of
from support.images import fundus_like
from support.live_server import live_server, settings_for
from tests.helpers.dicom_files import op_dicom

T = TypeVar("T")

pytestmark = pytest.mark.timeout(300)
MAX_BYTES = 4 * 1024 * 1024
BOUND = 8
SENDERS = 24
API_KEY = "intake-rules-key"


def _receive(spool: Spool, data: bytes) -> Accepted | Refused:
    return receive(data, spool, max_bytes=MAX_BYTES, max_instances=BOUND)


def _instances(study_uid: str, n: int = SENDERS) -> list[bytes]:
    """``n`` distinct photographs of one study, eyes alternating."""
    return [op_dicom(fundus_like(100 + i, 32), study_uid=study_uid, laterality="RL"[i % 2]) for i in range(n)]


def _held(spool: Spool, study_uid: str) -> list[Path]:
    return sorted((spool.studies_dir / key_of(study_uid)).glob("*.dcm"))


def _refused(verdict: Accepted | Refused, status: int = DATASET_DOES_NOT_MATCH) -> str:
    assert isinstance(verdict, Refused), verdict
    assert verdict.status == status, verdict
    return verdict.reason


# -- 1. the per-study bound holds under concurrent senders ---------------------------------------------------------
def test_concurrent_threads_store_exactly_the_bound(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    study_uid = generate_uid()
    instances = _instances(study_uid)
    verdicts = _all_at_once(lambda i: _receive(Spool(spool.root), instances[i]), 120)  # each its own view
    assert len(_held(spool, study_uid)) == BOUND
    assert sum(isinstance(v, Accepted) for v in verdicts) == BOUND
    assert all(v.status == OUT_OF_RESOURCES for v in verdicts if isinstance(v, Refused))


def _all_at_once(send: Callable[[int], T], timeout_s: float) -> list[T]:
    """``send(i)`` for each of the SENDERS senders, on threads released together; their results in order."""
    start = threading.Barrier(SENDERS)
    results: list[Any] = [None] * SENDERS

    def run(i: int) -> None:
        start.wait(timeout=60)
        results[i] = send(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(SENDERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout_s)
    return results


def _send_from_process(root: str, instances: list[bytes], start: Any, results: Any) -> None:
    """One receiving process (a forked HTTP worker or dicom-listen): its instances from concurrent threads."""
    start.wait(timeout=60)
    threads = [threading.Thread(target=lambda d=data: results.put(isinstance(_receive(Spool(Path(root)), d),
                                                                             Accepted)))
               for data in instances]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)


def test_concurrent_processes_store_exactly_the_bound(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    study_uid = generate_uid()
    instances = _instances(study_uid)
    context = multiprocessing.get_context("fork")
    n_processes = 4
    start, results = context.Barrier(n_processes), context.Queue()
    per = SENDERS // n_processes
    processes = [context.Process(target=_send_from_process,
                                 args=(str(spool.root), instances[k * per:(k + 1) * per], start, results))
                 for k in range(n_processes)]
    for process in processes:
        process.start()
    accepted = [results.get(timeout=120) for _ in range(SENDERS)]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    assert len(_held(spool, study_uid)) == BOUND
    assert sum(accepted) == BOUND


@pytest.fixture(scope="module")
def stow_service(tiny_artifact: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Spool]]:
    """The service in uvicorn with STOW-RS on a spool; no grading within the test (settle and quiet of an hour)."""
    folder = tmp_path_factory.mktemp("stow-intake")
    pacs = PacsSettings(spool_dir=folder / "spool", archive_url="", settle_s=3600, quiet_s=3600, poll_s=0.5)
    settings = settings_for(tiny_artifact, api_key=API_KEY, max_upload_bytes=MAX_BYTES, max_exam_images=BOUND,
                            backend="torch")
    with live_server(settings, pacs=pacs) as base:
        yield base, Spool(folder / "spool")


def _stow(base: str, data: bytes) -> int:
    boundary = uuid.uuid4().hex
    body = (f"--{boundary}\r\nContent-Type: application/dicom\r\n\r\n".encode() + data
            + f"\r\n--{boundary}--\r\n".encode())
    headers = {"Content-Type": f'multipart/related; type="application/dicom"; boundary={boundary}',
               "Accept": "application/dicom+json", "X-API-Key": API_KEY}
    return httpx.post(f"{base}/dicomweb/studies", content=body, headers=headers, timeout=120).status_code


def test_concurrent_stow_requests_store_exactly_the_bound(stow_service: tuple[str, Spool]) -> None:
    base, spool = stow_service
    study_uid = generate_uid()
    instances = _instances(study_uid)
    codes = _all_at_once(lambda i: _stow(base, instances[i]), 200)
    assert len(_held(spool, study_uid)) == BOUND
    assert sorted(codes) == [200] * BOUND + [409] * (SENDERS - BOUND)  # 409: the one part failed


# -- 2. ImageLaterality: Type 1, upper case --------------------------------------------------------------------------
def test_laterality_must_be_image_laterality_in_upper_case(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    rgb = fundus_like(1, 32)
    lower = _refused(_receive(spool, op_dicom(rgb, raw={"ImageLaterality": b"r "})))
    assert "upper case" in lower and "ImageLaterality" in lower
    series_only = _refused(_receive(spool, op_dicom(rgb, laterality=None, Laterality="R")))
    assert "ImageLaterality (0020,0062)" in series_only and "Laterality (0020,0060)" in series_only
    absent = _refused(_receive(spool, op_dicom(rgb, laterality=None)))
    assert "ImageLaterality (0020,0062)" in absent and "Type 1" in absent
    both = _refused(_receive(spool, op_dicom(rgb, laterality="B")))
    assert "ImageLaterality" in both
    assert list(spool.studies_dir.iterdir()) == []
    padded = _receive(spool, op_dicom(rgb, raw={"ImageLaterality": b"L "}))  # a CS value's space padding
    assert isinstance(padded, Accepted) and padded.eye is Eye.LEFT


# -- 3. UIDs exactly as received ----------------------------------------------------------------------------------
STUDY = "1.2.826.0.1.3680043.8.498.1"  # 27 characters: written with its NUL pad


@pytest.mark.parametrize("keyword, value", [
    ("StudyInstanceUID", STUDY.encode() + b" "),  # the finding: a trailing space
    ("StudyInstanceUID", b" " + STUDY.encode()),
    ("StudyInstanceUID", STUDY.encode() + b"A"),
    ("StudyInstanceUID", b"1.2.826.0.1.3680043..498.123"),  # an empty component
    ("StudyInstanceUID", b"1" * 66),  # over 64 characters
    ("SOPInstanceUID", b"1.2.826.0.1.3680043.8.498.9 "),
    ("SOPInstanceUID", b"1.2.826.0.1.3680043.8.498.99\x00\x00"),  # one NUL is the pad, two are not
    ("SOPInstanceUID", b"1.2.826.0.1.3680043.8.0498.9"),  # a component with a leading zero (the SR cannot
    ("StudyInstanceUID", b"1.01.2"),  # reference it)
    ("SeriesInstanceUID", b"abc\x00"),  # the SR references the series too
    ("SeriesInstanceUID", b"1..2"),
])
def test_uid_not_valid_as_received_is_refused(tmp_path: Path, keyword: str, value: bytes) -> None:
    spool = Spool(tmp_path / "spool")
    data = op_dicom(fundus_like(2, 32), raw={keyword: value})
    reason = _refused(_receive(spool, data))
    assert keyword in reason and value.strip(b" \x00").decode() not in reason
    assert list(spool.studies_dir.iterdir()) == []


def test_uid_with_its_nul_pad_is_the_same_study(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    padded = _receive(spool, op_dicom(fundus_like(3, 32), raw={"StudyInstanceUID": STUDY.encode() + b"\x00"}))
    assert isinstance(padded, Accepted) and padded.study_uid == STUDY
    assert len(_held(spool, STUDY)) == 1


# -- 4. an identical resend does not refresh the study's arrival time --------------------------------------------
def test_identical_resend_is_acknowledged_without_rewriting(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    study_uid = generate_uid()
    data = op_dicom(fundus_like(4, 32), study_uid=study_uid)
    assert isinstance(_receive(spool, data), Accepted)
    [path] = _held(spool, study_uid)
    long_ago = 1_000_000_000
    os.utime(path, (long_ago, long_ago))  # received long ago: settled
    inode = path.stat().st_ino
    for _ in range(3):  # the sender resends it
        assert isinstance(_receive(spool, data), Accepted)
    assert path.stat().st_mtime == long_ago and path.stat().st_ino == inode
    [study] = spool.studies()
    assert study.last_arrival == long_ago
    changed = op_dicom(fundus_like(5, 32), study_uid=study_uid, SOPInstanceUID=_sop(data))  # a corrected resend
    assert isinstance(_receive(spool, changed), Accepted)
    assert path.read_bytes() == changed and path.stat().st_mtime > long_ago


def _sop(data: bytes) -> str:
    verdict = check_instance(data)
    assert isinstance(verdict, Accepted)
    return verdict.sop_instance_uid


# -- 5. one patient per study, refused at receipt ----------------------------------------------------------------
def test_second_patient_in_a_study_is_refused_at_receipt(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    study_uid = generate_uid()
    right = op_dicom(fundus_like(6, 32), study_uid=study_uid, laterality="R", PatientID="PATIENT-A")
    left = op_dicom(fundus_like(7, 32), study_uid=study_uid, laterality="L", PatientID="PATIENT-B")
    no_id = op_dicom(fundus_like(8, 32), study_uid=study_uid, laterality="L", PatientID="")
    assert isinstance(_receive(spool, right), Accepted)
    reason = _refused(_receive(spool, left))
    assert "PatientID" in reason and "PATIENT" not in reason and study_uid not in reason
    _refused(_receive(spool, no_id))  # an absent PatientID is not the study's patient either
    assert len(_held(spool, study_uid)) == 1
    same = op_dicom(fundus_like(9, 32), study_uid=study_uid, laterality="L", PatientID="PATIENT-A")
    assert isinstance(_receive(spool, same), Accepted)
    identity = (spool.studies_dir / key_of(study_uid) / "identity.json").read_bytes()
    assert b"PATIENT" not in identity and study_uid.encode() not in identity


def test_a_removed_study_leaves_no_identity_behind(tmp_path: Path) -> None:
    """The worker removes a delivered study: its identity file goes with it, and a later study under the same UID
    is compared with nothing of the removed one."""
    spool = Spool(tmp_path / "spool")
    study_uid = generate_uid()
    first = op_dicom(fundus_like(12, 32), study_uid=study_uid, laterality="R", PatientID="PATIENT-A")
    assert isinstance(_receive(spool, first), Accepted)
    [study] = spool.studies()
    spool.remove_study(study)
    assert not (spool.studies_dir / key_of(study_uid)).exists()
    later = op_dicom(fundus_like(13, 32), study_uid=study_uid, laterality="L", PatientID="PATIENT-B")
    assert isinstance(_receive(spool, later), Accepted)


# -- 6. one photograph cannot stand for both eyes ------------------------------------------------------------------
def test_same_pixel_data_as_the_other_eye_is_refused_at_receipt(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    study_uid = generate_uid()
    rgb = fundus_like(10, 32)
    right = op_dicom(rgb, study_uid=study_uid, laterality="R")
    as_left = op_dicom(rgb, study_uid=study_uid, laterality="L")  # another SOP instance, the same pixels
    relabelled = op_dicom(rgb, study_uid=study_uid, laterality="L", SOPInstanceUID=_sop(right))  # only the eye
    assert isinstance(_receive(spool, right), Accepted)
    for copy in (as_left, relabelled):
        reason = _refused(_receive(spool, copy))
        assert reason == ("the same photograph as the right eye's instance already held: one photograph cannot "
                          "stand for both eyes")
    assert [p.name.endswith("-R.dcm") for p in _held(spool, study_uid)] == [True]
    again = op_dicom(rgb, study_uid=study_uid, laterality="R")  # the same photograph twice for one eye: harmless
    assert isinstance(_receive(spool, again), Accepted)
    other = op_dicom(fundus_like(11, 32), study_uid=study_uid, laterality="L")
    assert isinstance(_receive(spool, other), Accepted)


def test_instances_held_without_a_record_are_read_back(tmp_path: Path) -> None:
    """A spool written before identity files: the held instance's PatientID and pixels are read from its file."""
    spool = Spool(tmp_path / "spool")
    study_uid = generate_uid()
    rgb = fundus_like(14, 32)
    right = op_dicom(rgb, study_uid=study_uid, laterality="R", PatientID="PATIENT-A")
    verdict = check_instance(right)
    assert isinstance(verdict, Accepted)
    spool.put_instance(verdict.study_uid, verdict.sop_instance_uid, verdict.eye, right)  # no identity.json
    _refused(_receive(spool, op_dicom(fundus_like(15, 32), study_uid=study_uid, laterality="L", PatientID="X")))
    same = _refused(_receive(spool, op_dicom(rgb, study_uid=study_uid, laterality="L", PatientID="PATIENT-A")))
    assert same.startswith("the same photograph as the right eye's instance")
    assert isinstance(_receive(spool, op_dicom(fundus_like(16, 32), study_uid=study_uid, laterality="L",
                                               PatientID="PATIENT-A")), Accepted)


# -- 7. batch CSV: every error row names its own line ------------------------------------------------------------
def test_over_long_csv_rows_name_their_own_lines(tmp_path: Path) -> None:
    long_cell = "x" * 200_000  # over csv.field_size_limit() (131,072)
    manifest = tmp_path / "manifest.csv"
    manifest.write_text("image,grade\n"
                        "a.jpg,0\n"
                        f"{long_cell}.jpg,0\n"
                        f"{long_cell}.jpg,1\n"
                        "b.jpg,0\n"
                        f"{long_cell}.jpg,2\n"
                        "c.jpg,0\n", encoding="utf-8")
    items = discover_manifest(manifest).items
    assert [item.id for item in items] == ["a.jpg", "line-3", "line-4", "b.jpg", "line-6", "c.jpg"]
    errors = [item for item in items if item.error is not None]
    assert all(item.error is not None and item.error.kind == MALFORMED_ROW for item in errors)
    assert [f"line {n} " in str(item.error) for n, item in zip((3, 4, 6), errors, strict=True)] == [True] * 3


# -- another thread's warning is not this instance's repair -------------------------------------------------------
@pytest.mark.filterwarnings("ignore:a warning of another thread")
def test_warnings_of_other_threads_do_not_refuse_a_good_instance() -> None:
    """Receivers run in threads: a warning raised by another thread while an instance's header is read (pydicom in
    the decode pool, another association) must not mark that instance as repaired (0xC000)."""
    import warnings

    good = op_dicom(fundus_like(7, 32), study_uid=generate_uid())
    stop = threading.Event()

    def noisy() -> None:
        while not stop.is_set():
            warnings.warn("a warning of another thread (test)", UserWarning, stacklevel=1)

    import sys

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: the reading's window is a millisecond
    thread = threading.Thread(target=noisy, daemon=True)
    thread.start()
    try:
        verdicts = [check_instance(good) for _ in range(200)]
    finally:
        stop.set()
        thread.join(timeout=10)
        sys.setswitchinterval(interval)
    assert all(isinstance(v, Accepted) for v in verdicts), [v for v in verdicts if isinstance(v, Refused)][:1]
