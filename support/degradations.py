"""Degraded versions of real photographs, each with the quality issue the gate must name for it.

Used by tests/service/test_quality_real.py and benchmarks/quality_table.py. Every degradation is
deterministic (seeded by the caller) and is expressed relative to the image size, so it means the
same at 565 px and at 4288 px.
"""

from __future__ import annotations

import io
from collections.abc import Callable

import numpy as np
from PIL import Image, ImageFilter

Degrade = Callable[[np.ndarray, np.random.Generator], np.ndarray]


def strong_blur(rgb: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Gaussian blur, sigma = 1 % of the width (10 px at 1024 px): vessels and lesions gone."""
    sigma = rgb.shape[1] * rng.uniform(0.009, 0.012)
    return np.asarray(Image.fromarray(rgb).filter(ImageFilter.GaussianBlur(sigma)))


def darkened(rgb: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Exposure cut to ~10 % (a flash that did not fire properly)."""
    return np.round(rgb.astype(np.float32) * rng.uniform(0.08, 0.12)).astype(np.uint8)


BURNT_OUT = 240.0  # luminance (0-255) the retina's median reaches in an overexposed render


def overexposed(rgb: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Gain x2.5-3.5 plus a veil of flare, clipped: most of the retina burnt out.

    The gain is raised where a dark original needs more to be burnt out (its median luminance inside the field of
    view reaches ``BURNT_OUT``): a fixed x3 takes a photograph exposed at 34 of 255 only to an ordinary exposure,
    which is not the degradation this stands for.
    """
    fov = rgb.max(axis=2, keepdims=True) > 20  # [H, W, 1]
    flare = rng.uniform(40, 80)
    gain = rng.uniform(2.5, 3.5)
    x = rgb.astype(np.float32)
    weights = np.array([0.299, 0.587, 0.114], np.float32)
    out = np.clip(x * gain + flare, 0, 255)
    while fov.any() and gain < 64 and float(np.median(out[fov[..., 0]] @ weights)) < BURNT_OUT:
        gain *= 1.25  # the red channel clips first, so the luminance is measured after clipping
        out = np.clip(x * gain + flare, 0, 255)
    return np.where(fov, out, rgb).astype(np.uint8)


def eyelid_shadow(rgb: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A dark eyelid over the upper third of the field of view with eyelash strokes hanging from it."""
    h, w = rgb.shape[:2]
    rows = np.flatnonzero((rgb.max(axis=2) > 20).any(axis=1))
    top, bottom = (int(rows[0]), int(rows[-1])) if rows.size else (0, h - 1)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    edge = top + (bottom - top) * (rng.uniform(0.3, 0.38) + 0.04 * np.sin(xx / w * np.pi * rng.uniform(1, 2)))
    soft = 0.02 * h
    lid = 1.0 / (1.0 + np.exp(np.clip((yy - edge) / soft, -40, 40)))  # 1 above the lid edge
    factor = 1.0 - rng.uniform(0.8, 0.92) * lid
    lashes = np.zeros((h, w), np.float32)
    for _ in range(int(rng.integers(8, 16))):  # dark strokes below the lid edge
        x0 = rng.uniform(0.15, 0.85) * w
        length = rng.uniform(0.05, 0.12) * h
        slope = rng.uniform(-0.4, 0.4)
        t = np.linspace(0, 1, 200)
        ys = (top + (bottom - top) * 0.33 + t * length).astype(int)
        xs = (x0 + slope * t * length).astype(int)
        ok = (ys >= 0) & (ys < h) & (xs >= 0) & (xs < w)
        lashes[ys[ok], xs[ok]] = 1.0
    lash_img = Image.fromarray((lashes * 255).astype(np.uint8)).filter(ImageFilter.MaxFilter(5))
    lash_img = lash_img.filter(ImageFilter.GaussianBlur(0.004 * w))
    factor *= 1.0 - 0.7 * np.asarray(lash_img, np.float32) / 255.0
    return np.round(rgb.astype(np.float32) * factor[..., None]).astype(np.uint8)


def jpeg_blocking(rgb: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Re-encoded as JPEG at quality 3-6: a visible 8x8 block grid."""
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="JPEG", quality=int(rng.integers(3, 7)))
    return np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))


# degradation name -> (function, the issue the gate must report)
DEGRADATIONS: dict[str, tuple[Degrade, str]] = {
    "strong_blur": (strong_blur, "blurred"),
    "darkened_10pct": (darkened, "too_dark"),
    "overexposed": (overexposed, "overexposed"),
    "eyelid_shadow": (eyelid_shadow, "obstructed"),
    "jpeg_blocking": (jpeg_blocking, "compression_artifacts"),
}
