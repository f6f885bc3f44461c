"""Training data that travels: a data set already preprocessed at the training size, packed into small shards.

A GPU lease receives at most 64 MiB a command and has no room to decode JPEGs for minutes, so the images go
there already preprocessed (``models.image.transform``: the service's decode and contract at the training size),
as uint8 pixels compressed losslessly (PNG, or WebP lossless: about a quarter smaller, slower to write), with
their labels, patient ids and source, in shards of at most ``max_bytes`` each (16 MiB: what a command may
send back, and a size several of which fit beside a slim tree). ``index.json`` lists the shards with their
sha256, the size, preprocessing and codec, and the code digest of the preprocessing (as the image cache).

Lossless means exact: the pixels read back are the pixels the image folder gives, so a run on the shards
trains the same model as a run on the folder, bit for bit on the CPU (tests/training/test_gpu_lease_dryrun.py).
The codec ``webp-crop`` is the exception, for training sets that lossless shards would make too large to send:
it stores the contract's first step, the FOV crop with its frame mask as alpha (``training.data.crops``), as
lossy WebP, and runs the local-mean step on reading (a seventh of PNG's bytes at 512 px, 3-4 of 255 from the
contract's pixels on average); it may be read at a smaller size than it was packed at.

Shards may carry only some sides of a patient split (``pack_shards(sides=..., split=...)``): the split made on
the whole manifest is recorded per image, and a run on the shards uses it (``Packed.sides_for``), since the
split of the remaining rows alone would differ.
Each shard holds one source (a combined manifest's ``source`` column, else the data set's name); every image
carries its position in the manifest, so reading restores the manifest's order, and with it the patient
split and the batch order of a run on the folder.

Example::

    radscreen-train pack --data /data/odir-5k --layout odir --out .lease/shards --input-size 512
    radscreen-train fit --data .lease/shards --layout shards --out runs/x --input-size 512 ...
"""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from models.image.preprocessing import FOV_LOCAL_MEAN
from models.io.atomic import atomic_write_bytes, file_sha256
from training.data.crops import finish_crop
from training.data.manifest import Manifest, ManifestRow

log = logging.getLogger(__name__)

INDEX = "index.json"
FORMAT = "radscreen-shards/1"
MAX_SHARD_BYTES = 16 * 2**20  # a lease returns files of at most 16 MiB; the same bound keeps sends divisible
CODECS = {"png": ("PNG", {"compress_level": 6}), "webp": ("WEBP", {"lossless": True, "quality": 50, "method": 4}),
          "webp-crop": ("WEBP", {"quality": 90, "alpha_quality": 100, "method": 4})}
CROP_CODECS = ("webp-crop",)  # lossy FOV crops (``training.data.crops``): the local-mean step runs on reading
SIDES = ("train", "val", "test")
CROP_CHUNK = 32  # crops per worker task when reading
_TEXT = ("name", "patient_id", "eye", "category", "source")  # string columns of a shard


class ShardError(ValueError):
    """Shards that cannot be read as this training set: a missing or altered shard, another size or contract."""


@dataclass(frozen=True)
class Packed:
    """A packed data set read back: manifest rows in their original order and their pixels ``[N, S, S, 3]``;
    ``sides``: each row's split (0 train, 1 validation, 2 test) when the shards recorded the split they were
    packed with (``pack_shards(sides=...)``), else None (the run splits the rows it reads)."""

    rows: Manifest
    pixels: np.ndarray
    info: dict[str, Any]
    sides: np.ndarray | None = None

    def sides_for(self, config: Any) -> np.ndarray | None:
        """The recorded split, checked against the run's split fractions and seed (``TrainConfig``)."""
        if self.sides is None:
            return None
        split = self.info["split"]
        mine = {"fractions": [float(f) for f in config.split], "seed": int(config.effective_split_seed)}
        if {"fractions": [float(f) for f in split["fractions"]], "seed": int(split["seed"])} != mine:
            raise ShardError(f"the shards carry a patient split of {split['fractions']} with seed {split['seed']}, "
                             f"the run asks for {mine['fractions']} with seed {mine['seed']}: pack them again "
                             "with the run's --split and --split-seed")
        return self.sides


def _encode(image: np.ndarray, codec: str, quality: int | None = None) -> bytes:
    fmt, options = CODECS[codec]
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format=fmt, **{**options, **({"quality": quality} if quality else {})})
    return buf.getvalue()


def _decode(blob: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(blob)) as im:
        return np.asarray(im.convert("RGB"))


def _decode_crop(blob: bytes, size: int) -> np.ndarray:
    """A crop shard's image: the RGBA crop, then the contract's local-mean step at ``size``."""
    with Image.open(io.BytesIO(blob)) as im:
        rgba = np.asarray(im.convert("RGBA"))
    return finish_crop(rgba, size)


