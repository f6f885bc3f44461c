"""Asyncio micro-batcher: many concurrent requests, one batched forward of the K draws.

Requests ``submit`` prepared images and await a future. One worker task takes the first waiting
image, then keeps gathering until ``max_batch_size`` images or ``max_wait_ms`` have passed, runs
``Scorer.score_batch`` once in a dedicated inference thread (the event loop stays free), and
resolves every future. The queue is bounded: when ``queue_size`` images already wait, ``submit``
raises ``Overloaded`` at once (the API answers 503 + Retry-After) instead of growing memory. ``reserved``
places of the queue are kept for ``submit_many(..., reserved=True)`` (the PACS worker's lane,
``service.admission``): other submissions see a queue that is full ``reserved`` places earlier.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from service.inference.prepare import PreparedImage
from service.inference.scoring import ImageScore, Scorer
from service.metrics import ServiceMetrics

logger = logging.getLogger(__name__)


class RetryLater(Exception):  # noqa: N818
    """The request cannot be served now but can be retried: answered 503 with ``Retry-After``.

    ``slug`` names the problem type; ``retry_after`` is a whole-second estimate.
    """

    slug = "unavailable"

    def __init__(self, detail: str, *, retry_after: int) -> None:
        super().__init__(detail)
        self.retry_after = retry_after
        self.detail = detail


class Overloaded(RetryLater):
    """The queue is full; ``retry_after`` estimates when there will be room."""

    slug = "overloaded"


@dataclass(frozen=True)
class Scored:
    """A scored image with where its time went."""

    score: ImageScore
    queue_ms: float  # from submit to the start of its batch's forward
    inference_ms: float  # the whole batched forward it was part of
    batch_size: int


@dataclass
class _Job:
    image: PreparedImage
    future: asyncio.Future[Scored]
    enqueued: float


class MicroBatcher:
    """Gathers images into batches for ``scorer``; start() on the running loop, stop() to drain."""

    def __init__(
        self,
        scorer: Scorer,
        *,
        max_batch_size: int,
        max_wait_ms: float,
        queue_size: int,
        metrics: ServiceMetrics | None = None,
        reserved: int = 0,
    ) -> None:
        self.scorer = scorer
        self.max_batch_size = max_batch_size
        self.max_wait = max_wait_ms / 1000.0
        self.queue_size = queue_size
        self.reserved = min(reserved, queue_size - 1)  # at least one place stays for everyone else
        self.metrics = metrics
        self._queue: asyncio.Queue[_Job] = asyncio.Queue(maxsize=queue_size)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="radscreen-infer")
        self._worker: asyncio.Task[None] | None = None
        self._last_batch_s = 0.05  # running estimate of one forward, for Retry-After
        self._image_s: float | None = None  # running estimate of forward seconds per image (admission)

    def start(self) -> None:
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(self._run(), name="radscreen-batcher")

    async def stop(self) -> None:
        """Stop the worker and fail whatever still waits (the app is shutting down)."""
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None
        while not self._queue.empty():
            job = self._queue.get_nowait()
            if not job.future.done():
                job.future.set_exception(Overloaded("The service is shutting down.", retry_after=1))
        self._executor.shutdown(wait=True, cancel_futures=True)

    @property
    def depth(self) -> int:
        return self._queue.qsize()

    def seconds_per_image(self) -> float:
        """Measured forward seconds per image (running average; before any forward: one forward's estimate)."""
        return self._image_s if self._image_s is not None else self._last_batch_s

    def seed_seconds_per_image(self, seconds: float) -> None:
        """Start the estimate from a measurement (the warm-up forward) instead of a guess."""
        if self._image_s is None:
            self._image_s = seconds

    def retry_after(self) -> int:
        batches_ahead = math.ceil(self.queue_size / self.max_batch_size)
        return max(1, math.ceil(batches_ahead * self._last_batch_s))

    async def submit_many(self, images: Sequence[PreparedImage], *, reserved: bool = False) -> list[Scored]:
        """Queue all images (all or none) and wait for their scores, in order; ``reserved`` may use the places
        kept for the reserved lane (module docstring)."""
        free = self.queue_size - self._queue.qsize() - (0 if reserved else self.reserved)
        if len(images) > free:
            raise Overloaded(
                f"The inference queue is full ({self.queue_size} images waiting); retry shortly.",
                retry_after=self.retry_after(),
            )
        loop = asyncio.get_running_loop()
        now = time.perf_counter()
        jobs = [_Job(im, loop.create_future(), now) for im in images]
        for job in jobs:
            self._queue.put_nowait(job)
        self._set_depth()
        try:
            return list(await asyncio.gather(*(job.future for job in jobs)))
        except asyncio.CancelledError:  # client went away: the worker skips cancelled futures
            for job in jobs:
                job.future.cancel()
            raise

    async def submit(self, image: PreparedImage) -> Scored:
        [scored] = await self.submit_many([image])
        return scored

    def _set_depth(self) -> None:
        if self.metrics is not None:
            self.metrics.queue_depth.set(self._queue.qsize())

    async def _gather(self) -> list[_Job]:
        first = await self._queue.get()
        batch = [first]
        deadline = time.perf_counter() + self.max_wait
        while len(batch) < self.max_batch_size:
            # take whatever is already waiting without sleeping, then wait out the deadline
            try:
                batch.append(self._queue.get_nowait())
                continue
            except asyncio.QueueEmpty:
                pass
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                break
            try:
                batch.append(await asyncio.wait_for(self._queue.get(), remaining))
            except TimeoutError:
                break
        return batch

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [job for job in await self._gather() if not job.future.done()]
            self._set_depth()
            if not batch:
                continue
            started = time.perf_counter()
            try:
                scores = await loop.run_in_executor(
                    self._executor, self.scorer.score_batch, [job.image for job in batch]
                )
            except Exception as exc:  # a backend failure fails this batch, not the worker
                logger.exception("batched forward failed", extra={"batch_size": len(batch)})
                for job in batch:
                    if not job.future.done():
                        job.future.set_exception(exc)
                continue
            elapsed = time.perf_counter() - started
            self._last_batch_s = 0.8 * self._last_batch_s + 0.2 * elapsed
            per_image = elapsed / len(batch)
            self._image_s = per_image if self._image_s is None else 0.8 * self._image_s + 0.2 * per_image
            if self.metrics is not None:
                self.metrics.inference.observe(elapsed)
                self.metrics.batch_size.observe(len(batch))
            for job, score in zip(batch, scores, strict=True):
                wait = started - job.enqueued
                if self.metrics is not None:
                    self.metrics.queue_wait.observe(wait)
                    self.metrics.observe_score(score)
                if not job.future.done():
                    job.future.set_result(Scored(score, wait * 1e3, elapsed * 1e3, len(batch)))
