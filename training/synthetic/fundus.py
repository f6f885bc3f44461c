"""Anatomy of a synthetic fundus photograph: field of view, retina, optic disc, macula, vessel tree.

Everything here works in an *albedo* image: float32 RGB in [0, 1] without illumination, so that
lesions (``lesions.py``) can be painted with absolute colours and the camera (``camera.py``)
applies shading, exposure and noise afterwards, once, to the whole picture.

Geometry follows a macula-centred 45-50° photograph: the optic disc sits nasally (on the right of
the image for a right eye, on the left for a left eye), about 2 disc diameters from the fovea,
and the temporal vessel arcades bend around the macula.

Camera frames (``FRAME_FORMATS``, drawn with ``FRAME_SHARES`` unless asked for), ``size`` being the
frame *width* in pixels:

- ``"3:2"`` (40 %): a ``size`` x ``2/3 size`` frame whose FOV disc is cut at the top and bottom, as on the
  Kowa VX-10 of IDRiD (4288 x 2848): FOV radius 0.57-0.63 of the frame height, so 12-21 % of the
  disc's vertical diameter lies outside the frame (IDRiD: 17 %); black margins left and right;
- ``"4:3"`` (25 %): a ``size`` x ``3/4 size`` frame, FOV radius 0.53-0.58 of the height (6-14 % cut);
- ``"square_notch"`` (20 %): a square frame with the whole disc inside (radius 0.44-0.47 of the side)
  and a small rectangular notch cut into its rim at 12 or 3 o'clock (the orientation mark many
  cameras print);
- ``"square"`` (15 %): the square frame of earlier versions: whole disc, or (one in four) the
  EyePACS-style crop that cuts the disc on all four sides.

Photometry (with ``camera.py``) is matched to the 54 IDRiD photographs of ../shared/data: over gradable
renders, the median of each channel's mean inside the FOV is within 15 grey levels (R, G) / 10 (B) of
IDRiD's median, the median per-channel SD within 8, and the 10-90 % ranges overlap
(tests/training/test_synthetic_realism.py); vessel contrast and width, band-pass energy (sharpness) and
background texture are compared in the table that benchmarks/fundus_stats.py prints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

Eye = Literal["left", "right"]

SUPERSAMPLE = 2  # masks are drawn at 2x and box-downsampled: anti-aliased, sub-pixel widths
REF_RADIUS = 0.455 * 256  # FOV radius (px) at which the lengths in this package are defined
FRAME_FORMATS: tuple[str, ...] = ("3:2", "4:3", "square_notch", "square")
FRAME_SHARES: tuple[float, ...] = (0.40, 0.25, 0.20, 0.15)
_FRAME_HEIGHT = {"3:2": 2 / 3, "4:3": 3 / 4, "square_notch": 1.0, "square": 1.0}


@dataclass(frozen=True)
class Geometry:
    """Where things are, in pixel coordinates of the final ``width`` x ``height`` image."""

    width: int
    height: int
    eye: Eye
    cx: float  # FOV centre
    cy: float
    radius: float  # FOV radius
    disc_x: float
    disc_y: float
    disc_r: float
    fovea_x: float
    fovea_y: float
    frame: str = "square"
    notch: tuple[float, float, float] | None = None  # angle (rad), depth and half-width (px)

    @property
    def px(self) -> float:
        """Length scale: pixels per unit of a FOV of radius ``REF_RADIUS`` (lesion and vessel sizes)."""
        return self.radius / REF_RADIUS

    @property
    def shape(self) -> tuple[int, int]:
        """``(height, width)`` of the image."""
        return self.height, self.width

    @property
    def temporal_sign(self) -> float:
        """+1 when the temporal side (towards the macula) is +x, -1 when it is -x."""
        return 1.0 if self.fovea_x > self.disc_x else -1.0


@dataclass(frozen=True)
class VesselTree:
    """Centre-line segments of the vessel tree, used for drawing and to place vessel-bound lesions.

    ``segments`` is ``[N, 6]``: x0, y0, x1, y1, width (px), kind (0 artery, 1 vein).
    """

    segments: np.ndarray

    def sample_points(
        self, rng: np.random.Generator, n: int, *, veins_only: bool = False, min_width: float = 0.0
    ) -> np.ndarray:
        """``n`` random points on the centre lines with their direction: ``[n, 4]`` x, y, angle, width."""
        seg = self.segments
        keep = seg[:, 4] >= min_width
        if veins_only:
            keep &= seg[:, 5] == 1
        seg = seg[keep] if keep.any() else self.segments
        pick = seg[rng.integers(0, len(seg), size=n)]
        t = rng.random(n)
        x = pick[:, 0] + t * (pick[:, 2] - pick[:, 0])
        y = pick[:, 1] + t * (pick[:, 3] - pick[:, 1])
        angle = np.arctan2(pick[:, 3] - pick[:, 1], pick[:, 2] - pick[:, 0])
        return np.stack([x, y, angle, pick[:, 4]], axis=1)


@lru_cache(maxsize=8)
def pixel_grid(height: int, width: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Pixel-centre coordinates ``(yy, xx)``, each ``[height, width]`` float32 (cached, read-only).

    ``width`` defaults to ``height`` (a square image).
    """
    width = height if width is None else width
    yy, xx = np.meshgrid(
        np.arange(height, dtype=np.float32) + 0.5, np.arange(width, dtype=np.float32) + 0.5, indexing="ij"
    )
    yy.setflags(write=False)
    xx.setflags(write=False)
    return yy, xx


