"""FOV crops: the first step of the ``FOV_LOCAL_MEAN`` contract alone, for shards that travel lossy.

``preprocess_fundus`` is two steps: the crop to the fitted FOV circle (``crop_to_fov``: geometry, and a mask of
the pixels that came from the frame) and the local-mean subtraction. The second step multiplies the image's
fine texture by four, so its output compresses three times worse than the crop it came from (at 512 px, WebP
at quality 90: 22 KiB a crop against 56 KiB a preprocessed image, measured on 24 ODIR and EyePACS eyes). A
shard that stores the crop (RGB, with the mask as its alpha channel) and runs the second step on reading
(``training.data.shards``, codec ``webp-crop``) carries a training set at 512 px in a few lease commands.

``crop_rgba`` is the crop as ``read_square`` would make it (the same decode, circle fit and crop), ``fov_crops``
the crops of a manifest, in order, computed once into a memmap in ``cache_dir`` (keyed like the image cache).

Example::

    crops = fov_crops(rows, size=512, cache_dir=Path("/cache/crops"), workers=2)   # uint8 [N, 512, 512, 4]
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from models.image.decode import decode_image
from models.image.fov import fit_fov_circle
from models.image.preprocessing import FOV_LOCAL_MEAN, crop_to_fov, disc_mask, local_mean_normalise
from training.data.cache import CHUNK, cache_key, cached_array
from training.data.images import ImageLoadError
from training.data.manifest import ManifestRow

STAGE = "fov-crop"  # what a crop cache and crop shards hold: the contract's first step


def crop_rgba(path: Path | str, size: int) -> np.ndarray:
    """The FOV crop of the image at ``path``: uint8 ``[size, size, 4]``, RGB and alpha 255 where the pixel came
    from the frame (``crop_to_fov``'s mask), 0 where the crop was padded."""
    try:
        rgb = decode_image(path, size)
    except Exception as exc:
        raise ImageLoadError(f"cannot read image {path}: {type(exc).__name__}: {exc}") from exc
    square, valid = crop_to_fov(rgb, fit_fov_circle(rgb), size)
    return np.concatenate([square, (valid * np.uint8(255))[..., None]], axis=2)


def finish_crop(rgba: np.ndarray, size: int) -> np.ndarray:
    """The contract's second step on a crop: uint8 ``[S, S, 4]`` -> the preprocessed uint8 ``[size, size, 3]``.

    A crop larger than ``size`` is first resized (RGB bilinear, antialiased; the mask by its majority), as
    ``crop_to_fov`` would have resized the frame: crops packed at 512 px also train a 256 px run.
    """
    from PIL import Image

    rgb, alpha = rgba[..., :3], rgba[..., 3]
    if rgba.shape[0] != size:
        if rgba.shape[0] < size:
            raise ValueError(f"a {rgba.shape[0]} px crop cannot make a {size} px input (only smaller ones)")
        rgb = np.asarray(Image.fromarray(np.ascontiguousarray(rgb)).resize((size, size), Image.Resampling.BILINEAR))
        alpha = np.asarray(Image.fromarray(np.ascontiguousarray(alpha)).resize((size, size),
                                                                               Image.Resampling.BILINEAR))
    return local_mean_normalise(np.ascontiguousarray(rgb), (alpha >= 128) & disc_mask(size))


def _crop_chunk(args: tuple[list[str], int]) -> np.ndarray:
    paths, size = args
    return np.stack([crop_rgba(p, size) for p in paths])


def fov_crops(rows: Sequence[ManifestRow], *, size: int, cache_dir: Path, workers: int = 1,
              progress: bool = False) -> np.ndarray:
    """The crops of ``rows`` in order, uint8 ``[N, size, size, 4]`` (a read-only memmap kept in ``cache_dir``)."""
    paths = [Path(r.path) for r in rows]
    tasks = [([str(p) for p in paths[i:i + CHUNK]], size) for i in range(0, len(paths), CHUNK)]
    return cached_array(cache_dir, cache_key(paths, size, f"{FOV_LOCAL_MEAN}:{STAGE}"), (len(paths), size, size, 4),
                        tasks, _crop_chunk, desc=f"cropping {len(paths)} images", workers=max(1, workers),
                        progress=progress, info={"stage": STAGE})
