"""The one fundus preprocessing shared by training, the service and the batch job.

Two contracts, named in the artifact's ``config.json`` (``input.preprocessing``), because the
preprocessing is part of what a model learnt and travels with its weights:

- ``LEGACY`` (the text every artifact written before this module carries, and the value when the
  field is missing): the field of view centred on a square (``fov_square``), a bilinear resize
  (``resize_square``), ``(x - mean) / std``. Models trained before ``FOV_LOCAL_MEAN`` (default model
  0.1.0) were trained on square renders, which ``fov_square`` keeps as they are.
- ``FOV_LOCAL_MEAN`` (``"fov-local-mean/1"``), for new models, so a real photograph lands where the
  training images were:

  1. **crop to the fitted FOV circle** (``models.image.fov.fit_fov_circle``): the output square is the
     circle's bounding box, so the FOV is centred and its diameter is exactly ``size`` px whatever
     the camera, frame format (3:2, 4:3, square) or resolution. A disc clipped by the frame is
     cropped to the part inside the frame, resized, and only then padded *at output scale*: no
     array larger than the input or the output is ever made (a 100000 x 10 px image costs an
     output-sized array, not a 100000 x 100000 one). No circle (no fundus edge): the whole frame,
     centred, is used;
  2. **local-mean subtraction** (Graham, Kaggle DR 2015; the bdlb pipeline): ``4 I - 4 G_sigma(I) +
     128`` per channel, ``sigma = size / 60`` (a thirtieth of the FOV radius), with the local mean
     taken *inside the FOV only* (masked, normalised blur, so the dark surround does not darken the
     rim), clipped to [0, 255]; outside the FOV (and outside 97 % of its radius, where the rim
     glare sits) the value is 128. This removes camera-specific brightness, colour cast and
     vignetting and keeps vessels and lesions, so the statistics of real and synthetic images
     become comparable (tests/models/test_preprocessing.py);
  3. then, as for every model, scaling to [0, 1] and ``(x - mean) / std`` with the artifact's
     statistics (``channel_stats`` over preprocessed training images).

Both start from the decoded frame of ``models.image.decode``; ``models.image.transform.ImageTransform`` puts decode,
contract and normalisation together as the one callable an artifact hands out.

Example::

    square = preprocess_fundus(rgb, 256)        # uint8 [256, 256, 3]
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image

from models.image.fov import FovCircle, fit_fov_circle

LEGACY = "decode to RGB, resize to size x size (bilinear), scale to [0, 1], normalise each channel: (x - mean) / std"
FOV_LOCAL_MEAN = "fov-local-mean/1"
PREPROCESSINGS: tuple[str, ...] = (LEGACY, FOV_LOCAL_MEAN)
BY_NAME: dict[str, str] = {"legacy": LEGACY, FOV_LOCAL_MEAN: FOV_LOCAL_MEAN}  # short names (CLI choices)
RIM_FRACTION = 0.97  # beyond this share of the radius the local-mean output is set to grey
SIGMA_FRACTION = 1 / 60  # local-mean sigma, as a share of the output side (= radius / 30)
FOV_THRESHOLD = 12  # of 255: fundus cameras record a near-black background outside the FOV


def check_preprocessing(name: str) -> str:
    """Return ``name`` if it is a known preprocessing contract, else raise ValueError naming the valid ones."""
    if name not in PREPROCESSINGS:
        raise ValueError(f"Unknown preprocessing {name!r}; expected one of: {', '.join(map(repr, PREPROCESSINGS))}")
    return name


def disc_mask(size: int, fraction: float = 1.0) -> np.ndarray:
    """bool [size, size]: the centred disc of radius ``fraction * size / 2``."""
    c = (size - 1) / 2
    yy, xx = np.ogrid[0:size, 0:size]
    return (xx - c) ** 2 + (yy - c) ** 2 <= (fraction * size / 2) ** 2


def crop_to_fov(rgb: np.ndarray, circle: FovCircle | None, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Square ``size`` px around the FOV circle: (uint8 [size, size, 3], bool [size, size] "from the frame").

    The circle's bounding box (an ellipse's, for a stretched disc: it comes out round) is mapped onto the
    output; its part inside the frame is cut out (a
    view), resized, and pasted into a black output-sized canvas; black padding a previous step
    added along a straight cut (``FovCircle.box``) counts as outside the frame. ``circle=None`` uses the circle
    circumscribing the frame's centred square (the whole frame, padded to a square).
    """
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    h, w = rgb.shape[:2]
    bx0, by0, bx1, by1 = 0, 0, w, h  # the recorded part of the frame (a padded upload's padding excluded)
    if circle is None:
        cx, cy, rx = (w - 1) / 2, (h - 1) / 2, max(h, w) / 2
        ry = rx
    else:
        cx, cy, rx, ry = circle.cx, circle.cy, circle.radius, circle.ry
        bx0, by0 = circle.box[0], circle.box[1]
        bx1 = w if circle.box[2] < 0 else circle.box[2] + 1
        by1 = h if circle.box[3] < 0 else circle.box[3] + 1
    sx, sy = size / (2 * rx), size / (2 * ry)  # output px per input px (differ only for a stretched disc)
    left, top = cx + 0.5 - rx, cy + 0.5 - ry  # the box's corner in continuous input coordinates
    x0, y0 = max(bx0, math.floor(left)), max(by0, math.floor(top))
    x1, y1 = min(bx1, math.ceil(left + 2 * rx)), min(by1, math.ceil(top + 2 * ry))
    out = np.zeros((size, size, 3), np.uint8)
    valid = np.zeros((size, size), bool)
    if x1 <= x0 or y1 <= y0:
        return out, valid
    # destination rectangle of the visible part, at output scale (clipped to the canvas)
    dx0, dy0 = round((x0 - left) * sx), round((y0 - top) * sy)
    dx1, dy1 = min(size, round((x1 - left) * sx)), min(size, round((y1 - top) * sy))
    dx0, dy0 = min(max(dx0, 0), size), min(max(dy0, 0), size)
    if dx1 <= dx0 or dy1 <= dy0:
        return out, valid
    crop = Image.fromarray(np.ascontiguousarray(rgb[y0:y1, x0:x1]))
    resized = crop.resize((dx1 - dx0, dy1 - dy0), Image.Resampling.BILINEAR)  # antialiased when shrinking
    out[dy0:dy1, dx0:dx1] = np.asarray(resized, np.uint8)
    valid[dy0:dy1, dx0:dx1] = True
    return out, valid