class MaskCanvas:
    """A greyscale layer drawn with PIL at ``SUPERSAMPLE`` x resolution, read back as float [H, W] in [0, 1].

    Coordinates and lengths are given in final-image pixels; the canvas scales them. ``height``
    defaults to ``width`` (a square canvas).
    """

    def __init__(self, width: int, height: int | None = None) -> None:
        self.width = width
        self.height = width if height is None else height
        self.image = Image.new("L", (self.width * SUPERSAMPLE, self.height * SUPERSAMPLE), 0)
        self.draw = ImageDraw.Draw(self.image)

    def ellipse(self, x: float, y: float, rx: float, ry: float, value: float) -> None:
        s = SUPERSAMPLE
        self.draw.ellipse((s * (x - rx), s * (y - ry), s * (x + rx), s * (y + ry)), fill=_level(value))

    def rotated_ellipse(
        self, x: float, y: float, rx: float, ry: float, angle: float, value: float, n: int = 16
    ) -> None:
        t = np.linspace(0.0, 2 * math.pi, n, endpoint=False)
        ex, ey = rx * np.cos(t), ry * np.sin(t)
        ca, sa = math.cos(angle), math.sin(angle)
        px = SUPERSAMPLE * (x + ca * ex - sa * ey)
        py = SUPERSAMPLE * (y + sa * ex + ca * ey)
        self.draw.polygon(list(zip(px.tolist(), py.tolist(), strict=True)), fill=_level(value))

    def polygon(self, points: np.ndarray, value: float) -> None:
        """A filled polygon; ``points`` is ``[N, 2]`` in final-image pixels."""
        s = SUPERSAMPLE
        self.draw.polygon([(float(px) * s, float(py) * s) for px, py in points], fill=_level(value))

    def polyline(self, points: np.ndarray, width: float, value: float) -> None:
        """``points`` is ``[N, 2]`` in final-image pixels."""
        if len(points) < 2:
            return
        s = SUPERSAMPLE
        xy = [(px * s, py * s) for px, py in np.asarray(points, dtype=np.float64).tolist()]
        self.draw.line(xy, fill=_level(value), width=max(1, round(width * s)), joint="curve")

    def array(self, blur: float = 0.0) -> np.ndarray:
        """The layer at final resolution, float32 ``[H, W]`` in [0, 1]; ``blur``: Gaussian radius in px."""
        img = self.image.reduce(SUPERSAMPLE)
        if blur > 0:
            img = img.filter(ImageFilter.GaussianBlur(blur))
        return np.asarray(img, dtype=np.float32) * (1.0 / 255.0)

    def cropped(self, blur: float = 0.0) -> tuple[tuple[slice, slice], np.ndarray | None]:
        """Like ``array`` but only over the bounding box of what was drawn (plus a blur margin).

        Returns ``((row_slice, col_slice), mask)``; ``mask`` is None when nothing was drawn.
        """
        img = self.image.reduce(SUPERSAMPLE)
        bbox = img.getbbox()
        if bbox is None:
            return (slice(0, 0), slice(0, 0)), None
        pad = math.ceil(3 * blur) + 1
        x0, y0 = max(0, bbox[0] - pad), max(0, bbox[1] - pad)
        x1, y1 = min(self.width, bbox[2] + pad), min(self.height, bbox[3] + pad)
        img = img.crop((x0, y0, x1, y1))
        if blur > 0:
            img = img.filter(ImageFilter.GaussianBlur(blur))
        return (slice(y0, y1), slice(x0, x1)), np.asarray(img, dtype=np.float32) * (1.0 / 255.0)


