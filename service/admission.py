"""Admission by expected wait: refuse (503 + Retry-After) before decoding what would wait too long.

A bounded queue alone admits work that will wait far longer than any client should: 32 clients behind
one CPU model all get in and all wait ~30 s. Instead, every request is admitted or refused when it
arrives, before its images are decoded, on the wait it can expect:

    expected wait = (images already admitted and not yet scored + its own images) x seconds per image

where *seconds per image* is measured: the slower of the two pipeline stages, the batched forward
(``MicroBatcher``, forward time / batch size) and the decode pool (one image's decode / workers), both
running averages. Above ``max_queue_wait_s`` (``RADSCREEN_MAX_QUEUE_WAIT_S``) the request is
answered 503 ``overloaded`` with ``Retry-After`` = the seconds until the admitted work has drained below
the bound at the measured rate. A request that finds nothing pending is always admitted (an idle
service serves even an image slower than the bound), so the p99 of accepted requests stays near the
bound plus one request's own decode and forward.

**The reserved lane.** The PACS worker grades studies that the archive has already handed over: nobody retries
them for it, so HTTP clients that retry at once after a 503 must not be able to keep it out. Its requests go
through the reserved lane (``admit(..., reserved=True)``): one such request at a time is admitted whatever is
pending (its places still count, so HTTP requests see the wait it adds), and the micro-batcher keeps room in its
queue for one exam of it (``MicroBatcher(reserved=...)``). A second reserved request while one runs is admitted
like any other.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator

from service.batcher import Overloaded


class Admission:
    """Counts the images admitted and not yet answered; refuses a request whose expected wait is too long."""

    def __init__(self, max_wait_s: float, seconds_per_image: Callable[[], float]) -> None:
        self.max_wait_s = max_wait_s
        self._seconds_per_image = seconds_per_image
        self.pending = 0  # images admitted and not answered yet (decoding, queued or in a forward)
        self.reserved_busy = False  # a reserved-lane request is running

    def expected_wait(self, images: int) -> float:
        """Seconds until ``images`` more would be scored, at the measured rate."""
        return (self.pending + images) * self._seconds_per_image()

    @contextlib.contextmanager
    def admit(self, images: int, *, reserved: bool = False) -> Iterator[None]:
        """Hold ``images`` places while the request runs; raise :class:`Overloaded` when it would wait too long.
        ``reserved``: the reserved lane (module docstring), admitted whatever is pending while it is free."""
        lane = reserved and not self.reserved_busy
        wait = self.expected_wait(images)
        if self.pending and wait > self.max_wait_s and not lane:
            raise Overloaded(
                f"The service is overloaded: {self.pending} images are ahead, an expected wait of {wait:.1f} s "
                f"against the bound of {self.max_wait_s:g} s (RADSCREEN_MAX_QUEUE_WAIT_S); retry later.",
                retry_after=max(1, math.ceil(wait - self.max_wait_s)),
            )
        self.pending += images
        self.reserved_busy = self.reserved_busy or lane
        try:
            yield
        finally:
            self.pending -= images
            if lane:
                self.reserved_busy = False
