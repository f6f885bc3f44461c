"""Field of view (FOV) of a fundus photograph: the bright disc, found as a robustly fitted circle (or ellipse).

Real cameras record the retina as a disc on a dark (not always pure black) background, and most
frames cut that disc: a 3:2 or 4:3 frame cuts it at the top and bottom (or left and right, in
portrait), and some cameras add a notch or text overlays at the border. So the circle is fitted only
to edge points that are *not* on the frame, with RANSAC (three-point circles, the one with most
inliers wins) followed by a least-squares refit on its inliers: notches, text blobs and the straight
cut lines of a padded frame are outliers and do not pull the fit. Thin bright strokes on the surround
(text burned into a corner) are opened away before the edge is traced (``TEXT_STROKE``).

A tight square crop clips the disc on all four sides: the circle is larger than the frame and its edge
is visible only in the frame's corners. The fit needs nothing special for it (the corner arcs fix the
circle); ``FovCircle.arc_quadrants`` says that the visible edge is spread around the centre, which is
what tells such a crop from a curve in one corner. Its black corners are too small to set the surround's
level by the 1st percentile alone (``surround_level``), and a camera's cut left in such a crop, resized,
fades over a few lines next to the frame's border (``CUT_SPREAD``). A straight cut with black beyond it (a frame
padded to a square) is the frame's only when it is shallow (``MAX_CUT_DEPTH``): a lid as dark as the surround is
a deep cut on one side.

Some published copies of fundus photographs were cropped and then resized to a square, which stretches the
disc into an axis-aligned ellipse (the ODIR-5K copies: axis ratio ~1.14). A circle fits only two of its four
arcs; when the circle's inliers are fewer than ``ELLIPSE_TRIGGER`` and an axis-aligned ellipse (ratio within
``MAX_ASPECT``) fits more of the edge, at least ``ELLIPSE_MIN_SHARE`` of it (a publisher's crop may cut the
ellipse along a line that is not quite straight, whose points lie off it), the ellipse is the FOV
(``FovCircle.radius_y``), and the crop maps it back onto a round disc.

Everything runs on a copy whose long side is ``FIT_SIDE`` px, so the cost does not grow with the
camera's resolution; the circle is returned in the input image's pixel coordinates.

This module lives in ``models`` because the shared preprocessing (``models.image.preprocessing``, used
by training, service and batch job alike) crops to the fitted circle, and the service's quality gate
judges the same fit (``models.image.quality``).

Example::

    circle = fit_fov_circle(rgb)          # rgb: uint8 [H, W, 3]; None when there is no disc edge
    if circle is not None:
        print(circle.cx, circle.cy, circle.radius, circle.inlier_share)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from PIL import Image

FIT_SIDE = 384  # long side (px) of the copy the circle is fitted on
MIN_LEVEL = 4 / 255  # the threshold is at least this far above the surround (sensor and JPEG noise)
LEVEL_FRACTION = 0.2  # threshold = background + this x (FOV level - background)
FRAME_MARGIN = 2  # edge points within this many px (at FIT_SIDE) of the frame are "on the frame"
RANSAC_ITERATIONS = 256
RANSAC_SEED = 0  # fixed: the same image always gets the same circle
INLIER_TOLERANCE = 0.012  # of the radius (at least 1.5 px)
MIN_EDGE_POINTS = 24
STRAIGHT_RUN = 0.2  # span ends sharing one coordinate on > this share of lines are a straight cut
STRAIGHT_MIN_POINTS = 12
CUT_SPREAD = 3  # px at FIT_SIDE: a cut faded over up to this many more lines by a resize is still one cut
CUT_MIN_EXTENT = 0.7  # ... when its ends run along at least this share of the bright region's extent
CUT_BORDER_BAND = 0.02  # a cut leaving less than this share of the frame beyond it is the frame's own edge
CUT_BEYOND_MAX = 0.01  # a straight cut has (almost) no line whose bright span reaches past it: at most this share
TEXT_STROKE = 2  # px at FIT_SIDE: bright strokes narrower than 2 * this + 1 px (burned-in text) are not the disc
ARC_BINS = 144  # 2.5 degree bins for the arc measures: a tight crop shows its edge in arcs of 7-30 degrees
ELLIPSE_TRIGGER = 0.9  # a circle with fewer inliers than this share is compared with an axis-aligned ellipse
ELLIPSE_MIN_SHARE = 0.75  # ... which replaces it when it fits more of the edge points, and at least this share
MAX_ASPECT = 1.5  # the ellipse's axis ratio: a disc resized to a square by a publisher, not any oval
# a straight cut with padding beyond it is a frame's when it cuts at most this share of the diameter off the disc:
# the natural photographs' cuts reach 0.16 (EyePACS' bottom cuts); a lid as dark as the surround cuts 0.3 off one side
MAX_CUT_DEPTH = 0.25


@dataclass(frozen=True)
class FovCircle:
    """A fitted FOV circle in the pixel coordinates of the image it was fitted on (x right, y down)."""

    cx: float
    cy: float
    radius: float
    width: int  # the image's size, so the clipping by the frame can be judged
    height: int
    inlier_share: float  # share of the off-frame edge points within tolerance of the circle
    arc_support: float  # share of the circle's in-frame arcs (of ``ARC_BINS``) that have an inlier edge point
    visible_arc: float  # share of the circle's circumference that lies inside the frame
    mask_iou: float  # IoU of the bright region with the disc clipped to the frame
    # how many of the four 90-degree quadrants (around the centre) hold an in-frame arc with an inlier: a disc
    # clipped on four sides shows its edge only in the frame's corners, but in all four of them
    arc_quadrants: int = 4
    box: tuple[int, int, int, int] = (0, 0, -1, -1)  # recorded part of the frame x0, y0, x1, y1 (-1: to the end)
    # vertical semi-axis when the disc was stretched into an axis-aligned ellipse (an image resized to a square
    # after cropping: the ODIR-5K copies), None for a circle; ``radius`` is then the horizontal semi-axis
    radius_y: float | None = None

    @property
    def ry(self) -> float:
        """The vertical semi-axis (the radius, for a circle)."""
        return self.radius if self.radius_y is None else self.radius_y

    @property
    def mean_radius(self) -> float:
        """sqrt(rx * ry): the radius of the circle of the same area."""
        return math.sqrt(self.radius * self.ry)

    @property
    def offset(self) -> float:
        """Distance of the centre from the frame's centre, in radii."""
        return math.hypot(self.cx - self.width / 2, self.cy - self.height / 2) / self.mean_radius

    @property
    def clipped(self) -> bool:
        """True when the frame cuts the disc on at least one side."""
        rx, ry = self.radius, self.ry
        return self.cx - rx < 0 or self.cy - ry < 0 or self.cx + rx > self.width or self.cy + ry > self.height


