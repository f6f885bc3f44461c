"""Side-by-side image statistics: synthetic fundus renders vs real IDRiD photographs.

Prints one table (markdown) of the statistics the quality gate and the preprocessing look at: frame
aspect, field-of-view (FOV) radius and clipping, per-channel mean/SD inside the FOV, vessel contrast
and width, sharpness (the gate's band-pass energy), band-pass energy by scale and background
(choroidal) texture. Each row gives the median and the 10th-90th percentile range over the images.

Every measure after the FOV geometry is taken on a *normalised* image: the fitted FOV circle cropped
out (black where the frame clips it) and resized so that its diameter is ``NORM_DIAMETER`` px, so a
1024-px photograph and a 256-px render are compared at the same retinal scale.

Usage::

    PYTHONPATH=. python benchmarks/fundus_stats.py            # 54 IDRiD vs 54 synthetic (gradable)
    PYTHONPATH=. python benchmarks/fundus_stats.py --n-synthetic 120 --size 768 --seed 1

The FOV circle (``models.image.fov.fit_fov_circle``), the crop to it (``models.image.preprocessing.crop_to_fov``)
and every number the quality gate judges (``models.image.quality.measure``: FOV radius, colour inside the
disc, luminance, sharpness, blockiness) are the product's own functions, so the table shows exactly
what the gate and the preprocessing see. Vessel contrast/width, band-pass energy by scale and
background texture have no gate counterpart: they are this script's ``measure_*`` functions.
IDRiD: Porwal et al. 2018, CC BY 4.0 (see ../shared/data/README.md).
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
from PIL import Image
from scipy import ndimage

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.image.fov import FovCircle, fit_fov_circle
from models.image.preprocessing import crop_to_fov
from models.image.quality import measure
from support.shared_data import IDRID

NORM_DIAMETER = 512  # px: FOV diameter of the normalised image
FOV_LEVEL = 12  # of 255, brightest channel (smoothed): inside the FOV
DEFAULT_IDRID = IDRID  # $RADSCREEN_SHARED_DATA/idrid-lesion-54


def normalise_to_fov(rgb: np.ndarray, circle: FovCircle, diameter: int = NORM_DIAMETER) -> np.ndarray:
    """The fitted circle's bounding square (black beyond the frame) at ``diameter`` px: uint8 ``[D, D, 3]``."""
    return crop_to_fov(rgb, circle, diameter)[0]


def _disc(diameter: int, frac: float) -> np.ndarray:
    """bool ``[D, D]``: the centred disc of radius ``frac`` x D/2."""
    c = (np.arange(diameter) + 0.5 - diameter / 2) / (diameter / 2)
    return (c[None, :] ** 2 + c[:, None] ** 2) <= frac**2


def measure_vessels(norm: np.ndarray, valid: np.ndarray) -> dict[str, float]:
    """Vessel contrast and calibre on the green channel of the normalised image.

    Relative darkening ``d = 1 - g / closing(g)`` (a 15-px grey closing fills vessels and small red
    lesions with their surround). ``vessel_contrast`` is the 97th percentile of ``d`` inside the
    inner FOV; ``vessel_width`` is the mean diameter (2 x distance-transform maximum on the ridge) of
    the structures darker than half that, in per-mille of the FOV diameter; ``vessel_share`` their
    area share.
    """
    g = ndimage.gaussian_filter(norm[..., 1].astype(np.float32), 0.7) + 1.0  # [D, D]
    bg = ndimage.grey_closing(g, size=(15, 15))
    d = np.clip(1.0 - g / bg, 0.0, 1.0)
    inner = valid & _disc(norm.shape[0], 0.85)
    contrast = float(np.percentile(d[inner], 97))
    vessel = (d > 0.5 * contrast) & inner
    vessel = ndimage.binary_opening(vessel, iterations=1)
    edt = ndimage.distance_transform_edt(vessel)
    ridge = vessel & (edt >= ndimage.maximum_filter(edt, size=3)) & (edt > 0)
    width = float(2 * edt[ridge].mean()) if ridge.any() else 0.0
    return {
        "vessel_contrast": contrast,
        "vessel_width": 1000.0 * width / norm.shape[0],
        "vessel_share": float(vessel[inner].mean()),
    }


