"""Image-quality gate: is this a gradable fundus photograph?

A network trained on fundus photographs answers confidently on anything it is given, so the
service checks the image itself before trusting the network. Five measurements on the FOV-centred
square (``service.imaging.fov_square``) resampled to ``WORK_SIZE`` px, so every threshold is
independent of the camera resolution:

- **field of view** (``no_field_of_view``): the bright region on a dark background (brightest
  channel, 5x5-smoothed, above ``FOV_LEVEL``) must be a disc: a least-squares circle through its
  edge points (points on the frame border dropped, so a FOV cut by the frame still fits) must match
  the region (IoU >= ``MIN_FOV_IOU``), be centred (offset <= ``MAX_FOV_OFFSET`` of the side) and
  have a plausible radius. A uniformly bright frame has no edge points and fails;
- **exposure**: mean luminance inside the FOV >= ``MIN_MEAN_LUMA`` (``too_dark``); mean luminance
  <= ``MAX_MEAN_LUMA`` and near-white share <= ``MAX_SATURATED`` (``overexposed``);
- **obstruction** (``obstructed``): share of the inner FOV whose smoothed luminance is below
  ``SHADOW_RATIO`` x the median (eyelash/eyelid shadows) <= ``MAX_SHADOW``;
- **sharpness** (``blurred``): variance of a band-pass (difference of Gaussians, sigma ~1 and ~3 px)
  of luminance inside the FOV (rim excluded), over the squared mean luminance, >= ``MIN_SHARPNESS``.
  The band-pass keeps vessel-scale detail and ignores sensor noise, which a plain Laplacian would
  count as detail;
- **colour** (``not_fundus``): fundus photographs are red-dominant (red share of the FOV's mean
  colour >= ``MIN_RED_SHARE`` and red > ``MIN_RED_OVER_GREEN`` x green).

Each measurement becomes a score in [0, 1] that is 0.5 exactly at its threshold (a logistic of the
margin); the report's ``score`` is the smallest of them, so ``gradable`` <=> ``score >= 0.5``.
Thresholds were set on the synthetic generator's gradable/ungradable renders (seeds 0-1, 256 and
512 px); the accuracy on a held-out seed and on generated non-fundus images is asserted in
tests/service/test_quality.py and recorded in docs/service.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from PIL import Image

WORK_SIZE = 256
FOV_LEVEL = 12 / 255  # brightest channel above this = inside the field of view
MIN_FOV_IOU = 0.92
MAX_FOV_OFFSET = 0.10
MIN_FOV_RADIUS = 0.25
MAX_FOV_RADIUS = 0.80
MIN_FOV_FRACTION = 0.20
MIN_MEAN_LUMA = 0.10
MAX_SATURATED = 0.20
MAX_MEAN_LUMA = 0.60
SHADOW_RATIO = 0.35
MAX_SHADOW = 0.01
SATURATED_LUMA = 0.94
MIN_SHARPNESS = 1.2e-3
MIN_RED_SHARE = 0.42
MIN_RED_OVER_GREEN = 1.15

ISSUES = ("no_field_of_view", "too_dark", "overexposed", "obstructed", "blurred", "not_fundus")


@dataclass(frozen=True)
class QualityReport:
    """Outcome of the gate: ``gradable`` is False iff ``issues`` is non-empty; ``score`` in [0, 1]."""

    gradable: bool
    score: float
    issues: list[str] = field(default_factory=list)
    measurements: dict[str, float] = field(default_factory=dict, compare=False)


def _margin_score(value: float, threshold: float, scale: float, *, higher_is_better: bool = True) -> float:
    """Logistic of (value - threshold) / scale: 0.5 at the threshold, -> 1 on the good side."""
    z = (value - threshold) / scale if higher_is_better else (threshold - value) / scale
    return 1.0 / (1.0 + math.exp(-max(min(z, 40.0), -40.0)))


def box_blur(img: np.ndarray, radius: int) -> np.ndarray:
    """Mean over a (2r+1)^2 window, edges replicated; float32 [H, W] (cumulative sums: O(HW))."""
    if radius <= 0:
        return img.astype(np.float32)
    k = 2 * radius + 1
    padded = np.pad(img.astype(np.float64), radius, mode="edge")
    c = np.cumsum(np.cumsum(padded, axis=0), axis=1)
    c = np.pad(c, ((1, 0), (1, 0)))
    total = c[k:, k:] - c[:-k, k:] - c[k:, :-k] + c[:-k, :-k]
    return (total / (k * k)).astype(np.float32)


def gaussianish(img: np.ndarray, radius: int) -> np.ndarray:
    """Three box blurs: a close approximation of a Gaussian with sigma ~ radius."""
    for _ in range(3):
        img = box_blur(img, radius)
    return img


def fov_mask(rgb: np.ndarray) -> np.ndarray:
    """bool [H, W]: pixels inside the field of view, each row's span filled (lesions are not holes).

    The brightest channel is smoothed (5x5 mean) before thresholding so that sensor noise and JPEG
    ringing in the black surround do not count as field of view.
    """
    level = box_blur(rgb.max(axis=2).astype(np.float32) / 255.0, 2)  # [H, W]
    bright = level > FOV_LEVEL
    mask = np.zeros_like(bright)
    for r in np.flatnonzero(bright.any(axis=1)):
        cols = np.flatnonzero(bright[r])
        mask[r, cols[0] : cols[-1] + 1] = True
    return mask


@dataclass(frozen=True)
class FovFit:
    """The circle fitted to the FOV's edge, in units of the square's side."""

    iou: float  # IoU of the mask with the fitted circle clipped to the frame
    offset: float  # distance of the circle's centre from the frame's centre
    radius: float
    inner: np.ndarray  # bool [H, W]: the fitted disc shrunk to 85 % (measurement region, rim excluded)


def fit_fov(mask: np.ndarray) -> FovFit | None:
    """Least-squares (Kasa) circle through the FOV's edge points that are not on the frame border.

    Edge points are the ends of each row's and column's span; ends touching the frame are dropped,
    so a FOV cut by the frame (common on real cameras) is still fitted by its visible arc.
    """
    h, w = mask.shape
    pts: list[tuple[float, float]] = []  # (x, y)
    for r in np.flatnonzero(mask.any(axis=1)):
        cols = np.flatnonzero(mask[r])
        pts += [(float(c), float(r)) for c in (cols[0], cols[-1]) if 0 < c < w - 1]
    for c in np.flatnonzero(mask.any(axis=0)):
        rows = np.flatnonzero(mask[:, c])
        pts += [(float(c), float(r)) for r in (rows[0], rows[-1]) if 0 < r < h - 1]
    if len(pts) < 24:
        return None
    xy = np.asarray(pts)  # [N, 2]
    a = np.column_stack([xy, np.ones(len(xy))])
    sol, *_ = np.linalg.lstsq(a, -(xy**2).sum(axis=1), rcond=None)
    cx, cy = -sol[0] / 2, -sol[1] / 2
    r2 = cx**2 + cy**2 - sol[2]
    if not np.isfinite(r2) or r2 <= 0:
        return None
    radius = float(np.sqrt(r2))
    yy, xx = np.mgrid[0:h, 0:w]
    d2 = (xx - cx) ** 2 + (yy - cy) ** 2
    disc = d2 <= r2
    union = np.logical_or(mask, disc).sum()
    iou = float(np.logical_and(mask, disc).sum() / union) if union else 0.0
    offset = float(np.hypot(cx - (w - 1) / 2, cy - (h - 1) / 2) / w)
    return FovFit(iou=iou, offset=offset, radius=radius / w, inner=d2 <= (0.85**2) * r2)


def band_pass(y: np.ndarray) -> np.ndarray:
    """Difference of two Gaussian-like blurs (sigma ~1 and ~3 px at ``WORK_SIZE``), float32 [H, W].

    Keeps the scale of vessels and lesions, drops pixel noise (which a plain Laplacian would
    mistake for detail) and the slow illumination fall-off.
    """
    return gaussianish(y, 1) - gaussianish(y, 3)


def assess_quality(square: np.ndarray) -> QualityReport:
    """Grade the quality of an FOV-centred square uint8 [S, S, 3] image (see module docstring)."""
    if square.shape[0] != WORK_SIZE:
        square = np.asarray(Image.fromarray(square).resize((WORK_SIZE, WORK_SIZE), Image.Resampling.BILINEAR))
    rgb = square.astype(np.float32) / 255.0  # [S, S, 3]
    luma = rgb @ np.asarray([0.299, 0.587, 0.114], np.float32)  # [S, S]

    mask = fov_mask(square)
    fov_fraction = float(mask.mean())
    fit = fit_fov(mask)
    fov_iou = fit.iou if fit is not None else 0.0
    fov_offset = fit.offset if fit is not None else 1.0
    has_fov = (
        fit is not None
        and fov_iou >= MIN_FOV_IOU
        and fov_offset <= MAX_FOV_OFFSET
        and MIN_FOV_RADIUS <= fit.radius <= MAX_FOV_RADIUS
        and fov_fraction >= MIN_FOV_FRACTION
    )
    # measure inside the FOV when there is one, otherwise over the whole frame
    region = mask if has_fov else np.ones_like(mask)
    inner = (fit.inner & mask) if has_fov and fit is not None else np.ones_like(mask)

    mean_luma = float(luma[region].mean())
    saturated = float((luma[region] >= SATURATED_LUMA).mean())
    smooth = gaussianish(luma, 4)  # [S, S] illumination without vessels or small lesions
    shadow = float((smooth[inner] < SHADOW_RATIO * np.median(smooth[inner])).mean()) if inner.any() else 1.0
    detail = band_pass(luma)[inner]
    sharpness = float(detail.var() / max(mean_luma, 1e-3) ** 2) if detail.size else 0.0
    mean_rgb = rgb[region].mean(axis=0)  # [3]
    red_share = float(mean_rgb[0] / max(float(mean_rgb.sum()), 1e-6))
    red_over_green = float(mean_rgb[0] / max(float(mean_rgb[1]), 1e-3))

    scores = {
        "no_field_of_view": min(
            _margin_score(fov_iou, MIN_FOV_IOU, 0.02),
            _margin_score(fov_offset, MAX_FOV_OFFSET, 0.03, higher_is_better=False),
            _margin_score(fov_fraction, MIN_FOV_FRACTION, 0.05),
        ),
        "too_dark": _margin_score(mean_luma, MIN_MEAN_LUMA, 0.03),
        "overexposed": min(
            _margin_score(saturated, MAX_SATURATED, 0.05, higher_is_better=False),
            _margin_score(mean_luma, MAX_MEAN_LUMA, 0.03, higher_is_better=False),
        ),
        "obstructed": _margin_score(shadow, MAX_SHADOW, 0.03, higher_is_better=False),
        "blurred": _margin_score(math.log10(max(sharpness, 1e-9)), math.log10(MIN_SHARPNESS), 0.25),
        "not_fundus": min(
            _margin_score(red_share, MIN_RED_SHARE, 0.03),
            _margin_score(red_over_green, MIN_RED_OVER_GREEN, 0.1),
        ),
    }
    failed = {
        "no_field_of_view": not has_fov,
        "too_dark": mean_luma < MIN_MEAN_LUMA,
        "overexposed": saturated > MAX_SATURATED or mean_luma > MAX_MEAN_LUMA,
        "obstructed": shadow > MAX_SHADOW,
        "blurred": sharpness < MIN_SHARPNESS,
        "not_fundus": red_share < MIN_RED_SHARE or red_over_green < MIN_RED_OVER_GREEN,
    }
    issues = [name for name in ISSUES if failed[name]]
    score = min(scores.values())
    # keep the documented invariant exact at the thresholds: gradable <=> score >= 0.5
    score = min(score, 0.4999) if issues else max(score, 0.5)
    measurements = {
        "fov_iou": fov_iou,
        "fov_fraction": fov_fraction,
        "fov_offset": fov_offset,
        "fov_radius": fit.radius if fit is not None else 0.0,
        "mean_luma": mean_luma,
        "saturated_fraction": saturated,
        "shadow_fraction": shadow,
        "sharpness": sharpness,
        "red_share": red_share,
        "red_over_green": red_over_green,
    }
    return QualityReport(gradable=not issues, score=round(score, 4), issues=issues, measurements=measurements)