def _small_copy(rgb: np.ndarray, side: int) -> tuple[np.ndarray, float]:
    """uint8 [H, W, 3] -> float32 brightest channel in [0, 1] with long side <= ``side``, and the scale."""
    h, w = rgb.shape[:2]
    scale = min(1.0, side / max(h, w))
    img = Image.fromarray(np.ascontiguousarray(rgb))
    if scale < 1.0:
        img = img.resize((max(1, round(w * scale)), max(1, round(h * scale))), Image.Resampling.BOX)
    level = np.asarray(img, dtype=np.float32).max(axis=2) / 255.0  # [h, w]
    return level, scale


def _box3(img: np.ndarray) -> np.ndarray:
    """3x3 mean, edges replicated: float32 [H, W]."""
    p = np.pad(img, 1, mode="edge")
    h, w = img.shape
    return sum(p[i : i + h, j : j + w] for i in range(3) for j in range(3)) / 9.0  # type: ignore[return-value]


def fov_level(level: np.ndarray) -> float:
    """Threshold between the dark surround and the FOV: ``LEVEL_FRACTION`` of the way from one to the other.

    The surround's level is ``surround_level`` (it is dark but not always pure black), the FOV's
    the median of what lies above a first split at the 95th percentile's fraction: the retina's typical
    level, not its brightest 5 % (the optic disc of a dim photograph would put a dark periphery outside).
    A fixed fraction of the span keeps a dim, vignetted periphery inside the FOV on bright and dark
    photographs alike; a fraction of the span rather than Otsu's split, which lands *inside* the FOV when
    the frame is mostly FOV.
    """
    bg, top = surround_level(level), float(np.percentile(level, 95))
    first = max(bg + MIN_LEVEL, bg + LEVEL_FRACTION * (top - bg))
    above = level[level > first]
    fg = float(np.median(above)) if above.size else top
    return max(bg + MIN_LEVEL, bg + LEVEL_FRACTION * (fg - bg))


