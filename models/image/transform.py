"""The image transform an artifact hands out: file or bytes -> the network's input, one path for every caller.

Like torchvision's ``weights.transforms()``, the preprocessing is taken from the model, never re-declared:
``ArtifactConfig.image_transform()`` (or ``Artifact.image_transform()``) returns the ``ImageTransform`` of
the contract the artifact names. Training (``training.data.dataset.ManifestDataset``, photographs,
synthetic renders), the service and the batch job (``service.inference.prepare.prepare_image``) all run it,
so one file gives one tensor whichever of them reads it (tests/training/test_one_image_path.py).

Its three steps are also available separately, because two callers stop or start in between: training
keeps ``square`` as uint8 and normalises after augmentation on the training device
(``training.data.augment.normalise``), and the service decodes through its upload checks and fits the FOV
circle once for the quality gate before ``square``.

Example::

    transform = load_artifact("models/default").image_transform()
    x = transform(Path("eye.jpg").read_bytes())    # float32 [3, 256, 256], (x / 255 - mean) / std
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models.image.decode import decode_image
from models.image.fov import FovCircle
from models.image.preprocessing import LEGACY, check_preprocessing, preprocess


@dataclass(frozen=True)
class ImageTransform:
    """Decode, preprocess (the artifact's contract, ``models.image.preprocessing``) and normalise for one model."""

    size: int  # square input side in px
    preprocessing: str = LEGACY  # a models.image.preprocessing contract
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)  # per-channel mean of [0, 1] RGB
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"size must be >= 1, got {self.size}")
        check_preprocessing(self.preprocessing)

    def decode(self, source: bytes | Path | str) -> np.ndarray:
        """Image bytes or file -> uint8 [H, W, 3] (``models.image.decode.decode_image``)."""
        return decode_image(source, self.size)

    def square(self, rgb: np.ndarray, circle: FovCircle | None = None) -> np.ndarray:
        """Decoded uint8 [H, W, 3] -> uint8 [size, size, 3] by the contract; ``circle``: an FOV fit of ``rgb``."""
        return preprocess(rgb, self.size, self.preprocessing, circle)

    def normalise(self, square: np.ndarray) -> np.ndarray:
        """uint8 [H, W, 3] -> float32 [3, H, W], (x/255 - mean) / std."""
        x = square.astype(np.float32) / np.float32(255.0)  # [H, W, 3]
        y = (x - np.asarray(self.mean, np.float32)) / np.asarray(self.std, np.float32)
        return np.ascontiguousarray(y.transpose(2, 0, 1), dtype=np.float32)  # [3, H, W]

    def __call__(self, source: bytes | Path | str) -> np.ndarray:
        """Image bytes or file -> float32 [3, size, size], the network's input."""
        return self.normalise(self.square(self.decode(source)))
