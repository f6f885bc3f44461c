"""The PACS loop: grade each study when it is complete or quiet, build its SR once, deliver it until acknowledged.

Every state lives in the spool (``service.pacs.store``), so a process killed at any point and restarted picks
up where it stopped. Grading and delivery are two loops of their own: an archive that hangs never holds a study
back from grading, and a long grading pass never holds a result back from the archive.

1. **When to grade.** A study whose instance set changed since it was last graded is graded once both eyes
   are in and no instance came for ``settle_s``, or, with one eye only, once none came for ``quiet_s``.
   A study that gains instances after its grading is graded again with all of them (a new result object:
   its inputs differ); one whose set is unchanged is never graded twice.
2. **Quarantine.** A study that cannot be graded or reported is set aside, never retried in a loop: its
   instances are not one patient's visit or show one photograph as both eyes (``identity``), scoring raised
   (``grading``), its SR could not be built (``report``), no instance is readable any more (``unreadable``), or two
   grading passes of it ended with the process (``unfinished``: killed or crashed while grading it; each pass is
   recorded in the spool before it starts). The study keeps its files, a ``quarantine.json`` with the reason, a
   count in ``radscreen_pacs_quarantines_total{reason}`` and a log line without identifiers; a restart does not
   bring it back. It is looked at again only when an instance is added or replaced, or when an operator releases
   it (``radscreen pacs-quarantine``). One poison study therefore costs at most one grading pass and blocks no
   other study: each study's pass is isolated from the next.
3. **Exactly once.** The SR's UID derives from the source instances and the model (``service.pacs.sr``). If
   that UID is already waiting in the outbox or was delivered, nothing new is queued (``duplicate``): a study
   received twice, or resent after a crash, yields one result object, in the spool and in the archive.
4. **Delivery.** Each outbox SR is sent (``service.pacs.delivery``) within a deadline for the whole exchange
   (``archive_timeout_s``); a failure or a deadline passed is counted in
   ``radscreen_pacs_deliveries_total{result="failed"}``, ends that delivery pass (the archive is failing: the
   other results wait for the next pass rather than each waiting out the deadline) and is retried with a doubling
   delay. Only an acknowledged SR leaves the outbox. The outbox size, the age of its oldest result and the number
   of quarantined studies are read from the spool whenever the metrics are scraped, so they are true while a pass
   runs.
5. **The model's share.** Grading goes through the model host's reserved lane (``service.admission``): HTTP
   clients that retry at once after a 503 cannot keep a study from being graded.
6. **A spool that cannot be written.** Grading pauses while the spool's file system has less than
   ``min_free_mb`` free or a write failed (``radscreen_pacs_grading_paused`` is 1, one log line per pause), for
   ``retry_base_s`` doubling up to ``retry_max_s``; it is not a study's fault, so nothing is quarantined and
   nothing is graded again in a loop. A write that fails while receiving answers 0xA700 (``service.pacs.receive``).
7. **Progress.** A grading pass that went through every study sets ``radscreen_pacs_grading_pass_timestamp_seconds``
   to the time it judged them by: every study due by then has been graded (or quarantined), and one not graded
   was not due. A pass cut short (the model busy, the spool paused) does not move it.

One process at a time grades a spool (``Spool.try_lock``); others sharing it only receive, and one of them takes
over when the grader ends. Log lines carry counts, reasons and outcomes, never a patient identifier or a UID.
"""

from __future__ import annotations

import asyncio
import errno
import io
import logging
import time
from collections.abc import Awaitable, Callable

from pydicom.dataset import Dataset

from service.batcher import RetryLater
from service.metrics import ServiceMetrics
from service.model_host import ModelHost
from service.pacs.delivery import Archive, Backoff, DeliveryFailed, archive_from
from service.pacs.grading import exam_record, grade_study
from service.pacs.settings import PacsSettings
from service.pacs.sr import GradedExam, build_sr
from service.pacs.store import Spool, StudyFolder, key_of
from service.screening.identity import ExamIdentityError

logger = logging.getLogger(__name__)

MAX_UNFINISHED_PASSES = 2  # grading passes of one instance set that may end with the process before quarantine
DEADLINE_GRACE_S = 5.0  # past the archive's own deadline, the worker stops waiting for a send that did not return


def _encode(dataset: Dataset) -> bytes:
    out = io.BytesIO()
    dataset.save_as(out, enforce_file_format=True)
    return out.getvalue()


