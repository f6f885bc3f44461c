"""Sending a result to the archive: a DICOM C-STORE (pynetdicom SCU) or a DICOMweb STOW-RS POST.

``archive_from(settings)`` picks the client from ``RADSCREEN_PACS_*``: ``archive_url`` -> :class:`StowArchive`,
else ``archive_host`` -> :class:`CStoreArchive`, else None (results wait in the spool's outbox). ``send`` is
blocking (run it in a thread) and raises :class:`DeliveryFailed` with a reason free of identifiers when the archive
did not take the object. :class:`Backoff` spaces the retries of one result (doubling from ``retry_base_s`` up to
``retry_max_s``); nothing is ever dropped: a result leaves the outbox only once the archive acknowledged it.

**A deadline for the whole exchange.** ``timeout_s`` bounds one delivery from connecting to the archive's answer,
not each read: an archive that answers one byte every few seconds would pass every per-read timeout forever.
A watchdog (:class:`Deadline`) shuts the connection down when the deadline passes (the socket for STOW-RS, an
A-ABORT for C-STORE), which ends the blocked read at once; the delivery then fails with "no answer within N s".

The SR's SOP Instance UID is deterministic (``service.pacs.sr.result_uids``), so a result sent twice (the
acknowledgement lost in a crash) is the same object to the archive, which keeps one copy.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import io
import logging
import socket
import threading
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from service.pacs.settings import PacsSettings

# C-STORE statuses that mean "stored" (PS3.4 B.2.3): success and the warnings (coercion, elements discarded...)
STORED_STATUSES = frozenset({0x0000, 0xB000, 0xB006, 0xB007})


@functools.cache
def quiet_pynetdicom() -> None:
    """pynetdicom logs PDUs and data sets (identifiers included) at debug; none of it may reach our logs."""
    for name in ("pynetdicom", "pydicom"):
        log = logging.getLogger(name)
        log.propagate = False
        log.handlers[:] = [logging.NullHandler()]


class DeliveryFailed(Exception):  # noqa: N818 (an outcome of the archive, not a bug)
    """The archive did not acknowledge the object (reason in plain words, no identifier)."""


class Deadline:
    """Calls ``cut`` once ``seconds`` have passed, unless the exchange ended first (``with Deadline(...)``)."""

    def __init__(self, seconds: float, cut: Callable[[], None]) -> None:
        self.seconds = seconds
        self.passed = False
        self._cut = cut
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def _fire(self) -> None:
        self.passed = True
        with contextlib.suppress(Exception):  # the connection may be gone already
            self._cut()

    def __enter__(self) -> Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def failure(self) -> DeliveryFailed:
        return DeliveryFailed(f"no answer from the archive within the deadline of {self.seconds:g} s")


class Archive(Protocol):
    name: str

    def send(self, data: bytes) -> None: ...


@dataclass
class CStoreArchive:
    """C-STORE SCU to ``called_ae``@``host``:``port``, calling as ``calling_ae``."""

    host: str
    port: int
    called_ae: str
    calling_ae: str
    timeout_s: float = 30.0
    name: str = "cstore"

    def send(self, data: bytes) -> None:
        import pydicom
        from pynetdicom import AE

        quiet_pynetdicom()
        ds = pydicom.dcmread(io.BytesIO(data))
        ae = AE(ae_title=self.calling_ae)
        ae.acse_timeout = ae.dimse_timeout = ae.network_timeout = self.timeout_s
        ae.connection_timeout = self.timeout_s
        ae.add_requested_context(ds.SOPClassUID, ds.file_meta.TransferSyntaxUID)
        holder: dict[str, object] = {}

        def abort() -> None:
            assoc = holder.get("assoc")
            if assoc is not None:
                assoc.abort()  # type: ignore[attr-defined]

        with Deadline(self.timeout_s, abort) as deadline:
            assoc = ae.associate(self.host, self.port, ae_title=self.called_ae)
            holder["assoc"] = assoc
            if deadline.passed:
                assoc.abort()
                raise deadline.failure()
            if not assoc.is_established:
                raise DeliveryFailed(f"no association with the archive ({self.called_ae}): refused, aborted or down")
            try:
                status = assoc.send_c_store(ds)
            finally:
                if assoc.is_established:
                    assoc.release()
            if deadline.passed:
                raise deadline.failure()
        code = int(status.Status) if status and "Status" in status else None
        if code not in STORED_STATUSES:
            raise DeliveryFailed("the archive answered no status" if code is None
                                 else f"the archive answered C-STORE status 0x{code:04X}")


@dataclass
class StowArchive:
    """STOW-RS client: POST ``<base_url>/studies`` with one ``application/dicom`` part."""

    base_url: str
    timeout_s: float = 30.0
    name: str = "stow"

    def send(self, data: bytes) -> None:
        boundary = uuid.uuid4().hex
        body = (f"--{boundary}\r\nContent-Type: application/dicom\r\n\r\n".encode() + data
                + f"\r\n--{boundary}--\r\n".encode())
        url = urllib.parse.urlsplit(f"{self.base_url.rstrip('/')}/studies")
        headers = {"Content-Type": f'multipart/related; type="application/dicom"; boundary={boundary}',
                   "Accept": "application/dicom+json", "Content-Length": str(len(body))}
        try:
            with _connection(url, self.timeout_s) as conn, Deadline(self.timeout_s, lambda: _shut(conn)) as deadline:
                try:
                    conn.request("POST", url.path + (f"?{url.query}" if url.query else ""), body=body,
                                 headers=headers)
                    response = conn.getresponse()
                    response.read()
                    status = response.status
                except (OSError, http.client.HTTPException) as exc:
                    if deadline.passed:
                        raise deadline.failure() from exc
                    raise DeliveryFailed(f"the archive is unreachable over STOW-RS ({type(exc).__name__})") from exc
                if deadline.passed:
                    raise deadline.failure()
        except ValueError as exc:  # an unusable URL (scheme, port)
            raise DeliveryFailed(f"the archive URL cannot be used ({exc})") from exc
        if status != 200:  # 202: stored with warnings or partly failed; one part, so only 200 is a whole store
            raise DeliveryFailed(f"the archive answered HTTP {status} to STOW-RS")


@contextlib.contextmanager
def _connection(url: urllib.parse.SplitResult, timeout_s: float) -> Iterator[http.client.HTTPConnection]:
    """An HTTP(S) connection to the URL's host, each blocking call bounded by ``timeout_s`` too."""
    if url.scheme == "https":
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(url.hostname or "", url.port,
                                                                      timeout=timeout_s)
    elif url.scheme == "http":
        conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=timeout_s)
    else:
        raise ValueError(f"scheme {url.scheme!r} is not http or https")
    try:
        yield conn
    finally:
        conn.close()


