"""Packed shards (training.data.shards) and the content-keyed image cache: lossless, bounded in size, in the
manifest's order, and refused when altered or made for another size."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest

from models.image.preprocessing import FOV_LOCAL_MEAN
from models.image.transform import ImageTransform
from training.config import TrainConfig
from training.data.cache import cache_key, code_digest, preprocessed_array
from training.data.manifest import ManifestRow
from training.data.prepare import read_rows, source_split
from training.data.shards import ShardError, pack_shards, read_index, read_shards

TRANSFORM = ImageTransform(size=32, preprocessing=FOV_LOCAL_MEAN)


def _rows(tiny_data: Path) -> list[ManifestRow]:
    return list(read_rows(TrainConfig(data=str(tiny_data), out="unused")))


@pytest.mark.parametrize("codec", ["png", "webp"])
def test_shards_give_back_the_cached_pixels_exactly_and_stay_under_their_size(codec: str, tiny_data: Path,
                                                                           tmp_path: Path) -> None:
    rows = _rows(tiny_data)
    pixels = np.asarray(preprocessed_array(rows, transform=TRANSFORM, cache_dir=tmp_path / "c"))
    index = pack_shards(rows, pixels, tmp_path / "s", preprocessing=FOV_LOCAL_MEAN, code=code_digest(),
                        source="synth", codec=codec, max_bytes=96 * 1024)
    assert len(index["shards"]) > 1 and all(s["bytes"] <= 96 * 1024 for s in index["shards"])
    assert index["total_bytes"] == sum(p.stat().st_size for p in (tmp_path / "s").glob("*.npz"))
    packed = read_shards(tmp_path / "s", size=32, preprocessing=FOV_LOCAL_MEAN)
    assert np.array_equal(packed.pixels, pixels)  # lossless: bit for bit
    assert [(r.path.name, r.grade, r.patient_id, r.eye) for r in packed.rows] == \
        [(r.path.name, r.grade, r.patient_id, r.eye) for r in rows]


def test_each_shard_holds_one_source_and_reading_restores_the_manifest_order(tiny_data: Path, tmp_path: Path) -> None:
    rows = _rows(tiny_data)
    pixels = np.asarray(preprocessed_array(rows, transform=TRANSFORM, cache_dir=tmp_path / "c"))

    class Sourced:  # a combined manifest's row: the same fields and a source (interleaved here)
        def __init__(self, row: ManifestRow, source: str) -> None:
            self.__dict__.update(row.__dict__, source=source)

    mixed = [Sourced(r, "odir" if i % 3 else "eyepacs") for i, r in enumerate(rows)]
    index = pack_shards(mixed, pixels, tmp_path / "s", preprocessing=FOV_LOCAL_MEAN,  # type: ignore[arg-type]
                        code=code_digest(), source="unused", max_bytes=96 * 1024)
    assert index["sources"] == {"eyepacs": 16, "odir": 32}
    assert {s["file"].split("-")[0] for s in index["shards"]} == {"odir", "eyepacs"}
    packed = read_shards(tmp_path / "s", size=32, preprocessing=FOV_LOCAL_MEAN)
    assert [r.path.name for r in packed.rows] == [r.path.name for r in rows]
    assert np.array_equal(packed.pixels, pixels)


def test_each_rows_copy_travels_so_a_run_on_shards_can_train_on_a_copy_only(tiny_data: Path, tmp_path: Path) -> None:
    rows = [dataclasses.replace(r, source="eyepacs", copy="stretched-256" if i % 2 else "natural-1024")
            for i, r in enumerate(_rows(tiny_data))]
    pixels = np.asarray(preprocessed_array(rows, transform=TRANSFORM, cache_dir=tmp_path / "c"))
    pack_shards(rows, pixels, tmp_path / "s", preprocessing=FOV_LOCAL_MEAN, code=code_digest(), source="unused")
    packed = read_shards(tmp_path / "s", size=32, preprocessing=FOV_LOCAL_MEAN)
    assert [r.copy for r in packed.rows] == [r.copy for r in rows]
    config = TrainConfig(data=str(tmp_path / "s"), out="unused", layout="shards",
                         train_only_copies=("stretched-256",))
    split = source_split(packed.rows, config)
    assert {r.copy for r in split.train} == {"natural-1024", "stretched-256"}
    assert {r.copy for r in split.val + split.test} == {"natural-1024"}
    # rows without a copy (single-source data sets) read back with none
    plain = tmp_path / "plain"
    pack_shards(_rows(tiny_data), pixels, plain, preprocessing=FOV_LOCAL_MEAN, code=code_digest(), source="synth")
    assert {r.copy for r in read_shards(plain, size=32, preprocessing=FOV_LOCAL_MEAN).rows} == {None}


def test_an_altered_shard_or_another_size_is_refused_by_name(tiny_data: Path, tmp_path: Path) -> None:
    rows = _rows(tiny_data)
    pixels = np.asarray(preprocessed_array(rows, transform=TRANSFORM, cache_dir=tmp_path / "c"))
    pack_shards(rows, pixels, tmp_path / "s", preprocessing=FOV_LOCAL_MEAN, code=code_digest(), source="synth")
    with pytest.raises(ShardError, match="--input-size 64"):
        read_shards(tmp_path / "s", size=64, preprocessing=FOV_LOCAL_MEAN)
    shard = tmp_path / "s" / read_index(tmp_path / "s")["shards"][0]["file"]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 1
    shard.write_bytes(bytes(data))
    with pytest.raises(ShardError, match="altered"):
        read_shards(tmp_path / "s", size=32, preprocessing=FOV_LOCAL_MEAN)
    with pytest.raises(ValueError, match="not empty"):
        pack_shards(rows, pixels, tmp_path / "s", preprocessing=FOV_LOCAL_MEAN, code=code_digest(), source="x")


def test_the_cache_key_is_the_content_not_the_path(tiny_data: Path, tmp_path: Path) -> None:
    paths = sorted((tiny_data / "train").glob("*.jpeg"))[:3]
    copies = []
    for p in paths:
        shutil.copy(p, tmp_path / p.name)  # another folder, another mtime: the same cache
        copies.append(tmp_path / p.name)
    assert cache_key(copies, 32, FOV_LOCAL_MEAN) == cache_key(paths, 32, FOV_LOCAL_MEAN)
    data = bytearray(copies[1].read_bytes())
    data[-3] ^= 1
    copies[1].write_bytes(bytes(data))
    assert cache_key(copies, 32, FOV_LOCAL_MEAN) != cache_key(paths, 32, FOV_LOCAL_MEAN)
    assert cache_key(paths, 64, FOV_LOCAL_MEAN) != cache_key(paths, 32, FOV_LOCAL_MEAN)
