"""The C-STORE receiver (``radscreen dicom-listen``): a pynetdicom Storage SCP in front of the spool and the worker.

What it accepts, and what it answers otherwise:

- **Association.** Called AE title must be ours (``RADSCREEN_PACS_AE_TITLE``); when ``allowed_calling_aets`` is
  set, the calling AE title must be in it (else the association is rejected, reason "calling AE title not
  recognised"). At most ``max_associations`` at once, and at most ``max_associations_per_ae`` of them from one
  calling AE title: more are rejected (rejected-transient, "local limit exceeded"), so one caller holding its
  associations open (idle, or C-ECHO now and then) cannot keep the real PACS out. ACSE, DIMSE and network
  timeouts bound a silent or slow peer (``network_timeout_s``: no PDU for that long aborts the association; a
  C-ECHO now and then keeps one open, within its AE title's slots).
- **AE titles.** Leading and trailing spaces of an AE title are not significant (PS3.5 6.2 AE, PS3.8 9.3.2), so
  the calling AE title is compared with them stripped, in the allow-list and in the slots per AE title alike:
  " ORTHANC" is ORTHANC, accepted where ORTHANC is and sharing its slots (padding buys no extra one). Refusing a
  padded title instead would turn away a conformant peer, and would not stop a caller that simply sends the
  title unpadded. AE titles are what the peer says it is, not an authentication: the network (and the
  allow-list) decides who may connect.
- **Presentation contexts.** Ophthalmic Photography 8 and 16 bit storage with the transfer syntaxes the decoder
  reads (Explicit / Implicit VR Little Endian, JPEG Baseline), and Verification (C-ECHO). Any other abstract
  syntax is rejected as "abstract syntax not supported", any other transfer syntax as "transfer syntax not
  supported": the sender learns it before a byte of pixel data travels.
- **Bounds while the bytes arrive.** Every PDU's length is read from its header before its body: a P-DATA-TF PDU
  longer than the maximum we announce (``MAX_PDU_BYTES``), or any other PDU over ``CONTROL_PDU_BYTES``, is a
  protocol violation and its body is never read. The data set fragments of the message in progress are counted
  as each PDU arrives: past ``max_bytes`` (``RADSCREEN_MAX_UPLOAD_BYTES``, passed by ``serve_listener``) the
  instance could never be stored anyway, so the PDU that crosses the bound is not taken in, the association is
  aborted (an A-ABORT PDU, source "service user" for the data set, "service provider" with reason "invalid PDU
  parameter value" for the PDU) and the connection closed: the sender sees its association aborted (or, if it
  is still writing, its connection reset, which may discard the A-ABORT), never a status, and the receiver
  reads no further. A command set over ``CONTROL_PDU_BYTES`` is aborted the same way.
  Data sets travel to a file, not memory (pynetdicom's ``STORE_RECV_CHUNKED_DATASET``, a temporary file in the
  process's temp dir, ``tempfile.gettempdir()``): an association holds about a PDU in memory and at most
  ``max_bytes`` on disk, the receiver at most ``max_associations`` x ``max_bytes`` on disk. The file is removed
  once the C-STORE is answered or, for a transfer that never completed (aborted, cut or timed out), once the
  association has ended; only a receiver killed mid-transfer (SIGKILL) leaves one behind (``tmp*.dcm``).
- **C-STORE.** The data set is bounded and checked (``service.pacs.receive``: its size, SOP class, syntax, UIDs,
  laterality and the study's number of photographs; a refusal answers 0x0122 / 0xC122 / 0xA900 / 0xC000 /
  0xA700), then written to the spool durably (fsync and atomic rename) **before** the success status 0x0000 is
  returned; a disk failure answers 0xA700 (out of resources) and the sender keeps its copy. A data set within
  the bound whose file meta takes the instance past it answers 0xA700 before it is read; one within it is read
  into memory for the checks, so at most ``max_associations`` instances of ``max_bytes`` are in memory at once.
  A receiver killed at any moment has therefore acknowledged only what is on disk.

Grading and delivery run in the same process (``service.pacs.worker``) on the service's model host. pynetdicom's
and pydicom's loggers are silenced: at their debug level they print data sets, identifiers included; pydicom's
warnings, which quote a malformed value, are ignored in the receiver's process. A refusal or abort is logged with
its reason and sizes, never an identifier or a UID.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import struct
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from pynetdicom.transport import AssociationSocket, RequestHandler

from service.metrics import ServiceMetrics
from service.pacs.delivery import quiet_pynetdicom
from service.pacs.intake import (
    CANNOT_UNDERSTAND,
    OP_SOP_CLASSES,
    OUT_OF_RESOURCES,
    SUCCESS,
    TRANSFER_SYNTAXES,
    Refused,
)
from service.pacs.receive import receive
from service.pacs.settings import PacsSettings
from service.pacs.store import Spool

logger = logging.getLogger(__name__)
VERIFICATION = "1.2.840.10008.1.1"
MAX_PDU_BYTES = 256 * 1024  # the P-DATA-TF length we announce: the memory an association holds is about this
CONTROL_PDU_BYTES = 64 * 1024  # any other PDU (an A-ASSOCIATE-RQ of 128 contexts is ~15 KiB), and a command set
P_DATA_TF = 0x04
PDU_TYPES = range(0x01, 0x08)
# A-ABORT (PS3.8 9.3.8): source 0 = service user (our application refuses the data set), 2 = service provider
# (the PDU breaks the protocol); reason 6 = invalid PDU parameter value (significant with source 2 only).
ABORT_BY_USER, ABORT_BY_PROVIDER, INVALID_PDU_PARAMETER = 0x00, 0x02, 0x06
# A-ASSOCIATE-RJ (PS3.8 9.3.4): rejected-transient, by the service provider (presentation), local limit exceeded.
REJECTED_TRANSIENT, PRESENTATION_PROVIDER, LOCAL_LIMIT_EXCEEDED = 0x02, 0x03, 0x02


def calling_ae_title(assoc: Any) -> str:
    """The calling AE title of ``assoc``'s request as compared here: leading and trailing spaces stripped."""
    return str(assoc.requestor.primitive.calling_ae_title).strip()


