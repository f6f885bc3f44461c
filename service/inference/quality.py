"""Image-quality gate: is this a gradable fundus photograph?

A network trained on fundus photographs answers confidently on anything it is given, so the
service checks the image itself before trusting the network. The gate takes the decoded frame as
the camera made it (any size, any aspect: 3:2 and 4:3 frames cut the disc, square ones may not):

1. **field of view** (``no_field_of_view``): a circle is fitted robustly to the bright region's
   edge points that are not on the frame (``models.fov``: RANSAC + least squares, so frame cuts,
   notches and text overlays do not pull it). It must be plausible *as a circle*: most edge points
   on it (``MIN_INLIER_SHARE``), its in-frame arc supported by edge points (``MIN_ARC_SUPPORT``),
   at least ``MIN_VISIBLE_ARC`` of it inside the frame, centred (``MAX_FOV_OFFSET`` radii from the
   frame centre), of a radius a fundus camera produces (``MIN_FOV_RADIUS``..``MAX_FOV_RADIUS`` of
   the frame's half short side), and the bright region must fill it (IoU >= ``MIN_FOV_IOU``).
2. every other measure is taken on the FOV cropped to the fitted circle and resampled so that its
   diameter is ``WORK_SIZE`` px (``models.preprocessing.crop_to_fov``): the thresholds hold at any
   camera resolution, and the cost does not grow with it. Without a plausible FOV the whole frame
   is measured. Inside the disc (rim excluded):

   - **exposure**: mean luminance >= ``MIN_MEAN_LUMA`` (``too_dark``); ``overexposed`` when the share of
     near-white pixels exceeds ``MAX_SATURATED``, or the mean luminance exceeds ``MAX_MEAN_LUMA_SHARP``, or
     it exceeds ``MAX_MEAN_LUMA`` on a picture that is not sharp (washed out by flare: a bright but sharp
     photograph, common with some cameras' yellow rendering, is gradable);
   - **obstruction** (``obstructed``): share of the inner disc whose illumination (luminance blurred
     far beyond vessel scale) is below ``SHADOW_RATIO`` x its median <= ``MAX_SHADOW`` (eyelid and
     eyelash shadows);
   - **sharpness** (``blurred``): ratio of the vessel-scale to the coarse-scale band-pass energy
     (differences of Gaussians, sigma 1-3 px over 3-6 px at ``WORK_SIZE``) of the green channel
     divided by its local mean. Dividing by the local mean makes it a *contrast* (independent of
     exposure and pigmentation); the ratio makes it independent of how much structure a retina has
     (blur removes the vessel band first), and sigma >= 1 px keeps sensor noise out of it;
   - **colour** (``not_fundus``): red-dominant (red share of the mean colour >= ``MIN_RED_SHARE`` and
     red >= ``MIN_RED_OVER_GREEN`` x green).
3. **compression** (``compression_artifacts``): heavy JPEG quantisation leaves 8x8 blocks. Measured
   on the decoded frame (rows/columns subsampled): mean absolute step across block boundaries over
   the mean step elsewhere, at period 8 (and 4, for JPEGs decoded at half scale), >= ``MAX_BLOCKINESS``
   rejects. A photograph resized after compression loses the grid and is not caught by this measure.

Each measure becomes a score in [0, 1] that is 0.5 exactly at its threshold (a logistic of the
margin); the report's ``score`` is the smallest, so ``gradable`` <=> ``score >= 0.5``. Thresholds
were set on real (IDRiD) and synthetic photographs together; how in docs/quality-gate.md, the
accept/reject table in docs/results-quality-gate.md (``benchmarks/quality_table.py`` prints it).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from models.fov import FovCircle, fit_fov_circle
from models.preprocessing import crop_to_fov, disc_mask, masked_blur

WORK_SIZE = 256  # FOV diameter (px) at which exposure, shadow, sharpness and colour are measured
INNER_FRACTION = 0.9  # measure inside this share of the radius (the rim has glare and fall-off)
# field of view
MIN_INLIER_SHARE = 0.6
MIN_ARC_SUPPORT = 0.7
MIN_VISIBLE_ARC = 0.3
MAX_FOV_OFFSET = 0.15
MIN_FOV_RADIUS = 0.6
MAX_FOV_RADIUS = 1.5
MIN_FOV_IOU = 0.9
# exposure, obstruction, sharpness, colour, compression
MIN_MEAN_LUMA = 0.10
MAX_MEAN_LUMA = 0.60  # brighter than this AND not sharp: washed out
MAX_MEAN_LUMA_SHARP = 0.80  # brighter than this: overexposed however sharp
SATURATED_LUMA = 0.94
MAX_SATURATED = 0.20
SHADOW_SIGMA = 8.0  # px at WORK_SIZE: illumination, not vessels
SHADOW_RATIO = 0.35
MAX_SHADOW = 0.05
MIN_SHARPNESS = 1.45
MIN_RED_SHARE = 0.37
MIN_RED_OVER_GREEN = 1.02
MAX_BLOCKINESS = 3.0
BLOCK_SAMPLE_LINES = 512  # rows (columns) sampled for the blockiness profile

ISSUES = (
    "no_field_of_view",
    "too_dark",
    "overexposed",
    "obstructed",
    "blurred",
    "not_fundus",
    "compression_artifacts",
)


@dataclass(frozen=True)
class QualityReport:
    """Outcome of the gate: ``gradable`` is False iff ``issues`` is non-empty; ``score`` in [0, 1]."""

    gradable: bool
    score: float
    issues: list[str] = field(default_factory=list)
    measurements: dict[str, float] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class QualityMeasures:
    """Every number the gate judges (see the module docstring); importable for statistics tables."""

    has_circle: bool
    fov_inlier_share: float
    fov_arc_support: float
    fov_visible_arc: float
    fov_offset: float  # radii from the frame centre
    fov_radius: float  # radius / half the frame's short side
    fov_radius_px: float  # radius in the input's pixels
    fov_iou: float
    mean_luma: float
    saturated_fraction: float
    shadow_fraction: float
    sharpness: float
    red_share: float
    red_over_green: float
    blockiness: float
    channel_mean: tuple[float, float, float]  # RGB in [0, 1] inside the disc (rim excluded)
    channel_std: tuple[float, float, float]

    def as_dict(self) -> dict[str, float]:
        """Flat float dict (channel statistics as ``mean_r`` ... ``std_b``)."""
        out = {k: float(v) for k, v in asdict(self).items() if not isinstance(v, tuple)}
        for name, values in (("mean", self.channel_mean), ("std", self.channel_std)):
            out.update({f"{name}_{c}": float(v) for c, v in zip("rgb", values, strict=True)})
        return out


def _margin_score(value: float, threshold: float, scale: float, *, higher_is_better: bool = True) -> float:
    """Logistic of (value - threshold) / scale: 0.5 at the threshold, -> 1 on the good side."""
    z = (value - threshold) / scale if higher_is_better else (threshold - value) / scale
    return 1.0 / (1.0 + math.exp(-max(min(z, 40.0), -40.0)))


def _luma(rgb: np.ndarray) -> np.ndarray:
    """float32 [H, W] luminance in [0, 1] of uint8 or [0, 1] float RGB [H, W, 3]."""
    x = rgb.astype(np.float32) / (255.0 if rgb.dtype == np.uint8 else 1.0)
    return x @ np.asarray([0.299, 0.587, 0.114], np.float32)


def blockiness(rgb: np.ndarray) -> float:
    """JPEG block-grid strength of uint8 [H, W, 3]: ~1 for natural images, >> 1 for heavy compression.

    For each axis, the mean absolute luminance step between neighbouring pixels is folded by phase
    modulo the block period; the ratio of the strongest phase to the median phase, averaged over
    both axes, is taken at periods 8 and 4 (the larger wins). Lines are subsampled to bound the cost.
    """
    h, w = rgb.shape[:2]
    # luminance of the sampled rows and columns only: a float copy of the whole frame costs 16 bytes
    # a pixel (~0.6 GB for a 40 Mpx upload) per decode worker; the strips hold <= ~2/3 of the lines
    rows = _luma(rgb[:: max(1, h // BLOCK_SAMPLE_LINES)])  # [L, W]
    cols = _luma(rgb[:, :: max(1, w // BLOCK_SAMPLE_LINES)]).T  # [L, H]
    ratios = []
    for period in (8, 4):
        per_axis = []
        for sample in (rows, cols):
            if sample.shape[1] < 4 * period:
                continue
            step = np.abs(np.diff(sample, axis=1)).mean(axis=0)  # [N-1]
            n = (step.size // period) * period
            phases = step[:n].reshape(-1, period).mean(axis=0)  # [period]
            per_axis.append(float(phases.max() / max(float(np.median(phases)), 1e-4)))
        if per_axis:
            ratios.append(float(np.mean(per_axis)))
    return max(ratios) if ratios else 1.0


def _plausible(c: FovCircle | None) -> bool:
    if c is None:
        return False
    half_short = min(c.width, c.height) / 2
    return (
        c.inlier_share >= MIN_INLIER_SHARE
        and c.arc_support >= MIN_ARC_SUPPORT
        and c.visible_arc >= MIN_VISIBLE_ARC
        and c.offset <= MAX_FOV_OFFSET
        and MIN_FOV_RADIUS <= c.mean_radius / half_short <= MAX_FOV_RADIUS
        and c.mask_iou >= MIN_FOV_IOU
    )


def measure(rgb: np.ndarray, circle: FovCircle | None = None, *, fit: bool = True) -> QualityMeasures:
    """All quality measures of a decoded frame uint8 [H, W, 3]; ``circle`` as fitted by ``fit_fov_circle``.

    ``fit=True`` fits the circle when none is given. The disc measures are taken on the crop to the
    circle when it is plausible, else on the whole frame padded to a square.
    """
    if circle is None and fit:
        circle = fit_fov_circle(rgb)
    ok = _plausible(circle)
    square, valid = crop_to_fov(rgb, circle if ok else None, WORK_SIZE)  # [S, S, 3], [S, S]
    disc = valid & disc_mask(WORK_SIZE) if ok else valid
    inner = disc & disc_mask(WORK_SIZE, INNER_FRACTION) if ok else valid
    x = square.astype(np.float32) / 255.0  # [S, S, 3]
    y = _luma(x)  # [S, S]
    mean_luma = float(y[disc].mean()) if disc.any() else 0.0
    saturated = float((y[disc] >= SATURATED_LUMA).mean()) if disc.any() else 0.0
    light = masked_blur(y, disc, SHADOW_SIGMA)  # [S, S] illumination
    shadow = float((light[inner] < SHADOW_RATIO * np.median(light[inner])).mean()) if inner.any() else 1.0
    green = x[..., 1]
    g_local = masked_blur(green, disc, 6.0)  # [S, S]
    contrast = green / np.maximum(g_local, 0.02)  # [S, S] relative to the local mean
    b1, b3, b6 = (masked_blur(contrast, disc, sigma) for sigma in (1.0, 3.0, 6.0))  # each [S, S]
    fine_e, mid_e = (float(np.var(b[inner])) if inner.any() else 0.0 for b in (b1 - b3, b3 - b6))
    sharpness = fine_e / max(mid_e, 1e-9)
    mean_rgb = x[inner].mean(axis=0) if inner.any() else np.zeros(3)  # [3]
    std_rgb = x[inner].std(axis=0) if inner.any() else np.zeros(3)
    half_short = min(rgb.shape[:2]) / 2
    c = circle
    return QualityMeasures(
        has_circle=ok,
        fov_inlier_share=c.inlier_share if c else 0.0,
        fov_arc_support=c.arc_support if c else 0.0,
        fov_visible_arc=c.visible_arc if c else 0.0,
        fov_offset=c.offset if c else 1.0,
        fov_radius=c.mean_radius / half_short if c else 0.0,
        fov_radius_px=c.mean_radius if c else 0.0,
        fov_iou=c.mask_iou if c else 0.0,
        mean_luma=mean_luma,
        saturated_fraction=saturated,
        shadow_fraction=shadow,
        sharpness=sharpness,
        red_share=float(mean_rgb[0] / max(float(mean_rgb.sum()), 1e-6)),
        red_over_green=float(mean_rgb[0] / max(float(mean_rgb[1]), 1e-3)),
        blockiness=blockiness(rgb),
        channel_mean=(float(mean_rgb[0]), float(mean_rgb[1]), float(mean_rgb[2])),
        channel_std=(float(std_rgb[0]), float(std_rgb[1]), float(std_rgb[2])),
    )


def judge(m: QualityMeasures) -> QualityReport:
    """Apply the thresholds to the measures (see the module docstring)."""
    fov_score = min(
        _margin_score(m.fov_inlier_share, MIN_INLIER_SHARE, 0.05),
        _margin_score(m.fov_arc_support, MIN_ARC_SUPPORT, 0.05),
        _margin_score(m.fov_visible_arc, MIN_VISIBLE_ARC, 0.05),
        _margin_score(m.fov_offset, MAX_FOV_OFFSET, 0.03, higher_is_better=False),
        _margin_score(m.fov_iou, MIN_FOV_IOU, 0.02),
        _margin_score(m.fov_radius, MIN_FOV_RADIUS, 0.05),
        _margin_score(m.fov_radius, MAX_FOV_RADIUS, 0.05, higher_is_better=False),
    )
    scores = {
        "no_field_of_view": fov_score,
        "too_dark": _margin_score(m.mean_luma, MIN_MEAN_LUMA, 0.03),
        "overexposed": min(
            _margin_score(m.saturated_fraction, MAX_SATURATED, 0.05, higher_is_better=False),
            _margin_score(m.mean_luma, MAX_MEAN_LUMA_SHARP, 0.03, higher_is_better=False),
            max(_margin_score(m.mean_luma, MAX_MEAN_LUMA, 0.03, higher_is_better=False),
                _margin_score(m.sharpness, MIN_SHARPNESS, 0.15)),
        ),
        "obstructed": _margin_score(m.shadow_fraction, MAX_SHADOW, 0.03, higher_is_better=False),
        "blurred": _margin_score(m.sharpness, MIN_SHARPNESS, 0.15),
        "not_fundus": min(
            _margin_score(m.red_share, MIN_RED_SHARE, 0.03),
            _margin_score(m.red_over_green, MIN_RED_OVER_GREEN, 0.1),
        ),
        "compression_artifacts": _margin_score(m.blockiness, MAX_BLOCKINESS, 0.3, higher_is_better=False),
    }
    failed = {
        "no_field_of_view": not m.has_circle,
        "too_dark": m.mean_luma < MIN_MEAN_LUMA,
        "overexposed": (m.saturated_fraction > MAX_SATURATED or m.mean_luma > MAX_MEAN_LUMA_SHARP
                        or (m.mean_luma > MAX_MEAN_LUMA and m.sharpness < MIN_SHARPNESS)),
        "obstructed": m.shadow_fraction > MAX_SHADOW,
        "blurred": m.sharpness < MIN_SHARPNESS,
        "not_fundus": m.red_share < MIN_RED_SHARE or m.red_over_green < MIN_RED_OVER_GREEN,
        "compression_artifacts": m.blockiness > MAX_BLOCKINESS,
    }
    issues = [name for name in ISSUES if failed[name]]
    score = min(scores.values())
    # keep the documented invariant exact at the thresholds: gradable <=> score >= 0.5
    score = min(score, 0.4999) if issues else max(score, 0.5)
    return QualityReport(gradable=not issues, score=round(score, 4), issues=issues, measurements=m.as_dict())


def assess_quality(rgb: np.ndarray, circle: FovCircle | None = None) -> QualityReport:
    """Grade the quality of a decoded photograph uint8 [H, W, 3] (any size and aspect ratio).

    ``circle``: the FOV circle if the caller already fitted it (``prepare_image`` fits it once for
    the gate and the preprocessing).
    """
    return judge(measure(rgb, circle))
