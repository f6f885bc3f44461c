"""Crash-safe result storage for the batch job: atomic JSONL part files and the resume index.

Results are committed in chunks: each chunk is one ``part-NNNNNN.jsonl`` file written to a temporary
name, fsynced and ``os.replace``d into place, then the folder is fsynced (``models.io.atomic``), so a part
either exists whole or not at all, whatever moment the process is killed. The part files *are* the journal
of done ids: the set of done ids is exactly the union of the ids in the parts, with no second file that
could disagree.

``_job.json`` records the model sha256, the input the parts came from and the scoring settings that shape
a row's numbers (K, precision, backend, device, strategy, upload limits and a digest of the scoring code);
reopening the folder with a different model, input or settings is refused (unless the caller restarts),
so results of two models, two precisions or two quality-gate versions never mix in one file.
A ``.lock`` file held with ``flock`` keeps two jobs from writing the same folder at once (the kernel
releases it when a killed process dies).
"""

from __future__ import annotations

import fcntl
import json
import logging
import re
import shutil
import signal
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from models.io.atomic import atomic_write_bytes, stale_temporaries
from service.batch.rows import Row

logger = logging.getLogger(__name__)

META_NAME = "_job.json"
LOCK_NAME = ".lock"
PART_RE = re.compile(r"^part-(\d{6,})\.jsonl$")
FORMAT_VERSION = 1


class PartStoreError(Exception):
    """The parts folder cannot be used for this job (other model, other input, locked by another job)."""


def rows_to_jsonl(rows: Iterable[Row]) -> bytes:
    """JSON Lines bytes; floats use Python's shortest round-trip repr, so values survive exactly."""
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows).encode("utf-8")


