"""The HTTP service's model host: model lifecycle, decode pool and micro-batcher (no FastAPI).

``ModelHost.load()`` runs in the background from the app's lifespan: it loads and verifies the
artifact, materialises the K draws, warms the backend (batch 1; on GPU also ``max_batch_size``),
starts the batcher and only then reports ``ready``. Until then predictions raise ``NotReady``
(503 + Retry-After) while /healthz already answers, so orchestrators can tell "starting" from
"dead". A load failure (e.g. a sha256 mismatch) leaves the host ``failed`` with the reason.

The scorer comes from ``settings.scorer_spec()`` (:class:`~service.inference.spec.ScorerSpec`), the same
spec type the batch job and its Ray actors load.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, cast

from service.admission import Admission
from service.batcher import MicroBatcher, RetryLater, Scored
from service.inference.decode_deadline import DecodeDeadline
from service.inference.imaging import ImageRejected
from service.inference.loading import load_scorer
from service.inference.partition import accepted, merge_in_order
from service.inference.prepare import PreparedImage, prepare_image
from service.inference.scoring import Scorer
from service.inference.spec import ScorerSpec
from service.metrics import ServiceMetrics
from service.settings import Settings

CPU_DECODE_WORKERS = 2  # on the CPU the model's threads need the cores
GPU_DECODE_WORKERS_MAX = 16


def decode_threads(requested: int | None, device: str) -> int:
    """The decode pool's size: ``requested``, else one thread per core up to 16 when the model scores on a GPU
    (decoding, not the GPU, then bounds throughput), else 2."""
    if requested is not None:
        return requested
    from models.platform.compute import resolve_device

    try:
        gpu = resolve_device(device) != "cpu"
    except RuntimeError:  # cuda asked for and absent: the model load reports it; size as for the CPU
        gpu = False
    return min(os.cpu_count() or 1, GPU_DECODE_WORKERS_MAX) if gpu else CPU_DECODE_WORKERS

logger = logging.getLogger(__name__)

State = Literal["loading", "ready", "failed"]
ScorerFactory = Callable[[ScorerSpec], Scorer]  # default: load_scorer; tests wrap it
# an image's bytes, or how to read them (called in the decode worker, so a spooled upload is read into memory
# only when a worker is about to decode it)
ImageSource = bytes | Callable[[], bytes]


class NotReady(RetryLater):
    """The model is still loading (or failed to load)."""

    slug = "not-ready"

    def __init__(self, detail: str, retry_after: int = 2) -> None:
        super().__init__(detail, retry_after=retry_after)


@dataclass(frozen=True)
class Prediction:
    """One scored image with its timings in ms."""

    scored: Scored
    decode_ms: float


class ModelHost:
    """Owns the scorer, the decode thread pool and the batcher of one app."""

    def __init__(
        self, settings: Settings, metrics: ServiceMetrics, factory: ScorerFactory | None = None
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.spec = settings.scorer_spec()
        self.factory: ScorerFactory = factory or load_scorer
        self.state: State = "loading"
        self.error: str | None = None
        self.scorer: Scorer | None = None
        self.batcher: MicroBatcher | None = None
        self.admission: Admission | None = None
        self._decode_s = 0.0  # running average of one image's decode + preprocessing, for admission
        self.reserved_images = 0  # queue places kept for the reserved lane (reserve_lane)
        self.decode_workers = decode_threads(settings.decode_workers, self.spec.device)
        self._decode_pool = ThreadPoolExecutor(self.decode_workers, thread_name_prefix="radscreen-decode")

    async def load(self) -> None:
        """Load, verify, materialise, warm up, start batching; then ready (see module docstring)."""
        started = time.perf_counter()
        try:
            scorer = await asyncio.to_thread(self.factory, self.spec)
            # on CPU one small pass is enough; on GPU also the largest batch (cuDNN algorithm choice)
            sizes = [1] if scorer.backend.device == "cpu" else sorted({1, self.settings.max_batch_size})
            await asyncio.to_thread(scorer.warmup, sizes)
            timed = time.perf_counter()
            await asyncio.to_thread(scorer.warmup, [1])  # warm now: one image's forward, for admission
            image_s = time.perf_counter() - timed
        except Exception as exc:
            self.state, self.error = "failed", f"{type(exc).__name__}: {exc}"
            logger.error("model failed to load: %s", self.error)
            return
        self.scorer = scorer
        self.batcher = MicroBatcher(
            scorer,
            max_batch_size=self.settings.max_batch_size,
            max_wait_ms=self.settings.max_wait_ms,
            queue_size=self.settings.queue_size,
            metrics=self.metrics,
            reserved=self.reserved_images,
        )
        self.batcher.seed_seconds_per_image(image_s)
        self.admission = Admission(self.settings.max_queue_wait_s, self._seconds_per_image)
        self.batcher.start()
        self.metrics.set_model(scorer.model_identity, scorer.calibration.referral_threshold_mi)
        self.metrics.watch_guard(scorer.backend)
        self.metrics.ready.set(1)
        self.state = "ready"
        rt = scorer.runtime
        cpu = rt.get("cpu", {})
        logger.info(
            "ready: %s on %s, precision %s (%s), strategy %s",
            scorer.backend.name, scorer.backend.device, rt.get("precision"), rt.get("precision_reason", "-"),
            rt.get("strategy"),
            extra={"load_s": round(time.perf_counter() - started, 3), "cpu_model": cpu.get("model_name"),
                   "cpu_isa": cpu.get("isa"), "native_bf16": cpu.get("native_bf16"),
                   "precision": rt.get("precision"), "strategy": rt.get("strategy")},
        )

    async def stop(self, tasks: Iterable[asyncio.Task[Any]] = ()) -> None:
        """Stop serving: cancel and await ``tasks`` (the process's work on this host: its load, the PACS
        worker), then the batcher and the decode pool."""
        self.metrics.ready.set(0)
        tasks = list(tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.batcher is not None:
            await self.batcher.stop()
        self._decode_pool.shutdown(wait=False, cancel_futures=True)

    def require_ready(self) -> Scorer:
        if self.state == "ready" and self.scorer is not None:
            return self.scorer
        if self.state == "failed":
            raise NotReady(f"The model failed to load ({self.error}); fix the artifact and restart.", 30)
        raise NotReady("The model is loading and warming up; retry shortly.")

    async def prepare(self, source: ImageSource) -> PreparedImage:
        """Read (when ``source`` is a reader), decode/validate/quality-check off the event loop; raises
        ImageRejected.

        The decode, a DICOM header's parse included, has ``decode_timeout_s`` from the moment a worker starts
        it; when the request is cancelled (the client went away) a queued decode never starts and a running
        one stops at its next read chunk (``service.inference.decode_deadline``).
        """
        scorer = self.require_ready()
        loop = asyncio.get_running_loop()
        cancelled = threading.Event()

        def work() -> PreparedImage:
            deadline = DecodeDeadline(scorer.pipeline.decode_timeout_s, cancelled)
            return prepare_image(source() if callable(source) else source, scorer.pipeline, deadline)

        try:
            prepared = await loop.run_in_executor(self._decode_pool, work)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        self._decode_s = 0.8 * self._decode_s + 0.2 * prepared.decode_ms / 1e3
        return prepared

    def _seconds_per_image(self) -> float:
        """The pipeline's measured seconds per image: its slower stage, the batched forward or the decode
        pool (one image's decode over the number of decode workers)."""
        assert self.batcher is not None
        return max(self.batcher.seconds_per_image(), self._decode_s / self.decode_workers)

    def reserve_lane(self, images: int) -> None:
        """Keep ``images`` places of the batcher's queue for the reserved lane (``service.admission``: the PACS
        worker); call it before :meth:`load`, or it applies from the next load."""
        self.reserved_images = images

    def admit(self, images: int, *, reserved: bool = False) -> contextlib.AbstractContextManager[None]:
        """Admission by expected wait (``service.admission``), checked before any decoding; ``reserved``: the
        reserved lane."""
        self.require_ready()
        assert self.admission is not None  # set together with ready
        return self.admission.admit(images, reserved=reserved)

    async def predict(self, source: ImageSource) -> Prediction:
        """One image: admit, read and decode, then batch with whatever else is in flight."""
        with self.admit(1):
            prepared = await self.prepare(source)
            assert self.batcher is not None  # set together with ready
            scored = await self.batcher.submit(prepared)
        return Prediction(scored, prepared.decode_ms)

    async def predict_many(self, images: Sequence[ImageSource], *, reserved: bool = False
                           ) -> list[Prediction | ImageRejected]:
        """Several images in order; a rejected image becomes its ImageRejected, the others are scored
        together (``service.inference.partition``). Admitted (or refused) as a whole before decoding;
        ``reserved``: through the reserved lane (``service.admission``)."""
        with self.admit(len(images), reserved=reserved):
            return await self.score_prepared(await self.prepare_many(images), reserved=reserved)

    async def prepare_many(self, images: Sequence[ImageSource]) -> list[PreparedImage | ImageRejected]:
        """:meth:`prepare` of each image, in order; a rejected one becomes its ImageRejected. Call it admitted
        (:meth:`admit`): this is the work admission holds places for."""
        outcomes = await asyncio.gather(*(self.prepare(d) for d in images), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, ImageRejected):
                raise outcome
        return cast("list[PreparedImage | ImageRejected]", outcomes)  # any other exception was raised above

    async def score_prepared(self, checked: Sequence[PreparedImage | ImageRejected], *, reserved: bool = False
                             ) -> list[Prediction | ImageRejected]:
        """Score the prepared images of :meth:`prepare_many` in one batch submission; rejections stay in place."""
        assert self.batcher is not None
        scored = await self.batcher.submit_many(accepted(checked, PreparedImage), reserved=reserved)
        return [
            m if isinstance(m, ImageRejected) else Prediction(m.score, m.item.decode_ms)
            for m in merge_in_order(checked, PreparedImage, ImageRejected, scored)
        ]