class AssociationSlots:
    """The associations admitted per calling AE title, ``per_ae`` at most; a slot frees when its association ends.

    Admission happens under one lock, so two requests of one AE arriving together cannot both take its last slot.
    """

    def __init__(self, per_ae: int) -> None:
        self.per_ae = per_ae
        self._lock = threading.Lock()
        self._held: dict[Any, str] = {}  # Association (a thread) -> its calling AE title

    def admit(self, assoc: Any, ae_title: str) -> bool:
        with self._lock:
            self._held = {a: t for a, t in self._held.items()
                          if a.is_alive() and not (a.is_released or a.is_aborted or a.is_rejected)}
            if sum(t == ae_title for t in self._held.values()) >= self.per_ae:
                return False
            self._held[assoc] = ae_title
            return True


@dataclass(frozen=True)
class _Bounds:
    max_bytes: int  # data set bytes of one message
    on_abort: Callable[[str], None]


class _BoundedSocket(AssociationSocket):
    """pynetdicom's acceptor socket, reading each PDU's header before its body and counting what arrives.

    pynetdicom reads a PDU as ``recv(6)`` (type, length) then ``recv(length)``; this class sees both, so it refuses
    an oversized PDU before its body and a data set past its bound before its last PDU is handed on. Refusing
    sends the A-ABORT, closes the connection and answers the read with nothing, which pynetdicom takes as the
    transport closed (A-P-ABORT to the association, which then ends).
    """

    _bounds: _Bounds
    _next_is_header: bool
    _pdu_type: int
    _command_bytes: int
    _dataset_bytes: int

    @classmethod
    def adopt(cls, sock: AssociationSocket, bounds: _Bounds) -> None:
        """Make pynetdicom's freshly built socket this class (built by ``RequestHandler._create_association``,
        which also queues its transport event, so it is converted in place rather than built again)."""
        sock.__class__ = cls
        assert isinstance(sock, _BoundedSocket)
        sock._bounds = bounds
        sock._next_is_header, sock._pdu_type, sock._command_bytes, sock._dataset_bytes = True, 0, 0, 0

    def recv(self, nr_bytes: int) -> bytearray:
        if self.socket is None:
            return bytearray()
        if self._next_is_header:
            data = super().recv(nr_bytes)
            if len(data) == 6:
                pdu_type, _, length = struct.unpack(">BBL", data)
                limit = MAX_PDU_BYTES if pdu_type == P_DATA_TF else CONTROL_PDU_BYTES
                if length > limit:
                    return self._refuse(ABORT_BY_PROVIDER, INVALID_PDU_PARAMETER,
                                        f"a PDU of {length} bytes (at most {limit})")
                self._next_is_header = pdu_type not in PDU_TYPES  # an unknown type: pynetdicom reads no body
                self._pdu_type = pdu_type
            return data
        self._next_is_header = True
        data = super().recv(nr_bytes)
        if self._pdu_type == P_DATA_TF and len(data) == nr_bytes:
            reason = self._count(data)
            if reason is not None:
                return self._refuse(ABORT_BY_USER, 0x00, reason)
        return data

    def _count(self, body: bytearray) -> str | None:
        """Add the P-DATA-TF ``body``'s fragments to the message in progress; the reason to refuse, if any."""
        offset = 0
        while offset + 6 <= len(body):  # a PDV item: length (4), context ID (1), control header (1), fragment
            (item_length,) = struct.unpack_from(">L", body, offset)
            if item_length < 2 or offset + 4 + item_length > len(body):
                return None  # malformed: pynetdicom refuses the PDU itself (invalid PDU, A-ABORT)
            header, fragment = body[offset + 5], item_length - 2
            last = bool(header & 0x02)
            if header & 0x01:  # command set
                self._command_bytes += fragment
                if self._command_bytes > CONTROL_PDU_BYTES:
                    return f"a command set past {CONTROL_PDU_BYTES} bytes"
                self._command_bytes = 0 if last else self._command_bytes
            else:
                self._dataset_bytes += fragment
                if self._dataset_bytes > self._bounds.max_bytes:
                    return f"a data set past {self._bounds.max_bytes} bytes (RADSCREEN_MAX_UPLOAD_BYTES)"
                self._dataset_bytes = 0 if last else self._dataset_bytes
            offset += 4 + item_length
        return None

    def _refuse(self, source: int, reason: int, why: str) -> bytearray:
        from pynetdicom.pdu import A_ABORT_RQ

        abort = A_ABORT_RQ()
        abort.source, abort.reason_diagnostic = source, reason
        self.send(abort.encode())
        raw, self.socket = self.socket, None  # `ready` is False from now on: pynetdicom reads no more
        if raw is not None:
            with contextlib.suppress(OSError):
                raw.shutdown(socket.SHUT_RDWR)
            raw.close()
        self._bounds.on_abort(why)
        return bytearray()


