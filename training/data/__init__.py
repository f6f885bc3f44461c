"""Training data: manifests (EyePACS, APTOS, synthetic, generic CSV), datasets, patient splits, augmentation.

Example::

    from training.data import read_synthetic, split_by_patient, ManifestDataset, channel_stats
    rows = read_synthetic(Path("data/synth"))
    split = split_by_patient(rows, (0.7, 0.15, 0.15), seed=0)
    train = ManifestDataset(split.train, transform=ImageTransform(size=256, preprocessing=FOV_LOCAL_MEAN))
    mean, std = channel_stats(train, max_images=500)
"""

from training.data.augment import (
    AffineParams,
    AugmentConfig,
    JitterConfig,
    affine_theta,
    apply_affine,
    augment_batch,
    color_jitter,
    normalise,
    sample_params,
)
from training.data.dataset import ManifestDataset, channel_stats
from training.data.images import ImageLoadError, load_image, to_tensor
from training.data.manifest import (
    Manifest,
    ManifestError,
    ManifestRow,
    SkippedRow,
    eyepacs_identity,
    read_aptos,
    read_eyepacs,
    read_manifest,
    read_odir,
    read_synthetic,
)
from training.data.splits import DataSplit, split_by_patient

__all__ = [
    "AffineParams",
    "AugmentConfig",
    "DataSplit",
    "ImageLoadError",
    "JitterConfig",
    "Manifest",
    "ManifestDataset",
    "ManifestError",
    "ManifestRow",
    "SkippedRow",
    "affine_theta",
    "apply_affine",
    "augment_batch",
    "channel_stats",
    "color_jitter",
    "eyepacs_identity",
    "load_image",
    "normalise",
    "read_aptos",
    "read_eyepacs",
    "read_manifest",
    "read_odir",
    "read_synthetic",
    "sample_params",
    "split_by_patient",
    "to_tensor",
]
