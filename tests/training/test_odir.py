"""ODIR-5K: the layout reader, patient-level splits on the real labels, and the preprocessed-image cache."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from models.image.preprocessing import FOV_LOCAL_MEAN
from models.image.transform import ImageTransform
from support.shared_data import ODIR, missing_reason
from training.data import ManifestDataset, ManifestError, load_image, read_odir, split_by_patient
from training.data.cache import preprocessed_array

needs_odir = pytest.mark.skipif(not (ODIR / "labels.csv").is_file(), reason=missing_reason(ODIR))
HEADER = "image,patient,eye,dr_grade,referable,category,keywords\n"


def _disc_jpeg(path: Path, seed: int, side: int = 96) -> None:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:side, :side]
    disc = (yy - side / 2) ** 2 + (xx - side / 2) ** 2 < (0.45 * side) ** 2
    img = np.zeros((side, side, 3), np.uint8)
    img[disc] = (rng.integers(120, 200), rng.integers(50, 90), rng.integers(20, 40))
    img = np.clip(img.astype(int) + rng.integers(-8, 8, img.shape) * disc[..., None], 0, 255).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(img).save(path, quality=92)


@pytest.fixture()
def odir_like(tmp_path: Path) -> Path:
    lines = [("1_left", 1, "left", 0, "normal_fundus"), ("1_right", 1, "right", 3, "dr_keyword"),
             ("2_left", 2, "left", 0, "other_non_dr"), ("2_right", 2, "right", 1, "dr_keyword")]
    for i, (name, *_rest) in enumerate(lines):
        _disc_jpeg(tmp_path / "images" / f"{name}.jpg", i)
    (tmp_path / "labels.csv").write_text(HEADER + "".join(
        f"images/{n}.jpg,{p},{e},{g},{int(g >= 2)},{c},kw\n" for n, p, e, g, c in lines))
    return tmp_path


def test_odir_rows_keep_patient_eye_grade_and_category(odir_like: Path) -> None:
    rows = read_odir(odir_like / "labels.csv")
    assert [(r.patient_id, r.eye, r.grade, r.category) for r in rows] == [
        ("1", "left", 0, "normal_fundus"), ("1", "right", 3, "dr_keyword"),
        ("2", "left", 0, "other_non_dr"), ("2", "right", 1, "dr_keyword")]
    assert [r.referable for r in rows] == [False, True, False, False]
    assert rows[0].path == odir_like / "images" / "1_left.jpg"
    kept = read_odir(odir_like / "labels.csv", include_other_disease=False)
    assert [r.path.stem for r in kept] == ["1_left", "1_right", "2_right"] and kept.skipped == []


def test_odir_refuses_a_bad_eye_and_a_missing_column(odir_like: Path) -> None:
    text = (odir_like / "labels.csv").read_text()
    (odir_like / "bad_eye.csv").write_text(text.replace(",left,", ",both,", 1))
    with pytest.raises(ManifestError, match="eye must be left or right"):
        read_odir(odir_like / "bad_eye.csv")
    (odir_like / "no_patient.csv").write_text(text.replace("patient,", "person,", 1))
    with pytest.raises(ManifestError, match="missing column 'patient'"):
        read_odir(odir_like / "no_patient.csv")


@needs_odir
def test_real_odir_labels_and_a_patient_split_with_no_patient_on_two_sides() -> None:
    rows = read_odir(ODIR / "labels.csv", verify_images=False)
    assert len(rows) == 6340 and sum(r.referable for r in rows) == 1132
    assert Counter(r.category for r in rows) == {"normal_fundus": 2818, "dr_keyword": 1670, "other_non_dr": 1852}
    assert Counter(r.grade for r in rows if r.category != "other_non_dr") == {0: 2818, 1: 538, 2: 946, 3: 157, 4: 29}
    split = split_by_patient(rows, (0.7, 0.15, 0.15), seed=0)
    patients = [{r.patient_id for r in part} for part in split]
    assert not (patients[0] & patients[1]) and not (patients[0] & patients[2]) and not (patients[1] & patients[2])
    assert sum(len(p) for p in patients) == len({r.patient_id for r in rows}) == 3336
    overall = 1132 / 6340
    for part, share in zip(split, (0.7, 0.15, 0.15), strict=True):
        assert abs(len(part) / len(rows) - share) < 0.01
        assert abs(sum(r.referable for r in part) / len(part) - overall) < 0.02  # stratified by patient
    again = split_by_patient(list(reversed(rows)), (0.7, 0.15, 0.15), seed=0)
    assert {r.path for r in again.test} == {r.path for r in split.test}  # order-independent, seeded


def test_cache_holds_exactly_the_loader_pixels_and_rebuilds_when_a_file_changes(odir_like: Path,
                                                                                tmp_path: Path) -> None:
    rows = read_odir(odir_like / "labels.csv")
    cache = tmp_path / "cache"
    transform = ImageTransform(size=32, preprocessing=FOV_LOCAL_MEAN)
    pixels = preprocessed_array(rows, transform=transform, cache_dir=cache)
    assert pixels.shape == (4, 32, 32, 3) and pixels.dtype == np.uint8
    for i, row in enumerate(rows):
        np.testing.assert_array_equal(pixels[i], load_image(row.path, 32, FOV_LOCAL_MEAN))
    assert len(list(cache.glob("*.u8"))) == 1
    ds = ManifestDataset(rows, transform=transform).use_cache(cache)
    assert len(list(cache.glob("*.u8"))) == 1  # the same images: the same cache, not a second one
    np.testing.assert_array_equal(ds[1][0].numpy(), ManifestDataset(rows, transform=transform)[1][0])
    _disc_jpeg(rows[0].path, 99)  # a changed image is a new key: never the old pixels
    fresh = preprocessed_array(rows, transform=transform, cache_dir=cache, workers=2)
    np.testing.assert_array_equal(fresh[0], load_image(rows[0].path, 32, FOV_LOCAL_MEAN))
    assert len(list(cache.glob("*.u8"))) == 2 and not list(cache.glob("*.part-*"))


def test_odir_layout_reads_through_the_training_config(odir_like: Path) -> None:
    from training.config import TrainConfig
    from training.data.prepare import read_rows

    rows = read_rows(TrainConfig(data=str(odir_like), out="unused", layout="odir", include_other_disease=False))
    assert len(rows) == 3
    with (odir_like / "labels.csv").open() as f:
        assert len(list(csv.DictReader(f))) == 4