def _discard_partial(assoc: Any) -> None:
    """Remove the temporary data set files of messages ``assoc`` never completed or never answered."""
    files = [getattr(assoc.dimse.message, "_data_set_file", None)]
    files += [getattr(primitive, "_dataset_file", None) for _, primitive in list(assoc.dimse.msg_queue.queue)]
    for file in files:
        if file is not None:
            with contextlib.suppress(OSError):
                file.close()
            Path(file.name).unlink(missing_ok=True)


class _BoundedRequestHandler(RequestHandler):
    """One connection: pynetdicom's association, with the bounded socket; its partial files removed at its end."""

    def __init__(self, request: Any, client_address: Any, server: Any, *, bounds: _Bounds,
                 linger_s: float) -> None:
        self._bounds, self._linger_s = bounds, linger_s
        super().__init__(request, client_address, server)

    def _create_association(self) -> Any:
        assoc = super()._create_association()
        assert assoc.dul.socket is not None  # set by pynetdicom's _create_association
        _BoundedSocket.adopt(assoc.dul.socket, self._bounds)
        return assoc

    def handle(self) -> None:
        from pynetdicom import evt

        assoc = self._create_association()
        evt.trigger(assoc, evt.EVT_CONN_OPEN, {"address": self.client_address})
        assoc.start()
        assoc.join()
        assoc.dul.join(timeout=self._linger_s)  # the DUL writes the data set file; it stops soon after
        _discard_partial(assoc)


