"""The CPU image, built and served: deploy/Dockerfile.cpu on a locally bootstrapped Debian base.

What a site gets from ``docker build -f deploy/Dockerfile.cpu``: scripts/docker-build-cpu.sh builds the image
(scripts/docker-base.sh makes and caches the Debian bookworm base, since base images cannot be pulled here);
the container runs with host networking on a free 127.0.0.1 port, and must turn "healthy" by its own
HEALTHCHECK, run as the non-root user, answer /readyz 200, and return for ``POST /predict`` exactly the
numbers of the local service (same torch build, same embedded default model, same settings). The container
and the image are removed afterwards; the base image and the debootstrap tarball stay cached.

Skips (with the reason printed) where no Docker engine can start (no docker.io, not root), and with
RADSCREEN_SKIP_DOCKER=1.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from models.artifact import load_artifact
from models.platform.compute import resolve
from models.platform.cpu import detect_cpu
from service.inference.platform import choose_backend
from support.images import IDRID, fundus_png, synthetic_jpegs
from support.processes import free_port, running_process, wait_until_ready
from tests.helpers.deploy import ROOT

pytestmark = [pytest.mark.deploy, pytest.mark.timeout(3000)]

BUILD_TIMEOUT_S = 2400  # cold: debootstrap (~3-4 min) + build (~6-10 min) on a shared 2-core machine
HEALTHY_TIMEOUT_S = 300  # start period 60 s + interval 15 s; the full-size model warms up on a busy CPU
LOG_TAIL = 4000
# Differ between any two responses by design: the request's id and its measured timings.
PER_REQUEST_FIELDS = ("request_id", "timing_ms")
# Listen address and artifact path legitimately differ between the image and the local process.
NOT_COMPARED_SETTINGS = ("RADSCREEN_MODEL_DIR", "RADSCREEN_LISTEN_HOST", "RADSCREEN_LISTEN_PORT")


@dataclass(frozen=True)
class Container:
    """A running container of the image: its name and the base URL of the service inside it."""

    name: str
    base_url: str


def docker(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``docker ARGS`` and return the completed process (never raises on a non-zero exit)."""
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=False)


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-LOG_TAIL:] if path.exists() else f"(no log at {path})"


