"""Fixtures for the batch-job tests: tiny real artifacts (width 4, 64 px) and folders of real images.

The two private functions below only serve these fixtures; shared helpers live in tests/helpers.

The artifacts are built with ``models.artifact.save_artifact`` once per session; two seeds give two
models with different sha256 for the "refuse to mix models" tests.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
from PIL import Image

from support.artifacts import build_tiny_artifact

if TYPE_CHECKING:
    from service.inference.scoring import Scorer


def _batch_artifact(directory: Path, *, seed: int) -> Path:
    """Save an untrained tiny radial VGG-16* artifact; the MI threshold refers part of the images."""
    return build_tiny_artifact(
        directory,
        name="tiny-batch-test",
        version=f"0.0.{seed}",
        intended_use="Tests only: an untrained tiny network.",
        referral_threshold_mi=0.0011,
        target_referral_rate=0.5,
        seed=seed,
        draw_seed=77,
        validation=None,
        model_card="# Tiny batch test model\n\nUntrained; tests only.\n",
    )


@pytest.fixture(scope="session")
def batch_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _batch_artifact(tmp_path_factory.mktemp("batch-artifact") / "tiny", seed=0)


@pytest.fixture(scope="session")
def other_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _batch_artifact(tmp_path_factory.mktemp("batch-artifact-2") / "tiny", seed=1)


@pytest.fixture(scope="session")
def batch_scorer(batch_artifact: Path) -> Scorer:
    from service.inference.loading import load_scorer
    from service.inference.spec import ScorerSpec

    return load_scorer(ScorerSpec(model_dir=batch_artifact, device="cpu"))


def _write_fundus_png(path: Path, seed: int, size: int = 80) -> Path:
    """Write a fundus-looking PNG (red textured disc on black; every 5th one dark = ungradable)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size]
    c = (size - 1) / 2
    r = np.hypot(yy - c, xx - c) / (0.46 * size)
    base = np.stack([0.75 - 0.2 * r, 0.35 - 0.1 * r, 0.15 - 0.05 * r], axis=-1)
    img = np.clip(base + rng.normal(0, 0.08 + 0.02 * (seed % 4), (size, size, 1)), 0, 1) * (r <= 1)[..., None]
    if seed % 5 == 4:
        img *= 0.15
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray((img * 255).astype(np.uint8)).save(path)
    return path


@pytest.fixture
def make_folder(tmp_path: Path) -> Callable[..., Path]:
    """Factory: a folder of ``n`` fundus PNGs (a third in ``sub/``), optionally one corrupt JPEG."""

    def make(n: int, *, corrupt: bool = True, name: str = "images") -> Path:
        root = tmp_path / name
        for i in range(n):
            _write_fundus_png(root / ("sub" if i % 3 == 0 else ".") / f"eye{i:03d}.png", seed=i)
        if corrupt:
            (root / "corrupt.jpg").write_bytes(b"\xff\xd8\xff\xe0" + b"\x00garbage" * 8)
        (root / "notes.txt").write_text("not an image; ignored by folder discovery\n")
        return root

    return make
