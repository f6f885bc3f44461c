"""Several sources in one manifest: the builder, the CSV round trip, and patient splits made within each source."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from support.shared_data import EYEPACS, ODIR, missing_reason
from training.config import TrainConfig
from training.data import ManifestError, ManifestRow, read_manifest, read_odir, split_by_patient
from training.data.prepare import read_rows, source_split
from training.data.sources import (
    NATURAL_COPY,
    STRETCHED_COPY,
    build_sources_manifest,
    read_eyepacs_labels,
    source_counts,
    write_sources_manifest,
)
from training.data.splits import DataSplit, split_by_source

needs_both = pytest.mark.skipif(not ((ODIR / "labels.csv").is_file() and (EYEPACS / "labels.csv").is_file()),
                                reason=missing_reason(EYEPACS))


def _jpeg(path: Path, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 255, (24, 24, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path, quality=90)


@pytest.fixture()
def two_sources(tmp_path: Path) -> tuple[Path, Path]:
    """An ODIR-like and an EyePACS-like folder whose patient numbers overlap (patients 1 and 2 in both)."""
    odir, eyepacs = tmp_path / "odir", tmp_path / "eyepacs"
    odir_rows = [(1, "left", 0, "normal_fundus"), (1, "right", 2, "dr_keyword"), (2, "left", 0, "other_non_dr")]
    eyepacs_rows = [(1, "left", 3, NATURAL_COPY), (1, "right", 0, NATURAL_COPY), (2, "left", 1, STRETCHED_COPY),
                    (2, "right", 4, STRETCHED_COPY)]
    for i, (patient, eye, _, _) in enumerate(odir_rows):
        _jpeg(odir / "images" / f"{patient}_{eye}.jpg", i)
    for i, (patient, eye, _, _) in enumerate(eyepacs_rows):
        _jpeg(eyepacs / "images" / f"{patient}_{eye}.jpg", 10 + i)
    (odir / "labels.csv").write_text("image,patient,eye,dr_grade,referable,category,keywords\n" + "".join(
        f"images/{p}_{e}.jpg,{p},{e},{g},{int(g >= 2)},{c},kw\n" for p, e, g, c in odir_rows))
    (eyepacs / "labels.csv").write_text("image,patient,eye,dr_grade,referable,copy\n" + "".join(
        f"{p}_{e}.jpg,{p},{e},{g},{int(g >= 2)},{c}\n" for p, e, g, c in eyepacs_rows))
    return odir, eyepacs


def test_the_manifest_names_each_eyes_source_and_reads_back_unchanged(two_sources: tuple[Path, Path],
                                                                       tmp_path: Path) -> None:
    odir, eyepacs = two_sources
    rows = build_sources_manifest(odir=odir, eyepacs=eyepacs)
    assert [(r.source, r.patient_id, r.eye, r.grade, r.copy) for r in rows] == [
        ("odir", "1", "left", 0, None), ("odir", "1", "right", 2, None), ("odir", "2", "left", 0, None),
        ("eyepacs", "1", "left", 3, NATURAL_COPY), ("eyepacs", "1", "right", 0, NATURAL_COPY),
        ("eyepacs", "2", "left", 1, STRETCHED_COPY), ("eyepacs", "2", "right", 4, STRETCHED_COPY)]
    assert [r.referable for r in rows] == [False, True, False, True, False, False, True]  # grade >= 2
    path = write_sources_manifest(rows, tmp_path / "odir-eyepacs.csv")
    with path.open(newline="") as f:
        header = next(csv.reader(f))
    assert header == ["path", "grade", "patient_id", "eye", "source", "copy", "category"]  # source: a plain column
    back = read_manifest(path)
    keep = ("grade", "patient_id", "eye", "source", "copy", "category")
    assert [tuple(getattr(r, k) for k in keep) for r in back] == [tuple(getattr(r, k) for k in keep) for r in rows]
    assert [r.path.resolve() for r in back] == [r.path.resolve() for r in rows]
    assert "odir/images/1_left.jpg" in path.read_text()  # under the CSV's folder: stored relative to it
    assert source_counts(back)["eyepacs"] == {"eyes": 4, "patients": 2, "referable": 2}
    config = TrainConfig(data=str(path), out=str(tmp_path / "run"), layout="manifest", include_other_disease=False)
    assert [r.category for r in read_rows(config) if r.source == "odir"] == ["normal_fundus", "dr_keyword"]


def test_the_builder_can_leave_out_other_diseases_and_refuses_an_unknown_copy(two_sources: tuple[Path, Path]) -> None:
    odir, eyepacs = two_sources
    rows = build_sources_manifest(odir=odir, eyepacs=eyepacs, include_other_disease=False)
    assert [r.category for r in rows if r.source == "odir"] == ["normal_fundus", "dr_keyword"]
    text = (eyepacs / "labels.csv").read_text()
    (eyepacs / "labels.csv").write_text(text.replace(STRETCHED_COPY, "sepia-512", 1))
    with pytest.raises(ManifestError, match="unknown copy"):
        read_eyepacs_labels(eyepacs / "labels.csv")
    with pytest.raises(ValueError, match="at least one source"):
        build_sources_manifest()


def _rows(n_patients: int, source: str | None, seed: int,
          copies: tuple[str | None, ...] = (None,)) -> list[ManifestRow]:
    rng = np.random.default_rng(seed)
    rows: list[ManifestRow] = []
    for p in range(n_patients):
        copy = copies[p % len(copies)]
        for eye in ("left", "right")[: 1 + int(rng.random() < 0.8)]:
            rows.append(ManifestRow(Path(f"/{source}/{p}_{eye}.jpg"), int(rng.choice(5, p=[.6, .1, .2, .05, .05])),
                                    str(p), eye, len(rows) + 2, source=source, copy=copy))
    return rows


def _sides(split: DataSplit) -> dict[tuple[str | None, str], set[int]]:
    seen: dict[tuple[str | None, str], set[int]] = {}
    for k, part in enumerate(split):
        for row in part:
            seen.setdefault((row.source, row.patient_id), set()).add(k)
    return seen


def test_no_patient_lands_on_two_sides_per_source_and_pooled() -> None:
    # both sources number their patients 0..n: the same number is two people, split with their own source
    rows = _rows(400, "odir", 1) + _rows(300, "eyepacs", 2, copies=(NATURAL_COPY, STRETCHED_COPY))
    split = split_by_source(rows, (0.7, 0.15, 0.15), seed=3)
    assert sorted(map(id, [r for part in split for r in part])) == sorted(map(id, rows))
    assert all(len(s) == 1 for s in _sides(split).values())
    for source in ("odir", "eyepacs"):
        mine = [r for r in rows if r.source == source]
        per_source = split_by_patient(mine, (0.7, 0.15, 0.15), seed=3)  # the source alone splits the same way
        assert [[r for r in part if r.source == source] for part in split] == [list(p) for p in per_source]
        shares = np.array([sum(r.source == source for r in part) for part in split]) / len(mine)
        assert np.allclose(shares, (0.7, 0.15, 0.15), atol=0.02)
        referable = [np.mean([r.referable for r in part if r.source == source]) for part in split]
        assert max(referable) - min(referable) < 0.06  # stratified by referable within the source
    assert split_by_source(rows, (0.7, 0.15, 0.15), seed=3) == split
    assert split_by_source(rows, (0.7, 0.15, 0.15), seed=4) != split


def test_a_manifest_without_sources_splits_as_before() -> None:
    rows = _rows(200, None, 5)
    assert split_by_source(rows, (0.8, 0.1, 0.1), seed=1) == split_by_patient(rows, (0.8, 0.1, 0.1), seed=1)


def test_copy_filters_keep_the_validation_and_test_patients_of_the_other_copies(tmp_path: Path) -> None:
    rows = _rows(300, "odir", 1) + _rows(300, "eyepacs", 2, copies=(NATURAL_COPY, STRETCHED_COPY))
    path = write_manifest_stub(rows, tmp_path / "m.csv")
    splits = {}
    for name, kw in (("all", {}), ("train_only", {"train_only_copies": (STRETCHED_COPY,)}),
                     ("excluded", {"exclude_copies": (STRETCHED_COPY,)})):
        config = TrainConfig(data=str(path), out=str(tmp_path / name), layout="manifest", **kw)  # type: ignore[arg-type]
        splits[name] = source_split(read_rows(config), config)
    keys = {name: [{(r.source, r.patient_id, r.eye) for r in part} for part in split] for name, split in splits.items()}
    natural = [{k for k in part if k[0] == "odir" or int(k[1]) % 2 == 0} for part in keys["all"]]
    assert keys["excluded"] == natural  # the same validation and test patients in every recipe
    assert keys["train_only"][1:] == natural[1:]
    assert keys["train_only"][0] == keys["all"][0]  # stretched eyes still trained on
    assert all(r.copy != STRETCHED_COPY for part in splits["excluded"] for r in part)
    with pytest.raises(ValueError, match="both excluded and train-only"):
        TrainConfig(data="x", out="y", exclude_copies=("a",), train_only_copies=("a",))


def write_manifest_stub(rows: list[ManifestRow], path: Path) -> Path:
    """The rows as a manifest CSV whose images exist (one shared tiny JPEG per row)."""
    placed = [replace(row, path=path.parent / "images" / f"{row.source}-{row.path.name}") for row in rows]
    for row in placed:
        _jpeg(row.path, 0)
    return write_sources_manifest(placed, path)


@needs_both
def test_the_real_manifest_matches_the_readmes_and_keeps_odirs_split() -> None:
    rows = build_sources_manifest(odir=ODIR, eyepacs=EYEPACS, verify_images=False)
    counts = source_counts(rows)
    assert (counts["odir"]["eyes"], counts["odir"]["referable"]) == (6340, 1132)
    assert (counts["eyepacs"]["eyes"], counts["eyepacs"]["patients"], counts["eyepacs"]["referable"]) == (5363, 2682,
                                                                                                           1281)
    assert (counts[f"eyepacs/{NATURAL_COPY}"]["eyes"], counts[f"eyepacs/{STRETCHED_COPY}"]["eyes"]) == (850, 4513)
    split = split_by_source(rows, (0.7, 0.15, 0.15), seed=0)
    assert all(len(s) == 1 for s in _sides(split).values())
    alone = split_by_patient(read_odir(ODIR / "labels.csv", verify_images=False), (0.7, 0.15, 0.15), seed=0)
    for part, reference in zip(split, alone, strict=True):  # ODIR's eyes stay where model 1.0.0 put them
        assert [r.path for r in part if r.source == "odir"] == [r.path for r in reference]
