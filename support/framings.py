"""The framings and sizes real screening programmes publish a fundus photograph in, rendered deterministically.

A photograph is first brought to a *canonical disc* (``canonical``): the field of view fitted by the product's
own fit (``models.image.fov``), cropped to the circle's bounding box and resampled so that the disc is round, with
what the camera did not record left black. Every framing is then made from that disc:

- ``camera``: the camera's own frame, wider than tall, the disc cut at the top and bottom (IDRiD, EyePACS);
- ``padded``: the whole circle on a black square (Messidor-style);
- ``stretched``: cut at the top and bottom, then resized to a square, which stretches the disc into an
  axis-aligned ellipse (the ODIR-5K copies);
- ``tight``: a square crop inside the disc, clipped on all four sides, black only in the corners;

each at a long side of 224, 320, 400 or 512 px (``SIZES``), and with one *finish* (``FINISHES``): none,
re-encoded JPEG at quality 60-75, a thin dark ring at the disc's edge, a notch cut into the edge, or text
burned into a corner. Every random choice comes from the ``numpy`` generator passed in, so a seed gives the
same image. Used by benchmarks/framing_family.py and tests/service/test_quality_framings.py; never write the
renders into the repository.

Example::

    disc = canonical(rgb)                               # None when no FOV fits the photograph
    img = render(disc, "tight", 400, "jpeg", np.random.default_rng(0))
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from models.image.fov import fit_fov_circle
from models.image.preprocessing import crop_to_fov, disc_mask

FRAMINGS = ("camera", "padded", "stretched", "tight")
SIZES = (224, 320, 400, 512)
FINISHES = ("plain", "jpeg", "ring", "notch", "text")
CANONICAL_MAX = 1024  # the canonical disc's diameter at most (px)
# the family's ranges, as shares of the disc's diameter (or radius, for the notch): what training's framing
# augmentation must cover (training.data.augment.FramingConfig; tests/training/test_augment.py)
CAMERA_HEIGHT = (0.82, 0.9)  # camera frame height / diameter: the disc is cut at top and bottom
STRETCH_HEIGHT = (0.82, 0.92)  # the cut before an ODIR-style stretch to a square
TIGHT_SIDE = (0.75, 0.88)  # tight square side / diameter: cut on four sides
NOTCH_HALF = (0.05, 0.08)  # notch half-side / radius


def canonical(rgb: np.ndarray) -> np.ndarray | None:
    """The photograph's FOV as a round disc on black: uint8 [D, D, 3], D the fitted diameter (<= 1024 px)."""
    circle = fit_fov_circle(rgb)
    if circle is None:
        return None
    side = min(CANONICAL_MAX, round(2 * circle.mean_radius))
    square, valid = crop_to_fov(rgb, circle, side)
    return np.where((valid & disc_mask(side))[..., None], square, 0).astype(np.uint8)


def _resize(rgb: np.ndarray, width: int, height: int) -> np.ndarray:
    return np.asarray(Image.fromarray(rgb).resize((width, height), Image.Resampling.LANCZOS))


def _surround(shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """A dark, slightly noisy background as cameras record it (0-10 of 255)."""
    level = rng.uniform(0, 8)
    return np.clip(level + rng.normal(0, 1.5, (*shape, 1)), 0, 255).repeat(3, axis=2)


Geometry = tuple[float, float, float, float]  # the disc's centre and semi-axes in the frame: cx, cy, rx, ry


def _place(disc: np.ndarray, width: int, height: int, rng: np.random.Generator, *,
           jitter: float = 0.01) -> tuple[np.ndarray, Geometry]:
    """The disc centred (within ``jitter`` of its diameter) on a dark canvas width x height, cut by its edges."""
    d = disc.shape[0]
    canvas = _surround((height, width), rng)
    x0 = round((width - d) / 2 + rng.uniform(-jitter, jitter) * d)
    y0 = round((height - d) / 2 + rng.uniform(-jitter, jitter) * d)
    sx0, sy0 = max(0, -x0), max(0, -y0)
    dx0, dy0 = max(0, x0), max(0, y0)
    w, h = min(d - sx0, width - dx0), min(d - sy0, height - dy0)
    patch = disc[sy0 : sy0 + h, sx0 : sx0 + w].astype(np.float64)
    inside = patch.max(axis=2, keepdims=True) > 0
    canvas[dy0 : dy0 + h, dx0 : dx0 + w] = np.where(inside, patch, canvas[dy0 : dy0 + h, dx0 : dx0 + w])
    return np.round(canvas).astype(np.uint8), (x0 + d / 2, y0 + d / 2, d / 2, d / 2)


def camera(disc: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, Geometry]:
    """A 4:3 .. 3:2 camera frame: the disc spans 67-98 % of the width and is cut at the top and bottom."""
    d = disc.shape[0]
    height = round(d * rng.uniform(*CAMERA_HEIGHT))
    width = round(height * rng.uniform(1.25, 1.5))
    return _place(disc, max(width, round(d * 1.02)), height, rng)


def padded(disc: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, Geometry]:
    """The whole disc on a dark square 2-12 % larger than it."""
    side = round(disc.shape[0] * rng.uniform(1.02, 1.12))
    return _place(disc, side, side, rng)


def stretched(disc: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, Geometry]:
    """Cut at the top and bottom to 82-92 % of the diameter, then resized to a square (an ODIR-style ellipse)."""
    d = disc.shape[0]
    frame, (cx, cy, rx, ry) = _place(disc, d, round(d * rng.uniform(*STRETCH_HEIGHT)), rng, jitter=0.0)
    stretch = d / frame.shape[0]
    return _resize(frame, d, d), (cx, cy * stretch, rx, ry * stretch)


def tight(disc: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, Geometry]:
    """A square of 75-88 % of the diameter inside the disc: clipped on four sides, black only in the corners."""
    side = round(disc.shape[0] * rng.uniform(*TIGHT_SIDE))
    return _place(disc, side, side, rng, jitter=0.015)


FRAMERS: dict[str, Callable[[np.ndarray, np.random.Generator], tuple[np.ndarray, Geometry]]] = {
    "camera": camera,
    "padded": padded,
    "stretched": stretched,
    "tight": tight,
}


def sized(rgb: np.ndarray, long_side: int) -> np.ndarray:
    """Resized (Lanczos) so that the long side is ``long_side`` px, aspect kept."""
    h, w = rgb.shape[:2]
    scale = long_side / max(h, w)
    return _resize(rgb, max(1, round(w * scale)), max(1, round(h * scale)))


def jpeg(rgb: np.ndarray, geometry: Geometry, rng: np.random.Generator) -> np.ndarray:
    """Re-encoded as JPEG at quality 60-75 (4:2:0 chroma, as most encoders write)."""
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="JPEG", quality=int(rng.integers(60, 76)))
    return np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))


