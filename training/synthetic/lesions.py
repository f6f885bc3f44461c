"""Diabetic-retinopathy lesions and look-alike confounders, with counts driven by the DR grade.

Grades follow the EyePACS / ICDR scale: 0 none, 1 mild (microaneurysms only), 2 moderate, 3 severe
non-proliferative, 4 proliferative. Count ranges of neighbouring grades overlap and a share of grade-2
eyes are *subtle* (one or two small, faint haemorrhages), while confounders (drusen that look like
exudates, dust and pigment that look like haemorrhages, reflections) appear independently of the grade.
That keeps referable-vs-not (grade >= 2) learnable but not trivial.

Lesions are painted on the albedo image (see ``fundus.py``): dark lesions multiply the local colour
(they keep the local shading), bright ones blend towards an absolute colour.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from training.synthetic.fundus import Geometry, MaskCanvas, VesselTree

LESION_KINDS: tuple[str, ...] = (
    "microaneurysm",
    "haemorrhage",
    "hard_exudate",
    "cotton_wool_spot",
    "venous_beading",
    "new_vessels",
    "preretinal_haemorrhage",
)
CONFOUNDER_KINDS: tuple[str, ...] = ("drusen", "dust", "reflection", "pigment")

# Multiplicative colour factors for dark things, absolute target colours for bright ones.
_DARK_RED = np.array([0.5, 0.18, 0.24], np.float32)
_BLOOD = np.array([0.52, 0.14, 0.2], np.float32)
_EXUDATE = np.array([1.0, 0.88, 0.42], np.float32)
_COTTON = np.array([0.96, 0.88, 0.74], np.float32)
_DRUSEN = np.array([0.96, 0.80, 0.48], np.float32)
_REFLEX = np.array([1.0, 0.92, 0.82], np.float32)
_DUST = np.array([0.62, 0.6, 0.6], np.float32)
_PIGMENT = np.array([0.42, 0.36, 0.36], np.float32)


@dataclass
class LesionPlan:
    """How many of each lesion and confounder to paint, and how visible they are."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LESION_KINDS + CONFOUNDER_KINDS, 0))
    contrast: float = 1.0  # global lesion visibility in (0, 1]
    subtle: bool = False  # grade-2 eye whose only signs are one or two faint small haemorrhages


def plan_lesions(rng: np.random.Generator, grade: int) -> LesionPlan:
    """Draw lesion and confounder counts for one eye of the given DR grade (0-4)."""
    if grade not in range(5):
        raise ValueError(f"DR grade must be an integer 0-4, got {grade!r}")
    plan = LesionPlan(contrast=float(rng.uniform(0.65, 1.0)))
    c = plan.counts

    def some(lo: int, hi: int, p: float = 1.0) -> int:
        return int(rng.integers(lo, hi + 1)) if rng.random() < p else 0

    if grade == 1:
        c["microaneurysm"] = 1 + int(rng.binomial(5, 0.35))
    elif grade == 2:
        if rng.random() < 0.3:
            plan.subtle = True
            plan.contrast = float(rng.uniform(0.4, 0.65))
            c["microaneurysm"] = some(0, 3)
            c["haemorrhage"] = some(1, 2)
            c["hard_exudate"] = some(1, 3, p=0.3)
        else:
            c["microaneurysm"] = some(1, 14)
            c["haemorrhage"] = some(1, 9)
            c["hard_exudate"] = some(2, 20, p=0.55)
            c["cotton_wool_spot"] = some(1, 1, p=0.1)
    elif grade == 3:
        c["microaneurysm"] = some(5, 30)
        c["haemorrhage"] = some(9, 35)
        c["hard_exudate"] = some(3, 30, p=0.6)
        c["cotton_wool_spot"] = some(1, 6)
        c["venous_beading"] = some(1, 1, p=0.5)
    elif grade == 4:
        c["microaneurysm"] = some(3, 30)
        c["haemorrhage"] = some(3, 30)
        c["hard_exudate"] = some(2, 25, p=0.5)
        c["cotton_wool_spot"] = some(1, 5, p=0.6)
        c["venous_beading"] = some(1, 1, p=0.4)
        c["new_vessels"] = some(1, 3)
        c["preretinal_haemorrhage"] = some(1, 1, p=0.3)
    # Confounders: independent of the grade.
    c["drusen"] = some(3, 25, p=0.25)
    c["dust"] = some(1, 6, p=0.35)
    c["reflection"] = some(2, 8, p=0.5)
    c["pigment"] = some(1, 8, p=0.2)
    return plan


