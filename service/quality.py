"""Image-quality gate: is this a gradable fundus photograph?

A network trained on fundus photographs answers confidently on anything it is given, so the
service checks the image itself before trusting the network. Four measurements on the FOV-centred
square (``service.imaging.fov_square``) downscaled to ``WORK_SIZE`` px, so every threshold is
independent of the camera resolution:

- **field of view**: the bright region on a dark background must be a disc: its IoU with the
  ellipse inscribed in its bounding box >= ``MIN_FOV_IOU`` and it must cover >= ``MIN_FOV_FRACTION``
  of the square (a uniformly bright frame scores IoU = pi/4 = 0.785 and fails) -> ``no_field_of_view``;
- **exposure**: mean luminance inside the FOV >= ``MIN_MEAN_LUMA`` (``too_dark``) and the share of
  near-white FOV pixels <= ``MAX_SATURATED`` (``overexposed``);
- **sharpness**: variance of the 4-neighbour Laplacian of luminance inside the FOV (its rim
  excluded), divided by the squared mean luminance so that exposure does not pass for detail,
  >= ``MIN_SHARPNESS`` -> ``blurred``;
- **colour**: fundus photographs are red-dominant (red share of the FOV's mean colour >=
  ``MIN_RED_SHARE`` and red > ``MIN_RED_OVER_GREEN`` x green) -> ``not_fundus``.

Each measurement becomes a score in [0, 1] that is 0.5 exactly at its threshold (a logistic of the
margin); the report's ``score`` is the smallest of them, so ``gradable`` <=> ``score >= 0.5`` and
the score says how close the worst check came. Thresholds were set on generated examples; the
accuracy on them is recorded in docs/service.md and asserted in tests/service/test_quality.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from PIL import Image

WORK_SIZE = 256
FOV_LEVEL = 12 / 255  # brightest channel above this = inside the field of view
MIN_FOV_IOU = 0.88
MIN_FOV_FRACTION = 0.20
MIN_MEAN_LUMA = 0.10
MAX_SATURATED = 0.20
SATURATED_LUMA = 0.94
MIN_SHARPNESS = 2.0e-3
MIN_RED_SHARE = 0.42
MIN_RED_OVER_GREEN = 1.15

ISSUES = ("no_field_of_view", "too_dark", "overexposed", "blurred", "not_fundus")


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


def fov_mask(rgb: np.ndarray) -> np.ndarray:
    """bool [H, W]: pixels inside the field of view, each row's span filled (lesions are not holes)."""
    bright = rgb.max(axis=2).astype(np.float32) / 255.0 > FOV_LEVEL  # [H, W]
    mask = np.zeros_like(bright)
    for r in np.flatnonzero(bright.any(axis=1)):
        cols = np.flatnonzero(bright[r])
        mask[r, cols[0] : cols[-1] + 1] = True
    return mask


def _inscribed_ellipse(mask: np.ndarray, shrink: float = 1.0) -> np.ndarray:
    """bool [H, W]: the ellipse inscribed in the bounding box of ``mask`` (radii times ``shrink``)."""
    h, w = mask.shape
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    if rows.size == 0:
        return np.zeros_like(mask)
    cy, cx = (rows[0] + rows[-1]) / 2, (cols[0] + cols[-1]) / 2
    ry, rx = (rows[-1] - rows[0] + 1) / 2 * shrink, (cols[-1] - cols[0] + 1) / 2 * shrink
    yy, xx = np.mgrid[0:h, 0:w]
    return ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1.0


def _laplacian(y: np.ndarray) -> np.ndarray:
    """4-neighbour Laplacian, float32 [H-2, W-2] (the one-pixel border dropped)."""
    return y[:-2, 1:-1] + y[2:, 1:-1] + y[1:-1, :-2] + y[1:-1, 2:] - 4.0 * y[1:-1, 1:-1]


def assess_quality(square: np.ndarray) -> QualityReport:
    """Grade the quality of an FOV-centred square uint8 [S, S, 3] image (see module docstring)."""
    if square.shape[0] != WORK_SIZE:
        square = np.asarray(Image.fromarray(square).resize((WORK_SIZE, WORK_SIZE), Image.Resampling.BILINEAR))
    rgb = square.astype(np.float32) / 255.0  # [S, S, 3]
    luma = rgb @ np.asarray([0.299, 0.587, 0.114], np.float32)  # [S, S]

    mask = fov_mask(square)
    fov_fraction = float(mask.mean())
    ellipse = _inscribed_ellipse(mask)
    union = np.logical_or(mask, ellipse).sum()
    fov_iou = float(np.logical_and(mask, ellipse).sum() / union) if union else 0.0
    has_fov = fov_iou >= MIN_FOV_IOU and fov_fraction >= MIN_FOV_FRACTION
    # measure inside the FOV when there is one, otherwise over the whole frame
    region = mask if has_fov else np.ones_like(mask)
    inner = _inscribed_ellipse(mask, shrink=0.85) & mask if has_fov else np.ones_like(mask)

    mean_luma = float(luma[region].mean())
    saturated = float((luma[region] >= SATURATED_LUMA).mean())
    lap = _laplacian(luma)[inner[1:-1, 1:-1]]
    sharpness = float(lap.var() / max(mean_luma, 1e-3) ** 2) if lap.size else 0.0
    mean_rgb = rgb[region].mean(axis=0)  # [3]
    red_share = float(mean_rgb[0] / max(float(mean_rgb.sum()), 1e-6))
    red_over_green = float(mean_rgb[0] / max(float(mean_rgb[1]), 1e-3))

    scores = {
        "no_field_of_view": min(
            _margin_score(fov_iou, MIN_FOV_IOU, 0.02), _margin_score(fov_fraction, MIN_FOV_FRACTION, 0.05)
        ),
        "too_dark": _margin_score(mean_luma, MIN_MEAN_LUMA, 0.03),
        "overexposed": _margin_score(saturated, MAX_SATURATED, 0.05, higher_is_better=False),
        "blurred": _margin_score(math.log10(max(sharpness, 1e-9)), math.log10(MIN_SHARPNESS), 0.25),
        "not_fundus": min(
            _margin_score(red_share, MIN_RED_SHARE, 0.03),
            _margin_score(red_over_green, MIN_RED_OVER_GREEN, 0.1),
        ),
    }
    failed = {
        "no_field_of_view": not has_fov,
        "too_dark": mean_luma < MIN_MEAN_LUMA,
        "overexposed": saturated > MAX_SATURATED,
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
        "mean_luma": mean_luma,
        "saturated_fraction": saturated,
        "sharpness": sharpness,
        "red_share": red_share,
        "red_over_green": red_over_green,
    }
    return QualityReport(gradable=not issues, score=round(score, 4), issues=issues, measurements=measurements)
