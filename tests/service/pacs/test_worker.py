"""The PACS worker in-process on a real spool and the tiny model: when a study is graded, exactly-once results
across simulated crashes, and delivery failures retried with backoff and visible in the metrics.

Time is moved by setting the instances' modification times (tests/helpers/pacs_worker.py). The archive here is a
small in-test recorder (the real archives, C-STORE and STOW-RS into Orthanc, are in test_orthanc_roundtrip.py and
test_stow.py).
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from pathlib import Path

import pydicom
import pytest
from pydicom.uid import generate_uid

from models.outcome.decision import Eye
from service.model_host import ModelHost
from service.pacs.delivery import Backoff
from service.pacs.sr import result_uids
from service.pacs.store import Spool
from service.pacs.worker import PacsWorker
from support.images import fundus_like
from tests.helpers.dicom_files import op_dicom
from tests.helpers.dicom_listener import two_eye_study
from tests.helpers.pacs_worker import LOOP, RecordingArchive, loaded_host, make_worker, receive, tick, value


@pytest.fixture(scope="module")
def host(tiny_artifact: Path) -> Iterator[ModelHost]:
    model_host = loaded_host(tiny_artifact)
    yield model_host
    LOOP.run_until_complete(model_host.stop())


def _worker(host: ModelHost, root: Path, archive: RecordingArchive | None = None) -> PacsWorker:
    return make_worker(host, root, archive)


def test_grading_waits_for_both_eyes_or_the_quiet_period(host: ModelHost, tmp_path: Path) -> None:
    worker = _worker(host, tmp_path)
    right, left = two_eye_study(generate_uid())
    receive(worker.spool, right, age_s=30)  # one eye, quiet for 30 s < quiet_s = 60
    [study] = worker.spool.studies()
    assert study.eyes == {Eye.RIGHT} and not worker.ready(study, time.time())
    assert worker.ready(study, time.time() + 31)  # quiet for 61 s: graded with one eye
    receive(worker.spool, left, age_s=1)  # both eyes, last one 1 s ago < settle_s = 2
    [study] = worker.spool.studies()
    assert not worker.ready(study, time.time())
    assert worker.ready(study, time.time() + 1.5)


def test_a_complete_grading_pass_records_the_time_it_judged_the_studies_by(host: ModelHost, tmp_path: Path) -> None:
    """``radscreen_pacs_grading_pass_timestamp_seconds``: what was due as of it is graded; a cut-short pass (the
    spool paused) does not move it."""
    pass_time = "radscreen_pacs_grading_pass_timestamp_seconds"
    worker = _worker(host, tmp_path)
    receive(worker.spool, *two_eye_study(generate_uid()), age_s=1)  # due 1 s from now (settle_s = 2)
    assert value(worker.metrics, pass_time) == 0
    now = time.time()
    LOOP.run_until_complete(worker.grade_ready(now))
    assert value(worker.metrics, pass_time) == now
    assert value(worker.metrics, "radscreen_pacs_results_total", event="built") == 0  # not due as of `now`
    LOOP.run_until_complete(worker.grade_ready(now + 1.5))
    assert value(worker.metrics, pass_time) == now + 1.5
    assert value(worker.metrics, "radscreen_pacs_results_total", event="built") == 1  # due: graded in that pass
    worker.settings.min_free_mb = 1_048_576  # 1 TiB: more than is free, so grading pauses
    LOOP.run_until_complete(worker.grade_ready(now + 10))
    assert value(worker.metrics, "radscreen_pacs_grading_paused") == 1
    assert value(worker.metrics, pass_time) == now + 1.5


def test_crash_before_the_grading_was_recorded_yields_one_result(host: ModelHost, tmp_path: Path) -> None:
    archive = RecordingArchive()
    worker = _worker(host, tmp_path, archive)
    right, left = two_eye_study(generate_uid())
    receive(worker.spool, right, left, age_s=5)
    tick(worker)
    [study] = worker.spool.studies()
    (study.folder / "graded.json").unlink()  # as if killed after queuing the SR, before recording the grading
    tick(worker)
    receive(worker.spool, right, left, age_s=5)  # and the archive resends the whole study
    tick(worker)
    sr_uid = result_uids([str(pydicom.dcmread(io.BytesIO(d)).SOPInstanceUID) for d in (right, left)],
                         host.require_ready().model_identity.sha256)[0]
    assert archive.stored == [sr_uid]
    assert value(worker.metrics, "radscreen_pacs_results_total", event="built") == 1
    assert value(worker.metrics, "radscreen_pacs_results_total", event="duplicate") == 1
    assert worker.spool.outbox() == []


def test_archive_down_retried_with_backoff_and_counted(host: ModelHost, tmp_path: Path) -> None:
    archive = RecordingArchive(down=True)
    worker = _worker(host, tmp_path, archive)
    receive(worker.spool, *two_eye_study(generate_uid()), age_s=5)
    tick(worker)
    assert archive.stored == [] and len(worker.spool.outbox()) == 1
    assert value(worker.metrics, "radscreen_pacs_deliveries_total", result="failed") == 1
    assert value(worker.metrics, "radscreen_pacs_outbox") == 1
    tick(worker)  # within the 1 s backoff: not tried again
    assert value(worker.metrics, "radscreen_pacs_deliveries_total", result="failed") == 1
    archive.down = False
    [key] = [p.stem for p in worker.spool.outbox()]
    worker.backoff.next_try[key] = 0.0  # the backoff has elapsed
    tick(worker)
    assert len(archive.stored) == 1 and worker.spool.outbox() == []
    assert value(worker.metrics, "radscreen_pacs_deliveries_total", result="delivered") == 1
    assert worker.spool.is_sent(key)


def test_backoff_doubles_up_to_its_ceiling() -> None:
    backoff = Backoff(base_s=2, max_s=10)
    assert [backoff.failed("k", 0.0) for _ in range(5)] == [2, 4, 8, 10, 10]
    assert not backoff.due("k", 9.9) and backoff.due("k", 10.0)
    backoff.succeeded("k")
    assert backoff.due("k", 0.0)


def test_result_uid_depends_on_instances_and_model_only() -> None:
    a, b = generate_uid(), generate_uid()
    sha, other = "a" * 64, "b" * 64
    assert result_uids([a, b], sha) == result_uids([b, a, a], sha)  # order and repeats do not matter
    assert result_uids([a, b], sha)[0] != result_uids([a, b], other)[0]
    assert result_uids([a, b], sha)[0] != result_uids([a], sha)[0]
    uid = result_uids([a, b], sha)[0]
    assert uid.startswith("2.25.") and len(uid) <= 64 and pydicom.uid.UID(uid).is_valid


def test_one_grader_per_spool(tmp_path: Path) -> None:
    first, second = Spool(tmp_path), Spool(tmp_path)  # two processes' views (flock is per open file)
    assert first.try_lock() and first.try_lock()
    assert not second.try_lock()
    assert first._lock is not None
    first._lock.close()  # the grader ends
    assert second.try_lock()


def test_two_patients_in_one_study_are_not_graded(host: ModelHost, tmp_path: Path) -> None:
    """The exam identity rules of POST /v1/exams: one study carrying two PatientIDs is no one's visit."""
    archive = RecordingArchive()
    worker = _worker(host, tmp_path, archive)
    study_uid = generate_uid()
    right = op_dicom(fundus_like(1, 64), laterality="R", study_uid=study_uid, PatientID="PATIENT-A")
    left = op_dicom(fundus_like(2, 64), laterality="L", study_uid=study_uid, PatientID="PATIENT-B")
    receive(worker.spool, right, left, age_s=5)
    tick(worker)
    tick(worker)  # not tried again while its instances are unchanged
    assert archive.stored == [] and worker.spool.outbox() == []
    assert value(worker.metrics, "radscreen_pacs_results_total", event="refused") == 1
    assert value(worker.metrics, "radscreen_exams_total", outcome="no_referable_dr") == 0