def _positions(
    rng: np.random.Generator, geom: Geometry, n: int, *, posterior: float = 0.6, spread: float = 0.45
) -> np.ndarray:
    """``[n, 2]`` points in the FOV and off the disc: a mix around the fovea and uniform over the retina."""
    if n <= 0:
        return np.zeros((0, 2), np.float32)
    m = 6 * n + 12
    near = rng.random(m) < posterior
    ang = rng.uniform(0, 2 * math.pi, m)
    rad = np.where(near, np.abs(rng.normal(0, spread, m)), np.sqrt(rng.random(m)) * 0.92) * geom.radius
    x = np.where(near, geom.fovea_x, geom.cx) + rad * np.cos(ang)
    y = np.where(near, geom.fovea_y, geom.cy) + rad * np.sin(ang)
    ok = (
        ((x - geom.cx) ** 2 + (y - geom.cy) ** 2 < (0.93 * geom.radius) ** 2)
        & ((x - geom.disc_x) ** 2 + (y - geom.disc_y) ** 2 > (1.4 * geom.disc_r) ** 2)
        & (x > 2)
        & (y > 2)
        & (x < geom.width - 2)
        & (y < geom.height - 2)
    )
    pts = np.stack([x[ok], y[ok]], axis=1)[:n]
    return pts.astype(np.float32)


def _quadrant_positions(rng: np.random.Generator, geom: Geometry, per_quadrant: int) -> np.ndarray:
    """Points spread over all four quadrants around the FOV centre (the severe-NPDR 4-2-1 rule)."""
    pts = []
    for q in range(4):
        ang = rng.uniform(q * math.pi / 2 + 0.1, (q + 1) * math.pi / 2 - 0.1, per_quadrant)
        rad = rng.uniform(0.3, 0.88, per_quadrant) * geom.radius
        pts.append(np.stack([geom.cx + rad * np.cos(ang), geom.cy + rad * np.sin(ang)], axis=1))
    return np.concatenate(pts).astype(np.float32)


def _darken(img: np.ndarray, canvas: MaskCanvas, factor: np.ndarray, blur: float) -> None:
    """Multiply the colour under the canvas mask by ``factor`` (only inside the mask's bounding box)."""
    box, mask = canvas.cropped(blur)
    if mask is not None:
        img[box] *= 1.0 - mask[..., None] * (1.0 - factor)


def _blend(img: np.ndarray, canvas: MaskCanvas, colour: np.ndarray, blur: float) -> None:
    """Blend the colour under the canvas mask towards ``colour`` (only inside the mask's bounding box)."""
    box, mask = canvas.cropped(blur)
    if mask is not None:
        sub = img[box]
        sub += mask[..., None] * (colour - sub)


def paint_lesions(
    img: np.ndarray, rng: np.random.Generator, geom: Geometry, tree: VesselTree, plan: LesionPlan
) -> None:
    """Paint the planned lesions and confounders into the albedo image ``img`` ``[H, W, 3]`` in place."""
    # Confounders first, so true lesions sit on top of them; each part draws from rng after the one before.
    _paint_confounders(img, rng, geom, tree, plan)
    _paint_red_lesions(img, rng, geom, tree, plan)
    _paint_bright_lesions(img, rng, geom, tree, plan)
    _paint_proliferative(img, rng, geom, tree, plan)