class StoreSCP:
    """The Storage SCP of the module docstring, writing into ``spool``."""

    def __init__(self, settings: PacsSettings, spool: Spool, metrics: ServiceMetrics, *, max_bytes: int,
                 max_instances: int) -> None:
        self.settings = settings
        self.spool = spool
        self.metrics = metrics
        self.max_bytes, self.max_instances = max_bytes, max_instances
        self.slots = AssociationSlots(settings.max_associations_per_ae)
        self.server: Any = None
        self._chunked_before = False

    def _refused(self, status: int, reason: str) -> int:
        self.metrics.pacs_instances.labels(path="cstore", result="refused").inc()
        logger.info("C-STORE refused with status 0x%04X: %s", status, reason)
        return status

    def on_store(self, event: Any) -> int:
        """EVT_C_STORE: check, store durably, then (only then) answer success."""
        try:
            path = Path(event.dataset_path)
            size = path.stat().st_size
        except Exception:  # no data set, or one pynetdicom could not write
            return self._refused(CANNOT_UNDERSTAND, "no data set received")
        if size > self.max_bytes:  # the data set was within the bound, its file meta takes it past
            return self._refused(OUT_OF_RESOURCES, f"instance larger than {self.max_bytes} bytes "
                                 "(RADSCREEN_MAX_UPLOAD_BYTES)")
        verdict = receive(path.read_bytes(), self.spool, max_bytes=self.max_bytes, max_instances=self.max_instances)
        if isinstance(verdict, Refused):
            return self._refused(verdict.status, verdict.reason)
        self.metrics.pacs_instances.labels(path="cstore", result="stored").inc()
        return SUCCESS

    def on_requested(self, event: Any) -> None:
        """EVT_REQUESTED: reject an association over its calling AE title's slots ("local limit exceeded")."""
        assoc = event.assoc
        title = calling_ae_title(assoc)
        allowed = self.settings.allowed_calling_aets
        if allowed and title not in allowed:
            return  # pynetdicom rejects it next: "calling AE title not recognised"
        if not self.slots.admit(assoc, title):
            logger.info("association rejected: its calling AE title holds its %d associations "
                        "(RADSCREEN_PACS_MAX_ASSOCIATIONS_PER_AE)", self.slots.per_ae)
            assoc.acse.send_reject(REJECTED_TRANSIENT, PRESENTATION_PROVIDER, LOCAL_LIMIT_EXCEEDED)
            assoc.kill()  # as pynetdicom does after its own rejections: the A-ASSOCIATE-RJ is sent, the DUL stops

    def on_abort(self, reason: str) -> None:
        """A transfer refused while it arrived (module docstring): counted and logged, no identifier."""
        self.metrics.pacs_instances.labels(path="cstore", result="refused").inc()
        logger.warning("C-STORE association aborted: %s", reason)

    def start(self) -> None:
        from pynetdicom import AE, _config, evt
        from pynetdicom.transport import ThreadedAssociationServer

        quiet_pynetdicom()
        # pydicom warns of a malformed value by quoting it (a UID, a name), also from pynetdicom's threads as it
        # decodes a command set: in the receiver such warnings never reach the log (intake records its own)
        warnings.filterwarnings("ignore", category=UserWarning, module=r"pydicom(\.|$)")
        # data sets to a temporary file, not memory (module docstring); pynetdicom's setting is the process's
        self._chunked_before, _config.STORE_RECV_CHUNKED_DATASET = _config.STORE_RECV_CHUNKED_DATASET, True
        s = self.settings
        ae = AE(ae_title=s.ae_title)
        ae.maximum_associations = s.max_associations
        ae.maximum_pdu_size = MAX_PDU_BYTES
        ae.acse_timeout, ae.dimse_timeout, ae.network_timeout = s.acse_timeout_s, s.dimse_timeout_s, s.network_timeout_s
        ae.require_called_aet = True
        ae.require_calling_aet = list(s.allowed_calling_aets)
        for sop_class in OP_SOP_CLASSES:
            ae.add_supported_context(sop_class, list(TRANSFER_SYNTAXES))
        ae.add_supported_context(VERIFICATION)
        handler = partial(_BoundedRequestHandler, bounds=_Bounds(self.max_bytes, self.on_abort),
                          linger_s=s.acse_timeout_s + 5)
        server = ae.make_server((s.listen_host, s.listen_port), server_class=ThreadedAssociationServer,
                                request_handler=handler,
                                evt_handlers=[(evt.EVT_C_STORE, self.on_store), (evt.EVT_REQUESTED, self.on_requested)])
        server.daemon_threads = True  # a connection's thread waits for its association: never block shutdown on it
        ae._servers.append(server)  # as AE.start_server does: the server's shutdown() takes itself off this list
        threading.Thread(target=server.serve_forever, name="radscreen-cstore", daemon=True).start()
        self.server = server
        logger.info("C-STORE receiver listening", extra={"ae_title": s.ae_title, "port": s.listen_port})

    def stop(self) -> None:
        """Stop accepting associations (those in progress run to their end) and restore pynetdicom's setting."""
        from pynetdicom import _config

        if self.server is not None:
            self.server.shutdown()
            self.server = None
            _config.STORE_RECV_CHUNKED_DATASET = self._chunked_before


async def serve_listener(service_settings: Any, settings: PacsSettings) -> None:
    """Receive, grade and deliver until SIGTERM/SIGINT: the body of ``radscreen dicom-listen``."""
    from service.model_host import ModelHost
    from service.pacs.worker import start_worker

    assert settings.spool_dir is not None
    metrics = ServiceMetrics()
    spool = Spool(settings.spool_dir)
    host = ModelHost(service_settings, metrics)
    scp = StoreSCP(settings, spool, metrics, max_bytes=service_settings.max_upload_bytes,
                   max_instances=service_settings.max_exam_images)
    if settings.metrics_port is not None:
        from prometheus_client import start_http_server

        start_http_server(settings.metrics_port, addr=settings.listen_host, registry=metrics.registry)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.create_task(host.load(), name="radscreen-load"),
             start_worker(spool, host, settings, metrics)]  # cleans the spool: before the first write
    try:
        scp.start()  # instances are received (and kept) while the model still loads; OSError if the port is taken
        await stop.wait()
    finally:
        scp.stop()
        await host.stop(tasks)