def measure_bandpass(norm: np.ndarray, valid: np.ndarray) -> dict[str, float]:
    """Band-pass energy by scale: variance of luminance differences of Gaussians (sigma a..b px at
    ``NORM_DIAMETER``) inside the FOV shrunk to 85 %, over the squared mean luminance (fine to coarse)."""
    luma = norm.astype(np.float32) @ np.asarray([0.299, 0.587, 0.114], np.float32) / 255.0  # [D, D]
    inner = valid & _disc(norm.shape[0], 0.85)
    mean = max(float(luma[inner].mean()), 1e-3)
    out: dict[str, float] = {}
    for lo, hi in ((0.5, 1.0), (1.0, 2.0), (2.0, 4.0), (4.0, 8.0)):
        band = ndimage.gaussian_filter(luma, lo) - ndimage.gaussian_filter(luma, hi)
        out[f"bp_{lo:g}_{hi:g}"] = float(band[inner].var() / mean**2)
    return out


def measure_texture(norm: np.ndarray, valid: np.ndarray) -> dict[str, float]:
    """Background (choroidal) texture: robust SD of a mid-scale band-pass of green, vessels excluded.

    Green over its 8-px-sigma local mean, minus 1, band-passed at sigma 2..8 px of ``NORM_DIAMETER``;
    robust SD (1.4826 x MAD) over inner-FOV pixels whose relative darkening is < 3 % (not vessel).
    """
    g = norm[..., 1].astype(np.float32) + 1.0
    local = ndimage.gaussian_filter(g, 8.0)
    rel = g / local - 1.0
    band = ndimage.gaussian_filter(rel, 2.0) - ndimage.gaussian_filter(rel, 8.0)
    bg = ndimage.grey_closing(ndimage.gaussian_filter(g, 0.7), size=(15, 15))
    calm = (1.0 - g / bg < 0.03) & valid & _disc(norm.shape[0], 0.85)
    vals = band[calm]
    return {"texture": float(1.4826 * np.median(np.abs(vals - np.median(vals))))}


def measure_image(rgb: np.ndarray) -> dict[str, float] | None:
    """All statistics of one uint8 ``[H, W, 3]`` photograph; None when no FOV circle can be fitted."""
    circle = fit_fov_circle(rgb)
    if circle is None:
        return None
    h, w = rgb.shape[:2]
    visible = min(circle.cy + circle.radius, h) - max(circle.cy - circle.radius, 0)
    gate = measure(rgb, circle).as_dict()
    stats = {
        "aspect_w_h": w / h,
        "fov_r_over_h": circle.radius / h,
        "clip_vertical": float(max(0.0, 1.0 - visible / (2 * circle.radius))),
        "visible_arc": circle.visible_arc,
        **{f"{k}_{c}": 255.0 * gate[f"{k}_{c}"] for k in ("mean", "std") for c in "rgb"},
        **{k: gate[k] for k in ("mean_luma", "sharpness", "blockiness", "shadow_fraction")},
    }
    norm = normalise_to_fov(rgb, circle)
    # inside the disc shrunk to 95 % and not in the black part beyond the frame
    valid = _disc(NORM_DIAMETER, 0.95) & (ndimage.uniform_filter(norm.max(axis=2).astype(np.float32), 5) > FOV_LEVEL)
    for fn in (measure_vessels, measure_bandpass, measure_texture):
        stats.update(fn(norm, valid))
    return stats


def idrid_images(folder: Path) -> Iterable[np.ndarray]:
    """The real photographs, decoded to uint8 RGB."""
    paths = sorted(folder.glob("*.jpg"))
    if not paths:
        raise SystemExit(f"no IDRiD images under {folder} (see ../shared/data/README.md)")
    for p in paths:
        with Image.open(p) as im:
            yield np.asarray(im.convert("RGB"))