def _level(value: float) -> int:
    return round(255 * min(max(value, 0.0), 1.0))


def smooth_noise(rng: np.random.Generator, size: int, cells: int, height: int | None = None) -> np.ndarray:
    """Zero-mean low-frequency noise ``[height, size]``: a grid of normals upsampled bicubically.

    ``cells`` counts grid cells across the width; the height gets as many as keep them square.
    """
    height = size if height is None else height
    rows = max(2, round(cells * height / size))
    small = rng.standard_normal((rows, cells)).astype(np.float32)
    img = Image.fromarray(small, mode="F").resize((size, height), Image.Resampling.BICUBIC)
    return np.asarray(img, dtype=np.float32)


def draw_frame(rng: np.random.Generator) -> str:
    """One of ``FRAME_FORMATS`` with the probabilities ``FRAME_SHARES``."""
    return FRAME_FORMATS[int(rng.choice(len(FRAME_FORMATS), p=FRAME_SHARES))]


def frame_shape(size: int, frame: str) -> tuple[int, int]:
    """``(height, width)`` of a ``frame``-format image ``size`` px wide."""
    if frame not in _FRAME_HEIGHT:
        raise ValueError(f"Unknown frame {frame!r}; expected one of: {', '.join(FRAME_FORMATS)}")
    return max(1, round(size * _FRAME_HEIGHT[frame])), size


def sample_geometry(
    rng: np.random.Generator, size: int, eye: Eye, *, off_centre: bool = False, frame: str = "square"
) -> Geometry:
    """Random but anatomically placed FOV, disc and fovea in a ``frame``-format image ``size`` px wide.

    ``off_centre`` pushes the FOV half out of the frame (an ungradable acquisition).
    """
    height, width = frame_shape(size, frame)
    notch = None
    if frame == "3:2":
        radius = height * rng.uniform(0.57, 0.63)
    elif frame == "4:3":
        radius = height * rng.uniform(0.53, 0.58)
    else:
        radius = size * rng.uniform(0.44, 0.47)
        if frame == "square" and rng.random() < 0.25:  # EyePACS-style crop: the circle is cut on all sides
            radius = size * rng.uniform(0.5, 0.56)
    cx = width / 2 + rng.normal(0, 0.01) * height
    cy = height / 2 + rng.normal(0, 0.01) * height
    if frame == "square_notch":
        angle = (0.0 if rng.random() < 0.5 else -math.pi / 2) + float(rng.normal(0, 0.05))
        notch = (angle, radius * float(rng.uniform(0.03, 0.05)), radius * float(rng.uniform(0.03, 0.05)))
    if off_centre:
        angle = rng.uniform(0, 2 * math.pi)
        shift = rng.uniform(0.45, 0.7) * radius
        cx += shift * math.cos(angle)
        cy += shift * math.sin(angle)
    nasal = 1.0 if eye == "right" else -1.0
    disc_r = radius * rng.uniform(0.12, 0.15)
    disc_x = cx + nasal * radius * rng.uniform(0.38, 0.5)
    disc_y = cy + radius * rng.normal(-0.02, 0.04)
    dd = 2 * disc_r
    fovea_x = disc_x - nasal * dd * rng.uniform(2.1, 2.6)
    fovea_y = disc_y + dd * rng.uniform(0.1, 0.45)
    return Geometry(width, height, eye, cx, cy, radius, disc_x, disc_y, disc_r, fovea_x, fovea_y, frame, notch)