def _box(img: np.ndarray, radius: int) -> np.ndarray:
    """Mean over a (2r+1)^2 window with zero padding (masked blurs divide by the blurred mask)."""
    k = 2 * radius + 1
    c = np.pad(img, ((radius + 1, radius), (radius + 1, radius)) + ((0, 0),) * (img.ndim - 2)).cumsum(0).cumsum(1)
    return (c[k:, k:] - c[:-k, k:] - c[k:, :-k] + c[:-k, :-k]) / (k * k)


def masked_blur(img: np.ndarray, mask: np.ndarray, sigma: float) -> np.ndarray:
    """Gaussian-like (three box passes) mean of ``img`` [H, W(, C)] over ``mask`` [H, W] only, float64.

    ``sum(G * (img * mask)) / sum(G * mask)``: pixels outside the mask neither count nor darken the
    mean near its edge. Three boxes of radius r give sigma = sqrt(r (r + 1)).
    """
    radius = max(1, round(math.sqrt(sigma * sigma + 0.25) - 0.5))
    m = mask.astype(np.float64)
    num = img.astype(np.float64) * (m[..., None] if img.ndim == 3 else m)
    den = m
    for _ in range(3):
        num, den = _box(num, radius), _box(den, radius)
    return num / np.maximum(den, 1e-6)[..., None] if img.ndim == 3 else num / np.maximum(den, 1e-6)


