"""A header-read timeout for uvicorn's HTTP/1.1 protocol, which has none of its own.

uvicorn times out an idle keep-alive connection but, once the first byte of a request has arrived,
waits forever for the rest of its headers: a client sending one header byte every 10 s holds a
connection (and a file descriptor) indefinitely ("slowloris"). :class:`HeaderTimeoutH11Protocol` starts
a timer when a request's first bytes arrive (on a new connection, or after the previous answer) and
cancels it when h11 has parsed the whole request head; if the timer fires first the client gets a
``408`` problem and the connection is closed. The body has its own limits (``service.http.middleware``).
Behind a reverse proxy the proxy's own header timeout (nginx ``client_header_timeout``) applies
first; see docs/deploy.md.

The same protocol refuses an **obs-folded** request head (a header line continued on the next line after a
space or tab, RFC 9112 §5.2): h11 would unfold it silently, so ``Transfer-Encoding:\r\n chunked`` reaches
the app as an ordinary ``Transfer-Encoding: chunked`` while a proxy in front may have read no such header;
that disagreement is how request smuggling begins. The raw head is checked as it arrives (up to its blank
line) and a folded one is answered ``400`` and the connection closed before h11 parses it. A request head
that arrives pipelined in the same packet as the end of the previous request's body is not seen here; the
proxy's own rule applies to it (docs/deploy.md).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from service.http.errors import PROBLEM_MEDIA_TYPE, problem_body
from service.http.security_headers import response_headers

HEADER_TIMEOUT_ENV = "RADSCREEN_HEADER_TIMEOUT_S"
HEADER_TIMEOUT_S = 10.0  # its default


HEAD_END = re.compile(rb"\n\r?\n")  # h11 accepts bare LF line ends too
OBS_FOLD = re.compile(rb"\n[ \t]")  # a line that starts with a space or a tab continues the previous one
MAX_HEAD_BYTES = 64 * 1024  # h11 refuses a longer head itself (431); nothing beyond is buffered here


def raw_problem(status: int, reason: str, slug: str, detail: str) -> bytes:
    """A whole raw HTTP/1.1 problem+json answer that closes the connection (no request id exists yet), with the
    security headers every answer carries."""
    body = json.dumps(problem_body(slug, status, detail, "")).encode()
    security = "".join(f"{k.decode()}: {v.decode()}\r\n" for k, v in response_headers("/"))
    head = (f"HTTP/1.1 {status} {reason}\r\n"
            f"content-type: {PROBLEM_MEDIA_TYPE}\r\ncontent-length: {len(body)}\r\nconnection: close\r\n"
            f"{security}\r\n")
    return head.encode("latin-1") + body


def timeout_response(seconds: float) -> bytes:
    """The raw 408 sent when the request head did not arrive in time."""
    return raw_problem(408, "Request Timeout", "request-timeout",
                       f"The request headers did not arrive within {seconds:g} s (RADSCREEN_HEADER_TIMEOUT_S).")


OBS_FOLD_RESPONSE = raw_problem(
    400, "Bad Request", "bad-request",
    "The request head has a folded header line (a line starting with a space or a tab, RFC 9112 §5.2 "
    "obs-fold); send each header on one line.")


class HeaderTimeoutH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request head.

    The deadline is ``RADSCREEN_HEADER_TIMEOUT_S``, validated by ``Settings`` and exported by
    ``radscreen serve`` before uvicorn starts (worker processes inherit it), read once per connection.
    """

    _header_timer: asyncio.TimerHandle | None = None
    _head: bytes = b""  # the request head received so far, up to its blank line (obs-fold check)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout = float(os.environ.get(HEADER_TIMEOUT_ENV, HEADER_TIMEOUT_S))

    def data_received(self, data: bytes) -> None:
        between_requests = self.cycle is None or self.cycle.response_complete
        if self._header_timer is None and between_requests:
            self._header_timer = self.loop.call_later(self.header_timeout, self._header_timed_out)
        if between_requests and self._folded_head(data):
            self._cancel_header_timer()
            if not self.transport.is_closing():
                self.transport.write(OBS_FOLD_RESPONSE)
                self.transport.close()
            return
        before = self.cycle
        super().data_received(data)
        if self.cycle is not before:  # h11 parsed a whole request head: a new cycle began
            self._cancel_header_timer()

    def _folded_head(self, data: bytes) -> bool:
        """Add ``data`` to the head being received; True when that head has an obs-folded line."""
        head = self._head + data
        end = HEAD_END.search(head)
        folded = OBS_FOLD.search(head if end is None else head[:end.start()]) is not None
        self._head = head[:MAX_HEAD_BYTES] if end is None else b""
        return folded

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
