"""Fixtures shared by the training tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from training.synthetic.dataset import generate_dataset


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """48 gradable synthetic images at 64 px (EyePACS layout), made once per session; read-only for tests."""
    root = tmp_path_factory.mktemp("synth")
    generate_dataset(root, n_images=48, seed=7, size=64, ungradable_fraction=0.0)
    return root