def surround_level(level: np.ndarray) -> float:
    """The dark surround's level: the 1st percentile, or the 0.1th plus ``MIN_LEVEL`` when that is darker.

    A camera frame or a padded copy has a surround of a fifth of the frame or more, so its 1st percentile is the
    surround. A tight square crop keeps black only in its four corners, well under 1 % of the frame at 75 % of the
    diameter: the 1st percentile is then a dim periphery of the retina, which would put the threshold inside it.
    """
    low, p1 = (float(v) for v in np.percentile(level, [0.1, 1]))
    return min(p1, low + MIN_LEVEL)


def _box_mean(mask: np.ndarray, radius: int) -> np.ndarray:
    """Mean of bool [H, W] over a (2r+1)^2 window, edges replicated (the frame's border is not an edge)."""
    k = 2 * radius + 1
    padded = np.pad(mask.astype(np.float32), radius, mode="edge")  # [H+2r, W+2r]
    c = np.zeros((padded.shape[0] + 1, padded.shape[1] + 1), np.float32)
    c[1:, 1:] = padded.cumsum(0).cumsum(1)
    h, w = mask.shape
    return (c[k : k + h, k : k + w] - c[:h, k : k + w] - c[k : k + h, :w] + c[:h, :w]) / (k * k)


def _open(mask: np.ndarray, radius: int) -> np.ndarray:
    """Morphological opening by a (2r+1)^2 square: strokes thinner than that (burned-in text) disappear."""
    eroded = _box_mean(mask, radius) > 1 - 1e-4
    return _box_mean(eroded, radius) > 1e-4


def fov_mask(level: np.ndarray) -> np.ndarray:
    """bool [H, W]: the bright region, each row's span filled (dark lesions and vessels are not holes).

    Thin bright strokes on the surround (text and marks burned into a corner) are opened away first
    (``TEXT_STROKE``), so they neither pull the disc's edge points nor fill the rows they lie on.
    """
    threshold = fov_level(level)
    solid = _open(level > threshold, TEXT_STROKE)  # [H, W] without strokes (on the raw level: thin stays thin)
    bright = (_box3(level) > threshold) & (_box_mean(solid, TEXT_STROKE) > 0)
    w = bright.shape[1]
    any_row = bright.any(axis=1)
    first = np.where(any_row, bright.argmax(axis=1), w)
    last = np.where(any_row, w - 1 - bright[:, ::-1].argmax(axis=1), -1)
    cols = np.arange(w)[None, :]
    return (cols >= first[:, None]) & (cols <= last[:, None])


Box = tuple[int, int, int, int]  # x0, y0, x1, y1 (inclusive): the part of the frame the camera recorded