def _paint_confounders(img: np.ndarray, rng: np.random.Generator, geom: Geometry, tree: VesselTree, plan: LesionPlan
                       ) -> None:
    """Drusen, pigment, reflections and the other look-alikes that are not DR (painted first, under the lesions)."""
    c = plan.counts
    px = geom.px  # lesion sizes are defined for a FOV of radius REF_RADIUS and scale with it
    if c["drusen"]:
        m = MaskCanvas(geom.width, geom.height)
        for x, y in _positions(rng, geom, c["drusen"], posterior=0.9, spread=0.3):
            r = px * rng.uniform(0.8, 2.2)
            m.ellipse(x, y, r, r, rng.uniform(0.3, 0.6))
        _blend(img, m, _DRUSEN, 0.7 * px)
    if c["pigment"]:
        m = MaskCanvas(geom.width, geom.height)
        for x, y in _positions(rng, geom, c["pigment"], posterior=0.3):
            m.rotated_ellipse(
                x,
                y,
                px * rng.uniform(0.8, 2.5),
                px * rng.uniform(0.6, 1.6),
                rng.uniform(0, math.pi),
                rng.uniform(0.4, 0.8),
                n=7,
            )
        _darken(img, m, _PIGMENT, 0.4 * px)
    if c["reflection"]:
        m = MaskCanvas(geom.width, geom.height)
        for x, y, a, w in tree.sample_points(rng, c["reflection"], min_width=1.2 * px):
            length = px * rng.uniform(4, 12)
            dx, dy = math.cos(a) * length, math.sin(a) * length
            streak = np.array([[x - dx, y - dy], [x + dx, y + dy]])
            m.polyline(streak, max(0.4 * w, 0.5), rng.uniform(0.2, 0.4))
        for x, y in _positions(rng, geom, int(c["reflection"] // 2), posterior=1.0, spread=0.35):
            m.rotated_ellipse(
                x,
                y,
                px * rng.uniform(4, 10),
                px * rng.uniform(1, 3),
                rng.uniform(0, math.pi),
                rng.uniform(0.1, 0.25),
                n=12,
            )
        _blend(img, m, _REFLEX, 1.0 * px)



def _paint_red_lesions(img: np.ndarray, rng: np.random.Generator, geom: Geometry, tree: VesselTree, plan: LesionPlan
                       ) -> None:
    """Haemorrhages (dot/blot and flame-shaped along vessels) and microaneurysms."""
    c, k = plan.counts, plan.contrast
    px = geom.px  # lesion sizes are defined for a FOV of radius REF_RADIUS and scale with it
    # Haemorrhages: dot/blot (clusters of ellipses) and flame-shaped along vessels.
    if c["haemorrhage"]:
        n = c["haemorrhage"]
        pts = _positions(rng, geom, n, posterior=0.55)
        if c["haemorrhage"] >= 9:  # severe: every quadrant gets some
            pts = np.concatenate([_quadrant_positions(rng, geom, 2), pts])[:n]
        m = MaskCanvas(geom.width, geom.height)
        small = plan.subtle
        for x, y in pts:
            a = k * rng.uniform(0.7, 1.0)
            if not small and rng.random() < 0.25:
                ((fx, fy, fa, _),) = tree.sample_points(rng, 1, min_width=0.8 * px)
                m.rotated_ellipse(fx, fy, px * rng.uniform(3, 7), px * rng.uniform(1.0, 2.0), fa, a)
                continue
            r = px * (rng.uniform(1.2, 2.0) if small else rng.uniform(1.6, 4.5))
            for _ in range(1 if small else int(rng.integers(1, 4))):
                ox, oy = rng.normal(0, 0.5 * r, 2)
                m.rotated_ellipse(
                    x + ox,
                    y + oy,
                    r * rng.uniform(0.7, 1.1),
                    r * rng.uniform(0.6, 1.0),
                    rng.uniform(0, math.pi),
                    a,
                    n=10,
                )
        _darken(img, m, _BLOOD, 0.5 * px)
    if c["microaneurysm"]:
        m = MaskCanvas(geom.width, geom.height)
        for x, y in _positions(rng, geom, c["microaneurysm"], posterior=0.75, spread=0.35):
            r = px * rng.uniform(0.7, 1.3)
            m.ellipse(x, y, r, r, k * rng.uniform(0.65, 1.0))
        _darken(img, m, _DARK_RED, 0.25 * px)



def _paint_bright_lesions(img: np.ndarray, rng: np.random.Generator, geom: Geometry, tree: VesselTree, plan: LesionPlan
                          ) -> None:
    """Hard exudates and cotton-wool spots."""
    c, k = plan.counts, plan.contrast
    px = geom.px  # lesion sizes are defined for a FOV of radius REF_RADIUS and scale with it
    # Hard exudates: sharp yellow specks in clusters, often in a ring around a leaking centre.
    if c["hard_exudate"]:
        m = MaskCanvas(geom.width, geom.height)
        left = c["hard_exudate"]
        for cx, cy in _positions(rng, geom, max(1, left // 4), posterior=0.85, spread=0.3):
            take = min(left, int(rng.integers(1, 7)))
            left -= take
            ring = rng.random() < 0.4
            rad = px * rng.uniform(3, 9)
            for j in range(take):
                if ring:
                    t = 2 * math.pi * j / take + rng.normal(0, 0.2)
                    x, y = cx + rad * math.cos(t), cy + rad * math.sin(t)
                else:
                    x, y = cx + rng.normal(0, 3 * px), cy + rng.normal(0, 3 * px)
                r = px * rng.uniform(0.6, 1.8)
                m.rotated_ellipse(
                    x, y, r, r * rng.uniform(0.6, 1.0), rng.uniform(0, math.pi), k * rng.uniform(0.7, 1.0), n=8
                )
            if left <= 0:
                break
        _blend(img, m, _EXUDATE, 0.3 * px)
    if c["cotton_wool_spot"]:
        m = MaskCanvas(geom.width, geom.height)
        pts = tree.sample_points(rng, c["cotton_wool_spot"], min_width=1.0 * px)
        for x, y, a, _ in pts:
            off = px * rng.uniform(2, 6) * rng.choice([-1.0, 1.0])
            m.rotated_ellipse(
                x - math.sin(a) * off,
                y + math.cos(a) * off,
                px * rng.uniform(3, 7),
                px * rng.uniform(2, 4),
                a,
                k * rng.uniform(0.45, 0.8),
                n=10,
            )
        _blend(img, m, _COTTON, 1.5 * px)



def _paint_proliferative(img: np.ndarray, rng: np.random.Generator, geom: Geometry, tree: VesselTree, plan: LesionPlan
                         ) -> None:
    """New vessels and pre-retinal haemorrhage."""
    c, k = plan.counts, plan.contrast
    px = geom.px  # lesion sizes are defined for a FOV of radius REF_RADIUS and scale with it
    # Proliferative disease: fine tortuous new vessels at the disc or on a vessel, pre-retinal blood.
    if c["new_vessels"]:
        m = MaskCanvas(geom.width, geom.height)
        for _ in range(c["new_vessels"]):
            if rng.random() < 0.6:
                a0 = rng.uniform(0, 2 * math.pi)
                ox = geom.disc_x + math.cos(a0) * geom.disc_r * rng.uniform(0.3, 1.2)
                oy = geom.disc_y + math.sin(a0) * geom.disc_r * rng.uniform(0.3, 1.2)
            else:
                ((ox, oy, _, _),) = tree.sample_points(rng, 1, min_width=1.0 * px)
            for _ in range(int(rng.integers(4, 10))):
                n = int(rng.integers(10, 30))
                ang = rng.uniform(0, 2 * math.pi) + np.cumsum(rng.normal(0, 0.7, n))
                step = px * rng.uniform(0.6, 1.2)
                pts = np.stack([ox + np.cumsum(np.cos(ang) * step), oy + np.cumsum(np.sin(ang) * step)], 1)
                pts = np.concatenate([[[ox, oy]], pts])
                m.polyline(pts, px * rng.uniform(0.4, 0.7), k * rng.uniform(0.6, 0.9))
        _darken(img, m, _DARK_RED, 0.2 * px)
    if c["preretinal_haemorrhage"]:
        m = MaskCanvas(geom.width, geom.height)
        ((x, y),) = _positions(rng, geom, 1, posterior=0.5, spread=0.5)
        r = px * rng.uniform(8, 18)
        theta = np.linspace(0, math.pi, 16)  # boat shape: flat top (fluid level), round bottom
        poly = np.stack([x + r * np.cos(theta), y + 0.8 * r * np.sin(theta)], axis=1)
        m.polygon(poly, 0.95)
        _darken(img, m, _BLOOD * 0.8, 0.8 * px)


def paint_dust(img: np.ndarray, rng: np.random.Generator, geom: Geometry, count: int) -> None:
    """Out-of-focus dust on the lens: grey blurred blobs in image space (applied after illumination)."""
    if count <= 0:
        return
    px = geom.px
    m = MaskCanvas(geom.width, geom.height)
    for x, y in _positions(rng, geom, count, posterior=0.0):
        r = px * (rng.uniform(0.8, 1.8) if rng.random() < 0.5 else rng.uniform(2.5, 6))
        m.ellipse(x, y, r, r, rng.uniform(0.3, 0.7))
    _darken(img, m, _DUST, float(rng.uniform(0.5, 2.0)) * px)