def _decode_crops(args: tuple[list[bytes], int]) -> list[np.ndarray]:
    blobs, size = args
    return [_decode_crop(b, size) for b in blobs]


def _source(row: ManifestRow, default: str) -> str:
    """The row's source (a combined manifest's ``source`` column, where the manifest has one), else ``default``."""
    return str(getattr(row, "source", None) or default)


def _write_shard(path: Path, rows: Sequence[tuple[int, ManifestRow]], blobs: Sequence[bytes], source: str,
                 sides: np.ndarray | None = None) -> None:
    offsets = np.cumsum([0, *(len(b) for b in blobs)]).astype(np.int64)
    columns: dict[str, np.ndarray] = {
        "images": np.frombuffer(b"".join(blobs), dtype=np.uint8), "offsets": offsets,
        "order": np.array([i for i, _ in rows], dtype=np.int64),
        "grade": np.array([r.grade for _, r in rows], dtype=np.int8),
        "row_no": np.array([r.row_no for _, r in rows], dtype=np.int64),
        "gradable": np.array([r.gradable for _, r in rows], dtype=bool),
        "name": np.array([r.path.name for _, r in rows]), "patient_id": np.array([r.patient_id for _, r in rows]),
        "eye": np.array([r.eye or "" for _, r in rows]), "category": np.array([r.category or "" for _, r in rows]),
        "source": np.array([source] * len(rows)),
        "copy": np.array([getattr(r, "copy", None) or "" for _, r in rows]),  # which copy of the source's images
        **({"side": np.array([sides[i] for i, _ in rows], dtype=np.int8)} if sides is not None else {}),
    }
    buf = io.BytesIO()
    np.savez(buf, allow_pickle=False, **columns)  # uncompressed: the images inside are compressed already
    atomic_write_bytes(path, buf.getvalue())