def edge_points(mask: np.ndarray, level: np.ndarray | None = None) -> tuple[np.ndarray, Box]:
    """The ends of every row's and column's span that are not on the frame: (float64 [N, 2] (x, y), box).

    A frame padded with black to a square (a pre-processed upload, or ``fov_square``) cuts the disc
    along a straight line *inside* the image: span ends sharing one coordinate on more than
    ``STRAIGHT_RUN`` of the lines are such a cut, *if* everything beyond it is as dark as padding
    (``level`` [H, W], the brightest channel, at most its 1st percentile + ``MIN_LEVEL``) and none of the
    bright region lies beyond it (at most ``CUT_BEYOND_MAX``): an eyelid shadow with a straight-ish edge
    still shows retina beyond it, or the lit retina goes on past the line at one end (each row's span is
    filled, so the row where both ends of a curved lid edge are lit is straight), and is not the frame.
    The cut's points are dropped like the frame's own border, and ``box`` is shrunk to it, so the
    arc and IoU measures treat it as the frame. Without ``level`` no cut is accepted.
    """
    h, w = mask.shape
    m = FRAME_MARGIN
    pts: list[np.ndarray] = []
    box = [0, 0, w - 1, h - 1]
    for axis, length in ((1, w), (0, h)):
        present = mask.any(axis=axis)
        idx = np.flatnonzero(present)
        first = mask.argmax(axis=axis)[idx]
        last = length - 1 - np.flip(mask, axis=axis).argmax(axis=axis)[idx]
        for side, end in enumerate((first, last)):
            keep = (end >= m) & (end <= length - 1 - m)
            values, counts = np.unique(end[keep], return_counts=True)
            needed = max(STRAIGHT_MIN_POINTS, STRAIGHT_RUN * idx.size)
            straight = values[counts > needed]
            if not straight.size:
                straight = _spread_cut(end[keep], idx[keep], values, counts, needed)
            if level is None:
                straight = straight[:0]  # no cut accepted: every end is an edge point
            elif straight.size:
                # no line's bright span reaches past the cut's innermost line by more than the CUT_SPREAD lines a
                # resize fades it over, and only surround lies past them; a cut within CUT_BORDER_BAND of the
                # frame's border is the frame (a JPEG's blocks ring over the black left there)
                inner = int(straight.max() if side == 0 else straight.min())
                past = end < inner - CUT_SPREAD if side == 0 else end > inner + CUT_SPREAD  # [lines] lit beyond
                faded = (np.s_[:, : max(0, inner - 1 - CUT_SPREAD)] if side == 0
                         else np.s_[:, inner + 2 + CUT_SPREAD :])
                lines = level if axis == 1 else level.T  # [lines, length]
                judged = lines[faded].shape[1] > CUT_BORDER_BAND * length  # else too thin to be anything else
                if past.mean() > CUT_BEYOND_MAX or (judged and not _is_surround(lines[faded], level)):
                    straight = straight[:0]  # not padding: retina (or anything bright) beyond the line
            if straight.size:  # a straight cut: the frame edge of a padded image
                keep &= ~np.isin(end, straight)
                slot = (0 if axis == 1 else 1) + 2 * side  # x0/y0 for first ends, x1/y1 for last
                box[slot] = int(straight.max() if side == 0 else straight.min())
            along, across = end[keep].astype(np.float64), idx[keep].astype(np.float64)
            pts.append(np.column_stack([along, across] if axis == 1 else [across, along]))
    return np.concatenate(pts), (box[0], box[1], box[2], box[3])


def _spread_cut(ends: np.ndarray, lines: np.ndarray, values: np.ndarray, counts: np.ndarray,
                needed: float) -> np.ndarray:
    """The end values of a straight cut spread over up to ``CUT_SPREAD + 1`` adjacent lines, or none.

    A cut resampled from a larger copy fades over a few lines, and where the crossing of the threshold falls
    among them follows the retina's brightness along the cut. The window of values holding the most ends is a
    cut when it holds more than ``needed`` of them *and* they run along at least ``CUT_MIN_EXTENT`` of the
    region's extent: the flat top of a circle also holds many ends within a few lines, but only along a short
    chord (2 sqrt(2 r s) for a spread s, about a sixth of the diameter).
    """
    if not values.size:
        return values
    cumulative = np.concatenate([[0], np.cumsum(counts)])  # values are sorted and unique
    totals = cumulative[np.searchsorted(values, values + CUT_SPREAD, side="right")] - cumulative[:-1]
    start = int(values[int(np.argmax(totals))])
    window = (ends >= start) & (ends <= start + CUT_SPREAD)  # [N] the ends in the best window
    extent = float(lines.max() - lines.min()) if lines.size else 0.0
    along = float(lines[window].max() - lines[window].min()) if window.any() else 0.0
    if totals.max() <= needed or along < CUT_MIN_EXTENT * extent:
        return values[:0]
    return values[(values >= start) & (values <= start + CUT_SPREAD)]


def _is_surround(region: np.ndarray, level: np.ndarray) -> bool:
    """True when ``region`` (the brightest channel beyond a straight cut) is as dark as the frame's surround.

    Padding and a camera's dark surround are at ``surround_level``; sensor noise and JPEG ringing
    scatter pixels a little above it and burned-in text is bright but thin, so three quarters of the region
    must be within 2 x ``MIN_LEVEL`` of that floor. A shadowed retina (an eyelid) is not.
    """
    floor = surround_level(level) + 2 * MIN_LEVEL
    return float(np.percentile(region, 75)) <= floor