def _shut(conn: http.client.HTTPConnection) -> None:
    """End a blocked send or read at once (closing alone does not wake a thread blocked on the socket)."""
    if conn.sock is not None:
        conn.sock.shutdown(socket.SHUT_RDWR)


def archive_from(settings: PacsSettings) -> Archive | None:
    """The configured archive client, or None when none is configured."""
    if settings.archive_url:
        return StowArchive(settings.archive_url, settings.archive_timeout_s)
    if settings.archive_host:
        return CStoreArchive(settings.archive_host, settings.archive_port, settings.archive_ae_title,
                             settings.ae_title, settings.archive_timeout_s)
    return None


@dataclass
class Backoff:
    """Per result: when it may be tried next (monotonic seconds) and how many tries failed."""

    base_s: float
    max_s: float
    failures: dict[str, int] = field(default_factory=dict)
    next_try: dict[str, float] = field(default_factory=dict)

    def due(self, key: str, now: float) -> bool:
        return now >= self.next_try.get(key, 0.0)

    def failed(self, key: str, now: float) -> float:
        """Record a failure; returns the delay before the next try."""
        n = self.failures.get(key, 0)
        self.failures[key] = n + 1
        delay = min(self.max_s, self.base_s * 2 ** min(n, 30))
        self.next_try[key] = now + delay
        return delay

    def succeeded(self, key: str) -> None:
        self.failures.pop(key, None)
        self.next_try.pop(key, None)