def pack_shards(rows: Sequence[ManifestRow], pixels: np.ndarray, out: Path, *, preprocessing: str, code: str,
                source: str, codec: str = "png", max_bytes: int = MAX_SHARD_BYTES, workers: int = 4,
                settings: dict[str, Any] | None = None, quality: int | None = None,
                sides: np.ndarray | None = None, split: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write ``pixels`` (uint8 ``[N, S, S, 3]``, ``rows``' images in order; ``[N, S, S, 4]`` FOV crops for a
    crop codec) as shards into ``out``; the index.

    ``code`` is the digest of the preprocessing code (``training.data.cache.code_digest``), ``source`` the name
    of rows without a source of their own, ``settings`` what selected the rows (recorded in the index),
    ``quality`` a lossy codec's quality. ``sides`` (each row's split, 0/1/2) with ``split`` (``{"fractions",
    "seed"}``: what made it, on the whole manifest) are recorded, so a run on shards that carry only some of a
    manifest's rows keeps the patient split of a run on all of them.
    """
    if codec not in CODECS:
        raise ValueError(f"Unknown codec {codec!r}; expected one of: {', '.join(CODECS)}.")
    channels = 4 if codec in CROP_CODECS else 3
    if pixels.dtype != np.uint8 or pixels.ndim != 4 or pixels.shape[0] != len(rows) or pixels.shape[3] != channels:
        raise ValueError(f"pixels must be uint8 [{len(rows)}, S, S, {channels}] for codec {codec}, "
                         f"got {pixels.dtype} {list(pixels.shape)}")
    if (sides is None) != (split is None) or (sides is not None and len(sides) != len(rows)):
        raise ValueError("sides (one per row) and split go together")
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise ValueError(f"{out} is not empty: shards go into a folder of their own")
    with ThreadPoolExecutor(max(1, workers)) as pool:  # Pillow's encoders release the GIL
        blobs = list(pool.map(lambda i: _encode(np.asarray(pixels[i]), codec, quality), range(len(rows))))
    budget = max_bytes - 64 * 1024  # the npz container and the label columns
    if max((len(b) for b in blobs), default=0) > budget:
        raise ValueError(f"one image takes more than a shard's {max_bytes} bytes; raise --shard-mib")
    by_source: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        by_source.setdefault(_source(row, source), []).append(i)
    shards: list[dict[str, Any]] = []
    for name, members in by_source.items():
        start = 0
        while start < len(members):
            stop, size = start, 0
            while stop < len(members) and size + len(blobs[members[stop]]) <= budget:
                size += len(blobs[members[stop]])
                stop += 1
            part = members[start:stop]
            path = out / f"{name}-{len([s for s in shards if s['source'] == name]):04d}.npz"
            _write_shard(path, [(i, rows[i]) for i in part], [blobs[i] for i in part], name, sides)
            shards.append({"file": path.name, "source": name, "images": len(part), "bytes": path.stat().st_size,
                           "sha256": file_sha256(path)})
            start = stop
    index = {"format": FORMAT, "images": len(rows), "size": int(pixels.shape[1]), "preprocessing": preprocessing,
             "code": code, "codec": codec, "max_shard_bytes": max_bytes, "settings": settings or {},
             **({"quality": quality or CODECS[codec][1]["quality"]} if codec in CROP_CODECS else {}),
             **({"split": split, "sides": {n: int((np.asarray(sides) == k).sum()) for k, n in enumerate(SIDES)}}
                if sides is not None else {}),
             "sources": {k: len(v) for k, v in by_source.items()}, "raw_bytes": int(pixels.nbytes),
             "total_bytes": sum(s["bytes"] for s in shards), "shards": shards}
    atomic_write_bytes(out / INDEX, (json.dumps(index, indent=2) + "\n").encode())
    log.info("packed %d images into %d shards (%d bytes)", len(rows), len(shards), index["total_bytes"])
    return index


def read_index(root: Path) -> dict[str, Any]:
    """The index of the shards in ``root`` (``root`` may also be the index file itself)."""
    path = root / INDEX if root.is_dir() else root
    if not path.is_file():
        raise ShardError(f"{path}: no shard index (write one with `radscreen-train pack`)")
    info: dict[str, Any] = json.loads(path.read_text())
    if info.get("format") != FORMAT:
        raise ShardError(f"{path}: format {info.get('format')!r}, expected {FORMAT!r}")
    return info


def read_shards(root: Path, *, size: int, preprocessing: str, gradable_only: bool = True,
                workers: int = 8) -> Packed:
    """Every image of the shards in ``root``, checked against the index's sha256 and the run's size and
    preprocessing, decoded (``workers`` threads) into one uint8 array in the manifest's original order."""
    info = read_index(root)
    folder = root if root.is_dir() else root.parent
    crops = info["codec"] in CROP_CODECS
    if crops and preprocessing == FOV_LOCAL_MEAN and info["preprocessing"] == preprocessing and size <= info["size"]:
        pass  # FOV crops: the local-mean step (and a smaller size) is made on reading
    elif (info["size"], info["preprocessing"]) != (size, preprocessing):
        raise ShardError(f"{folder}: shards of {info['size']} px {info['preprocessing']}, the run wants {size} px "
                         f"{preprocessing}: pack them again with --input-size {size} --preprocessing {preprocessing}")
    columns: dict[str, list[np.ndarray]] = {}
    blobs: list[bytes] = []
    for shard in info["shards"]:
        path = folder / shard["file"]
        if not path.is_file() or file_sha256(path) != shard["sha256"]:
            raise ShardError(f"{path}: missing or altered (its sha256 is not the index's); send the shards again")
        with np.load(path, allow_pickle=False) as z:
            images, offsets = z["images"], z["offsets"]
            blobs += [images[offsets[i]:offsets[i + 1]].tobytes() for i in range(len(offsets) - 1)]
            optional = tuple(key for key in ("side", "copy") if key in z.files)  # shards packed before "copy": none
            for key in ("order", "grade", "row_no", "gradable", *_TEXT, *optional):
                columns.setdefault(key, []).append(z[key])
    col = {k: np.concatenate(v) for k, v in columns.items()}
    order = np.argsort(col["order"], kind="stable")
    keep = [int(i) for i in order if col["gradable"][i] or not gradable_only]
    if crops:  # the local-mean step is numpy arithmetic that holds the GIL: processes, in chunks
        chunks = [([blobs[i] for i in keep[j:j + CROP_CHUNK]], size) for j in range(0, len(keep), CROP_CHUNK)]
        with ProcessPoolExecutor(max(1, (os.cpu_count() or 2) - 1)) as procs:
            decoded = [image for chunk in procs.map(_decode_crops, chunks) for image in chunk]
    else:
        with ThreadPoolExecutor(max(1, workers)) as pool:
            decoded = list(pool.map(lambda i: _decode(blobs[i]), keep))
    if any(d.shape != (size, size, 3) for d in decoded):
        raise ShardError(f"{folder}: an image decodes to another shape than the index's {size} px")
    pixels = np.stack(decoded) if decoded else np.zeros((0, size, size, 3), np.uint8)
    rows = [ManifestRow(path=Path(str(col["name"][i])), grade=int(col["grade"][i]),
                        patient_id=str(col["patient_id"][i]), eye=str(col["eye"][i]) or None,
                        row_no=int(col["row_no"][i]), gradable=bool(col["gradable"][i]),
                        category=str(col["category"][i]) or None,
                        source=str(col["source"][i]) if "source" in col else None,
                        copy=str(col["copy"][i]) or None if "copy" in col else None) for i in keep]
    sides = np.asarray([int(col["side"][i]) for i in keep], dtype=np.int64) if "side" in col else None
    return Packed(Manifest(rows, source=folder / INDEX), pixels, info, sides)
