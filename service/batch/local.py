"""The local runner (``--runner local``, the default): a worker pool reads and prepares files while the
model scores batches.

Reading + ``prepare_image`` (decode, quality gate, resize, normalise) run in a thread or process pool,
``prefetch`` images ahead of the model; the main thread gathers ``batch_size`` prepared images, runs one
batched ``Scorer.score_batch`` forward and emits the rows of the whole window in input order. Bad files
become error rows here and never stop the job.
"""

from __future__ import annotations

import logging
import signal
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import TYPE_CHECKING, Literal

from service.batch.inputs import InputItem, RowError
from service.batch.reading import read_input_file
from service.batch.rows import Row, error_row, scored_row
from service.inference.partition import Accepted, score_accepted

if TYPE_CHECKING:
    from service.inference.imaging import ImagePipeline
    from service.inference.prepare import PreparedImage
    from service.inference.scoring import Scorer

logger = logging.getLogger(__name__)

PoolKind = Literal["thread", "process"]
UNEXPECTED_ERROR = "unexpected-error"


def load_prepared(file: str, pipeline: ImagePipeline) -> PreparedImage | RowError:
    """Read one file and run ``prepare_image`` on it; any failure becomes a :class:`RowError`.

    Module-level (picklable) so a process pool can run it.
    """
    from service.inference.imaging import ImageRejected
    from service.inference.prepare import prepare_image

    data = read_input_file(file, pipeline.max_bytes)
    if isinstance(data, RowError):
        return data
    try:
        return prepare_image(data, pipeline)
    except ImageRejected as exc:
        return RowError(exc.problem_type, exc.detail)
    except Exception as exc:  # a bad image must not end a long job; the row records what happened
        logger.exception("unexpected error while preparing an image")
        return RowError(UNEXPECTED_ERROR, f"{type(exc).__name__} while preparing the image")


def ignore_sigint() -> None:
    """A process-pool worker leaves Ctrl-C to the job (which commits and says how to resume): no traceback
    from each worker."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def make_executor(pool: PoolKind, workers: int) -> Executor:
    """A thread pool (PIL and numpy release the GIL while decoding) or a process pool (spawned)."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if pool == "thread":
        return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="radscreen-prepare")
    if pool == "process":
        import multiprocessing

        return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=ignore_sigint)
    raise ValueError(f"unknown pool {pool!r}; expected one of: thread, process")


def prepared_stream(items: Sequence[InputItem], pipeline: ImagePipeline, executor: Executor,
                    prefetch: int) -> Iterator[tuple[InputItem, PreparedImage | RowError]]:
    """``(item, prepared-or-error)`` in input order, keeping up to ``prefetch`` reads in flight."""
    pending: deque[tuple[InputItem, Future[PreparedImage | RowError]]] = deque()
    it = iter(items)
    exhausted = False
    while True:
        while not exhausted and len(pending) < prefetch:
            item = next(it, None)
            if item is None:
                exhausted = True
                break
            assert item.file is not None, "rows with input errors never reach the reader"
            pending.append((item, executor.submit(load_prepared, str(item.file), pipeline)))
        if not pending:
            return
        item, future = pending.popleft()
        yield item, future.result()


def score_window(window: list[tuple[InputItem, PreparedImage | RowError]], scorer: Scorer) -> list[Row]:
    """Rows for a window of prepared images/errors, in window order, using one batched forward."""
    from service.inference.prepare import PreparedImage
    from service.screening.payload import score_payload

    sha = scorer.model_identity.sha256
    merged = score_accepted([result for _, result in window], PreparedImage, RowError, scorer.score_batch)
    return [
        scored_row(item, score_payload(m.score, scorer)) if isinstance(m, Accepted) else error_row(item, m, sha)
        for (item, _), m in zip(window, merged, strict=True)
    ]


def run_local(items: Sequence[InputItem], scorer: Scorer, emit: Callable[[list[Row]], None], *,
              batch_size: int = 16, workers: int = 2, pool: PoolKind = "thread",
              prefetch: int | None = None, part_ends: frozenset[str] = frozenset()) -> None:
    """Score ``items`` (all readable-looking inputs still to do) and pass their rows to ``emit``.

    ``emit`` receives the rows of each window (``batch_size`` prepared images plus any error rows met
    on the way, cut short at an id in ``part_ends`` so that no batch spans two part files) in input order.
    On Ctrl-C the reads still queued are cancelled, not waited for.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if not items:
        return
    ahead = prefetch if prefetch is not None else 2 * batch_size + workers
    executor = make_executor(pool, workers)
    try:
        window: list[tuple[InputItem, PreparedImage | RowError]] = []
        n_prepared = 0
        for item, result in prepared_stream(items, scorer.pipeline, executor, ahead):
            window.append((item, result))
            n_prepared += not isinstance(result, RowError)
            if n_prepared >= batch_size or item.id in part_ends:
                emit(score_window(window, scorer))
                window, n_prepared = [], 0
        if window:
            emit(score_window(window, scorer))
    except BaseException:
        executor.shutdown(wait=False, cancel_futures=True)
        raise
    executor.shutdown(wait=True)
