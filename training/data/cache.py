"""Preprocess a data set's images once and keep them as one uint8 array on disk.

Decoding a 512-px JPEG and running the FOV fit and local-mean filter costs ~70 ms per image on one core
at 256 px, more than a training step spends per image on the network; every epoch would pay it again.
The preprocessing is deterministic (augmentation runs afterwards, on the batch), so the result is
computed once per (images, size, preprocessing) and memory-mapped: ``[N, size, size, 3]`` uint8, 1.2 GB
for 6,340 images at 256 px. The key is the content: the sha256 of every file's bytes, in order, with the size,
the preprocessing and the decoding and preprocessing code, so a changed image, manifest or preprocessing
builds a new cache, while the same images elsewhere (another machine, another folder) find it: a cache can be
built ahead and copied. The array is written under a temporary name and renamed only when complete, so a
killed build leaves nothing that could be mistaken for a finished one.

Example::

    pixels = preprocessed_array(rows, transform=config.image_transform(), cache_dir=Path("runs/x/cache"))
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from models.image.transform import ImageTransform
from models.io.atomic import atomic_write_bytes, file_sha256
from training.data.images import read_square
from training.data.manifest import ManifestRow

log = logging.getLogger(__name__)
CHUNK = 64  # images per worker task


def code_digest() -> str:
    """sha256 of the code that turns a file into pixels (recorded with packed shards, too)."""
    return hashlib.sha256(_code_source()).hexdigest()


def _code_source() -> bytes:
    """The source of the code that turns a file into pixels: a change to it is a new cache."""
    import models.image.decode
    import models.image.fov
    import models.image.preprocessing
    import models.image.transform
    import training.data.images

    modules = (models.image.decode, models.image.fov, models.image.preprocessing, models.image.transform,
               training.data.images)
    return b"".join(inspect.getsource(m).encode() for m in modules)


def cache_key(paths: Sequence[Path], size: int, preprocessing: str) -> str:
    """sha256 over the decoding and preprocessing code, the contract, the size and the sha256 of every file's
    bytes in order: the content, not where it lies or when it was touched."""
    h = hashlib.sha256(_code_source())
    h.update(f"{preprocessing}\n{size}\n".encode())
    for path in paths:
        h.update(f"{file_sha256(path)}\n".encode())
    return h.hexdigest()[:32]


def _leave_ctrl_c_to_the_parent() -> None:
    """A preprocessing worker ignores Ctrl-C: the parent stops the run and says how to resume, once."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _load_chunk(args: tuple[list[str], ImageTransform]) -> np.ndarray:
    paths, transform = args
    return np.stack([read_square(p, transform) for p in paths])  # [n, size, size, 3]


def preprocessed_array(rows: Sequence[ManifestRow], *, transform: ImageTransform, cache_dir: Path,
                       workers: int = 1, progress: bool = False) -> np.ndarray:
    """The images of ``rows`` in order through ``transform``'s decode and contract, uint8 ``[N, size, size, 3]``
    (a read-only memmap)."""
    size, preprocessing = transform.size, transform.preprocessing
    paths = [Path(r.path) for r in rows]
    tasks = [([str(p) for p in paths[i:i + CHUNK]], transform) for i in range(0, len(paths), CHUNK)]
    return cached_array(cache_dir, cache_key(paths, size, preprocessing), (len(paths), size, size, 3), tasks,
                        _load_chunk, desc=f"preprocessing {len(paths)} images", workers=workers, progress=progress,
                        info={"preprocessing": preprocessing})


def cached_array(cache_dir: Path, key: str, shape: tuple[int, ...], tasks: Sequence[Any],
                 work: Callable[[Any], np.ndarray], *, desc: str, workers: int, progress: bool,
                 info: dict[str, Any]) -> np.ndarray:
    """A uint8 array of ``shape`` kept in ``cache_dir`` as ``<key>.u8`` and ``<key>.json`` (``info`` and the
    shape): read back when it is there, else filled in order from ``work(task)`` (``CHUNK`` images a task; in
    ``workers`` processes when more than one) and put in place only once whole. Returns a read-only memmap."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    data_path, info_path = cache_dir / f"{key}.u8", cache_dir / f"{key}.json"
    if info_path.is_file() and data_path.is_file() and tuple(json.loads(info_path.read_text())["shape"]) == shape:
        return np.memmap(data_path, dtype=np.uint8, mode="r", shape=shape)
    tmp = data_path.with_suffix(f".part-{os.getpid()}")
    out = np.memmap(tmp, dtype=np.uint8, mode="w+", shape=shape)
    bar = tqdm(total=shape[0], desc=desc, disable=not progress)
    try:
        with ExitStack() as stack:
            pool = (stack.enter_context(ProcessPoolExecutor(workers, initializer=_leave_ctrl_c_to_the_parent))
                    if workers > 1 else None)
            for i, chunk in enumerate(pool.map(work, tasks) if pool else map(work, tasks)):
                out[i * CHUNK:i * CHUNK + len(chunk)] = chunk
                bar.update(len(chunk))
    except BaseException:  # Ctrl-C or a bad image: no half-written cache file (it is as large as the data set) stays
        del out
        tmp.unlink(missing_ok=True)
        raise
    finally:
        bar.close()
    out.flush()
    del out
    os.replace(tmp, data_path)
    atomic_write_bytes(info_path, (json.dumps({"shape": list(shape), **info}) + "\n").encode())
    log.info("cached %d images into %s", shape[0], data_path)
    return np.memmap(data_path, dtype=np.uint8, mode="r", shape=shape)
