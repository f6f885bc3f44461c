"""The PACS worker never stops: a study that cannot be graded or reported is quarantined after one pass (a
restart does not bring it back), an archive that trickles is abandoned at the deadline and never holds grading
back, the outbox metrics are true while nothing delivers, HTTP clients cannot starve the worker of the model, and
a spool that cannot be written pauses grading instead of re-grading in a loop.

The worker runs in-process on a real spool with the tiny model (tests/helpers/pacs_worker.py). Where a failure
must be provoked whatever the SR builder accepts, the SR builder is replaced by one that raises for one study:
the worker's handling of a failure is what these tests check (the SR's handling of hostile header values is
tests/service/hostile/test_sr_header_values.py).
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydicom.uid import generate_uid

from service.batcher import MicroBatcher, Overloaded
from service.model_host import ModelHost
from service.pacs import worker as worker_module
from service.pacs.delivery import DeliveryFailed, StowArchive
from service.pacs.sr import GradedExam, build_sr
from service.pacs.store import Spool, key_of
from tests.helpers.dicom_listener import two_eye_study
from tests.helpers.pacs_worker import (
    LOOP,
    RecordingArchive,
    exams_scored,
    loaded_host,
    make_worker,
    receive,
    tick,
    value,
)

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def host(tiny_artifact: Path) -> Iterator[ModelHost]:
    model_host = loaded_host(tiny_artifact)
    yield model_host
    LOOP.run_until_complete(model_host.stop())


def _poison_sr_for(study_uid: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The SR builder raises for the study ``study_uid`` (as highdicom does for a value it cannot encode)."""

    def build(exam: GradedExam) -> Any:
        if str(exam.images[0].header.StudyInstanceUID) == study_uid:
            raise ValueError("Value of PatientSex is not valid (provoked by the test)")
        return build_sr(exam)

    monkeypatch.setattr(worker_module, "build_sr", build)