def _build_sr_bytes(graded: GradedExam) -> bytes:
    return _encode(build_sr(graded))


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
        self.pause = Backoff(settings.retry_base_s, settings.retry_max_s)  # grading paused: key "spool"
        self._paused_logged = False
        host.reserve_lane(host.settings.max_exam_images)  # one study's photographs always find room
        metrics.pacs_outbox.set_function(lambda: len(self.spool.outbox()))
        metrics.pacs_oldest_undelivered.set_function(self._oldest_undelivered)
        metrics.pacs_quarantined.set_function(lambda: len(self.spool.quarantine_list()))

    def _oldest_undelivered(self) -> float:
        now = time.time()
        return max((now - mtime for mtime in self.spool.outbox_times()), default=0.0)

    # -- grading ---------------------------------------------------------------------------------------------
    def ready(self, study: StudyFolder, now: float) -> bool:
        """Whether ``study`` should be graded now (rules 1 and 2)."""
        graded = self.spool.graded(study)
        if graded is not None and graded.get("digest") == study.digest:
            return False
        if self.spool.quarantined(study) is not None:
            return False
        idle = now - study.last_arrival
        return idle >= (self.settings.settle_s if len(study.eyes) == 2 else self.settings.quiet_s)

    def _quarantine(self, study: StudyFolder, reason: str, detail: str) -> None:
        self.spool.quarantine(study, reason, detail)
        self.metrics.pacs_quarantines.labels(reason=reason).inc()
        logger.warning("study quarantined (%s): %s", reason, detail)  # details name no identifier

    async def grade(self, study: StudyFolder) -> str | None:
        """Grade one study and queue its SR unless that SR exists already; returns the result key, or None when
        the study was quarantined (rule 2). Raises RetryLater (the model cannot take it now: the study stays as
        it was) and OSError (the spool cannot be written: the caller pauses)."""
        unfinished = self.spool.start_grading(study)
        if unfinished >= MAX_UNFINISHED_PASSES:
            self._quarantine(study, "unfinished", f"{unfinished} grading passes of this study ended with the "
                             "process (killed or crashed) before they finished")
            return None
        try:
            graded = await grade_study(self.host, study)
        except RetryLater:
            self.spool.restore_grading(study, unfinished)  # not a pass: the model was busy or loading
            raise
        except ExamIdentityError as exc:  # two patients, or one photograph as both eyes: not one visit
            self.metrics.pacs_results.labels(event="refused").inc()
            self._quarantine(study, "identity", str(exc))  # the message names instances by number only
            return None
        except OSError as exc:
            if _spool_full(exc):
                raise
            self._quarantine(study, "grading", f"grading raised {type(exc).__name__}")
            return None
        except Exception as exc:  # any failure of one study must not stop the others
            self._quarantine(study, "grading", f"grading raised {type(exc).__name__}")  # the type: a message
            return None  # could quote a header value
        if graded is None:
            self._quarantine(study, "unreadable", "no instance of the study is readable any more (damaged on disk)")
            return None
        sr_uid = graded.uids[0]
        key = key_of(sr_uid)
        if self.spool.is_sent(key) or (self.spool.results_dir / f"{key}.dcm").is_file():
            self.metrics.pacs_results.labels(event="duplicate").inc()
            logger.info("study graded again with the same instances: result already exists, not queued again")
        else:
            try:
                sr_bytes = await asyncio.to_thread(_build_sr_bytes, graded)
            except Exception as exc:  # highdicom refuses values it cannot encode
                self._quarantine(study, "report", f"the DICOM SR could not be built ({type(exc).__name__})")
                return None
            self.spool.put_result(sr_uid, sr_bytes, exam_record(graded, key))
            self.metrics.pacs_results.labels(event="built").inc()
            logger.info("exam graded: %s, %d photographs", graded.result.outcome.value, len(graded.images))
        self.spool.mark_graded(study, key)
        self.spool.finish_grading(study)
        return key

    def grading_paused(self) -> bool:
        """Whether grading waits for the spool (rule 6); sets the gauge, logs once per pause."""
        now = time.monotonic()
        if not self.pause.due("spool", now):
            return True
        if self.spool.free_bytes() < self.settings.min_free_mb * 1024 * 1024:
            self._paused(f"less than {self.settings.min_free_mb} MiB free on the spool's file system")
            return True
        if self._paused_logged:
            logger.info("PACS grading resumed: the spool can be written")
            self._paused_logged = False
        self.pause.succeeded("spool")
        self.metrics.pacs_grading_paused.set(0)
        return False

    def _paused(self, why: str) -> None:
        delay = self.pause.failed("spool", time.monotonic())
        self.metrics.pacs_grading_paused.set(1)
        if not self._paused_logged:
            logger.error("PACS grading paused: %s; trying again in %.0f s", why, delay)
            self._paused_logged = True

    async def grade_ready(self, now: float | None = None) -> None:
        """One grading pass: each study that is ready, each in isolation (rule 2), unless paused (rule 6)."""
        if self.grading_paused():
            return
        now = time.time() if now is None else now
        for study in self.spool.studies():
            if not self.ready(study, now):
                continue
            try:
                await self.grade(study)
            except RetryLater:  # the model is loading or busy: the study stays for the next pass
                return
            except OSError as exc:  # the spool cannot be written: not this study's fault
                self._paused(f"the spool cannot be written ({errno.errorcode.get(exc.errno or 0, type(exc).__name__)})")
                return
        self.expire(now)
        self.metrics.pacs_grading_pass.set(now)  # every study was judged as of `now`: what was due then is graded

    # -- delivery --------------------------------------------------------------------------------------------
    async def deliver(self) -> None:
        """Send each due outbox SR once, each within the deadline; the first failure ends the pass (rule 4)."""
        if self.archive is None:
            return
        archive = self.archive
        for path in self.spool.outbox():
            key = path.stem
            if not self.backoff.due(key, time.monotonic()):
                continue
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            try:
                await asyncio.wait_for(asyncio.to_thread(archive.send, data),
                                       self.settings.archive_timeout_s + DEADLINE_GRACE_S)
            except (DeliveryFailed, TimeoutError) as exc:
                reason = exc if isinstance(exc, DeliveryFailed) else (
                    f"no answer within {self.settings.archive_timeout_s:g} s")
                delay = self.backoff.failed(key, time.monotonic())
                self.metrics.pacs_deliveries.labels(result="failed").inc()
                logger.warning("result not delivered (%s); retry in %.0f s", reason, delay)
                return
            self.backoff.succeeded(key)
            self.spool.mark_sent(path)
            self.metrics.pacs_deliveries.labels(result="delivered").inc()
            logger.info("result delivered to the archive (%s)", archive.name)

    def expire(self, now: float) -> None:
        """Delete the instances of studies delivered, refused or quarantined and quiet for ``retention_s``."""
        for study in self.spool.studies():
            graded = self.spool.graded(study)
            done = self.spool.quarantined(study) is not None or (
                graded is not None and graded.get("digest") == study.digest and (
                    graded.get("result") == "" or self.spool.is_sent(str(graded.get("result")))))
            if done and now - study.last_arrival >= self.settings.retention_s:
                self.spool.remove_study(study)

    async def tick(self) -> None:
        """One grading pass, then one delivery pass (``run`` runs them as two loops)."""
        await self.grade_ready()
        await self.deliver()

    # -- the loops -------------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Take the spool's grading lock (waiting while another process holds it), then run the grading loop
        and the delivery loop until cancelled; a failing pass is logged and its loop goes on. (The owner calls
        ``spool.clean_temporaries()`` once before receiving starts: while receiving, a temporary file is a write
        in progress.)"""
        waiting_logged = False
        while not self.spool.try_lock():
            if not waiting_logged:
                logger.info("another process grades this spool; this one only receives")
                waiting_logged = True
            await asyncio.sleep(self.settings.poll_s)
        await asyncio.gather(self._loop("grading", self._grading_pass), self._loop("delivery", self.deliver))

    async def _grading_pass(self) -> None:
        if self.host.state == "ready":
            await self.grade_ready()

    async def _loop(self, name: str, one_pass: Callable[[], Awaitable[None]]) -> None:
        while True:
            try:
                await one_pass()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # keep serving; the type only: a message could quote a header
                logger.error("PACS %s pass failed (%s); retrying", name, type(exc).__name__)
            await asyncio.sleep(self.settings.poll_s)


def start_worker(spool: Spool, host: ModelHost, settings: PacsSettings, metrics: ServiceMetrics
                 ) -> asyncio.Task[None]:
    """The PACS side's start, one for ``radscreen serve`` (STOW-RS) and ``radscreen dicom-listen`` (C-STORE):
    the spool cleaned of any partial file a killed writer left (call it before the first instance is written),
    the configured archive (a warning when none is: results then stay in the spool), and the worker's task."""
    spool.clean_temporaries()
    archive = archive_from(settings)
    if archive is None:
        logger.warning("no archive configured (RADSCREEN_PACS_ARCHIVE_URL / _ARCHIVE_HOST): results stay in the spool")
    worker = PacsWorker(spool, host, archive, settings, metrics)
    return asyncio.create_task(worker.run(), name="radscreen-pacs")


def _spool_full(exc: OSError) -> bool:
    return exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
