"""Reading one input file for the batch job: checked from ``stat`` before a byte is read.

A folder or manifest may name things that are not plain files: a FIFO called ``scan.jpg`` (reading it
blocks until a writer comes, i.e. forever), a device, a symlink loop (``stat`` fails with ``ELOOP``), or
a sparse 4 GiB file (reading it whole costs 4 GiB of memory before any size check). So the file is
``stat``-ed first: not a regular file, or larger than the upload limit, becomes an error row without
being opened. It is then opened non-blocking (a file swapped for a FIFO after the ``stat`` cannot
block either), checked again on the open descriptor, and at most ``max_bytes + 1`` bytes are read (or the
first ``head`` bytes, for a reader that needs only a file's header, e.g. grouping DICOM files by study).
Every read of an input file, for scoring or for grouping, goes through :func:`read_input_file`.
"""

from __future__ import annotations

import os
import stat

from service.batch.inputs import RowError
from service.batch.rows import FILE_NOT_FOUND, NOT_A_REGULAR_FILE, UNREADABLE_FILE

PAYLOAD_TOO_LARGE = "payload-too-large"  # the service's problem slug for the same refusal


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def _checked(st: os.stat_result, max_bytes: int) -> RowError | None:
    if not stat.S_ISREG(st.st_mode):
        return RowError(NOT_A_REGULAR_FILE, f"{_kind(st.st_mode)}, not an image file; it was not opened")
    if st.st_size > max_bytes:
        return RowError(PAYLOAD_TOO_LARGE, f"the file is {st.st_size} bytes; the limit is {max_bytes} bytes")
    return None


def read_input_file(file: str, max_bytes: int, *, head: int | None = None) -> bytes | RowError:
    """The bytes of ``file`` (its first ``head`` bytes, when given), or why it is not read (missing, not a
    regular file, too large, unreadable). The size limit applies to the whole file either way."""
    try:
        refusal = _checked(os.stat(file), max_bytes)
        if refusal is not None:
            return refusal
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return RowError(FILE_NOT_FOUND, "the file does not exist")
    except OSError as exc:  # ELOOP (a symlink loop), EACCES, ...
        return RowError(UNREADABLE_FILE, f"the file cannot be read ({type(exc).__name__}: {exc.strerror})")
    try:
        refusal = _checked(os.fstat(fd), max_bytes)
        if refusal is not None:
            return refusal
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(max_bytes + 1 if head is None else min(head, max_bytes + 1))
    except OSError as exc:
        return RowError(UNREADABLE_FILE, f"the file cannot be read ({type(exc).__name__}: {exc.strerror})")
    finally:
        os.close(fd)
    if len(data) > max_bytes:  # grew after the stat
        return RowError(PAYLOAD_TOO_LARGE, f"the file is larger than the limit of {max_bytes} bytes")
    return data
