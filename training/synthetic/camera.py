"""Fundus-camera effects: illumination, exposure, colour cast, haze, eyelash shadows, blur, noise, JPEG.

A gradable image gets mild, realistic variation; an ungradable one gets one dominating defect of a
named kind (``UNGRADABLE_KINDS``), the kinds a screening programme's quality check rejects.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from PIL import Image, ImageFilter

from training.synthetic.fundus import Geometry, MaskCanvas, fov_mask, pixel_grid
from training.synthetic.lesions import paint_dust

UNGRADABLE_KINDS: tuple[str, ...] = ("blur", "dark", "overexposed", "eyelash", "off_centre")


@dataclass(frozen=True)
class CameraParams:
    """One photograph's acquisition settings (all dimensionless or in pixels of a 256-px image)."""

    gain: float  # exposure multiplier
    gamma: float
    cast: tuple[float, float, float]  # per-channel colour multipliers
    vignette: float  # fall-off of the illumination towards the FOV edge
    light_dx: float  # illumination centre offset, in FOV radii
    light_dy: float
    haze: float  # milky veil (media opacity, flare), 0..1
    rim_glow: float  # bluish-white flare at the FOV rim (common on real cameras), 0..1
    blur: float  # Gaussian blur radius in px of a FOV of radius REF_RADIUS (optics + focus)
    noise: float  # sensor noise standard deviation, in [0, 1] intensity units
    eyelashes: int  # number of eyelash/eyelid shadows
    eyelash_strength: float
    jpeg_quality: int
    background: float  # level of the dark surround outside the FOV, in [0, 1] intensity units


def sample_camera(rng: np.random.Generator, ungradable: str | None = None) -> CameraParams:
    """Draw camera settings; ``ungradable`` (one of ``UNGRADABLE_KINDS``) makes that defect dominate."""
    if ungradable is not None and ungradable not in UNGRADABLE_KINDS:
        raise ValueError(f"Unknown ungradable kind {ungradable!r}; expected one of: {', '.join(UNGRADABLE_KINDS)}")
    p: dict[str, Any] = dict(
        gain=float(np.clip(math.exp(rng.normal(0.12, 0.15)), 0.7, 1.35)),  # IDRiD-like exposure, no extremes
        gamma=float(rng.uniform(0.9, 1.2)),
        cast=tuple(float(v) for v in rng.uniform(0.9, 1.1, 3)),
        vignette=float(rng.uniform(0.3, 0.65)),
        light_dx=float(rng.normal(0, 0.12)),
        light_dy=float(rng.normal(0, 0.12)),
        haze=float(rng.uniform(0.03, 0.18)) if rng.random() < 0.2 else 0.0,
        rim_glow=float(rng.uniform(0.1, 0.4)) if rng.random() < 0.25 else 0.0,
        blur=float(rng.uniform(0.4, 1.0)),  # every real photograph is a little soft (IDRiD band-pass)
        noise=float(rng.uniform(0.004, 0.015)),
        eyelashes=int(rng.integers(1, 3)) if rng.random() < 0.15 else 0,
        eyelash_strength=float(rng.uniform(0.25, 0.55)),
        jpeg_quality=int(rng.integers(80, 97)),  # IDRiD's copy is q92
        background=float(rng.uniform(0.0, 0.012)),
    )
    if ungradable == "blur":
        p["blur"] = float(rng.uniform(6.0, 12.0))
        p["haze"] = float(rng.uniform(0.1, 0.35))
    elif ungradable == "dark":
        p["gain"] = float(rng.uniform(0.04, 0.11))
        p["haze"] = p["rim_glow"] = 0.0  # both are light added after the exposure: they would lift it
        p["noise"] = float(rng.uniform(0.01, 0.03))
    elif ungradable == "overexposed":
        p["gain"] = float(rng.uniform(3.0, 5.0))
        p["haze"] = float(rng.uniform(0.75, 0.9))
        p["blur"] = float(rng.uniform(1.5, 4.0))
        p["gamma"] = float(rng.uniform(0.6, 0.8))
    elif ungradable == "eyelash":
        p["eyelashes"] = int(rng.integers(4, 8))
        p["eyelash_strength"] = float(rng.uniform(0.85, 0.97))
        p["haze"] = float(rng.uniform(0.1, 0.3))
        p["blur"] = max(p["blur"], float(rng.uniform(1.5, 3.0)))
    return CameraParams(**p)


