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
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
TINY_SIZE = 64


def build_artifact(directory: Path, *, referral_threshold_mi: float = 0.002, seed: int = 0) -> Path:
    """Save a tiny untrained radial VGG-16* artifact (width 4, 64 px) with the given MI threshold.

    A threshold far below the network's typical MI (~1e-3 at rho_init -2.5) makes every gradable image
    "uncertain", so tests can see the referral path deterministically.
    """
    import torch

    from models.artifact import ArtifactConfig, Calibration, save_artifact
    from models.vgg import VGGConfig, build_vgg16_star

    torch.manual_seed(seed)
    arch = VGGConfig(width=4, input_size=TINY_SIZE, layer="radial", rho_init=-2.5)
    config = ArtifactConfig(
        name="tiny-radial-e2e",
        version="0.0.1",
        architecture=arch,
        mean=(0.45, 0.25, 0.15),
        std=(0.25, 0.15, 0.1),
        posterior="radial",
        prior={"kind": "unit_gaussian"},
        draw_seed=1234,
        training_data="synthetic",
        intended_use="End-to-end tests only: an untrained tiny network with no clinical meaning.",
    )
    calibration = Calibration(
        referral_threshold_mi=referral_threshold_mi,
        target_referral_rate=0.2,
        decision_threshold=0.5,
        validation={"note": "none (untrained test model)"},
        dataset="none: test fixture",
    )
    save_artifact(directory, model=build_vgg16_star(arch), config=config, calibration=calibration,
                  model_card="# Tiny e2e model\n\nUntrained; for tests only.\n", overwrite=True)
    return directory


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
    with log_path.open("wb") as log:
        proc = subprocess.Popen(command, cwd=ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + ready_timeout_s
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"service exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"service not ready in {ready_timeout_s} s:\n{log_path.read_text()[-3000:]}")
                time.sleep(0.25)
            yield base
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