def test_a_study_whose_report_fails_is_quarantined_once_and_others_go_on(
        host: ModelHost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = RecordingArchive()
    worker = make_worker(host, tmp_path, archive)
    poison_uid, good_uid = generate_uid(), generate_uid()
    _poison_sr_for(poison_uid, monkeypatch)
    receive(worker.spool, *two_eye_study(poison_uid), age_s=30)  # the older study: graded first
    receive(worker.spool, *two_eye_study(good_uid), age_s=10)
    for _ in range(3):
        tick(worker)
    assert exams_scored(worker.metrics) == 2  # the poison study ran the model once, not once a pass
    assert len(archive.stored) == 1  # the good study was graded and delivered in the same pass
    assert value(worker.metrics, "radscreen_pacs_quarantines_total", reason="report") == 1
    assert value(worker.metrics, "radscreen_pacs_quarantined") == 1
    [(study, record)] = worker.spool.quarantine_list()
    assert study.key == key_of(poison_uid) and record["reason"] == "report"
    assert poison_uid not in record["detail"]

    restarted = make_worker(host, tmp_path, archive)  # a new process on the same spool: not graded again
    tick(restarted)
    assert exams_scored(restarted.metrics) == 0 and value(restarted.metrics, "radscreen_pacs_quarantined") == 1


def test_the_operator_lists_and_releases_a_quarantined_study(
        host: ModelHost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    worker = make_worker(host, tmp_path, RecordingArchive())
    uid = generate_uid()
    _poison_sr_for(uid, monkeypatch)
    receive(worker.spool, *two_eye_study(uid), age_s=30)
    tick(worker)
    command = [sys.executable, "-m", "service", "pacs-quarantine", "--spool-dir", str(tmp_path)]
    listed = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=60, check=True)
    [header, row] = listed.stdout.strip().splitlines()
    assert header.split("\t")[:2] == ["key", "reason"]
    assert row.split("\t")[:3] == [key_of(uid), "report", "2"] and uid not in listed.stdout
    released = subprocess.run([*command, "--release", key_of(uid)], capture_output=True, text=True, cwd=ROOT,
                              timeout=60)
    assert released.returncode == 0, released.stderr
    monkeypatch.setattr(worker_module, "build_sr", build_sr)  # the cause fixed
    tick(worker)
    assert worker.spool.quarantine_list() == [] and len(worker.archive.stored) == 1  # type: ignore[union-attr]
    unknown = subprocess.run([*command, "--release", "0" * 32], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert unknown.returncode == 1 and "no quarantined study" in unknown.stderr


def test_a_study_whose_grading_ended_with_the_process_twice_is_quarantined(host: ModelHost, tmp_path: Path) -> None:
    worker = make_worker(host, tmp_path, RecordingArchive())
    receive(worker.spool, *two_eye_study(generate_uid()), age_s=30)
    [study] = worker.spool.studies()
    worker.spool.start_grading(study)  # two passes started and never finished: the process was killed in each
    worker.spool.start_grading(study)
    tick(worker)
    assert exams_scored(worker.metrics) == 0
    assert value(worker.metrics, "radscreen_pacs_quarantines_total", reason="unfinished") == 1


def test_a_busy_model_is_no_unfinished_pass(host: ModelHost, tmp_path: Path) -> None:
    """A pass refused by the model (RetryLater) is undone, so waiting for the model never quarantines."""
    worker = make_worker(host, tmp_path, RecordingArchive())
    receive(worker.spool, *two_eye_study(generate_uid()), age_s=30)
    [study] = worker.spool.studies()
    host.state = "loading"  # the model is reloading: grading raises NotReady
    try:
        for _ in range(3):
            LOOP.run_until_complete(worker.grade_ready())
    finally:
        host.state = "ready"
    assert not (study.folder / "grading.json").exists()
    tick(worker)
    assert exams_scored(worker.metrics) == 1 and worker.spool.quarantine_list() == []


# -- the archive -------------------------------------------------------------------------------------------------
class TricklingArchive:
    """An HTTP server on 127.0.0.1 that reads the request, then answers one byte every ``every_s`` seconds."""

    def __init__(self, every_s: float = 0.5) -> None:
        self.every_s = every_s
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self.server.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:  # closed
                return
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/dicom+json\r\nContent-Length: 2\r\n\r\n{}"
        with conn:
            conn.settimeout(5)
            try:
                conn.recv(1 << 20)
                for byte in answer:
                    if self.stop.wait(self.every_s):
                        return
                    conn.sendall(bytes([byte]))
            except OSError:
                return

    def close(self) -> None:
        self.stop.set()
        self.server.close()


def test_an_archive_that_trickles_is_abandoned_at_the_deadline() -> None:
    archive = TricklingArchive(every_s=0.5)  # 90 bytes: 45 s at one byte every 0.5 s, each read well in time
    try:
        started = time.monotonic()
        with pytest.raises(DeliveryFailed, match="deadline of 2 s"):
            StowArchive(f"http://127.0.0.1:{archive.port}", timeout_s=2.0).send(b"DICM")
        assert time.monotonic() - started < 10
    finally:
        archive.close()


class HangingArchive:
    """An archive whose send blocks until released (or 30 s)."""

    name = "hanging"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def send(self, data: bytes) -> None:
        self.calls += 1
        self.release.wait(30)
        raise DeliveryFailed("the archive hung (test)")


def _until(condition: Any, timeout_s: float) -> bool:
    async def poll() -> bool:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if condition():
                return True
            await asyncio.sleep(0.05)
        return bool(condition())

    return LOOP.run_until_complete(poll())


def test_grading_goes_on_while_delivery_hangs(host: ModelHost, tmp_path: Path) -> None:
    archive = HangingArchive()
    worker = make_worker(host, tmp_path, archive, poll_s=0.05, archive_timeout_s=60)
    receive(worker.spool, *two_eye_study(generate_uid()), age_s=30)
    task = LOOP.create_task(worker.run())
    try:
        assert _until(lambda: archive.calls == 1, 30)  # the first result is being delivered, and hangs
        receive(worker.spool, *two_eye_study(generate_uid()), age_s=30)
        assert _until(lambda: value(worker.metrics, "radscreen_pacs_results_total", event="built") == 2, 30)
        assert archive.calls == 1  # still the same hanging delivery
    finally:
        archive.release.set()
        task.cancel()
        LOOP.run_until_complete(asyncio.gather(task, return_exceptions=True))
        assert worker.spool._lock is not None
        worker.spool._lock.close()


def test_the_outbox_metrics_are_read_from_the_spool(host: ModelHost, tmp_path: Path) -> None:
    """True at any scrape, with no delivery pass run (the documented alert must be able to fire)."""
    worker = make_worker(host, tmp_path, None)
    for n in range(3):
        worker.spool.put_result(generate_uid(), b"SR", {"n": n})
    old = time.time() - 600
    os.utime(worker.spool.outbox()[0], (old, old))
    assert value(worker.metrics, "radscreen_pacs_outbox") == 3
    assert value(worker.metrics, "radscreen_pacs_oldest_undelivered_seconds") >= 600


# -- the model's share -------------------------------------------------------------------------------------------
def test_http_load_cannot_keep_the_worker_from_the_model(host: ModelHost, tmp_path: Path) -> None:
    worker = make_worker(host, tmp_path, RecordingArchive())
    receive(worker.spool, *two_eye_study(generate_uid()), age_s=30)
    assert host.admission is not None
    with host.admit(100_000):  # HTTP requests hold every place: the next HTTP request is refused
        with pytest.raises(Overloaded), host.admit(1):
            pass
        tick(worker)
    assert exams_scored(worker.metrics) == 1 and len(worker.archive.stored) == 1  # type: ignore[union-attr]


def test_the_batcher_keeps_room_for_the_reserved_lane() -> None:
    async def run() -> None:
        batcher = MicroBatcher(None, max_batch_size=4, max_wait_ms=1, queue_size=4, reserved=2)  # type: ignore[arg-type]
        held = asyncio.ensure_future(batcher.submit_many([object(), object()]))  # type: ignore[list-item]
        await asyncio.sleep(0)
        with pytest.raises(Overloaded):
            await batcher.submit_many([object()])  # type: ignore[list-item]
        reserved = asyncio.ensure_future(batcher.submit_many([object(), object()], reserved=True))  # type: ignore[list-item]
        await asyncio.sleep(0)
        assert batcher.depth == 4 and not reserved.done()  # queued, not refused
        for task in (held, reserved):
            task.cancel()
        await asyncio.gather(held, reserved, return_exceptions=True)

    LOOP.run_until_complete(run())


# -- a spool that cannot be written ------------------------------------------------------------------------------
def test_a_spool_without_free_space_pauses_grading(host: ModelHost, tmp_path: Path) -> None:
    worker = make_worker(host, tmp_path, RecordingArchive(), min_free_mb=1_048_576)  # 1 TiB: more than is free
    receive(worker.spool, *two_eye_study(generate_uid()), age_s=30)
    tick(worker)
    assert exams_scored(worker.metrics) == 0 and value(worker.metrics, "radscreen_pacs_grading_paused") == 1
    worker.settings.min_free_mb = 0
    worker.pause.next_try["spool"] = 0.0  # the pause has elapsed and space was freed
    tick(worker)
    assert exams_scored(worker.metrics) == 1 and value(worker.metrics, "radscreen_pacs_grading_paused") == 0


def test_a_failed_write_pauses_grading_instead_of_regrading(
        host: ModelHost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    worker = make_worker(host, tmp_path, RecordingArchive())
    receive(worker.spool, *two_eye_study(generate_uid()), age_s=30)

    def full(*args: object, **kwargs: object) -> str:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Spool, "put_result", full)
    for _ in range(5):
        tick(worker)
    assert exams_scored(worker.metrics) == 1  # graded once, then paused: not once a pass
    assert value(worker.metrics, "radscreen_pacs_grading_paused") == 1
    assert worker.spool.quarantine_list() == []  # not the study's fault
