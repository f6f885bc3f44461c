"""A real uvicorn server on 127.0.0.1 (random free port) running in a background thread of the test process.

For tests that pass ``Settings`` or a ``scorer_factory`` directly (tests/service) and for
benchmarks/load_service.py ``--in-process``; ``tests.helpers.service_process`` starts a separate process.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from service.app import create_app
from service.model_host import ScorerFactory
from service.pacs.settings import PacsSettings
from service.settings import Settings


def settings_for(artifact: Path, **overrides: Any) -> Settings:
    """Service settings for the tests: ``artifact``, CPU, batches of 8, 256 KiB uploads, then ``overrides``."""
    base: dict[str, Any] = {
        "model_dir": artifact,
        "max_batch_size": 8,
        "max_wait_ms": 30.0,
        "max_upload_bytes": 256 * 1024,
        "device": "cpu",
    }
    return Settings(**{**base, **overrides})


@contextmanager
def live_server(
    settings: Settings, *, scorer_factory: ScorerFactory | None = None, wait_ready: bool = True,
    pacs: PacsSettings | None = None,
) -> Iterator[str]:
    """Yield the base URL of a running server; readiness is awaited unless ``wait_ready=False``; ``pacs``
    configures DICOMweb (``create_app``)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = create_app(settings, scorer_factory=scorer_factory, pacs=pacs)
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        if wait_ready:
            wait_until_ready(base)
        yield base
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


def wait_until_ready(base: str, timeout: float = 60.0) -> None:
    """Poll ``{base}/readyz`` until it answers 200 (the model is loaded); raise after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if httpx.get(f"{base}/readyz").status_code == 200:
            return
        time.sleep(0.05)
    raise RuntimeError(f"{base} never became ready")
