"""``radscreen-train fit --layout eyepacs|aptos --data <folder>`` finds the images where Kaggle puts them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from training.config import TrainConfig
from training.data.prepare import read_rows


def _image(path: Path, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, (16, 16, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)


def _rows(data: Path, layout: str) -> list[tuple[str, int, str, str | None]]:
    rows = read_rows(TrainConfig(data=str(data), out=str(data / "run"), layout=layout))  # type: ignore[arg-type]
    return [(r.path.relative_to(data).as_posix(), r.grade, r.patient_id, r.eye) for r in rows]


@pytest.mark.parametrize("subfolder", [True, False], ids=["train-folder", "beside-csv"])
def test_eyepacs_folder(tmp_path: Path, subfolder: bool) -> None:
    (tmp_path / "trainLabels.csv").write_text("image,level\n10_left,0\n10_right,3\n")
    where = "train/" if subfolder else ""
    _image(tmp_path / f"{where}10_left.jpeg", 0)
    _image(tmp_path / f"{where}10_right.jpeg", 1)
    expected = [(f"{where}10_left.jpeg", 0, "10", "left"), (f"{where}10_right.jpeg", 3, "10", "right")]
    assert _rows(tmp_path, "eyepacs") == expected
    by_csv = read_rows(TrainConfig(data=str(tmp_path / "trainLabels.csv"), out=str(tmp_path / "run"), layout="eyepacs"))
    assert [r.path for r in by_csv] == [tmp_path / p for p, *_ in expected]  # --data may name the CSV itself


def test_aptos_folder(tmp_path: Path) -> None:
    (tmp_path / "train.csv").write_text("id_code,diagnosis\nabc123,2\ndef456,0\n")
    _image(tmp_path / "train_images" / "abc123.png", 0)
    _image(tmp_path / "train_images" / "def456.png", 1)
    assert _rows(tmp_path, "aptos") == [
        ("train_images/abc123.png", 2, "abc123", None),
        ("train_images/def456.png", 0, "def456", None),
    ]
