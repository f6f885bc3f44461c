"""A real Radial Screen service process for end-to-end tests: uvicorn on 127.0.0.1 with the app factory.

Used by the Prometheus scrape and container-image tests (tests/deploy) and by the dashboard and FHIR
endpoint tests (tests/service). The server is a separate process started with the app factory, exactly as
``uvicorn --factory service.app:create_app`` runs it in production, configured through ``RADSCREEN_*``
environment variables; it is always stopped when the context exits. (``support.live_server`` runs
uvicorn in a thread of the test process instead, for tests that need the app object or many quick starts.)
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from support.processes import ROOT, free_port, running_process, wait_until_ready


@contextlib.contextmanager
def running_service(
    model_dir: Path, log_path: Path, *, env: dict[str, str] | None = None, ready_timeout_s: float = 120.0
) -> Iterator[str]:
    """Start the service on a free 127.0.0.1 port, wait for /readyz = 200, yield its base URL, stop it."""
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "--factory", "service.app:create_app",
               "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    environment = {**os.environ, "RADSCREEN_MODEL_DIR": str(model_dir), "RADSCREEN_DEVICE": "cpu",
                   "RADSCREEN_BACKEND": "torch", **(env or {})}
    base = f"http://127.0.0.1:{port}"
    with running_process(command, log_path, cwd=ROOT, env=environment) as proc:
        wait_until_ready(proc, f"{base}/readyz", deadline_s=ready_timeout_s, log_path=log_path)
        yield base
