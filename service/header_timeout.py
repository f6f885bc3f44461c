"""A header-read timeout for uvicorn's HTTP/1.1 protocol, which has none of its own.

uvicorn times out an idle keep-alive connection but, once the first byte of a request has arrived,
waits forever for the rest of its headers: a client sending one header byte every 10 s holds a
connection (and a file descriptor) indefinitely ("slowloris"). :class:`HeaderTimeoutH11Protocol` starts
a timer when a request's first bytes arrive (on a new connection, or after the previous answer) and
cancels it when h11 has parsed the whole request head; if the timer fires first the client gets a
``408`` problem and the connection is closed. The body has its own limits (``service.middleware``).
Behind a reverse proxy the proxy's own header timeout (nginx ``client_header_timeout``) applies
first; see docs/deploy.md.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from service.errors import PROBLEM_MEDIA_TYPE, problem_body

HEADER_TIMEOUT_ENV = "RADSCREEN_HEADER_TIMEOUT_S"
HEADER_TIMEOUT_S = 10.0  # its default


def timeout_response(seconds: float) -> bytes:
    """The raw 408 sent when the request head did not arrive in time (no request id exists yet)."""
    body = json.dumps(problem_body(
        "request-timeout", 408,
        f"The request headers did not arrive within {seconds:g} s (RADSCREEN_HEADER_TIMEOUT_S).", "")).encode()
    head = ("HTTP/1.1 408 Request Timeout\r\n"
            f"content-type: {PROBLEM_MEDIA_TYPE}\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n")
    return head.encode("latin-1") + body


class HeaderTimeoutH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request head.

    The deadline is ``RADSCREEN_HEADER_TIMEOUT_S``, validated by ``Settings`` and exported by
    ``radscreen serve`` before uvicorn starts (worker processes inherit it), read once per connection.
    """

    _header_timer: asyncio.TimerHandle | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout = float(os.environ.get(HEADER_TIMEOUT_ENV, HEADER_TIMEOUT_S))

    def data_received(self, data: bytes) -> None:
        between_requests = self.cycle is None or self.cycle.response_complete
        if self._header_timer is None and between_requests:
            self._header_timer = self.loop.call_later(self.header_timeout, self._header_timed_out)
        before = self.cycle
        super().data_received(data)
        if self.cycle is not before:  # h11 parsed a whole request head: a new cycle began
            self._cancel_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timed_out(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.write(timeout_response(self.header_timeout))
            self.transport.close()
