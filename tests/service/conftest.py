"""Shared fixtures for the service tests: a tiny real artifact and generated test images.

The artifact is a real ``models.artifact`` directory (tiny radial VGG-16*: width 4, 64 px input), built by
``tests.helpers.artifacts`` with its defaults once per test session, so the tests never depend on the
embedded full-size model.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.helpers.artifacts import build_tiny_artifact  # also imported from here by benchmarks/load_service.py


@pytest.fixture(scope="session")
def tiny_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_artifact(tmp_path_factory.mktemp("artifact") / "tiny")


def fundus_like(seed: int, size: int = 96) -> np.ndarray:
    """A cheap fundus-looking uint8 [size, size, 3] image: red disc on black, textured, seeded."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size]
    c = (size - 1) / 2
    r = np.hypot(yy - c, xx - c) / (0.46 * size)
    disc = r <= 1.0
    base = np.stack([0.75 - 0.2 * r, 0.35 - 0.1 * r, 0.15 - 0.05 * r], axis=-1)
    texture = rng.normal(0, 0.06, (size, size, 1)) + 0.08 * np.sin(xx / (2 + seed % 5))[..., None]
    img = np.clip(base + texture, 0, 1) * disc[..., None]
    return (img * 255).astype(np.uint8)


def encode(arr: np.ndarray, fmt: str = "PNG", **kwargs: object) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format=fmt, **kwargs)
    return buf.getvalue()


@pytest.fixture
def png_bytes() -> Callable[[int], bytes]:
    """Factory: a distinct fundus-like PNG per seed."""
    return lambda seed: encode(fundus_like(seed))
