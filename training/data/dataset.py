"""The ``ManifestDataset``: labelled fundus images as float tensors, and their channel statistics.

Every image of a dataset is read through ONE ``models.image.transform.ImageTransform``, the artifact-to-be's
(``TrainConfig.image_transform()``) or an artifact's own (``Artifact.image_transform()``, for evaluation):
its decode and contract run on each file exactly as the service runs them (``training.data.images``;
tests/training/test_one_image_path.py), then the pixels are scaled to [0, 1]. Channel normalisation is
*not* done here: it runs after augmentation, on the training device (``augment.normalise``), with the
statistics from ``channel_stats``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from models.image.preprocessing import LEGACY
from models.image.transform import ImageTransform
from training.data.images import load_image, read_square, to_tensor
from training.data.manifest import ManifestRow


class ManifestDataset(Dataset[tuple[torch.Tensor, torch.Tensor, int]]):
    """Images of a manifest through ``transform``: items are ``(image [3, size, size] float32 in [0, 1], label,
    index)``; only the transform's decode and contract run here (its mean/std are applied after augmentation).

    ``label`` is a float32 scalar tensor, 1.0 for referable DR (grade >= 2) else 0.0; ``index`` is the
    position in ``rows`` so predictions can be joined back to the manifest.
    """

    def __init__(self, rows: Sequence[ManifestRow], *, transform: ImageTransform) -> None:
        if transform.size < 8:
            raise ValueError(f"size must be >= 8, got {transform.size}")
        self.rows = list(rows)
        self.transform = transform
        self.pixels: np.ndarray | None = None  # preprocessed images [N, size, size, 3] uint8 (use_cache)

    def use_cache(self, cache_dir: Path, *, workers: int = 1, progress: bool = False) -> ManifestDataset:
        """Preprocess every image once into ``cache_dir`` (``training.data.cache``) and read items from there."""
        from training.data.cache import preprocessed_array

        self.pixels = preprocessed_array(self.rows, transform=self.transform, cache_dir=cache_dir, workers=workers,
                                         progress=progress)
        return self

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        row = self.rows[index]
        pixels = self.pixels[index] if self.pixels is not None else read_square(row.path, self.transform)
        image = to_tensor(pixels)  # [3, H, W]
        label = torch.tensor(1.0 if row.referable else 0.0, dtype=torch.float32)
        return image, label, index

    @property
    def labels(self) -> torch.Tensor:
        """All binary labels ``[N]`` without decoding any image (for class balance, metrics)."""
        return torch.tensor([1.0 if r.referable else 0.0 for r in self.rows], dtype=torch.float32)


def channel_stats(
    source: ManifestDataset | Sequence[Path | str],
    *,
    max_images: int | None = 1000,
    size: int = 128,
    preprocessing: str = LEGACY,
) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """Per-channel mean and standard deviation over all pixels of (up to ``max_images``) training images.

    Compute on the *training split only*: the numbers go into the model artifact and the service
    normalises with them. Images are taken evenly spaced over the source, so a cap stays representative.
    ``size`` and ``preprocessing`` apply to paths; a dataset uses its own. Values are on the [0, 1] scale.
    """
    n = len(source)
    if n == 0:
        raise ValueError("channel_stats needs at least one image")
    take = n if max_images is None else min(n, max_images)
    picks = np.unique(np.linspace(0, n - 1, take).round().astype(int))
    total = np.zeros(3, np.float64)
    total_sq = np.zeros(3, np.float64)
    count = 0
    for i in picks.tolist():
        if isinstance(source, ManifestDataset):
            pixels = source[i][0].numpy().reshape(3, -1).astype(np.float64)  # [3, H*W]
        else:
            pixels = load_image(source[i], size, preprocessing).reshape(-1, 3).T.astype(np.float64) / 255.0
        total += pixels.sum(axis=1)
        total_sq += (pixels**2).sum(axis=1)
        count += pixels.shape[1]
    mean = total / count
    std = np.sqrt(np.maximum(total_sq / count - mean**2, 0.0))
    if (std <= 0).any():
        raise ValueError(f"a channel has zero variance over {len(picks)} images (std={std.tolist()})")
    m, s = mean.tolist(), std.tolist()
    return (m[0], m[1], m[2]), (s[0], s[1], s[2])
