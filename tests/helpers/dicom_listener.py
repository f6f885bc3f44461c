"""``radscreen dicom-listen`` as a real subprocess, and a two-eye study to send it, for the PACS tests.

``running_listener`` starts the receiver on free loopback ports with a tiny artifact, short grading delays and
(optionally) an archive to deliver to, waits until its model is ready (its Prometheus ``radscreen_ready`` gauge)
and yields a :class:`Listener` (the process too: the crash test kills it). ``two_eye_study`` builds both eyes of
one visit as DICOM Ophthalmic Photography (JPEG Baseline, as a fundus camera writes) from the real photographs of
one ODIR patient with normal fundi, or from synthetic fundus images when the shared data is absent; the
patient's name and ID are distinctive strings the tests look for in logs and metrics.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from support.images import fundus_like
from support.processes import ROOT, free_port, running_process
from support.shared_data import ODIR
from tests.helpers.dicom_files import JPEG_BASELINE, op_dicom, rgb_of

AE_TITLE = "RADSCREEN"
PATIENT_NAME = "Phiname^Zebulon"  # distinctive: must never appear in a log line or a metric
PATIENT_ID = "PHI-ID-7391"
ODIR_PATIENT = 1  # both eyes labelled normal fundus in labels.csv
SETTLE_S = 0.5  # RADSCREEN_PACS_SETTLE_S of the receiver: a two-eye study is due this long after its last instance
GRADING_PASS = "radscreen_pacs_grading_pass_timestamp_seconds "


@dataclass(frozen=True)
class Listener:
    port: int
    metrics_url: str
    log: Path
    proc: subprocess.Popen[bytes]

    def metrics(self) -> str:
        return httpx.get(self.metrics_url, timeout=10).text

    def metric(self, line_start: str) -> float:
        """The value of the first exposition line starting with ``line_start`` (0 when absent)."""
        for line in self.metrics().splitlines():
            if line.startswith(line_start):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def wait_for_grading_pass(self, as_of: float, timeout_s: float) -> bool:
        """Wait until the worker has completed a grading pass that judged every study as of ``as_of`` (Unix time)
        or later: a study due by then has been graded. False if none did within ``timeout_s``."""
        end = time.monotonic() + timeout_s
        while self.metric(GRADING_PASS) < as_of:
            if time.monotonic() > end:
                return False
            time.sleep(0.1)
        return True


def photographs() -> tuple[np.ndarray, np.ndarray, str]:
    """(right, left, source): the real ODIR pair, else two synthetic fundus images."""
    right, left = ODIR / "images" / f"{ODIR_PATIENT}_right.jpg", ODIR / "images" / f"{ODIR_PATIENT}_left.jpg"
    if right.is_file() and left.is_file():
        return rgb_of(right), rgb_of(left), "odir"
    return fundus_like(1, 512), fundus_like(2, 512), "synthetic"


def two_eye_study(study_uid: str) -> tuple[bytes, bytes]:
    """Right and left eye of one visit as OP JPEG Baseline instances of ``study_uid`` (module docstring)."""
    right, left, _ = photographs()
    fields: dict[str, Any] = {"PatientName": PATIENT_NAME, "PatientID": PATIENT_ID, "AccessionNumber": "ACC1"}
    return (op_dicom(right, syntax=JPEG_BASELINE, laterality="R", study_uid=study_uid, **fields),
            op_dicom(left, syntax=JPEG_BASELINE, laterality="L", study_uid=study_uid, **fields))


def listener_env(model_dir: Path, archive_port: int | None, metrics_port: int) -> dict[str, str]:
    env = {**os.environ, "RADSCREEN_MODEL_DIR": str(model_dir), "RADSCREEN_DEVICE": "cpu",
           "RADSCREEN_BACKEND": "torch", "RADSCREEN_LOG_LEVEL": "debug",
           "RADSCREEN_PACS_METRICS_PORT": str(metrics_port),
           "RADSCREEN_PACS_SETTLE_S": str(SETTLE_S), "RADSCREEN_PACS_QUIET_S": "30", "RADSCREEN_PACS_POLL_S": "0.2",
           "RADSCREEN_PACS_RETRY_BASE_S": "0.5", "RADSCREEN_PACS_RETRY_MAX_S": "2"}
    if archive_port is not None:
        env.update({"RADSCREEN_PACS_ARCHIVE_HOST": "127.0.0.1", "RADSCREEN_PACS_ARCHIVE_PORT": str(archive_port),
                    "RADSCREEN_PACS_ARCHIVE_AE_TITLE": "ORTHANC"})
    return env


@contextlib.contextmanager
def running_listener(model_dir: Path, spool: Path, log: Path, *, archive_port: int | None = None,
                     port: int | None = None, ready_timeout_s: float = 120.0,
                     env: dict[str, str] | None = None) -> Iterator[Listener]:
    """Start ``radscreen dicom-listen`` (``env`` added to its environment); yield once its model is ready; stop
    it on exit."""
    port = port or free_port()
    metrics_port = free_port()
    command = [sys.executable, "-m", "service", "dicom-listen", "--spool-dir", str(spool), "--port", str(port),
               "--ae-title", AE_TITLE]
    full_env = {**listener_env(model_dir, archive_port, metrics_port), **(env or {})}
    with running_process(command, log, cwd=ROOT, env=full_env) as proc:
        listener = Listener(port, f"http://127.0.0.1:{metrics_port}/metrics", log, proc)
        end = time.monotonic() + ready_timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"dicom-listen exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if listener.metric("radscreen_ready ") == 1.0:
                    break
            if time.monotonic() > end:
                raise RuntimeError(f"dicom-listen not ready in {ready_timeout_s} s:\n{log.read_text()[-3000:]}")
            time.sleep(0.3)
        yield listener