def synthetic_images(n: int, seed: int, size: int) -> Iterable[np.ndarray]:
    """Gradable renders of the training generator, JPEG round-tripped at their own quality."""
    from training.synthetic import render_image

    index = 0
    made = 0
    while made < n:
        image, info, plan = render_image(seed, index, size=size)
        index += 1
        if not plan.gradable:
            continue
        buf = io.BytesIO()
        Image.fromarray(image).save(buf, format="JPEG", quality=info["jpeg_quality"])
        made += 1
        yield np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))


ROWS: tuple[tuple[str, str, str], ...] = (
    ("aspect_w_h", "frame aspect (w/h)", "{:.2f}"),
    ("fov_r_over_h", "FOV radius / frame height (fit_fov_circle)", "{:.3f}"),
    ("clip_vertical", "share of the FOV diameter cut by the frame (vertical)", "{:.3f}"),
    ("visible_arc", "share of the FOV circumference inside the frame", "{:.2f}"),
    ("mean_r", "mean R inside the disc (gate, 0-255)", "{:.0f}"),
    ("mean_g", "mean G inside the disc (gate)", "{:.0f}"),
    ("mean_b", "mean B inside the disc (gate)", "{:.0f}"),
    ("std_r", "SD R inside the disc (gate)", "{:.1f}"),
    ("std_g", "SD G inside the disc (gate)", "{:.1f}"),
    ("std_b", "SD B inside the disc (gate)", "{:.1f}"),
    ("mean_luma", "mean luminance (gate, 0-1)", "{:.3f}"),
    ("sharpness", "gate sharpness (fine/mid band-pass energy ratio)", "{:.2f}"),
    ("blockiness", "gate JPEG blockiness (~1 natural)", "{:.2f}"),
    ("shadow_fraction", "gate shadow share", "{:.3f}"),
    ("vessel_contrast", "vessel contrast (97th pct. relative darkening, green)", "{:.3f}"),
    ("vessel_width", "vessel width (per-mille of FOV diameter)", "{:.1f}"),
    ("vessel_share", "dark-structure area share of inner FOV", "{:.3f}"),
    ("bp_0.5_1", "band-pass energy sigma 0.5-1 px @512", "{:.1e}"),
    ("bp_1_2", "band-pass energy sigma 1-2 px @512", "{:.1e}"),
    ("bp_2_4", "band-pass energy sigma 2-4 px @512", "{:.1e}"),
    ("bp_4_8", "band-pass energy sigma 4-8 px @512", "{:.1e}"),
    ("texture", "background texture (robust SD, green band 2-8 px @512)", "{:.4f}"),
)


def summarise(
    images: Iterable[np.ndarray], measure: Callable[[np.ndarray], dict[str, float] | None]
) -> dict[str, np.ndarray]:
    """Measure every image; returns each statistic's values over the images (unfittable ones skipped)."""
    rows = [s for s in (measure(im) for im in images) if s is not None]
    return {k: np.asarray([r[k] for r in rows]) for k in rows[0]} if rows else {}


def format_table(real: dict[str, np.ndarray], synth: dict[str, np.ndarray]) -> str:
    """Markdown table: median [p10, p90] per statistic, real vs synthetic."""

    def cell(vals: np.ndarray, fmt: str) -> str:
        p10, p50, p90 = np.percentile(vals, [10, 50, 90])
        return f"{fmt.format(p50)} [{fmt.format(p10)}, {fmt.format(p90)}]"

    n_r, n_s = len(next(iter(real.values()))), len(next(iter(synth.values())))
    lines = [
        f"| statistic | IDRiD (n={n_r}) median [p10, p90] | synthetic (n={n_s}) median [p10, p90] |",
        "|---|---|---|",
    ]
    lines += [f"| {label} | {cell(real[k], fmt)} | {cell(synth[k], fmt)} |" for k, label, fmt in ROWS]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idrid", type=Path, default=DEFAULT_IDRID)
    parser.add_argument("--n-synthetic", type=int, default=54)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", type=int, default=768, help="synthetic frame width in px")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    real = summarise(idrid_images(args.idrid), measure_image)
    synth = summarise(synthetic_images(args.n_synthetic, args.seed, args.size), measure_image)
    print(format_table(real, synth))
    print(f"\n({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
