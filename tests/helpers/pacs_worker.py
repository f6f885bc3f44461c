"""The PACS worker in-process for tests: one event loop for the model host, a recording archive, a spool fed
without the network, and the metric readings the tests compare.

The model host's batcher runs on the loop that loaded it, so every tick of every test module runs on ``LOOP``.
Time is moved by setting the instances' modification times (the worker reads arrival times from the spool, as
after a restart), never by sleeping.
"""

from __future__ import annotations

import asyncio
import io
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import pydicom

from models.outcome.decision import ScreeningOutcome
from service.metrics import ServiceMetrics
from service.model_host import ModelHost
from service.pacs.delivery import DeliveryFailed
from service.pacs.intake import Accepted, check_instance
from service.pacs.settings import PacsSettings
from service.pacs.store import Spool
from service.pacs.worker import PacsWorker
from support.live_server import settings_for

LOOP = asyncio.new_event_loop()


@dataclass
class RecordingArchive:
    """Takes SRs (or refuses them while ``down``), recording each SOP Instance UID it stored."""

    down: bool = False
    stored: list[str] = field(default_factory=list)
    name: str = "recorder"

    def send(self, data: bytes) -> None:
        if self.down:
            raise DeliveryFailed("archive down (test)")
        self.stored.append(str(pydicom.dcmread(io.BytesIO(data)).SOPInstanceUID))


def loaded_host(model_dir: Path) -> ModelHost:
    """A ready model host on ``LOOP`` (stop it with ``LOOP.run_until_complete(host.stop())``)."""
    host = ModelHost(settings_for(model_dir, backend="torch"), ServiceMetrics())
    LOOP.run_until_complete(host.load())
    assert host.state == "ready", host.error
    return host


def make_worker(host: ModelHost, root: Path, archive: object | None = None, **overrides: object) -> PacsWorker:
    """A worker on the spool at ``root`` with fresh metrics (settle 2 s, quiet 60 s, retries 1-4 s)."""
    values: dict[str, object] = {"spool_dir": root, "settle_s": 2, "quiet_s": 60, "retry_base_s": 1,
                                 "retry_max_s": 4, "min_free_mb": 0, **overrides}
    host.metrics = ServiceMetrics()  # fresh counters per test
    return PacsWorker(Spool(root), host, archive, PacsSettings(**values), host.metrics)  # type: ignore[arg-type]


def receive(spool: Spool, *instances: bytes, age_s: float = 0.0) -> None:
    """Store accepted instances as the receivers do, arrived ``age_s`` ago."""
    for data in instances:
        verdict = check_instance(data)
        assert isinstance(verdict, Accepted), verdict
        path = spool.put_instance(verdict.study_uid, verdict.sop_instance_uid, verdict.eye, data)
        os.utime(path, (time.time() - age_s, time.time() - age_s))


def tick(worker: PacsWorker) -> None:
    LOOP.run_until_complete(worker.tick())


def value(metrics: ServiceMetrics, name: str, **labels: str) -> float:
    return float(metrics.registry.get_sample_value(name, labels or None) or 0.0)


def exams_scored(metrics: ServiceMetrics) -> float:
    """Grading passes that ran the model (each observes one exam)."""
    return sum(value(metrics, "radscreen_exams_total", outcome=o.value) for o in ScreeningOutcome)