def ring(rgb: np.ndarray, geometry: Geometry, rng: np.random.Generator) -> np.ndarray:
    """A thin dark ring (1-2 % of the radius wide, x0.2-0.5) just inside the disc's edge."""
    cx, cy, rx, ry = geometry
    h, w = rgb.shape[:2]
    yy, xx = np.ogrid[0:h, 0:w]
    rho = np.hypot((xx + 0.5 - cx) / rx, (yy + 0.5 - cy) / ry)
    inner = rng.uniform(0.95, 0.97)
    band = (rho >= inner) & (rho <= inner + rng.uniform(0.01, 0.02))
    out = rgb.astype(np.float32)
    out[band] *= rng.uniform(0.2, 0.5)
    return np.round(out).astype(np.uint8)


def notch(rgb: np.ndarray, geometry: Geometry, rng: np.random.Generator) -> np.ndarray:
    """A black square notch (10-16 % of the radius wide) cut into the disc's edge where it is in the frame."""
    cx, cy, rx, ry = geometry
    h, w = rgb.shape[:2]
    angles = rng.permutation(np.linspace(0, 2 * math.pi, 72, endpoint=False))
    inside = [a for a in angles if 0 <= cx + rx * math.cos(a) < w and 0 <= cy + ry * math.sin(a) < h]
    theta = float(inside[0] if inside else angles[0])
    ex, ey = cx + rx * math.cos(theta), cy + ry * math.sin(theta)
    half = rng.uniform(*NOTCH_HALF) * min(rx, ry)
    out = rgb.copy()
    out[max(0, round(ey - half)) : max(0, round(ey + half)), max(0, round(ex - half)) : max(0, round(ex + half))] = 0
    return out


def text(rgb: np.ndarray, geometry: Geometry, rng: np.random.Generator) -> np.ndarray:
    """White or yellow text (a date and an eye) burned into a corner, 4-6 % of the height tall."""
    img = Image.fromarray(rgb)
    h, w = rgb.shape[:2]
    size = max(8, round(h * rng.uniform(0.04, 0.06)))
    font = ImageFont.load_default(size=size)
    eye = "OD" if rng.uniform() < 0.5 else "OS"
    label = f"{int(rng.integers(2010, 2026))}-{int(rng.integers(1, 13)):02d}-{int(rng.integers(1, 29)):02d} {eye}"
    corner = int(rng.integers(4))
    x = 2 if corner % 2 == 0 else max(2, w - 2 - round(font.getlength(label)))
    y = 2 if corner < 2 else h - 4 - size
    colour = (255, 255, 255) if rng.uniform() < 0.5 else (255, 230, 0)
    ImageDraw.Draw(img).text((x, y), label, fill=colour, font=font)
    return np.asarray(img)


def plain(rgb: np.ndarray, geometry: Geometry, rng: np.random.Generator) -> np.ndarray:
    """As framed and sized."""
    return rgb


FINISHERS: dict[str, Callable[[np.ndarray, Geometry, np.random.Generator], np.ndarray]] = {
    "plain": plain,
    "jpeg": jpeg,
    "ring": ring,
    "notch": notch,
    "text": text,
}



def render(disc: np.ndarray, framing: str, size: int, finish: str, rng: np.random.Generator) -> np.ndarray:
    """``disc`` (``canonical``) in ``framing`` at long side ``size`` px with ``finish``: uint8 [H, W, 3]."""
    framed, (cx, cy, rx, ry) = FRAMERS[framing](disc, rng)
    scale = size / max(framed.shape[:2])
    return FINISHERS[finish](sized(framed, size), (cx * scale, cy * scale, rx * scale, ry * scale), rng)