def _window(geom: Geometry, x: float, y: float, half: float) -> tuple[slice, slice, np.ndarray, np.ndarray]:
    """Window of half-width ``half`` around (x, y), clipped to the image: slices and pixel coords."""
    y0, y1 = max(0, int(y - half)), min(geom.height, int(y + half) + 2)
    x0, x1 = max(0, int(x - half)), min(geom.width, int(x + half) + 2)
    yy, xx = pixel_grid(geom.height, geom.width)
    return slice(y0, y1), slice(x0, x1), yy[y0:y1, x0:x1], xx[y0:y1, x0:x1]


def render_retina(rng: np.random.Generator, geom: Geometry) -> np.ndarray:
    """Retina albedo with pigmentation, choroidal texture, macula and optic disc: float32 ``[H, W, 3]``.

    Colours and texture amplitudes were set so that, after ``camera.apply_camera``, the per-channel
    mean/SD inside the FOV and the background texture match IDRiD's (benchmarks/fundus_stats.py).
    Texture scales are fixed relative to the FOV, not the frame. Local structures (macula, disc, cup)
    are computed only in windows around them, for speed.
    """
    width, height = geom.width, geom.height
    # Fundus pigmentation: fair (orange-red) to dark (brown).
    pigment = float(rng.uniform(0.0, 1.0))
    base = (
        np.array([0.93, 0.44, 0.09], np.float32) * (1 - pigment) + np.array([0.75, 0.335, 0.045], np.float32) * pigment
    )
    base = base * rng.uniform(0.93, 1.07, size=3).astype(np.float32)
    per_fov = width / (2 * geom.radius)  # frame widths per FOV diameter: noise cells scale with the FOV
    fine = float(rng.uniform(0.02, 0.04))
    texture = (
        0.05 * smooth_noise(rng, width, max(3, round(6 * per_fov)), height)
        + fine * smooth_noise(rng, width, max(4, round(24 * per_fov)), height)
        + float(rng.uniform(0.025, 0.045)) * smooth_noise(rng, width, max(8, round(70 * per_fov)), height)
    )  # [H, W]: broad pigment variation, choroidal blotches, fine choroidal grain
    img = base * (1.0 + texture[..., None] * np.array([0.35, 1.25, 1.2], np.float32))  # [H, W, 3]
    # Broad green-only variation: on real photographs green varies more across the fundus than red.
    img[..., 1] *= 1.0 + float(rng.uniform(0.04, 0.09)) * smooth_noise(rng, width, max(3, round(4 * per_fov)), height)

    # Macula: darker, browner; a faint foveal reflex in some eyes.
    mac_r = geom.disc_r * float(rng.uniform(1.8, 2.6))
    ys, xs, yy, xx = _window(geom, geom.fovea_x, geom.fovea_y, 3 * mac_r)
    d2 = (xx - geom.fovea_x) ** 2 + (yy - geom.fovea_y) ** 2
    macula = np.exp(d2 * (-0.5 / mac_r**2)) * float(rng.uniform(0.35, 0.55))
    img[ys, xs] *= 1.0 - macula[..., None] * np.array([0.45, 0.6, 0.5], np.float32)
    if rng.random() < 0.5:
        reflex = np.exp(d2 * (-0.5 / (0.12 * geom.disc_r) ** 2)) * float(rng.uniform(0.1, 0.25))
        img[ys, xs] += reflex[..., None] * np.array([0.5, 0.5, 0.4], np.float32)

    # Optic disc: pale yellow-pink, slightly vertical oval, with a paler cup off-centre temporally.
    ys, xs, yy, xx = _window(geom, geom.disc_x, geom.disc_y, 1.5 * geom.disc_r)
    patch = img[ys, xs]
    dx = (xx - geom.disc_x) / geom.disc_r
    dy = (yy - geom.disc_y) / (geom.disc_r * float(rng.uniform(1.0, 1.12)))
    rr = np.sqrt(dx**2 + dy**2)
    disc = float(rng.uniform(0.6, 0.8)) * np.clip((1.08 - rr) / 0.25, 0.0, 1.0) ** 1.5
    disc_col = np.array([1.0, 0.7, 0.36], np.float32) * float(rng.uniform(0.9, 1.0))
    patch += disc[..., None] * (disc_col - patch)
    cup_ratio = float(rng.uniform(0.25, 0.55))
    cx = geom.disc_x + geom.temporal_sign * geom.disc_r * 0.15
    cr2 = ((xx - cx) ** 2 + (yy - geom.disc_y) ** 2) / (geom.disc_r * cup_ratio) ** 2
    cup = 0.5 * np.exp(-cr2 * 1.5)
    patch += cup[..., None] * (np.array([1.0, 0.9, 0.7], np.float32) - patch)
    if rng.random() < 0.3:  # a thin peripapillary ring of pigment in some eyes
        ring = np.exp(-((rr - 1.1) ** 2) / 0.01) * float(rng.uniform(0.15, 0.3))
        patch *= 1.0 - ring[..., None] * np.array([0.3, 0.5, 0.6], np.float32)
    return img