@pytest.fixture(scope="module")
def cpu_image(docker_engine: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Tag of the CPU image built by scripts/docker-build-cpu.sh; the image is removed afterwards."""
    tag = f"radscreen-test:cpu-{os.getpid()}"
    log = tmp_path_factory.mktemp("image") / "build.log"
    try:
        with log.open("w") as out:
            proc = subprocess.run(["bash", str(ROOT / "scripts" / "docker-build-cpu.sh"), tag], cwd=ROOT,
                                  stdout=out, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT_S, check=False)
        if proc.returncode != 0:
            pytest.fail(f"image build failed (exit {proc.returncode}):\n{_tail(log)}")
        print(log.read_text(errors="replace").strip().splitlines()[-1], file=sys.stderr)  # build time, size
        yield tag
    finally:
        docker("image", "rm", "--force", tag)


@pytest.fixture(scope="module")
def container(cpu_image: str) -> Iterator[Container]:
    """The image running with host networking on a free 127.0.0.1 port; removed afterwards."""
    port = free_port()
    name = f"radscreen-test-{os.getpid()}"
    started = docker("run", "--detach", "--name", name, "--network", "host",
                     "--env", "RADSCREEN_LISTEN_HOST=127.0.0.1", "--env", f"RADSCREEN_LISTEN_PORT={port}",
                     cpu_image)
    try:
        assert started.returncode == 0, f"docker run failed: {started.stderr}"
        yield Container(name=name, base_url=f"http://127.0.0.1:{port}")
    finally:
        docker("rm", "--force", name)


def _state(name: str) -> dict[str, Any]:
    out = docker("inspect", "--format", "{{json .State}}", name)
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


@pytest.fixture(scope="module")
def healthy(container: Container) -> Container:
    """The container once Docker reports it healthy by the image's own HEALTHCHECK (GET /readyz)."""
    deadline = time.monotonic() + HEALTHY_TIMEOUT_S
    while True:
        state = _state(container.name)
        health = state.get("Health") or {}
        status = health.get("Status")
        if status == "healthy":
            return container
        if not state.get("Running") or status == "unhealthy" or time.monotonic() > deadline:
            logs = docker("logs", "--tail", "60", container.name)
            pytest.fail(f"container not healthy (running={state.get('Running')}, health={status}, "
                        f"probes={health.get('Log')}):\n{logs.stdout[-LOG_TAIL:]}{logs.stderr[-LOG_TAIL:]}")
        time.sleep(1.0)


def test_the_image_carries_the_cpu_torch_and_no_training_code(healthy: Container) -> None:
    probe = ("import importlib.util as u, torch; "
             "print(torch.__version__, torch.version.cuda, u.find_spec('training'), u.find_spec('sklearn'))")
    out = docker("exec", healthy.name, "python", "-c", probe)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2.13.0+cpu", "None", "None", "None"]


def test_the_service_runs_as_the_non_root_user(cpu_image: str, healthy: Container) -> None:
    assert docker("image", "inspect", "--format", "{{.Config.User}}", cpu_image).stdout.strip() == "10001:10001"
    # PID 1 is the server itself (the CMD's `sh -c exec`): its real, effective, saved and fs uids.
    status = docker("exec", healthy.name, "cat", "/proc/1/status").stdout
    uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
    assert uid_line.split()[1:] == ["10001"] * 4, uid_line
    cmdline = docker("exec", healthy.name, "cat", "/proc/1/cmdline").stdout.split("\0")
    assert "serve" in cmdline and "radscreen" in " ".join(cmdline), cmdline
    assert docker("exec", healthy.name, "id", "-u").stdout.strip() == "10001"


def test_readyz_answers_200(healthy: Container) -> None:
    response = httpx.get(f"{healthy.base_url}/readyz", timeout=10)
    assert response.status_code == 200, response.text


def _image_settings(tag: str) -> dict[str, str]:
    """The image's RADSCREEN_* environment, less what legitimately differs outside the container."""
    env = json.loads(docker("image", "inspect", "--format", "{{json .Config.Env}}", tag).stdout)
    pairs = dict(item.split("=", 1) for item in env)
    return {k: v for k, v in pairs.items() if k.startswith("RADSCREEN_") and k not in NOT_COMPARED_SETTINGS}


@contextlib.contextmanager
def _local_service(settings: dict[str, str], workdir: Path) -> Iterator[str]:
    """The service from this checkout, with the embedded default model and exactly ``settings``.

    Inherited RADSCREEN_* variables are dropped and the working directory holds no ``.env``, so the only
    configuration is the image's own.
    """
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RADSCREEN_")}
    env |= settings | {"RADSCREEN_MODEL_DIR": str(ROOT / "models" / "default")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    command = [sys.executable, "-m", "uvicorn", "--factory", "service.app:create_app",
               "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    log = workdir / "local-service.log"
    base = f"http://127.0.0.1:{port}"
    with running_process(command, log, cwd=workdir, env=env) as proc:
        wait_until_ready(proc, f"{base}/readyz", deadline_s=HEALTHY_TIMEOUT_S, log_path=log)
        yield base


def _predict(base_url: str, image: bytes, name: str = "fundus.png", mime: str = "image/png") -> dict[str, Any]:
    response = httpx.post(f"{base_url}/predict", files={"image": (name, image, mime)}, timeout=120)
    assert response.status_code == 200, response.text
    body = dict(response.json())
    return {k: v for k, v in body.items() if k not in PER_REQUEST_FIELDS}


def test_predict_returns_exactly_the_local_services_numbers(
    cpu_image: str, healthy: Container, tmp_path: Path
) -> None:
    settings = _image_settings(cpu_image)
    assert settings["RADSCREEN_DEVICE"] == "cpu" and settings["RADSCREEN_BACKEND"] == "auto"
    runtime = httpx.get(f"{healthy.base_url}/v1/model", timeout=30).json()["runtime"]
    # what auto picks on this CPU from the embedded model's real-eye record (guarded bf16 where bf16 is
    # native, ONNX Runtime fp32 elsewhere): the image decides as the checkout does
    choice = resolve(device="cpu", precision="auto", cpu=detect_cpu(), permits=load_artifact().calibration.permits())
    expected_backend, _ = choose_backend("auto", device="cpu", precision=choice.precision)
    assert (runtime["backend"], runtime["precision"]) == (expected_backend, choice.precision)
    assert (runtime["guard_band"] is None) == (choice.guard is None)
    # two generated images and a JPEG: a real photograph (IDRiD) where the shared data folder is present
    images = [(fundus_png(seed, size=320), "fundus.png", "image/png") for seed in (3, 11)]
    photo = IDRID / "IDRiD_01.jpg"
    images.append((photo.read_bytes(), photo.name, "image/jpeg") if photo.is_file()
                  else (synthetic_jpegs(1, size=320, seed=5)[0], "fundus.jpg", "image/jpeg"))
    from_image = [_predict(healthy.base_url, *image) for image in images]
    with _local_service(settings, tmp_path) as local_url:
        from_local = [_predict(local_url, *image) for image in images]
    for got, expected in zip(from_image, from_local, strict=True):
        assert got["model"]["name"] == expected["model"]["name"]
        assert got["diagnosis"]["referable_dr_probability"] == expected["diagnosis"]["referable_dr_probability"]
        assert got["uncertainty"]["mutual_information"] == expected["uncertainty"]["mutual_information"]
        assert got == expected  # every field: model identity, diagnosis, uncertainty, quality, referral
    # Two different images gave two different answers: the comparison is not between constants.
    assert from_image[0]["diagnosis"] != from_image[1]["diagnosis"]
