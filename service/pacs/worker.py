"""The PACS loop: grade each study when it is complete or quiet, build its SR once, deliver it until acknowledged.

Every state lives in the spool (``service.pacs.store``), so a process killed at any point and restarted picks
up where it stopped:

1. **When to grade.** A study whose instance set changed since it was last graded is graded once both eyes
   are in and no instance came for ``settle_s``, or, with one eye only, once none came for ``quiet_s``.
   A study that gains instances after its grading is graded again with all of them (a new result object:
   its inputs differ); one whose set is unchanged is never graded twice.
2. **Exactly once.** The SR's UID derives from the source instances and the model (``service.pacs.sr``). If
   that UID is already waiting in the outbox or was delivered, nothing new is queued (``duplicate``): a study
   received twice, or resent after a crash, yields one result object, in the spool and in the archive.
3. **Delivery.** Each outbox SR is sent (``service.pacs.delivery``); a failure is counted in
   ``radscreen_pacs_deliveries_total{result="failed"}`` and retried with a doubling delay; the outbox size and
   the age of its oldest result are gauges. Only an acknowledged SR leaves the outbox.

One process at a time grades a spool (``Spool.try_lock``); others sharing it only receive, and one of them takes
over when the grader ends. Log lines carry counts and outcomes, never a patient identifier or a UID.
"""

from __future__ import annotations

import asyncio
import io
import logging
import time

from pydicom.dataset import Dataset

from service.batcher import RetryLater
from service.exam_identity import ExamIdentityError
from service.metrics import ServiceMetrics
from service.model_host import ModelHost
from service.pacs.delivery import Archive, Backoff, DeliveryFailed
from service.pacs.grading import exam_record, grade_study
from service.pacs.settings import PacsSettings
from service.pacs.sr import build_sr
from service.pacs.store import Spool, StudyFolder, key_of

logger = logging.getLogger(__name__)


def _encode(dataset: Dataset) -> bytes:
    out = io.BytesIO()
    dataset.save_as(out, enforce_file_format=True)
    return out.getvalue()


class PacsWorker:
    """Grades spooled studies and delivers their SRs (module docstring)."""

    def __init__(self, spool: Spool, host: ModelHost, archive: Archive | None, settings: PacsSettings,
                 metrics: ServiceMetrics) -> None:
        self.spool = spool
        self.host = host
        self.archive = archive
        self.settings = settings
        self.metrics = metrics
        self.backoff = Backoff(settings.retry_base_s, settings.retry_max_s)

    def ready(self, study: StudyFolder, now: float) -> bool:
        """Whether ``study`` should be graded now (rule 1)."""
        graded = self.spool.graded(study)
        if graded is not None and graded.get("digest") == study.digest:
            return False
        idle = now - study.last_arrival
        return idle >= (self.settings.settle_s if len(study.eyes) == 2 else self.settings.quiet_s)

    async def grade(self, study: StudyFolder) -> str | None:
        """Grade one study and queue its SR unless that SR exists already; returns the result key."""
        try:
            graded = await grade_study(self.host, study)
        except ExamIdentityError as exc:  # two patients, or one photograph as both eyes: not one visit
            self.metrics.pacs_results.labels(event="refused").inc()
            logger.warning("study not graded: %s", exc)  # the message names instances by number only
            self.spool.mark_graded(study, "")  # not again until its instances change
            return None
        if graded is None:
            return None
        sr_uid = graded.uids[0]
        key = key_of(sr_uid)
        if self.spool.is_sent(key) or (self.spool.results_dir / f"{key}.dcm").is_file():
            self.metrics.pacs_results.labels(event="duplicate").inc()
            logger.info("study graded again with the same instances: result already exists, not queued again")
        else:
            sr_bytes = await asyncio.to_thread(lambda: _encode(build_sr(graded)))
            self.spool.put_result(sr_uid, sr_bytes, exam_record(graded, key))
            self.metrics.pacs_results.labels(event="built").inc()
            logger.info("exam graded: %s, %d photographs", graded.exam["outcome"], len(graded.images))
        self.spool.mark_graded(study, key)
        return key

    async def deliver(self) -> None:
        """Send each due outbox SR once (rule 3)."""
        outbox = self.spool.outbox()
        now = time.time()
        self.metrics.pacs_outbox.set(len(outbox))
        self.metrics.pacs_oldest_undelivered.set(max((now - p.stat().st_mtime for p in outbox), default=0.0))
        if self.archive is None:
            return
        for path in outbox:
            key = path.stem
            if not self.backoff.due(key, time.monotonic()):
                continue
            try:
                await asyncio.to_thread(self.archive.send, path.read_bytes())
            except DeliveryFailed as exc:
                delay = self.backoff.failed(key, time.monotonic())
                self.metrics.pacs_deliveries.labels(result="failed").inc()
                logger.warning("result not delivered (%s); retry in %.0f s", exc, delay)
                continue
            except FileNotFoundError:
                continue
            self.backoff.succeeded(key)
            self.spool.mark_sent(path)
            self.metrics.pacs_deliveries.labels(result="delivered").inc()
            logger.info("result delivered to the archive (%s)", self.archive.name)

    def expire(self, now: float) -> None:
        """Delete the instances of studies delivered (or refused) and quiet for ``retention_s``."""
        for study in self.spool.studies():
            graded = self.spool.graded(study)
            done = graded is not None and graded.get("digest") == study.digest and (
                graded.get("result") == "" or self.spool.is_sent(str(graded.get("result"))))  # refused, or delivered
            if done and now - study.last_arrival >= self.settings.retention_s:
                self.spool.remove_study(study)

    async def tick(self) -> None:
        """One pass: grade what is ready, deliver what is due, expire what is old."""
        now = time.time()
        for study in self.spool.studies():
            if not self.ready(study, now):
                continue
            try:
                await self.grade(study)
            except RetryLater:  # the model is loading or the queue is full: the study stays for the next pass
                break
        await self.deliver()
        self.expire(now)

    async def run(self) -> None:
        """Tick every ``poll_s`` until cancelled; a failing pass is logged and the loop goes on. (The owner calls
        ``spool.clean_temporaries()`` once before receiving starts: while receiving, a temporary file is a write
        in progress.)"""
        waiting_logged = False
        while True:
            try:
                if not self.spool.try_lock():
                    if not waiting_logged:
                        logger.info("another process grades this spool; this one only receives")
                        waiting_logged = True
                elif self.host.state == "ready":
                    await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # keep serving; the type only: a message could quote a header value
                logger.error("PACS pass failed (%s); retrying", type(exc).__name__)
            await asyncio.sleep(self.settings.poll_s)
