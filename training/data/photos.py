"""Unlabelled photographs decoded and preprocessed exactly as the service does, without importing the service.

Training may not import ``service`` (import-linter contract), and need not: the service
(``service.inference.prepare.prepare_image``) and training read a file through the same
``models.image.transform.ImageTransform`` (decode at ``models.image.decode``'s size, EXIF orientation, 8-bit RGB, the
artifact's preprocessing contract), so ``serving_square`` gives the pixels a model would see in production
and its uncertainty on real photographs is measured on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from models.image.preprocessing import FOV_LOCAL_MEAN
from training.data.images import load_image, to_tensor

PHOTO_SUFFIXES = (".jpg", ".jpeg", ".png")


def serving_square(path: Path | str, size: int, preprocessing: str = FOV_LOCAL_MEAN) -> np.ndarray:
    """Decode ``path`` as the service does and preprocess it: uint8 ``[size, size, 3]``."""
    return load_image(path, size, preprocessing)


def list_photos(folder: Path | str) -> list[Path]:
    """The image files directly in ``folder``, sorted by name."""
    return sorted(p for p in Path(folder).iterdir() if p.suffix.lower() in PHOTO_SUFFIXES)


class PhotoDataset(Dataset[tuple[torch.Tensor, torch.Tensor, int]]):
    """Unlabelled photographs as ``(image [3, H, W] float32 in [0, 1], label 0.0 (unknown), index)``.

    Items are preprocessed once and kept (a few dozen images): several models score the same pixels.
    """

    def __init__(self, paths: Sequence[Path | str], *, size: int, preprocessing: str = FOV_LOCAL_MEAN) -> None:
        self.paths = [Path(p) for p in paths]
        self.images = [to_tensor(serving_square(p, size, preprocessing)) for p in self.paths]  # each [3, H, W]

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        return self.images[index], torch.tensor(0.0), index