def _circles_through(p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Circles through point triples p [T, 3, 2]: centres x, y and radii, each [T] (nan if collinear)."""
    ax, bx, cx = p[:, 0, 0], p[:, 1, 0], p[:, 2, 0]
    ay, by, cy = p[:, 0, 1], p[:, 1, 1], p[:, 2, 1]
    d = 2 * (ax * (by - cy) + bx * (cy - ay) + cx * (ay - by))
    a2, b2, c2 = ax**2 + ay**2, bx**2 + by**2, cx**2 + cy**2
    with np.errstate(divide="ignore", invalid="ignore"):
        ux = (a2 * (by - cy) + b2 * (cy - ay) + c2 * (ay - by)) / d
        uy = (a2 * (cx - bx) + b2 * (ax - cx) + c2 * (bx - ax)) / d
    return ux, uy, np.hypot(ax - ux, ay - uy)


def _least_squares_circle(pts: np.ndarray) -> tuple[float, float, float] | None:
    """Algebraic (Kasa) least-squares circle through pts [N, 2]."""
    a = np.column_stack([pts, np.ones(len(pts))])
    sol, *_ = np.linalg.lstsq(a, -(pts**2).sum(axis=1), rcond=None)
    cx, cy = -sol[0] / 2, -sol[1] / 2
    r2 = cx**2 + cy**2 - sol[2]
    if not np.isfinite(r2) or r2 <= 0:
        return None
    return float(cx), float(cy), float(math.sqrt(r2))


def ransac_circle(pts: np.ndarray, width: int, height: int) -> tuple[float, float, float, np.ndarray] | None:
    """Robust circle through pts [N, 2]: RANSAC on three-point circles, then least squares on inliers.

    Candidate circles must be of a size a fundus FOV can have in this frame (radius between 15 %
    of the short side and the long side) with the centre inside the frame. Returns (cx, cy, r,
    inlier mask [N]) or None.
    """
    if len(pts) < MIN_EDGE_POINTS:
        return None
    rng = np.random.default_rng(RANSAC_SEED)
    triples = pts[rng.integers(0, len(pts), (RANSAC_ITERATIONS, 3))]  # [T, 3, 2]
    ux, uy, r = _circles_through(triples)
    ok = (
        np.isfinite(r)
        & (r >= 0.15 * min(width, height))
        & (r <= max(width, height))
        & (ux >= 0)
        & (ux <= width)
        & (uy >= 0)
        & (uy <= height)
    )
    if not ok.any():
        return None
    ux, uy, r = ux[ok], uy[ok], r[ok]
    tol = np.maximum(1.5, INLIER_TOLERANCE * r)  # [T]
    resid = np.abs(np.hypot(pts[None, :, 0] - ux[:, None], pts[None, :, 1] - uy[:, None]) - r[:, None])  # [T, N]
    best = int(np.argmax((resid <= tol[:, None]).sum(axis=1)))
    circle = (float(ux[best]), float(uy[best]), float(r[best]))
    for _ in range(2):  # refit on the inliers, then re-select them around the refit circle
        inliers = np.abs(np.hypot(pts[:, 0] - circle[0], pts[:, 1] - circle[1]) - circle[2]) <= max(
            1.5, 2 * INLIER_TOLERANCE * circle[2]
        )
        if inliers.sum() < MIN_EDGE_POINTS // 2:
            return None
        refit = _least_squares_circle(pts[inliers])
        if refit is None:
            return None
        circle = refit
    inliers = np.abs(np.hypot(pts[:, 0] - circle[0], pts[:, 1] - circle[1]) - circle[2]) <= max(
        1.5, 2 * INLIER_TOLERANCE * circle[2]
    )
    return circle[0], circle[1], circle[2], inliers


def _least_squares_ellipse(pts: np.ndarray) -> tuple[float, float, float, float] | None:
    """Axis-aligned ellipse through pts [N, 2] (least squares on a x^2 + b y^2 + c x + d y = 1): cx, cy, rx, ry."""
    x, y = pts[:, 0], pts[:, 1]
    sol, *_ = np.linalg.lstsq(np.column_stack([x * x, y * y, x, y]), np.ones(len(pts)), rcond=None)
    a, b, c, d = (float(v) for v in sol)
    if a * b <= 0:  # not an ellipse (a hyperbola or a degenerate conic)
        return None
    cx, cy = -c / (2 * a), -d / (2 * b)
    k = 1 + a * cx * cx + b * cy * cy  # a (x - cx)^2 + b (y - cy)^2 = k
    if k / a <= 0:
        return None
    return cx, cy, math.sqrt(k / a), math.sqrt(k / b)


def _ellipse_fit(pts: np.ndarray, width: int, height: int) -> tuple[float, float, float, float, np.ndarray] | None:
    """An axis-aligned ellipse (cx, cy, rx, ry, inlier mask [N]) with the circle's inlier rule, refit on inliers."""
    if len(pts) < MIN_EDGE_POINTS:
        return None
    fit = _least_squares_ellipse(pts)
    for step in range(4):  # trimmed: the first two refits keep the better-fitting half (two concentric edges,
        if fit is None:    # a dark ring inside the rim, pull a plain least-squares fit between them)
            return None
        cx, cy, rx, ry = fit
        resid = np.abs(np.hypot((pts[:, 0] - cx) / rx, (pts[:, 1] - cy) / ry) - 1.0)
        tolerance = max(1.5 / min(rx, ry), 2 * INLIER_TOLERANCE)
        inliers = resid <= (max(tolerance, float(np.median(resid))) if step < 2 else tolerance)
        if inliers.sum() < MIN_EDGE_POINTS:
            return None
        fit = _least_squares_ellipse(pts[inliers])
    if fit is None:
        return None
    cx, cy, rx, ry = fit
    if not (0 <= cx <= width and 0 <= cy <= height and 1 / MAX_ASPECT <= rx / ry <= MAX_ASPECT):
        return None
    resid = np.abs(np.hypot((pts[:, 0] - cx) / rx, (pts[:, 1] - cy) / ry) - 1.0)
    return cx, cy, rx, ry, resid <= max(1.5 / min(rx, ry), 2 * INLIER_TOLERANCE)


def _arc_measures(cx: float, cy: float, r: float, inlier_pts: np.ndarray, box: Box,
                  ry: float | None = None) -> tuple[float, float, int]:
    """(arc_support, visible_arc, arc_quadrants) of the circle (or ellipse), from ``ARC_BINS`` arcs (``FovCircle``)."""
    ry = r if ry is None else ry
    theta = (np.arange(ARC_BINS) + 0.5) * 2 * math.pi / ARC_BINS
    px, py = cx + r * np.cos(theta), cy + ry * np.sin(theta)
    m = FRAME_MARGIN + 1
    x0, y0, x1, y1 = box
    visible = (px >= x0 + m) & (px <= x1 - m) & (py >= y0 + m) & (py <= y1 - m)  # [B]
    if not visible.any():
        return 0.0, 0.0, 0
    ang = np.arctan2((inlier_pts[:, 1] - cy) / ry, (inlier_pts[:, 0] - cx) / r) % (2 * math.pi)
    hit = np.zeros(ARC_BINS, bool)
    hit[(ang / (2 * math.pi) * ARC_BINS).astype(int) % ARC_BINS] = True
    quadrants = int((hit & visible).reshape(4, ARC_BINS // 4).any(axis=1).sum())
    return float((hit & visible).sum() / visible.sum()), float(visible.mean()), quadrants


def _disc_iou(mask: np.ndarray, cx: float, cy: float, r: float, box: Box, ry: float | None = None) -> float:
    """IoU of the bright region with the disc (or ellipse), both clipped to the recorded part of the frame."""
    ry = r if ry is None else ry
    x0, y0, x1, y1 = box
    mask = mask[y0 : y1 + 1, x0 : x1 + 1]
    h, w = mask.shape
    yy, xx = np.ogrid[y0 : y0 + h, x0 : x0 + w]
    disc = ((xx - cx) / r) ** 2 + ((yy - cy) / ry) ** 2 <= 1.0
    union = np.logical_or(mask, disc).sum()
    return float(np.logical_and(mask, disc).sum() / union) if union else 0.0


Fit = tuple[float, float, float, float | None, np.ndarray]  # cx, cy, rx, ry (None: a circle), inlier mask [N]


def _circle_or_ellipse(pts: np.ndarray, width: int, height: int) -> Fit | None:
    """The circle through ``pts``, or the axis-aligned ellipse when it fits clearly more of them (a stretched disc)."""
    fit = ransac_circle(pts, width, height)
    cx, cy, r, inliers = fit if fit is not None else (0.0, 0.0, 0.0, np.zeros(len(pts), bool))
    if fit is None or inliers.mean() < ELLIPSE_TRIGGER:  # a disc stretched by a resize: try an ellipse
        oval = _ellipse_fit(pts, width, height)
        if oval is not None and oval[4].mean() >= ELLIPSE_MIN_SHARE and oval[4].mean() > inliers.mean():
            return oval
    return None if fit is None else (cx, cy, r, None, inliers)


def _deepest_cut(fit: Fit, box: Box, width: int, height: int) -> float:
    """How far the deepest straight cut inside the frame (``box`` short of the frame) reaches into the disc.

    As a share of the disc's diameter across the cut; 0 when the box is the whole frame.
    """
    cx, cy, rx, ry_or_none, _ = fit
    ry = rx if ry_or_none is None else ry_or_none
    depths = [
        (box[0] - (cx - rx)) / (2 * rx) if box[0] > 0 else 0.0,
        (box[1] - (cy - ry)) / (2 * ry) if box[1] > 0 else 0.0,
        ((cx + rx) - box[2]) / (2 * rx) if box[2] < width - 1 else 0.0,
        ((cy + ry) - box[3]) / (2 * ry) if box[3] < height - 1 else 0.0,
    ]
    return max(depths)


def straight_cut_depth(rgb: np.ndarray) -> float:
    """How deep the deepest straight cut with black beyond it reaches into the disc fitted with it, uint8 [H, W, 3].

    As a share of the disc's diameter, before ``MAX_CUT_DEPTH`` is applied (``fit_fov_circle`` refits a deeper cut
    as an edge); 0 without such a cut or a fit. The evidence the bound was set on: benchmarks/gate_evidence.py.
    """
    level, _ = _small_copy(rgb, FIT_SIDE)
    mask = fov_mask(level)
    pts, box = edge_points(mask, level)
    fit = _circle_or_ellipse(pts, mask.shape[1], mask.shape[0])
    return 0.0 if fit is None else _deepest_cut(fit, box, mask.shape[1], mask.shape[0])


def fit_fov_circle(rgb: np.ndarray) -> FovCircle | None:
    """Fit the FOV circle of uint8 [H, W, 3]; None when no circle fits the bright region's edge.

    The fit is done on a copy with long side ``FIT_SIDE`` and scaled back: the returned circle is
    in ``rgb``'s pixel coordinates.
    """
    h, w = rgb.shape[:2]
    level, scale = _small_copy(rgb, FIT_SIDE)
    mask = fov_mask(level)
    sh, sw = mask.shape
    pts, box = edge_points(mask, level)
    fit = _circle_or_ellipse(pts, sw, sh)
    if fit is not None and _deepest_cut(fit, box, sw, sh) > MAX_CUT_DEPTH:
        pts, box = edge_points(mask)  # not a frame's cut: a lid's edge with shade as dark as the surround beyond
        fit = _circle_or_ellipse(pts, sw, sh)
    if fit is None:
        return None
    cx, cy, r, ry, inliers = fit
    support, visible, quadrants = _arc_measures(cx, cy, r, pts[inliers], box, ry)
    return FovCircle(
        cx=(cx + 0.5) / scale - 0.5,
        cy=(cy + 0.5) / scale - 0.5,
        radius=r / scale,
        width=w,
        height=h,
        inlier_share=float(inliers.mean()),
        arc_support=support,
        visible_arc=visible,
        mask_iou=_disc_iou(mask, cx, cy, r, box, ry),
        arc_quadrants=quadrants,
        box=(
            math.floor(box[0] / scale),
            math.floor(box[1] / scale),
            min(w - 1, math.ceil((box[2] + 1) / scale) - 1),
            min(h - 1, math.ceil((box[3] + 1) / scale) - 1),
        ),
        radius_y=None if ry is None else ry / scale,
    )