def _eyelash_mask(rng: np.random.Generator, geom: Geometry, count: int) -> np.ndarray:
    """Soft dark bands entering the FOV from the top or bottom edge (lashes and eyelid)."""
    px = geom.px
    m = MaskCanvas(geom.width, geom.height)
    for _ in range(count):
        top = rng.random() < 0.7
        x0 = geom.cx + rng.uniform(-0.9, 0.9) * geom.radius
        y0 = geom.cy + (-1 if top else 1) * geom.radius * rng.uniform(0.95, 1.1)
        n = 12
        ang = (math.pi / 2 if top else -math.pi / 2) + rng.normal(0, 0.5) + np.cumsum(rng.normal(0, 0.12, n))
        step = geom.radius * rng.uniform(0.04, 0.09)
        pts = np.stack([x0 + np.cumsum(np.cos(ang) * step), y0 + np.cumsum(np.sin(ang) * step)], axis=1)
        m.polyline(np.concatenate([[[x0, y0]], pts]), px * rng.uniform(6, 22), 1.0)
    return m.array(blur=6.0 * px)


@lru_cache(maxsize=64)
def _tone_lut(gamma: float, knee: float = 0.6) -> list[int]:
    """The camera's tone curve as a 256-entry table: a gamma, then a soft shoulder above ``knee``.

    The shoulder compresses highlights the way a camera's response does, so the bright red channel
    keeps the modest spread it has on real photographs while green and blue, lower, are untouched.
    """
    v = (np.arange(256) / 255.0) ** gamma
    over = np.maximum(v - knee, 0.0)
    v = np.where(v > knee, knee + (1.0 - knee) * np.tanh(over / (1.0 - knee)), v)
    return (255.0 * v + 0.5).astype(np.uint8).tolist()


def apply_camera(
    albedo: np.ndarray, geom: Geometry, params: CameraParams, rng: np.random.Generator, *, dust: int = 0
) -> np.ndarray:
    """Photograph the albedo ``[H, W, 3]`` float image: uint8 ``[H, W, 3]``, near-black outside the FOV."""
    px = geom.px
    yy, xx = pixel_grid(geom.height, geom.width)
    lx = geom.cx + params.light_dx * geom.radius
    ly = geom.cy + params.light_dy * geom.radius
    r2 = ((xx - lx) ** 2 + (yy - ly) ** 2) / geom.radius**2
    # [H, W], ~r^2.5 fall-off; the floor keeps a gradable photograph's far rim dim, not black
    illum = np.clip(1.0 - params.vignette * (r2 * np.sqrt(np.sqrt(r2))), 0.3, 1.0)
    gain = np.asarray(params.cast, np.float32) * params.gain
    img = albedo * (illum[..., None] * gain)
    if params.haze > 0:
        img += params.haze * (np.array([0.9, 0.75, 0.6], np.float32) * illum[..., None] - img)
    if params.rim_glow > 0:  # flare in the outer tenth of the FOV, strongest at the rim
        rc = np.sqrt((xx - geom.cx) ** 2 + (yy - geom.cy) ** 2) / geom.radius
        glow = params.rim_glow * np.clip((rc - 0.82) / 0.18, 0.0, 1.0) ** 2
        img += glow[..., None] * (np.array([0.75, 0.6, 0.9], np.float32) - img)
    paint_dust(img, rng, geom, dust)
    if params.eyelashes:
        lash = _eyelash_mask(rng, geom, params.eyelashes)
        img *= (1.0 - params.eyelash_strength * lash)[..., None]
    cover = fov_mask(geom)[..., None]  # [H, W, 1]
    img = img * cover + params.background * (1.0 - cover)
    np.clip(img, 0.0, 1.0, out=img)
    out = Image.fromarray((img * 255.0 + 0.5).astype(np.uint8), mode="RGB")
    out = out.point(_tone_lut(params.gamma) * 3)  # a lookup table: far cheaper than float maths over H*W*3
    if params.blur > 0.05:
        out = out.filter(ImageFilter.GaussianBlur(params.blur * px))
    arr = np.asarray(out, dtype=np.float32)
    noise = rng.standard_normal(geom.shape, dtype=np.float32) * (params.noise * 255.0)
    arr += noise[..., None] * np.array([1.0, 0.8, 1.2], np.float32)
    return np.clip(arr + 0.5, 0, 255).astype(np.uint8)
