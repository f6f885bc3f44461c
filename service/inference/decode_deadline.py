"""A decode deadline and cancellation, checked while the decoder reads its input.

Pillow's JPEG and PNG decoders (and its other chunked ones) pull the encoded bytes through ``fp.read`` in a loop,
decoding as the data arrives (a progressive JPEG's scans are entropy-decoded chunk by chunk). The
decoder is given at most ``CHUNK`` bytes per read, and a :class:`DeadlineReader` checks, before each, the
wall-clock deadline and a cancellation flag (set when the client has gone): the decode then stops within
one chunk's work instead of running to the end for nobody. What a chunk can cost is bounded by the
limits checked before decoding (pixels, JPEG scans), so the deadline is a backstop, not the only bound.
"""

from __future__ import annotations

import io
import threading
import time

CHUNK = 16 * 1024  # bytes handed to the decoder per read: the granularity of the checks


class DecodeAborted(Exception):  # noqa: N818 (a reason, not an error of ours)
    """The decode was stopped: past its deadline (``timed_out``) or cancelled because nobody waits."""

    def __init__(self, detail: str, *, timed_out: bool) -> None:
        super().__init__(detail)
        self.timed_out = timed_out


class DecodeDeadline:
    """A deadline ``seconds`` from creation (in the decode worker) and a flag the request sets when it goes."""

    def __init__(self, seconds: float, cancelled: threading.Event | None = None) -> None:
        self.seconds = seconds
        self.expires = time.monotonic() + seconds
        self._cancelled = cancelled if cancelled is not None else threading.Event()

    def check(self) -> None:
        """Raise :class:`DecodeAborted` when cancelled or past the deadline."""
        if self._cancelled.is_set():
            raise DecodeAborted("The request was abandoned; its decode was stopped.", timed_out=False)
        if time.monotonic() > self.expires:
            raise DecodeAborted(
                f"Decoding took longer than {self.seconds:g} s (RADSCREEN_DECODE_TIMEOUT_S, or "
                "--decode-timeout-s of radscreen-batch score).", timed_out=True
            )


class DeadlineReader(io.BytesIO):
    """An in-memory file whose ``read`` checks ``deadline`` first (the decoder's chunk size is set apart,
    with ``decodermaxblock = CHUNK``: header parsers expect whole reads)."""

    def __init__(self, data: bytes, deadline: DecodeDeadline) -> None:
        super().__init__(data)
        self._deadline = deadline

    def read(self, size: int | None = -1, /) -> bytes:
        self._deadline.check()
        return super().read(size)