def local_mean_normalise(square: np.ndarray, fov: np.ndarray) -> np.ndarray:
    """Graham's local-mean subtraction inside the FOV: uint8 [S, S, 3] -> uint8 [S, S, 3] (see module doc)."""
    size = square.shape[0]
    x = square.astype(np.float64)  # [S, S, 3]
    local = masked_blur(x, fov, SIGMA_FRACTION * size)  # [S, S, 3]
    y = np.clip(4.0 * x - 4.0 * local + 128.0, 0.0, 255.0)
    y[~(fov & disc_mask(size, RIM_FRACTION))] = 128.0
    return np.round(y).astype(np.uint8)


def preprocess_fundus(rgb: np.ndarray, size: int, circle: FovCircle | None = None) -> np.ndarray:
    """The ``FOV_LOCAL_MEAN`` contract: uint8 [H, W, 3] photograph -> uint8 [size, size, 3].

    ``circle``: a circle already fitted on ``rgb`` (the service fits it once for the quality gate);
    fitted here when omitted. Scaling to [0, 1] and the artifact's mean/std come after.
    """
    if circle is None:
        circle = fit_fov_circle(rgb)
    square, valid = crop_to_fov(rgb, circle, size)
    return local_mean_normalise(square, valid & disc_mask(size))


def fov_square(rgb: np.ndarray) -> np.ndarray:
    """The ``LEGACY`` geometry: a square with the field of view centred and whole. uint8 [H, W, 3] -> [S, S, 3].

    Square images are returned as they are (the legacy models' training renders are square with the FOV
    centred). For a wide or tall camera frame, the dark margins along the long axis are trimmed, down to a
    square around the FOV at most, and what remains is padded with black to a centred square: the FOV is
    never cut and never shrunk by empty margins.
    """
    h, w = rgb.shape[:2]
    if h == w:
        return rgb
    long_axis = 1 if w > h else 0
    short, long = min(h, w), max(h, w)
    bright = rgb.max(axis=2) > FOV_THRESHOLD  # [H, W]
    # a line across the long axis belongs to the FOV when a few of its pixels are bright (JPEG noise)
    profile = bright.sum(axis=1 - long_axis) >= max(2, short // 200)  # [long]
    idx = np.flatnonzero(profile)
    if idx.size:
        extent = min(long, max(short, int(idx[-1] - idx[0] + 1)))
        start = round((idx[0] + idx[-1]) / 2 - extent / 2)
        start = min(max(start, 0), long - extent)
    else:
        extent, start = long, 0
    rgb = rgb[:, start : start + extent] if long_axis == 1 else rgb[start : start + extent]
    h, w = rgb.shape[:2]
    side = max(h, w)
    out = np.zeros((side, side, 3), dtype=np.uint8)
    top, left = (side - h) // 2, (side - w) // 2
    out[top : top + h, left : left + w] = rgb
    return out


def resize_square(square: np.ndarray, size: int) -> np.ndarray:
    """uint8 [S, S, 3] -> uint8 [size, size, 3], bilinear (antialiased when shrinking)."""
    if square.shape[0] == size:
        return square
    return np.asarray(Image.fromarray(square).resize((size, size), Image.Resampling.BILINEAR))


def preprocess(rgb: np.ndarray, size: int, preprocessing: str, circle: FovCircle | None = None) -> np.ndarray:
    """The contract ``preprocessing`` on a decoded photograph: uint8 [H, W, 3] -> uint8 [size, size, 3].

    ``circle`` (``FOV_LOCAL_MEAN`` only): the FOV circle already fitted on ``rgb``, as in ``preprocess_fundus``.
    """
    if check_preprocessing(preprocessing) == FOV_LOCAL_MEAN:
        return preprocess_fundus(rgb, size, circle)
    return resize_square(fov_square(rgb), size)
