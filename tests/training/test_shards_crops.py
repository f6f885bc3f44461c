"""Crop shards (codec ``webp-crop``: the FOV crop travels lossy, the local-mean step is made on reading), the
patient split recorded in shards that carry only some of a manifest's sides, and a warm start at another size."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from models.image.preprocessing import FOV_LOCAL_MEAN, disc_mask
from models.image.transform import ImageTransform
from training.config import TrainConfig
from training.data.cache import code_digest
from training.data.crops import crop_rgba, finish_crop, fov_crops
from training.data.images import read_square
from training.data.manifest import ManifestRow
from training.data.prepare import prepare_data, read_rows
from training.data.shards import ShardError, pack_shards, read_shards
from training.data.splits import source_sides, split_by_source

SIZE = 64


def _rows(tiny_data: Path) -> list[ManifestRow]:
    return list(read_rows(TrainConfig(data=str(tiny_data), out="unused")))


def test_the_crop_and_the_local_mean_step_make_the_contract_bit_for_bit(tiny_data: Path) -> None:
    transform = ImageTransform(size=SIZE, preprocessing=FOV_LOCAL_MEAN)
    for row in _rows(tiny_data)[:6]:
        rgba = crop_rgba(row.path, SIZE)
        assert rgba.shape == (SIZE, SIZE, 4) and set(np.unique(rgba[..., 3])) <= {0, 255}
        assert np.array_equal(finish_crop(rgba, SIZE), read_square(row.path, transform))


def test_crop_shards_read_back_near_the_contract_at_their_size_and_below(tiny_data: Path, tmp_path: Path) -> None:
    rows = _rows(tiny_data)
    crops = fov_crops(rows, size=SIZE, cache_dir=tmp_path / "c")
    assert np.array_equal(fov_crops(rows, size=SIZE, cache_dir=tmp_path / "c"), crops)  # the cache, read again
    index = pack_shards(rows, np.asarray(crops), tmp_path / "s", preprocessing=FOV_LOCAL_MEAN, code=code_digest(),
                        source="synth", codec="webp-crop", quality=95)
    assert index["codec"] == "webp-crop" and index["quality"] == 95
    for size in (SIZE, SIZE // 2):
        packed = read_shards(tmp_path / "s", size=size, preprocessing=FOV_LOCAL_MEAN)
        exact = np.stack([read_square(r.path, ImageTransform(size=size, preprocessing=FOV_LOCAL_MEAN))
                          for r in rows])
        diff = np.abs(packed.pixels.astype(np.int16) - exact.astype(np.int16))
        assert packed.pixels.shape == exact.shape
        outside = ~disc_mask(size)  # grey outside the disc: the geometry, not the codec, decides it
        assert diff.mean() < 6.0 and (diff > 0).any()  # lossy, but close to the contract
        assert (packed.pixels[:, outside] == 128).all() and (exact[:, outside] == 128).all()
    with pytest.raises(ShardError, match="--input-size"):
        read_shards(tmp_path / "s", size=SIZE * 2, preprocessing=FOV_LOCAL_MEAN)
    with pytest.raises(ValueError, match="4\\]"):  # a crop codec takes RGBA crops, not preprocessed pixels
        pack_shards(rows, np.asarray(crops)[..., :3].copy(), tmp_path / "t", preprocessing=FOV_LOCAL_MEAN,
                    code=code_digest(), source="synth", codec="webp-crop")


def test_shards_of_some_sides_keep_the_whole_manifests_patient_split(tiny_data: Path, tmp_path: Path) -> None:
    rows = _rows(tiny_data)
    fractions = (0.6, 0.2, 0.2)
    side = source_sides(rows, fractions, seed=3)
    keep = [i for i in range(len(rows)) if side[i] < 2]  # train and validation only
    assert 0 < len(keep) < len(rows)
    crops = np.asarray(fov_crops(rows, size=SIZE, cache_dir=tmp_path / "c"))[keep]
    pack_shards([rows[i] for i in keep], crops, tmp_path / "s", preprocessing=FOV_LOCAL_MEAN, code=code_digest(),
                source="synth", codec="webp-crop", sides=side[keep],
                split={"fractions": list(fractions), "seed": 3})
    config = TrainConfig(data=str(tmp_path / "s"), out=str(tmp_path / "run"), layout="shards", input_size=SIZE,
                         split=fractions, seed=3)
    data = prepare_data(config, progress=False)
    whole = split_by_source(rows, fractions, seed=3)
    assert [r.path.name for r in data.train.rows] == [r.path.name for r in whole.train]
    assert [r.path.name for r in data.val.rows] == [r.path.name for r in whole.val]
    assert len(data.test) == 0
    # the split of the remaining rows alone would differ: the recorded one is what keeps it
    assert [r.path.name for r in split_by_source([rows[i] for i in keep], fractions, seed=3).train] != \
        [r.path.name for r in whole.train]
    with pytest.raises(ShardError, match="pack them again"):
        prepare_data(TrainConfig(data=str(tmp_path / "s"), out=str(tmp_path / "r2"), layout="shards",
                                 input_size=SIZE, split=fractions, seed=4), progress=False)


def test_pack_records_the_split_only_when_it_leaves_rows_out(tiny_data: Path, tmp_path: Path) -> None:
    from training.cli import main as train_main
    from training.data.shards import read_index

    common = ["pack", "--data", str(tiny_data), "--layout", "eyepacs", "--input-size", str(SIZE), "--codec",
              "webp-crop", "--cache-dir", str(tmp_path / "c"), "--workers", "1", "--split-seed", "5"]
    assert train_main([*common, "--out", str(tmp_path / "all")]) == 0
    assert train_main([*common, "--out", str(tmp_path / "some"), "--sides", "train,val"]) == 0
    every, some = read_index(tmp_path / "all"), read_index(tmp_path / "some")
    assert "split" not in every and every["images"] == len(_rows(tiny_data))  # a run may split them as it likes
    assert some["split"] == {"fractions": [0.7, 0.15, 0.15], "seed": 5}
    assert some["sides"]["test"] == 0 and some["images"] == some["sides"]["train"] + some["sides"]["val"] < 48
    assert train_main([*common, "--out", str(tmp_path / "bad"), "--sides", "train,holdout"]) != 0
