"""A run's data: the manifest its config names, split by patient into datasets, and the input statistics.

``read_rows`` reads the labels of any supported layout (synthetic, EyePACS, APTOS, ODIR-5K, a generic CSV; packed
shards, whose pixels come with them: ``training.data.shards``);
``prepare_data`` splits them by patient, builds the three ``ManifestDataset``s (optionally preprocessed once
into the run's cache) and fixes the channel mean/std the model is trained and served with: measured on the
training split, or, for a warm start, the parent artifact's own.

Example::

    data = prepare_data(TrainConfig(data="data/synth", out="runs/x"))
    len(data.train), data.mean, data.std
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from training.config import TrainConfig
from training.data.dataset import ManifestDataset, channel_stats
from training.data.manifest import (
    OTHER_DISEASE,
    Manifest,
    read_aptos,
    read_eyepacs,
    read_manifest,
    read_odir,
    read_synthetic,
)
from training.data.shards import read_shards
from training.data.sources import keep_copies
from training.data.splits import DataSplit, split_by_source, split_from_sides, training_subset
from training.warm_start import input_statistics

log = logging.getLogger(__name__)


def _kaggle_paths(root: Path, csv_name: str, image_folder: str) -> tuple[Path, Path]:
    """The CSV and image folder of a Kaggle download: ``<root>/<csv_name>`` with the images in
    ``<root>/<image_folder>/`` (EyePACS ``train/``, APTOS ``train_images/``), or beside the CSV when that
    folder does not exist. ``root`` may also be the CSV itself."""
    csv_path = root / csv_name if root.is_dir() else root
    images = csv_path.parent / image_folder
    return csv_path, images if images.is_dir() else csv_path.parent


def read_rows(config: TrainConfig) -> Manifest:
    """The labelled images of ``config.data`` in ``config.layout``."""
    root = Path(config.data)
    if config.layout == "synthetic":
        return read_synthetic(root, gradable_only=config.gradable_only)
    if config.layout == "eyepacs":
        return read_eyepacs(*_kaggle_paths(root, "trainLabels.csv", "train"))
    if config.layout == "aptos":
        return read_aptos(*_kaggle_paths(root, "train.csv", "train_images"))
    if config.layout == "odir":
        return read_odir(root / "labels.csv" if root.is_dir() else root,
                         include_other_disease=config.include_other_disease)
    if config.layout == "shards":
        raise ValueError(f"{root}: packed shards carry their pixels; read them with prepare_data")
    rows = read_manifest(root)
    if config.include_other_disease:
        return rows
    kept = [row for row in rows if row.category != OTHER_DISEASE]  # a multi-source manifest keeps ODIR's category
    return Manifest(kept, source=rows.source, skipped=rows.skipped)


def source_split(rows: Manifest, config: TrainConfig, sides: Sequence[int] | np.ndarray | None = None) -> DataSplit:
    """The patient split within each source (``split_by_source``), then the recipe's image copies: those in
    ``exclude_copies`` leave every split, those in ``train_only_copies`` leave validation and test. The split is
    made before the filters, so recipes that differ only in them share their validation and test patients.
    ``sides``: an assignment made earlier on the whole manifest (shards that carry only some of its rows)."""
    split = (split_from_sides(rows, sides) if sides is not None
             else split_by_source(rows, config.split, seed=config.effective_split_seed))
    evaluated = (*config.exclude_copies, *config.train_only_copies)
    train = training_subset(keep_copies(split.train, config.exclude_copies), config.train_fraction,
                            seed=config.effective_split_seed)
    return DataSplit(train, keep_copies(split.val, evaluated), keep_copies(split.test, evaluated))


@dataclass
class PreparedData:
    """The patient split, its three datasets (items in [0, 1]) and the channel statistics to normalise with."""

    split: DataSplit
    train: ManifestDataset
    val: ManifestDataset
    test: ManifestDataset
    mean: tuple[float, float, float]
    std: tuple[float, float, float]


def prepare_data(config: TrainConfig, *, progress: bool = True) -> PreparedData:
    """Read, split by patient and (with ``cache_images``) preprocess once; see the module docstring.
    ``progress``: the preprocessing bars on stderr (``fit --no-progress`` hides them)."""
    packed = (read_shards(Path(config.data), size=config.input_size, preprocessing=config.preprocessing,
                          gradable_only=config.gradable_only) if config.layout == "shards" else None)
    rows = packed.rows if packed is not None else read_rows(config)
    if rows.skipped:
        log.warning("%d manifest rows skipped: %s", len(rows.skipped), rows.skipped[:3])
    split = source_split(rows, config, packed.sides_for(config) if packed is not None else None)
    if not split.train or not split.val:
        raise ValueError(f"{config.data}: too few images for a train/validation split ({len(rows)} rows).")
    transform = config.image_transform()  # the artifact-to-be's: every image of the run goes through it
    train, val, test = (ManifestDataset(part, transform=transform) for part in split)
    if packed is not None:  # the pixels came packed, in the manifest's order
        position = {id(row): i for i, row in enumerate(rows)}
        for dataset in (train, val, test):
            dataset.pixels = packed.pixels[[position[id(row)] for row in dataset.rows]]
    elif config.cache_images:  # preprocess once: decoding + FOV fit + local mean cost more than a step per image
        for dataset in (train, val, test):
            dataset.use_cache(Path(config.cache_dir or Path(config.out) / "cache"), workers=max(config.workers or 0, 2),
                              progress=progress)
    if config.init_from:  # a warm start keeps the input normalisation its weights were trained with
        mean, std = input_statistics(config.init_from, preprocessing=config.preprocessing)
    else:
        mean, std = channel_stats(train, max_images=500)
    return PreparedData(split, train, val, test, mean, std)
