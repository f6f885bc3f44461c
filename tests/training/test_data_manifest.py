"""Manifest readers: EyePACS / APTOS / generic layouts, and bad rows reported with file and line."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from training.data import ManifestError, read_aptos, read_eyepacs, read_manifest, read_synthetic


def _image(path: Path, value: int = 120, fmt: str = "JPEG") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((16, 16, 3), value, np.uint8)).save(path, format=fmt)


@pytest.fixture()
def eyepacs(tmp_path: Path) -> Path:
    for name in ("10_left", "10_right", "13_left", "13_right"):
        _image(tmp_path / "train" / f"{name}.jpeg")
    (tmp_path / "trainLabels.csv").write_text("image,level\n10_left,0\n10_right,2\n13_left,4\n13_right,1\n")
    return tmp_path


def test_eyepacs_rows_are_typed_with_patient_and_eye(eyepacs: Path) -> None:
    rows = read_eyepacs(eyepacs / "trainLabels.csv", eyepacs / "train")
    assert [(r.patient_id, r.eye, r.grade, r.row_no) for r in rows] == [
        ("10", "left", 0, 2),
        ("10", "right", 2, 3),
        ("13", "left", 4, 4),
        ("13", "right", 1, 5),
    ]
    assert [r.referable for r in rows] == [False, True, True, False]
    assert rows[0].path == eyepacs / "train" / "10_left.jpeg"
    assert rows.skipped == [] and rows.source == eyepacs / "trainLabels.csv"


def test_aptos_layout_each_image_is_its_own_patient(tmp_path: Path) -> None:
    for name in ("000c1434d8d7", "001639a390f0"):
        _image(tmp_path / "train_images" / f"{name}.png", fmt="PNG")
    (tmp_path / "train.csv").write_text("id_code,diagnosis\n000c1434d8d7,2\n001639a390f0,4\n")
    rows = read_aptos(tmp_path / "train.csv", tmp_path / "train_images")
    assert [(r.patient_id, r.eye, r.grade) for r in rows] == [("000c1434d8d7", None, 2), ("001639a390f0", None, 4)]


def test_generic_manifest_uses_optional_patient_and_eye_columns(tmp_path: Path) -> None:
    _image(tmp_path / "a" / "x.jpg")
    _image(tmp_path / "b.jpg")
    (tmp_path / "m.csv").write_text("path,grade,patient_id,eye\na/x.jpg,3,p7,left\nb.jpg,0,,\n")
    rows = read_manifest(tmp_path / "m.csv")
    assert [(r.path.name, r.grade, r.patient_id, r.eye) for r in rows] == [
        ("x.jpg", 3, "p7", "left"),
        ("b.jpg", 0, "b.jpg", None),
    ]


BAD_CASES = [
    ("10_left,0\n10_right,7\n", 3, "outside 0-4", "bad_grade"),
    ("10_left,0\n10_right,two\n", 3, "not an integer", "bad_grade"),
    ("10_left,0\n99_left,1\n", 3, "image file not found", "missing_file"),
    ("10_left,0\n10_left,1\n", 3, "duplicate image '10_left' (first listed on line 2)", "duplicate"),
    ("10_left,0\ncorrupt_left,1\n", 3, "cannot read image", "unreadable_image"),
    ("10_left,0\n10_right\n", 3, "different number of fields", "bad_row"),
]


@pytest.mark.parametrize(("body", "line", "problem", "reason"), BAD_CASES)
def test_bad_rows_raise_naming_file_and_line(eyepacs: Path, body: str, line: int, problem: str, reason: str) -> None:
    (eyepacs / "train" / "corrupt_left.jpeg").write_bytes(b"\xff\xd8\xff\xe0 definitely not a JPEG")
    csv_path = eyepacs / "trainLabels.csv"
    csv_path.write_text("image,level\n" + body)
    with pytest.raises(ManifestError) as err:
        read_eyepacs(csv_path, eyepacs / "train")
    message = str(err.value)
    assert message.startswith(f"{csv_path}, line {line}: ") and problem in message
    assert err.value.line == line and err.value.reason == reason and err.value.csv_path == csv_path


def test_skip_mode_counts_every_bad_row_with_its_reason(eyepacs: Path, caplog: pytest.LogCaptureFixture) -> None:
    (eyepacs / "train" / "corrupt_left.jpeg").write_bytes(b"not an image at all")
    csv_path = eyepacs / "trainLabels.csv"
    csv_path.write_text(
        "image,level\n10_left,0\n10_right,9\n13_left,x\n99_left,1\n10_left,2\ncorrupt_left,1\n13_right,1\n,2\n"
    )
    with caplog.at_level(logging.WARNING, logger="training.data.manifest"):
        rows = read_eyepacs(csv_path, eyepacs / "train", on_error="skip")
    assert [r.row_no for r in rows] == [2, 8]
    assert [(s.line, s.reason) for s in rows.skipped] == [
        (3, "bad_grade"),
        (4, "bad_grade"),
        (5, "missing_file"),
        (6, "duplicate"),
        (7, "unreadable_image"),
        (9, "bad_row"),
    ]
    assert all(s.message.startswith(f"{csv_path}, line {s.line}:") for s in rows.skipped)
    assert "skipped 6 of 8 rows" in caplog.text and "bad_grade: 2" in caplog.text
    assert "corrupt_left" not in caplog.text  # image names are identifiers: not logged


def test_missing_column_and_missing_file_fail_even_in_skip_mode(tmp_path: Path) -> None:
    csv_path = tmp_path / "trainLabels.csv"
    csv_path.write_text("image,grade\n10_left,0\n")
    with pytest.raises(ManifestError, match=r"line 1: missing column 'level' \(found: image, grade\)"):
        read_eyepacs(csv_path, tmp_path, on_error="skip")
    with pytest.raises(ManifestError, match="manifest file not found"):
        read_aptos(tmp_path / "nope.csv", tmp_path)
    with pytest.raises(ValueError, match="on_error"):
        read_eyepacs(csv_path, tmp_path, on_error="ignore")  # type: ignore[arg-type]


def test_synthetic_reader_flags_and_filters_ungradable(eyepacs: Path) -> None:
    (eyepacs / "metadata.csv").write_text(
        "image,level,gradable\n10_left,0,1\n10_right,2,0\n13_left,4,1\n13_right,1,1\n"
    )
    rows = read_synthetic(eyepacs)
    assert [r.gradable for r in rows] == [True, False, True, True]
    assert [r.path.stem for r in read_synthetic(eyepacs, gradable_only=True)] == ["10_left", "13_left", "13_right"]
    (eyepacs / "metadata.csv").write_text("image,level,gradable\n10_left,0,maybe\n")
    with pytest.raises(ManifestError, match=r"metadata.csv, line 2: gradable must be 0 or 1"):
        read_synthetic(eyepacs)