def grow_vessels(rng: np.random.Generator, geom: Geometry) -> VesselTree:
    """A branching artery/vein tree from the disc: 4 artery + 4 vein trunks, recursive random branching.

    Temporal trunks bend towards the temporal direction so they arc around the macula; width tapers
    along the vessel and drops at each branch point; vessels stop at the FOV edge and short of the
    fovea (the foveal avascular zone).
    """
    t = geom.temporal_sign
    temporal = 0.0 if t > 0 else math.pi
    nasal = math.pi - temporal
    # (start angle, target angle, bend rate) per trunk; y grows downwards so -pi/2 is "up".
    trunks = [
        (-math.pi / 2 - t * 0.2, temporal - t * 0.3, 0.075),  # superior temporal arcade
        (math.pi / 2 + t * 0.2, temporal + t * 0.3, 0.075),  # inferior temporal arcade
        (nasal - t * 0.8, nasal - t * 0.5, 0.02),  # superior nasal
        (nasal + t * 0.8, nasal + t * 0.5, 0.02),  # inferior nasal
    ]
    # Stack entries: x, y, angle, target angle, bend rate, width, kind (0 artery / 1 vein), depth.
    stack: list[tuple[float, float, float, float, float, float, int, int]] = []
    for start, target, bend in trunks:
        for kind, width in ((0, 0.0072), (1, 0.0097)):
            a0 = start + float(rng.normal(0, 0.12)) + (0.12 if kind else -0.12)
            x0 = geom.disc_x + math.cos(a0) * geom.disc_r * 0.15
            y0 = geom.disc_y + math.sin(a0) * geom.disc_r * 0.15
            stack.append(
                (
                    x0,
                    y0,
                    a0,
                    target + float(rng.normal(0, 0.1)),
                    bend,
                    width * 256 * geom.px * float(rng.uniform(0.9, 1.1)),
                    kind,
                    0,
                )
            )
    min_width = 0.3 * geom.px
    step = 0.022 * geom.radius
    r_stop2 = (1.05 * geom.radius) ** 2
    fovea2 = (0.9 * geom.disc_r) ** 2
    segments: list[tuple[float, float, float, float, float, float]] = []
    n = 140
    while stack:
        x, y, ang, target, bend, width, kind, depth = stack.pop()
        noise = rng.normal(0, 0.1, n).tolist()
        branch_u = rng.random(n).tolist()
        side = rng.choice([-1.0, 1.0], n).tolist()
        child_angle = rng.uniform(0.5, 1.1, n).tolist()
        child_frac = rng.uniform(0.5, 0.75, n).tolist()
        steps = (step * rng.uniform(0.7, 1.3, n)).tolist()
        for i in range(n):
            diff = (target - ang + math.pi) % (2 * math.pi) - math.pi
            ang += bend * diff + noise[i]
            nx = x + math.cos(ang) * steps[i]
            ny = y + math.sin(ang) * steps[i]
            segments.append((x, y, nx, ny, width, float(kind)))
            x, y = nx, ny
            width *= 0.985
            if (
                (x - geom.cx) ** 2 + (y - geom.cy) ** 2 > r_stop2
                or width < min_width
                or (x - geom.fovea_x) ** 2 + (y - geom.fovea_y) ** 2 < fovea2
            ):
                break
            if depth < 3 and i > 3 and branch_u[i] < 0.06 and width > 2.5 * min_width:
                ca = ang + side[i] * child_angle[i]
                stack.append((x, y, ca, ca + side[i] * 0.2, 0.01, width * child_frac[i], kind, depth + 1))
                width *= 0.9
    return VesselTree(np.asarray(segments, dtype=np.float32).reshape(-1, 6))


