"""Preprocess a data set's images once and keep them as one uint8 array on disk.

Decoding a 512-px JPEG and running the FOV fit and local-mean filter costs ~70 ms per image on one core
at 256 px, more than a training step spends per image on the network; every epoch would pay it again.
The preprocessing is deterministic (augmentation runs afterwards, on the batch), so the result is
computed once per (images, size, preprocessing) and memory-mapped: ``[N, size, size, 3]`` uint8, 1.2 GB
for 6,340 images at 256 px. The key covers each file's path, size and modification time and the decoding
and preprocessing code, so a changed image, manifest or preprocessing builds a new cache; the array is
written under a temporary name and renamed only when complete, so a killed build leaves nothing that
could be mistaken for a finished one.

Example::

    pixels = preprocessed_array(rows, transform=config.image_transform(), cache_dir=Path("runs/x/cache"))
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from tqdm import tqdm

from models.atomic import atomic_write_bytes
from models.transform import ImageTransform
from training.data.images import read_square
from training.data.manifest import ManifestRow

log = logging.getLogger(__name__)
CHUNK = 64  # images per worker task


def _code_digest() -> bytes:
    """The source of the code that turns a file into pixels: a change to it is a new cache."""
    import models.decode
    import models.fov
    import models.preprocessing
    import models.transform
    import training.data.images

    modules = (models.decode, models.fov, models.preprocessing, models.transform, training.data.images)
    return b"".join(inspect.getsource(m).encode() for m in modules)


def cache_key(paths: Sequence[Path], size: int, preprocessing: str) -> str:
    """sha256 over the decoding and preprocessing code, the contract, the size and every file's path, byte
    size and mtime (ns)."""
    h = hashlib.sha256(_code_digest())
    h.update(f"{preprocessing}\n{size}\n".encode())
    for path in paths:
        st = path.stat()
        h.update(f"{path.resolve()}\t{st.st_size}\t{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:32]


def _load_chunk(args: tuple[list[str], ImageTransform]) -> np.ndarray:
    paths, transform = args
    return np.stack([read_square(p, transform) for p in paths])  # [n, size, size, 3]


def preprocessed_array(rows: Sequence[ManifestRow], *, transform: ImageTransform, cache_dir: Path,
                       workers: int = 1, progress: bool = False) -> np.ndarray:
    """The images of ``rows`` in order through ``transform``'s decode and contract, uint8 ``[N, size, size, 3]``
    (a read-only memmap)."""
    size, preprocessing = transform.size, transform.preprocessing
    paths = [Path(r.path) for r in rows]
    cache_dir.mkdir(parents=True, exist_ok=True)
    key = cache_key(paths, size, preprocessing)
    data_path, info_path = cache_dir / f"{key}.u8", cache_dir / f"{key}.json"
    shape = (len(paths), size, size, 3)
    if info_path.is_file() and data_path.is_file():
        info = json.loads(info_path.read_text())
        if tuple(info["shape"]) == shape:
            return np.memmap(data_path, dtype=np.uint8, mode="r", shape=shape)
    tmp = data_path.with_suffix(f".part-{os.getpid()}")
    out = np.memmap(tmp, dtype=np.uint8, mode="w+", shape=shape)
    tasks = [([str(p) for p in paths[i:i + CHUNK]], transform) for i in range(0, len(paths), CHUNK)]
    bar = tqdm(total=len(paths), desc=f"preprocessing {len(paths)} images", disable=not progress)
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            for i, chunk in enumerate(pool.map(_load_chunk, tasks)):
                out[i * CHUNK:i * CHUNK + len(chunk)] = chunk
                bar.update(len(chunk))
    else:
        for i, task in enumerate(tasks):
            chunk = _load_chunk(task)
            out[i * CHUNK:i * CHUNK + len(chunk)] = chunk
            bar.update(len(chunk))
    bar.close()
    out.flush()
    del out
    os.replace(tmp, data_path)
    atomic_write_bytes(info_path, (json.dumps({"shape": list(shape), "preprocessing": preprocessing}) + "\n").encode())
    log.info("preprocessed %d images into %s", len(paths), data_path)
    return np.memmap(data_path, dtype=np.uint8, mode="r", shape=shape)
