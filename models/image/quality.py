"""Image-quality gate: is this a gradable fundus photograph?

A network trained on fundus photographs answers confidently on anything it is given, so the
service checks the image itself before trusting the network. The gate takes the decoded frame as
the camera made it (any size, any aspect: 3:2 and 4:3 frames cut the disc, square ones may not):

1. **field of view** (``no_field_of_view``): a circle is fitted robustly to the bright region's
   edge points that are not on the frame (``models.image.fov``: RANSAC + least squares, so frame cuts,
   notches and text overlays do not pull it). It must be plausible *as a circle*: most edge points
   on it (``MIN_INLIER_SHARE``), its in-frame arc supported by edge points (``MIN_ARC_SUPPORT``),
   at least ``MIN_VISIBLE_ARC`` of it inside the frame and spread around it (supported arcs in at
   least ``MIN_ARC_QUADRANTS`` of the four quadrants: a disc clipped on four sides by a tight crop
   shows its edge only in the frame's corners, but in all four), centred (``MAX_FOV_OFFSET`` radii
   from the frame centre), of a radius a fundus camera produces (``MIN_FOV_RADIUS``..``MAX_FOV_RADIUS``
   of the frame's half short side), and the bright region must fill it (IoU >= ``MIN_FOV_IOU``).
2. every other measure is taken on the FOV cropped to the fitted circle and resampled so that its
   diameter is ``WORK_SIZE`` px (``models.image.preprocessing.crop_to_fov``): the thresholds hold at any
   camera resolution and copy size (224 px or 4288 px), and the cost does not grow with it. Without a
   plausible FOV the whole frame is measured, unless the circle is centred and of a camera's radius and
   only its edge failed (an eyelid over the rim): then on the circle, so the shadow is named too. Inside
   the disc (rim and ``EDGE_MARGIN`` px along the frame's cuts excluded):

   - **exposure**: mean luminance >= ``MIN_MEAN_LUMA`` (``too_dark``); ``overexposed`` when the share of
     near-white pixels exceeds ``MAX_SATURATED``, or the mean luminance exceeds ``MAX_MEAN_LUMA_SHARP``, or
     it exceeds ``MAX_MEAN_LUMA`` on a picture that is not sharp (washed out by flare: a bright but sharp
     photograph, common with some cameras' yellow rendering, is gradable);
   - **obstruction** (``obstructed``): share of the inner disc whose illumination (luminance blurred
     far beyond vessel scale) is below ``SHADOW_RATIO`` x its median <= ``MAX_SHADOW`` (eyelid and
     eyelash shadows), and share below ``DEEP_SHADOW_RATIO`` x its upper quartile <= ``MAX_DEEP_SHADOW``
     (a lid over the brightest part of a picture, e.g. a flare-lit upper field, leaves it no darker than a
     third of the median but far below the lit retina's level);
   - **sharpness** (``blurred``): ratio of the vessel-scale to the coarse-scale band-pass energy
     (differences of Gaussians, sigma 1-3 px over 3-6 px at ``WORK_SIZE``) of the green channel
     divided by its local mean. Dividing by the local mean makes it a *contrast* (independent of
     exposure and pigmentation); the ratio makes it independent of how much structure a retina has
     (blur removes the vessel band first), and sigma >= 1 px keeps sensor noise out of it. Only the
     lit retina counts: black left inside the crop (a notch, a ring, a band of an earlier crop) would
     otherwise be the strongest edge in it. **Patch sharpness** (``blurred`` too): the same ratio in each of
     8 x 8 patches of the disc, and its median patch >= ``MIN_PATCH_SHARPNESS``. A blurred photograph is
     blurred in every patch; crisp marks over a few patches (text burned in over the retina) lift the whole
     ratio but not the median patch;
   - **colour** (``not_fundus``): not a neutral or green picture (red share of the mean colour >=
     ``MIN_RED_SHARE``, a grey card has 1/3, and red >= ``MIN_RED_OVER_GREEN`` x green). Some cameras render
     the fundus greyish or green-tinged (red share 0.34-0.37), so the rule does not ask for more red than that.
3. **compression** (``compression_artifacts``): heavy JPEG quantisation leaves 8x8 blocks. Measured
   on the decoded frame (rows/columns subsampled): mean absolute step across block boundaries over
   the mean step elsewhere, at period 8 (and 4, for JPEGs decoded at half scale), >= ``MAX_BLOCKINESS``
   rejects. A photograph resized after compression loses the grid and is not caught by this measure.

Each threshold is a ``Rule``; each measure becomes a score in [0, 1] that is 0.5 exactly at its threshold
(a logistic of the margin); the report's ``score`` is the smallest, so ``gradable`` <=> ``score >= 0.5``.
A refusal explains itself: ``QualityReport.findings`` names, for each issue, the measure that missed, its
value and the threshold (the API's ``quality.details``, the page, the batch output's ``quality_details``).
Thresholds were set on real (IDRiD, ODIR-5K, EyePACS) and synthetic photographs and the framing family
of real photographs (``support.framings``); how in docs/quality-gate.md, the accept/reject tables in
docs/results-quality-gate.md (``benchmarks/quality_table.py``, ``benchmarks/framing_family.py``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from models.image.fov import FovCircle, fit_fov_circle
from models.image.preprocessing import crop_to_fov, disc_mask, masked_blur
from models.image.quality_rules import Finding, Rule

WORK_SIZE = 256  # FOV diameter (px) at which exposure, shadow, sharpness and colour are measured
EDGE_MARGIN = 3.0  # px at WORK_SIZE kept between the measured region and the picture's cut edges
LIT_FRACTION = 0.3  # sharpness: retina at least this share of the inner median luminance (not black)
INNER_FRACTION = 0.9  # measure inside this share of the radius (the rim has glare and fall-off)
# field of view
MIN_INLIER_SHARE = 0.6
MIN_ARC_SUPPORT = 0.7
MIN_VISIBLE_ARC = 0.02
MIN_ARC_QUADRANTS = 3
MAX_FOV_OFFSET = 0.15
MIN_FOV_RADIUS = 0.6
MAX_FOV_RADIUS = 1.5
MIN_FOV_IOU = 0.9
# exposure, obstruction, sharpness, colour, compression
MIN_MEAN_LUMA = 0.10
MAX_MEAN_LUMA = 0.60  # brighter than this AND not sharp: washed out
# brighter than this: overexposed however sharp. Bright, sharp renderings of some programmes' cameras reach
# 0.81-0.86 (EyePACS 95, 728; ODIR 3212: vessels sharp to the periphery), a burnt-out picture >= 0.93
MAX_MEAN_LUMA_SHARP = 0.87
SATURATED_LUMA = 0.94
MAX_SATURATED = 0.20
SHADOW_SIGMA = 8.0  # px at WORK_SIZE: illumination, not vessels
SHADOW_RATIO = 0.35
MAX_SHADOW = 0.05
DEEP_SHADOW_RATIO = 0.3  # of the upper quartile of the illumination
MAX_DEEP_SHADOW = 0.10
MIN_SHARPNESS = 1.45
PATCH_GRID = 8  # patch sharpness: the crop in 8 x 8 patches (32 px at WORK_SIZE, 1/8 of the disc)
MIN_PATCH_SHARPNESS = 1.45
MIN_RED_SHARE = 0.34  # a neutral grey picture has 1/3
MIN_RED_OVER_GREEN = 0.9
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
    findings: list[Finding] = field(default_factory=list, compare=False)  # why, for each issue

    @property
    def details(self) -> list[dict[str, str | float]]:
        """The findings as JSON-ready dicts (the API's ``quality.details``)."""
        return [f.as_dict() for f in self.findings]


@dataclass(frozen=True)
class QualityMeasures:
    """Every number the gate judges (see the module docstring); importable for statistics tables."""

    has_circle: bool
    fov_inlier_share: float
    fov_arc_support: float
    fov_visible_arc: float
    fov_arc_quadrants: float  # quadrants around the centre with an in-frame, supported arc (0-4)
    fov_offset: float  # radii from the frame centre
    fov_radius: float  # radius / half the frame's short side
    fov_radius_px: float  # radius in the input's pixels
    fov_iou: float
    mean_luma: float
    saturated_fraction: float
    shadow_fraction: float
    deep_shadow_fraction: float  # share below DEEP_SHADOW_RATIO x the illumination's upper quartile
    sharpness: float
    patch_sharpness: float  # the median patch's sharpness (PATCH_GRID x PATCH_GRID patches of the disc)
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
    """The fitted circle is a camera's field of view (every ``FOV_RULES`` threshold holds)."""
    if c is None:
        return False
    values = _fov_values(c)
    return all(r.holds(values[r.measure]) for r in FOV_RULES)


def _placed(c: FovCircle | None) -> bool:
    """A circle where a camera puts the disc (centred, of a camera's radius) whose edge is not plausible.

    An eyelid's shadow hides part of the rim, so the fit is refused (``no_field_of_view``), but the circle is
    still the disc: the other measures are taken on it, so the shadow is also named (``obstructed``).
    """
    if c is None:
        return False
    values = _fov_values(c)
    geometric = {"fov_offset", "fov_radius"}
    return all(r.holds(values[r.measure]) for r in FOV_RULES if r.measure in geometric)


def _fov_values(c: FovCircle | None) -> dict[str, float]:
    """The field-of-view measures of a fit (of no circle: values that fail every rule)."""
    if c is None:
        return {"fov_inlier_share": 0.0, "fov_arc_support": 0.0, "fov_visible_arc": 0.0, "fov_arc_quadrants": 0.0,
                "fov_offset": 1.0, "fov_radius": 0.0, "fov_radius_px": 0.0, "fov_iou": 0.0}
    return {
        "fov_inlier_share": c.inlier_share,
        "fov_arc_support": c.arc_support,
        "fov_visible_arc": c.visible_arc,
        "fov_arc_quadrants": float(c.arc_quadrants),
        "fov_offset": c.offset,
        "fov_radius": c.mean_radius / (min(c.width, c.height) / 2),
        "fov_radius_px": c.mean_radius,
        "fov_iou": c.mask_iou,
    }


def _erode(mask: np.ndarray, margin: float) -> np.ndarray:
    """bool [S, S]: the pixels of ``mask`` at least about ``margin`` px from its edge (a blur of it is ~1)."""
    return masked_blur(mask.astype(np.float32), np.ones_like(mask), margin) > 0.999


def _regions(valid: np.ndarray, ok: bool) -> tuple[np.ndarray, np.ndarray]:
    """(disc, inner) masks [S, S] of the crop: the disc as far as the frame recorded it, and its inner part.

    ``inner`` keeps ``INNER_FRACTION`` of the radius and stays ``EDGE_MARGIN`` px away from where the frame or a
    straight cut ends the picture: the step from retina to black there would count as shade (shadow).
    """
    core = _erode(valid, EDGE_MARGIN)
    if not ok:
        return valid, valid & core
    disc = valid & disc_mask(WORK_SIZE)
    return disc, disc & core & disc_mask(WORK_SIZE, INNER_FRACTION)


def _sharpness(green: np.ndarray, luma: np.ndarray, disc: np.ndarray, inner: np.ndarray) -> tuple[float, float]:
    """(whole, patch) sharpness: fine over mid band-pass energy of the green contrast (green / its local mean).

    ``whole`` is the ratio over the lit retina; ``patch`` the median of the same ratio over the ``PATCH_GRID`` x
    ``PATCH_GRID`` patches of the crop that hold at least half as much lit retina as the fullest patch. A blurred
    photograph is blurred in every patch, so the median patch stays low when something crisp covers a few of them
    (text burned in over the retina, a glint), while that lifts the whole ratio.

    Pixels darker than ``LIT_FRACTION`` of the inner median (a notch, a dark ring, a band of black left by an
    earlier crop, the surround of a copy whose cut the fit did not see) and ``EDGE_MARGIN`` px around them are
    left out: a step from retina to black is the strongest edge in a crop and would swamp the vessels' detail.
    """
    if not inner.any():
        return 0.0, 0.0
    lit = disc & (luma > LIT_FRACTION * float(np.median(luma[inner])))  # [S, S]
    region = inner & _erode(lit, EDGE_MARGIN)
    if not region.any():
        return 0.0, 0.0
    g_local = masked_blur(green, lit, 6.0)  # [S, S]
    contrast = green / np.maximum(g_local, 0.02)  # [S, S] relative to the local mean
    b1, b3, b6 = (masked_blur(contrast, lit, sigma) for sigma in (1.0, 3.0, 6.0))  # each [S, S]
    fine, mid = b1 - b3, b3 - b6  # [S, S] the vessel-scale and the coarse band
    whole = float(np.var(fine[region])) / max(float(np.var(mid[region])), 1e-9)
    g, t = PATCH_GRID, green.shape[0] // PATCH_GRID

    def per_patch(a: np.ndarray) -> np.ndarray:  # [S, S] -> [g, g] sums over each patch's region pixels
        return np.where(region, a, 0.0)[: g * t, : g * t].reshape(g, t, g, t).sum(axis=(1, 3))

    count, fine_e, mid_e = per_patch(np.ones_like(fine)), per_patch(fine * fine), per_patch(mid * mid)
    kept = count >= 0.5 * count.max()  # [g, g]
    patch = float(np.median(fine_e[kept] / np.maximum(mid_e[kept], 1e-9)))
    return whole, patch


def measure(rgb: np.ndarray, circle: FovCircle | None = None, *, fit: bool = True) -> QualityMeasures:
    """All quality measures of a decoded frame uint8 [H, W, 3]; ``circle`` as fitted by ``fit_fov_circle``.

    ``fit=True`` fits the circle when none is given. The disc measures are taken on the crop to the
    circle when it is plausible, else on the whole frame padded to a square.
    """
    if circle is None and fit:
        circle = fit_fov_circle(rgb)
    ok = _plausible(circle)
    placed = ok or _placed(circle)  # crop to the circle: plausible, or only its edge is broken (an eyelid)
    square, valid = crop_to_fov(rgb, circle if placed else None, WORK_SIZE)  # [S, S, 3], [S, S]
    disc, inner = _regions(valid, placed)
    x = square.astype(np.float32) / 255.0  # [S, S, 3]
    y = _luma(x)  # [S, S]
    mean_luma = float(y[disc].mean()) if disc.any() else 0.0
    saturated = float((y[disc] >= SATURATED_LUMA).mean()) if disc.any() else 0.0
    light = masked_blur(y, disc, SHADOW_SIGMA)  # [S, S] illumination
    lit = light[inner]  # [N] the inner disc's illumination
    shadow = float((lit < SHADOW_RATIO * np.median(lit)).mean()) if lit.size else 1.0
    deep_shadow = float((lit < DEEP_SHADOW_RATIO * np.quantile(lit, 0.75)).mean()) if lit.size else 1.0
    sharpness, patch_sharpness = _sharpness(x[..., 1], y, disc, inner)
    mean_rgb = x[inner].mean(axis=0) if inner.any() else np.zeros(3)  # [3]
    std_rgb = x[inner].std(axis=0) if inner.any() else np.zeros(3)
    return QualityMeasures(
        has_circle=ok,
        **_fov_values(circle),
        mean_luma=mean_luma,
        saturated_fraction=saturated,
        shadow_fraction=shadow,
        deep_shadow_fraction=deep_shadow,
        sharpness=sharpness,
        patch_sharpness=patch_sharpness,
        red_share=float(mean_rgb[0] / max(float(mean_rgb.sum()), 1e-6)),
        red_over_green=float(mean_rgb[0] / max(float(mean_rgb[1]), 1e-3)),
        blockiness=blockiness(rgb),
        channel_mean=(float(mean_rgb[0]), float(mean_rgb[1]), float(mean_rgb[2])),
        channel_std=(float(std_rgb[0]), float(std_rgb[1]), float(std_rgb[2])),
    )


FOV_RULES = (
    Rule("no_field_of_view", "fov_inlier_share", MIN_INLIER_SHARE, ">=", 0.05),
    Rule("no_field_of_view", "fov_arc_support", MIN_ARC_SUPPORT, ">=", 0.05),
    Rule("no_field_of_view", "fov_visible_arc", MIN_VISIBLE_ARC, ">=", 0.02),
    Rule("no_field_of_view", "fov_arc_quadrants", MIN_ARC_QUADRANTS, ">=", 0.3),
    Rule("no_field_of_view", "fov_offset", MAX_FOV_OFFSET, "<=", 0.03),
    Rule("no_field_of_view", "fov_iou", MIN_FOV_IOU, ">=", 0.02),
    Rule("no_field_of_view", "fov_radius", MIN_FOV_RADIUS, ">=", 0.05),
    Rule("no_field_of_view", "fov_radius", MAX_FOV_RADIUS, "<=", 0.05),
)
SATURATION = Rule("overexposed", "saturated_fraction", MAX_SATURATED, "<=", 0.05)
GLARE = Rule("overexposed", "mean_luma", MAX_MEAN_LUMA_SHARP, "<=", 0.03)
WASHED_OUT = Rule("overexposed", "mean_luma", MAX_MEAN_LUMA, "<=", 0.03)  # applies to a picture that is not sharp
SHARPNESS = Rule("blurred", "sharpness", MIN_SHARPNESS, ">=", 0.15)
# named when the whole picture passes: a blurred picture is blurred in its patches too, one finding says it
PATCH_SHARPNESS = Rule("blurred", "patch_sharpness", MIN_PATCH_SHARPNESS, ">=", 0.15)
RULES = (  # every rule but the washed-out one, in the order of ISSUES
    *FOV_RULES,
    Rule("too_dark", "mean_luma", MIN_MEAN_LUMA, ">=", 0.03),
    SATURATION,
    GLARE,
    Rule("obstructed", "shadow_fraction", MAX_SHADOW, "<=", 0.03),
    Rule("obstructed", "deep_shadow_fraction", MAX_DEEP_SHADOW, "<=", 0.03),
    SHARPNESS,
    PATCH_SHARPNESS,
    Rule("not_fundus", "red_share", MIN_RED_SHARE, ">=", 0.01),
    Rule("not_fundus", "red_over_green", MIN_RED_OVER_GREEN, ">=", 0.1),
    Rule("compression_artifacts", "blockiness", MAX_BLOCKINESS, "<=", 0.3),
)


def _findings(m: QualityMeasures) -> list[Finding]:
    """Every rule the measures miss, as findings (the FOV's only when no plausible circle was found, the patch
    sharpness's only when the whole picture's sharpness holds)."""
    values = m.as_dict()
    sharp = SHARPNESS.holds(m.sharpness)
    found = [
        Finding(r.issue, r.measure, values[r.measure], r.threshold, r.relation)
        for r in RULES
        if not r.holds(values[r.measure])
        and (r.issue != "no_field_of_view" or not m.has_circle)
        and (r is not PATCH_SHARPNESS or sharp)
    ]
    if not WASHED_OUT.holds(m.mean_luma) and not sharp:
        found.append(Finding(WASHED_OUT.issue, WASHED_OUT.measure, m.mean_luma, WASHED_OUT.threshold, "<=",
                             f"washed out: sharpness {m.sharpness:.3g} is below {MIN_SHARPNESS:.3g}"))
    if not m.has_circle and not any(f.issue == "no_field_of_view" for f in found):
        found.append(Finding("no_field_of_view", "fov_inlier_share", m.fov_inlier_share, MIN_INLIER_SHARE, ">="))
    return sorted(found, key=lambda f: ISSUES.index(f.issue))


def judge(m: QualityMeasures) -> QualityReport:
    """Apply the thresholds to the measures (see the module docstring)."""
    values = m.as_dict()
    scores: dict[str, float] = {}
    for r in RULES:
        scores[r.issue] = min(scores.get(r.issue, 1.0), r.score(values[r.measure]))
    washed = max(WASHED_OUT.score(m.mean_luma), SHARPNESS.score(m.sharpness))  # bright is fine when sharp
    scores["overexposed"] = min(scores["overexposed"], washed)
    findings = _findings(m)
    issues = [name for name in ISSUES if any(f.issue == name for f in findings)]
    score = min(scores.values())
    # keep the documented invariant exact at the thresholds: gradable <=> score >= 0.5
    score = min(score, 0.4999) if issues else max(score, 0.5)
    return QualityReport(gradable=not issues, score=round(score, 4), issues=issues, measurements=values,
                         findings=findings)


def assess_quality(rgb: np.ndarray, circle: FovCircle | None = None) -> QualityReport:
    """Grade the quality of a decoded photograph uint8 [H, W, 3] (any size and aspect ratio).

    ``circle``: the FOV circle if the caller already fitted it (``prepare_image`` fits it once for
    the gate and the preprocessing).
    """
    return judge(measure(rgb, circle))