def vessel_masks(
    tree: VesselTree, geom: Geometry, *, beading: float = 0.0, rng: np.random.Generator | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Anti-aliased artery and vein coverage masks, each float32 ``[H, W]``.

    Runs of connected segments with (nearly) the same width are drawn as one polyline, so the whole
    tree takes a few hundred PIL calls. ``beading`` > 0 adds bead-like calibre changes on veins.
    """
    layers = [MaskCanvas(geom.width, geom.height), MaskCanvas(geom.width, geom.height)]
    seg = tree.segments
    if len(seg):
        quant = np.floor(seg[:, 4] * SUPERSAMPLE * 2)  # half-pixel width classes on the canvas
        joined = (seg[1:, 0] == seg[:-1, 2]) & (seg[1:, 1] == seg[:-1, 3])
        breaks = np.flatnonzero(~joined | (quant[1:] != quant[:-1]) | (seg[1:, 5] != seg[:-1, 5])) + 1
        starts = [0, *breaks.tolist()]
        ends = [*breaks.tolist(), len(seg)]
        for s0, s1 in zip(starts, ends, strict=True):
            run = seg[s0:s1]
            pts = np.concatenate([run[:, 0:2], run[-1:, 2:4]], axis=0)
            layers[int(run[0, 5])].polyline(pts, float(run[0, 4]), 1.0)
    if beading > 0 and rng is not None and len(seg):
        beads = tree.sample_points(rng, int(40 * beading), veins_only=True, min_width=0.006 * 256 * geom.px)
        for x, y, _, w in beads.tolist():
            layers[1].ellipse(x, y, w * 0.9, w * 0.9, 1.0)
    return layers[0].array(), layers[1].array()


def fov_mask(geom: Geometry, *, soft: float = 1.0) -> np.ndarray:
    """Field-of-view coverage ``[H, W]`` in [0, 1] with a ``soft``-pixel edge (the frame clips it).

    A ``square_notch`` frame's notch is cut out of the rim: ``depth`` px deep, ``2 * half`` px wide.
    """
    yy, xx = pixel_grid(geom.height, geom.width)
    r = np.sqrt((xx - geom.cx) ** 2 + (yy - geom.cy) ** 2)
    cover = np.clip((geom.radius - r) / soft + 0.5, 0.0, 1.0).astype(np.float32)
    if geom.notch is not None:
        angle, depth, half = geom.notch
        ux, uy = math.cos(angle), math.sin(angle)
        ys, xs, wy, wx = _window(geom, geom.cx + ux * geom.radius, geom.cy + uy * geom.radius, depth + half + 2)
        along = (wx - geom.cx) * ux + (wy - geom.cy) * uy  # radial coordinate
        across = np.abs(-(wx - geom.cx) * uy + (wy - geom.cy) * ux)  # tangential distance
        inside = np.clip((along - (geom.radius - depth)) / soft + 0.5, 0.0, 1.0) * np.clip(
            (half - across) / soft + 0.5, 0.0, 1.0
        )
        cover[ys, xs] *= 1.0 - inside
    return cover
