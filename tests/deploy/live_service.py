"""A real Radial Screen service for end-to-end tests: a tiny artifact on disk and uvicorn on 127.0.0.1.

Used by the Prometheus scrape test (tests/deploy) and by the dashboard and FHIR endpoint tests
(tests/service). The server is a separate process started with the app factory, exactly as
``uvicorn --factory service.app:create_app`` runs it in production, configured through
``RADSCREEN_*`` environment variables; it is always stopped when the context exits.
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from tests.helpers.artifacts import build_tiny_artifact
from tests.helpers.processes import running_process, wait_until_ready

ROOT = Path(__file__).resolve().parents[2]


def build_artifact(directory: Path, *, referral_threshold_mi: float = 0.002, seed: int = 0) -> Path:
    """Save a tiny untrained radial VGG-16* artifact (width 4, 64 px) with the given MI threshold.

    A threshold far below the network's typical MI (~1e-3 at rho_init -2.5) makes every gradable image
    "uncertain", so tests can see the referral path deterministically.
    """
    return build_tiny_artifact(
        directory,
        name="tiny-radial-e2e",
        intended_use="End-to-end tests only: an untrained tiny network with no clinical meaning.",
        referral_threshold_mi=referral_threshold_mi,
        seed=seed,
        model_card="# Tiny e2e model\n\nUntrained; for tests only.\n",
    )


def fundus_png(seed: int, size: int = 256) -> bytes:
    """A generated, gradable fundus photograph (training.synthetic, grade 1) as PNG bytes.

    The quality gate's thresholds are set on this generator, so its gradable images pass the gate.
    """
    from PIL import Image

    from training.synthetic.render import render_fundus

    image, _ = render_fundus(np.random.default_rng(seed), 1, size=size, gradable=True, eye="left")  # [H, W, 3]
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    return buf.getvalue()


def blank_png(size: int = 128, value: int = 0) -> bytes:
    """A uniform image: no field of view, nothing to grade (the quality gate refuses it)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (size, size), (value, value, value)).save(buf, format="PNG")
    return buf.getvalue()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