class PartStore:
    """The ``<output>.parts/`` folder of one job: open it, find done ids, add parts, read rows back."""

    def __init__(self, directory: Path, lock_fh: IO[str], index: dict[str, int], next_part: int,
                 model_sha256: str):
        self.directory = directory
        self.model_sha256 = model_sha256
        self._lock_fh = lock_fh
        self._index = index  # id -> part number holding its row
        self._next_part = next_part
        self._cache: OrderedDict[int, dict[str, Row]] = OrderedDict()

    @classmethod
    def open(cls, directory: Path, *, model_sha256: str, input_description: str,
             scoring: Mapping[str, Any] | None = None, restart: bool = False) -> PartStore:
        """Open (or create) the parts folder for a job, refusing one that belongs to another model/input or
        was scored with other ``scoring`` settings (JSON values; compared key by key)."""
        if restart and directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True, exist_ok=True)
        lock_fh = (directory / LOCK_NAME).open("a")
        try:
            fcntl.flock(lock_fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock_fh.close()
            raise PartStoreError(
                f"another batch job is writing to {directory}; wait for it to finish"
            ) from None
        try:
            index, next_part = cls._prepare(directory, model_sha256, input_description, dict(scoring or {}))
        except BaseException:
            lock_fh.close()
            raise
        return cls(directory, lock_fh, index, next_part, model_sha256)

    @staticmethod
    def _prepare(directory: Path, model_sha256: str, input_description: str,
                 scoring: dict[str, Any]) -> tuple[dict[str, int], int]:
        """Check/write ``_job.json``, drop stale temporaries, and index the ids in existing parts."""
        for stale in stale_temporaries(directory):
            stale.unlink()  # a temporary from a killed run: never renamed, so never counted
        parts = sorted((int(m.group(1)), p) for p in directory.iterdir() if (m := PART_RE.match(p.name)))
        meta_path = directory / META_NAME
        wanted = {"format_version": FORMAT_VERSION, "model_sha256": model_sha256, "input": input_description,
                  "scoring": scoring}
        if meta_path.exists():
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            if meta.get("model_sha256") != model_sha256:
                raise PartStoreError(
                    f"{directory} holds results from model sha256 {meta.get('model_sha256')}, not from the "
                    f"loaded model {model_sha256}; refusing to mix them. Pass --restart to discard those "
                    "results, or write to another --output"
                )
            if meta.get("input") != input_description:
                raise PartStoreError(
                    f"{directory} holds results for another input ({meta.get('input')}); pass --restart to "
                    "discard them, or write to another --output"
                )
            before = meta.get("scoring", {})
            changed = sorted(k for k in before.keys() | scoring.keys() if before.get(k) != scoring.get(k))
            if changed:
                diff = "; ".join(f"{k} {before.get(k, '(not recorded)')} -> {scoring.get(k, '(not set)')}"
                                 for k in changed)
                raise PartStoreError(
                    f"{directory} holds results scored with other settings ({diff}); refusing to mix them in "
                    "one file. Rerun with the settings of the first run, pass --restart to discard those "
                    "results, or write to another --output"
                )
        elif parts:
            raise PartStoreError(
                f"{directory} has part files but no {META_NAME}; pass --restart to start over"
            )
        else:
            atomic_write_bytes(meta_path, json.dumps(wanted, indent=2).encode("utf-8"))

        index: dict[str, int] = {}
        for number, path in parts:
            for row in _read_part(path):
                if row.get("model_sha256") != model_sha256:
                    raise PartStoreError(f"{path} has a row from another model; pass --restart to start over")
                index.setdefault(str(row["id"]), number)
        next_part = parts[-1][0] + 1 if parts else 0
        return index, next_part

    @property
    def done_ids(self) -> frozenset[str]:
        """Ids whose rows are committed."""
        return frozenset(self._index)

    def write_part(self, rows: list[Row]) -> Path:
        """Commit ``rows`` atomically as the next part file; ids already committed are skipped."""
        for row in rows:
            if row["model_sha256"] != self.model_sha256:
                raise PartStoreError(
                    f"a row from model {row['model_sha256']} cannot join parts of {self.model_sha256}"
                )
        fresh = [r for r in rows if r["id"] not in self._index]
        number = self._next_part
        path = self.directory / f"part-{number:06d}.jsonl"
        atomic_write_bytes(path, rows_to_jsonl(fresh))
        self._next_part += 1
        for row in fresh:
            self._index[str(row["id"])] = number
        return path

    def get(self, item_id: str) -> Row | None:
        """The committed row for ``item_id``; parts are parsed lazily and a few kept (input-order reads)."""
        number = self._index.get(item_id)
        if number is None:
            return None
        if number not in self._cache:
            path = self.directory / f"part-{number:06d}.jsonl"
            self._cache[number] = {str(r["id"]): r for r in _read_part(path)}
            if len(self._cache) > 16:
                self._cache.popitem(last=False)
        self._cache.move_to_end(number)
        return self._cache[number][item_id]

    def close(self) -> None:
        """Release the lock (the folder stays: it is the resume state and makes a rerun cheap)."""
        self._lock_fh.close()

    def __enter__(self) -> PartStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_part(path: Path) -> Iterator[Row]:
    """Rows of one committed part file."""
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def part_ends(ids: Sequence[str], chunk_size: int) -> frozenset[str]:
    """The ids that end a part: every ``chunk_size``-th of the job's inputs, in input order, and the last.

    Counted over the whole job (done or not), so a rerun cuts its parts, and its scoring windows, where the
    first run did.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    return frozenset([*ids[chunk_size - 1::chunk_size], *ids[-1:]])


@contextmanager
def sigint_deferred() -> Iterator[None]:
    """Hold a Ctrl-C (SIGINT) until the block is done, then raise it: a part is committed whole and its
    rows are counted as done, or neither. Outside the main thread (where no signal arrives) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


class ChunkWriter:
    """Buffers rows and commits them as a part at each part end (:func:`part_ends`), every ``chunk_size``
    rows, or after ``flush_seconds``; a Ctrl-C never splits a commit (:func:`sigint_deferred`)."""

    def __init__(self, store: PartStore, *, chunk_size: int = 64, flush_seconds: float = 10.0,
                 ends: frozenset[str] = frozenset()):
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.store = store
        self.chunk_size = chunk_size
        self.flush_seconds = flush_seconds
        self.ends = ends
        self._pending: list[Row] = []
        self._last_flush = time.monotonic()
        self.parts_written = 0

    def add(self, rows: Iterable[Row]) -> None:
        """Queue one window of rows; commit once it reaches a part end, ``chunk_size`` rows are queued, or
        time is up.

        Commits happen only between windows, so a part holds whole scoring windows; the local runner cuts
        its windows at the part ends, so a part holds exactly ``chunk_size`` rows (fewer only for the last,
        a time-based commit or an interrupted run), and after a kill the rerun starts on a window boundary
        and forms the same batches as an uninterrupted run would.
        """
        rows = list(rows)
        self._pending.extend(rows)
        if (any(r["id"] in self.ends for r in rows) or len(self._pending) >= self.chunk_size
                or (self._pending and time.monotonic() - self._last_flush >= self.flush_seconds)):
            self.flush()

    def flush(self) -> None:
        """Commit all queued rows now (no-op when none)."""
        if self._pending:
            rows, self._pending = self._pending, []
            with sigint_deferred():
                self.store.write_part(rows)
                self.parts_written += 1
        self._last_flush = time.monotonic()
