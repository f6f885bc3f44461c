"""One image file as training reads it: the artifact contract's ``models.image.transform.ImageTransform``.

An image is read exactly as the service reads it: the transform decodes the file (``models.image.decode``: JPEG
draft at ``2 * max(size, 512)`` px, EXIF orientation, 8-bit RGB) and preprocesses it
(``models.image.preprocessing``: ``FOV_LOCAL_MEAN`` crops to the fitted FOV circle and subtracts the local mean;
``LEGACY`` centres the field of view on a square and resizes bilinearly), so a file gives the service's
pixels (tests/training/test_one_image_path.py). The datasets (``training.data.dataset``), the preprocessing
cache (``training.data.cache``) and the photographs (``training.data.photos``) all read through here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from models.image.preprocessing import LEGACY
from models.image.transform import ImageTransform


class ImageLoadError(OSError):
    """An image that cannot be decoded; the message names the file (one-argument form for DataLoader)."""


def load_image(path: Path | str, size: int, preprocessing: str = LEGACY) -> np.ndarray:
    """Decode ``path`` and return it preprocessed as uint8 ``[size, size, 3]`` RGB (see module docstring)."""
    return read_square(path, ImageTransform(size=size, preprocessing=preprocessing))


def read_square(path: Path | str, transform: ImageTransform) -> np.ndarray:
    """``transform``'s decode and contract on the file ``path``: uint8 ``[size, size, 3]``; ImageLoadError names it."""
    try:
        rgb = transform.decode(path)
    except Exception as exc:
        raise ImageLoadError(f"cannot read image {path}: {type(exc).__name__}: {exc}") from exc
    return transform.square(rgb)


def to_tensor(image: np.ndarray) -> torch.Tensor:
    """uint8 ``[H, W, 3]`` -> float32 ``[3, H, W]`` in [0, 1]."""
    return torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1))).float().div_(255.0)
