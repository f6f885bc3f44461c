"""Sending a result to the archive: a DICOM C-STORE (pynetdicom SCU) or a DICOMweb STOW-RS POST.

``archive_from(settings)`` picks the client from ``RADSCREEN_PACS_*``: ``archive_url`` -> :class:`StowArchive`,
else ``archive_host`` -> :class:`CStoreArchive`, else None (results wait in the spool's outbox). ``send`` is
blocking (run it in a thread) and raises :class:`DeliveryFailed` with a reason free of identifiers when the archive
did not take the object. :class:`Backoff` spaces the retries of one result (doubling from ``retry_base_s`` up to
``retry_max_s``); nothing is ever dropped: a result leaves the outbox only once the archive acknowledged it.

The SR's SOP Instance UID is deterministic (``service.pacs.sr.result_uids``), so a result sent twice (the
acknowledgement lost in a crash) is the same object to the archive, which keeps one copy.
"""

from __future__ import annotations

import functools
import io
import logging
import urllib.error
import urllib.request
import uuid
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
        assoc = ae.associate(self.host, self.port, ae_title=self.called_ae)
        if not assoc.is_established:
            raise DeliveryFailed(f"no association with the archive ({self.called_ae}): refused, aborted or down")
        try:
            status = assoc.send_c_store(ds)
        finally:
            if assoc.is_established:
                assoc.release()
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
        request = urllib.request.Request(
            f"{self.base_url.rstrip('/')}/studies", data=body, method="POST",
            headers={"Content-Type": f'multipart/related; type="application/dicom"; boundary={boundary}',
                     "Accept": "application/dicom+json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                status = response.status
        except urllib.error.HTTPError as exc:
            raise DeliveryFailed(f"the archive answered HTTP {exc.code} to STOW-RS") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise DeliveryFailed(f"the archive is unreachable over STOW-RS ({type(exc).__name__})") from exc
        if status != 200:  # 202: stored with warnings or partly failed; one part, so only 200 is a whole store
            raise DeliveryFailed(f"the archive answered HTTP {status} to STOW-RS")


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
