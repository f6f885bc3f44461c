"""ManifestDataset decoding/labels, channel statistics and patient-level splits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from models.image.transform import ImageTransform
from training.data import (
    ImageLoadError,
    ManifestDataset,
    ManifestRow,
    channel_stats,
    load_image,
    split_by_patient,
)


def _row(path: Path, grade: int, patient: str = "p", i: int = 0) -> ManifestRow:
    return ManifestRow(path=path, grade=grade, patient_id=patient, eye=None, row_no=i + 2)


def test_items_are_resized_float_images_with_binary_labels(tmp_path: Path) -> None:
    colours = [(255, 0, 0), (0, 128, 255), (10, 20, 30)]
    rows = []
    for i, (colour, grade) in enumerate(zip(colours, (0, 2, 4), strict=True)):
        path = tmp_path / f"{i}.png"
        Image.new("RGB", (40, 40), colour).save(path)
        rows.append(_row(path, grade, str(i), i))
    ds = ManifestDataset(rows, transform=ImageTransform(size=24))
    image, label, index = ds[1]
    assert image.shape == (3, 24, 24) and image.dtype == torch.float32 and index == 1
    assert torch.allclose(image.mean(dim=(1, 2)), torch.tensor([0, 128, 255]) / 255.0, atol=1e-3)
    assert label.item() == 1.0 and ds[0][1].item() == 0.0 and ds[2][1].item() == 1.0
    assert ds.labels.tolist() == [0.0, 1.0, 1.0] and len(ds) == 3


def test_exif_orientation_is_applied_and_non_square_images_are_padded(tmp_path: Path) -> None:
    # 20 wide x 10 high, left half white, right half grey; EXIF orientation 6 = "rotate 90° clockwise to display".
    arr = np.full((10, 20, 3), 100, np.uint8)
    arr[:, :10] = 255
    exif = Image.Exif()
    exif[0x0112] = 6
    path = tmp_path / "rot.jpg"
    Image.fromarray(arr).save(path, exif=exif, quality=100)
    out = load_image(path, 20).astype(float)  # displayed: 10 wide x 20 high, white on top; padded left/right
    assert out[:8, 6:14].mean() > 240 and abs(out[12:, 6:14].mean() - 100) < 15  # white top half, grey bottom
    assert out[:, :4].mean() < 5 and out[:, 16:].mean() < 5  # black padding at the sides


def test_undecodable_image_at_load_time_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.jpeg"
    path.write_bytes(b"\x00" * 64)
    with pytest.raises(ImageLoadError, match=r"cannot read image .*broken\.jpeg"):
        ManifestDataset([_row(path, 0)], transform=ImageTransform(size=16))[0]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_failed_preprocessing_leaves_no_partial_cache_file(tmp_path: Path, workers: int) -> None:
    """The cache file is as large as the data set: one that failed half-way (a bad image, Ctrl-C) is removed,
    not left beside the cache, and a rerun builds it whole."""
    good = tmp_path / "good.png"
    Image.fromarray(np.full((32, 32, 3), 120, np.uint8)).save(good)
    broken = tmp_path / "broken.jpeg"
    broken.write_bytes(b"\x00" * 64)
    cache = tmp_path / "cache"
    with pytest.raises(ImageLoadError, match="broken"):
        rows = [_row(good, 0), _row(broken, 1, i=1)]
        ManifestDataset(rows, transform=ImageTransform(size=16)).use_cache(cache, workers=workers)
    assert list(cache.iterdir()) == []
    ManifestDataset([_row(good, 0)], transform=ImageTransform(size=16)).use_cache(cache, workers=workers)
    assert sorted(p.suffix for p in cache.iterdir()) == [".json", ".u8"]


def test_channel_stats_match_numpy_over_all_pixels(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    arrays, rows = [], []
    for i in range(4):
        arr = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
        arr[..., 2] //= 4
        Image.fromarray(arr).save(tmp_path / f"{i}.png")
        arrays.append(arr)
        rows.append(_row(tmp_path / f"{i}.png", 0, str(i), i))
    pixels = np.stack(arrays).reshape(-1, 3) / 255.0
    mean, std = channel_stats(ManifestDataset(rows, transform=ImageTransform(size=16)), max_images=None)
    assert np.allclose(mean, pixels.mean(0), atol=1e-6) and np.allclose(std, pixels.std(0), atol=1e-6)
    mean_p, std_p = channel_stats([r.path for r in rows], size=16)
    assert np.allclose(mean_p, mean) and np.allclose(std_p, std)
    mean_2, _ = channel_stats([r.path for r in rows], size=16, max_images=2)  # first and last image
    assert np.allclose(mean_2, np.stack([arrays[0], arrays[3]]).reshape(-1, 3).mean(0) / 255.0, atol=1e-6)


def _patients(n: int, seed: int = 0) -> list[ManifestRow]:
    rng = np.random.default_rng(seed)
    rows: list[ManifestRow] = []
    for p in range(n):
        grade = int(rng.choice(5, p=[0.55, 0.13, 0.21, 0.06, 0.05]))
        for eye in ("left", "right"):
            g = grade if rng.random() < 0.6 else int(rng.integers(0, 5))
            rows.append(ManifestRow(Path(f"{p}_{eye}.jpeg"), g, str(p), eye, len(rows) + 2))
    return rows


def test_patient_split_has_no_leakage_and_respects_fractions_and_strata() -> None:
    rows = _patients(500)
    split = split_by_patient(rows, (0.7, 0.15, 0.15), seed=1)
    ids = [{r.patient_id for r in part} for part in split]
    assert not (ids[0] & ids[1]) and not (ids[0] & ids[2]) and not (ids[1] & ids[2])
    assert sum(len(p) for p in split) == len(rows)
    assert sorted(r.row_no for part in split for r in part) == [r.row_no for r in rows]
    fractions = [len(p) / len(rows) for p in split]
    assert np.allclose(fractions, (0.7, 0.15, 0.15), atol=0.02)
    overall = np.mean([r.referable for r in rows])
    for part in split:
        assert abs(np.mean([r.referable for r in part]) - overall) < 0.06


def test_patient_split_is_deterministic_and_order_independent() -> None:
    rows = _patients(100)
    a = split_by_patient(rows, seed=3)
    b = split_by_patient(list(reversed(rows)), seed=3)
    c = split_by_patient(rows, seed=4)
    assert [{r.row_no for r in p} for p in a] == [{r.row_no for r in p} for p in b]
    assert [{r.row_no for r in p} for p in a] != [{r.row_no for r in p} for p in c]
    with pytest.raises(ValueError, match="fractions"):
        split_by_patient(rows, (0.5, 0.6, 0.1))
