"""The C-STORE receiver (``radscreen dicom-listen``): a pynetdicom Storage SCP in front of the spool and the worker.

What it accepts, and what it answers otherwise:

- **Association.** Called AE title must be ours (``RADSCREEN_PACS_AE_TITLE``); when ``allowed_calling_aets`` is
  set, the calling AE title must be in it (else the association is rejected, reason "calling AE title not
  recognised"). At most ``max_associations`` at once (more are rejected: "local limit exceeded"); ACSE, DIMSE and
  network timeouts bound a silent or slow peer.
- **Presentation contexts.** Ophthalmic Photography 8 and 16 bit storage with the transfer syntaxes the decoder
  reads (Explicit / Implicit VR Little Endian, JPEG Baseline), and Verification (C-ECHO). Any other abstract
  syntax is rejected as "abstract syntax not supported", any other transfer syntax as "transfer syntax not
  supported": the sender learns it before a byte of pixel data travels.
- **C-STORE.** The data set is bounded and checked (``service.pacs.receive``: its size, SOP class, syntax, UIDs,
  laterality and the study's number of photographs; a refusal answers 0x0122 / 0xC122 / 0xA900 / 0xC000 /
  0xA700), then written to the spool durably (fsync and atomic rename) **before** the success status 0x0000 is
  returned; a disk failure answers 0xA700 (out of resources) and the sender keeps its copy. A receiver killed
  at any moment has therefore acknowledged only what is on disk.

Grading and delivery run in the same process (``service.pacs.worker``) on the service's model host. pynetdicom's
and pydicom's loggers are silenced: at their debug level they print data sets, identifiers included.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any

from service.metrics import ServiceMetrics
from service.pacs.delivery import quiet_pynetdicom
from service.pacs.intake import CANNOT_UNDERSTAND, OP_SOP_CLASSES, SUCCESS, TRANSFER_SYNTAXES, Refused
from service.pacs.receive import receive
from service.pacs.settings import PacsSettings
from service.pacs.store import Spool

logger = logging.getLogger(__name__)
VERIFICATION = "1.2.840.10008.1.1"


class StoreSCP:
    """The Storage SCP of the module docstring, writing into ``spool``."""

    def __init__(self, settings: PacsSettings, spool: Spool, metrics: ServiceMetrics, *, max_bytes: int,
                 max_instances: int) -> None:
        self.settings = settings
        self.spool = spool
        self.metrics = metrics
        self.max_bytes, self.max_instances = max_bytes, max_instances
        self.server: Any = None

    def on_store(self, event: Any) -> int:
        """EVT_C_STORE: check, store durably, then (only then) answer success."""
        try:
            data = event.encoded_dataset(include_meta=True)
        except Exception:  # a data set pynetdicom cannot even re-frame
            self.metrics.pacs_instances.labels(path="cstore", result="refused").inc()
            return CANNOT_UNDERSTAND
        verdict = receive(data, self.spool, max_bytes=self.max_bytes, max_instances=self.max_instances)
        if isinstance(verdict, Refused):
            self.metrics.pacs_instances.labels(path="cstore", result="refused").inc()
            logger.info("C-STORE refused with status 0x%04X: %s", verdict.status, verdict.reason)
            return verdict.status
        self.metrics.pacs_instances.labels(path="cstore", result="stored").inc()
        return SUCCESS

    def start(self) -> None:
        from pynetdicom import AE, evt

        quiet_pynetdicom()
        s = self.settings
        ae = AE(ae_title=s.ae_title)
        ae.maximum_associations = s.max_associations
        ae.acse_timeout, ae.dimse_timeout, ae.network_timeout = s.acse_timeout_s, s.dimse_timeout_s, s.network_timeout_s
        ae.require_called_aet = True
        ae.require_calling_aet = list(s.allowed_calling_aets)
        for sop_class in OP_SOP_CLASSES:
            ae.add_supported_context(sop_class, list(TRANSFER_SYNTAXES))
        ae.add_supported_context(VERIFICATION)
        self.server = ae.start_server((s.listen_host, s.listen_port), block=False,
                                      evt_handlers=[(evt.EVT_C_STORE, self.on_store)])
        logger.info("C-STORE receiver listening", extra={"ae_title": s.ae_title, "port": s.listen_port})

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server = None


async def serve_listener(service_settings: Any, settings: PacsSettings) -> None:
    """Receive, grade and deliver until SIGTERM/SIGINT: the body of ``radscreen dicom-listen``."""
    from service.model_host import ModelHost
    from service.pacs.delivery import archive_from
    from service.pacs.worker import PacsWorker

    assert settings.spool_dir is not None
    metrics = ServiceMetrics()
    spool = Spool(settings.spool_dir)
    host = ModelHost(service_settings, metrics)
    archive = archive_from(settings)
    if archive is None:
        logger.warning("no archive configured (RADSCREEN_PACS_ARCHIVE_URL / _ARCHIVE_HOST): results stay in the spool")
    worker = PacsWorker(spool, host, archive, settings, metrics)
    scp = StoreSCP(settings, spool, metrics, max_bytes=service_settings.max_upload_bytes,
                   max_instances=service_settings.max_exam_images)
    if settings.metrics_port is not None:
        from prometheus_client import start_http_server

        start_http_server(settings.metrics_port, addr=settings.listen_host, registry=metrics.registry)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    spool.clean_temporaries()  # before the first write: a partial file of a killed writer is no instance
    scp.start()  # instances are received (and kept) while the model still loads; OSError if the port is taken
    tasks = [asyncio.create_task(host.load(), name="radscreen-load"),
             asyncio.create_task(worker.run(), name="radscreen-pacs")]
    try:
        await stop.wait()
    finally:
        scp.stop()
        await host.stop(tasks)
