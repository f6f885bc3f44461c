"""Atomic file replacement: a reader (or a rerun after a crash) sees the old file or the whole new one.

The one helper behind every file the project must never leave half-written: training checkpoints
(``training/checkpoint.py``), the artifact's ``calibration.json`` and manifest (``models/artifact``), the batch
job's part files and ``_job.json`` (``service/batch/parts.py``) and its results file
(``service/batch/output.py``). It lives in ``models`` because that is the bottom layer both ``training`` and
``service`` may import (the import-linter contracts in ``pyproject.toml``).

The recipe: write to a uniquely named temporary file in the target's folder (same file system, so the
rename is atomic), ``fsync`` it, ``os.replace`` it over the target, then ``fsync`` the folder so the rename
itself survives a power cut. If the writer raises, the temporary file is removed and the target is left as
it was. Example::

    with atomic_write(run_dir / "checkpoint.pt") as tmp:
        torch.save(state, tmp)          # any writer that takes a path: torch, PIL, pyarrow, open()
    atomic_write_bytes(path, data)      # the common case of bytes already in memory

``file_sha256`` is the digest files that travel are checked with (training shards, an artifact's parts).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

_TEMP_NAME = re.compile(r"^\..+\.[0-9a-f]{12}\.tmp$")  # .<target name>.<12 hex>.tmp


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)  # fsync acts on the inode, so a fresh read-only descriptor suffices
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    """Flush a written file's data to disk."""
    _fsync(path)


def fsync_dir(directory: Path) -> None:
    """Flush a folder's entries: a rename is durable only once its folder is synced."""
    _fsync(directory)


@contextlib.contextmanager
def atomic_write(path: str | Path, *, fsync: bool = True) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; when the block succeeds, it replaces ``path`` atomically.

    The caller writes the temporary path (and closes it) inside the block. On success the file is fsynced,
    renamed over ``path`` and the folder fsynced (``fsync=False`` skips both syncs: still atomic against a
    crashed process, not against a power cut). On any exception, including ``KeyboardInterrupt``, the
    temporary file is removed and ``path`` is untouched. The temporary name is unique per call (not just
    per process), so two threads writing the same target never share one; it is created with the default
    permissions (umask applies), like any file ``open`` creates.
    """
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp")  # matches _TEMP_NAME
    try:
        yield tmp
        if not tmp.is_file():
            raise FileNotFoundError(f"atomic_write: the block did not write {tmp.name} for {target}")
        if fsync:
            fsync_file(tmp)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if fsync:
        fsync_dir(target.parent)


def atomic_write_bytes(path: str | Path, data: bytes, *, fsync: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically (see :func:`atomic_write`)."""
    with atomic_write(path, fsync=fsync) as tmp:
        tmp.write_bytes(data)


def stale_temporaries(directory: Path) -> list[Path]:
    """Temporary files :func:`atomic_write` left in ``directory`` (a writer killed before it could clean up).

    They were never renamed into place, so no reader counts them; a job resuming in that folder may delete
    them (only while no other writer is active there, e.g. under the folder's lock).
    """
    return sorted(p for p in directory.iterdir() if _TEMP_NAME.match(p.name) and p.is_file())


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(2**20), b""):
            h.update(block)
    return h.hexdigest()
