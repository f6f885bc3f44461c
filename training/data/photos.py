"""Unlabelled photographs decoded and preprocessed exactly as the service does, without importing the service.

The service (``service.inference.imaging.decode_rgb`` + ``service.inference.scoring.prepare_image``)
decodes a JPEG at a reduced DCT scale of at least twice ``max(size, models.preprocessing.DECODE_SIDE)`` (``draft``; the
quality gate needs >= 1,024 px), applies the EXIF orientation, converts to 8-bit RGB and, for
``fov-local-mean/1`` artifacts, runs ``models.preprocessing.preprocess_fundus`` with the FOV circle fitted
on that same decoded frame. Training's ``load_image`` does the same (``training.data.dataset.decode_photo``),
and ``serving_square`` is that function for unlabelled photographs, so a model's uncertainty on real
photographs is measured on the pixels it would see in production. Training may not import ``service``
(import-linter contract).

The legacy contract (``fov_square`` + resize, of models trained before it such as default model 0.1.0) is
not reproduced here: the models this is for are new ``fov-local-mean/1`` runs, and a legacy request is
refused rather than approximated.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from models.preprocessing import FOV_LOCAL_MEAN, check_preprocessing
from training.data.dataset import load_image, to_tensor

PHOTO_SUFFIXES = (".jpg", ".jpeg", ".png")


def serving_square(path: Path | str, size: int, preprocessing: str = FOV_LOCAL_MEAN) -> np.ndarray:
    """Decode ``path`` as the service does and preprocess it: uint8 ``[size, size, 3]``."""
    if check_preprocessing(preprocessing) != FOV_LOCAL_MEAN:
        raise ValueError(f"serving_square reproduces the {FOV_LOCAL_MEAN!r} contract only, not {preprocessing!r}")
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
