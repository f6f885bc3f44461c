"""Compose one synthetic fundus photograph: anatomy, lesions for a DR grade, confounders and camera.

``render_fundus`` is the single-image entry point; it draws every random number from the generator it
is given, in a fixed order, so ``(seed, index)`` -> identical pixels (see ``dataset.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from training.synthetic.camera import UNGRADABLE_KINDS, apply_camera, sample_camera
from training.synthetic.fundus import (
    FRAME_FORMATS,
    Eye,
    draw_frame,
    grow_vessels,
    render_retina,
    sample_geometry,
    vessel_masks,
)
from training.synthetic.lesions import CONFOUNDER_KINDS, LESION_KINDS, paint_lesions, plan_lesions

# Vessel colours as multiplicative factors on the local retina colour: on real photographs vessels
# are red on orange, darkening green by ~20-30 % at the 97th percentile (IDRiD), not near-black.
_ARTERY = np.array([0.88, 0.72, 0.75], np.float32)
_VEIN = np.array([0.76, 0.48, 0.57], np.float32)


def render_fundus(
    rng: np.random.Generator,
    grade: int,
    *,
    size: int = 256,
    gradable: bool = True,
    eye: Eye | None = None,
    ungradable_kind: str | None = None,
    frame: str | None = None,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Render one fundus photograph of DR ``grade`` (0-4), ``size`` px wide.

    Returns the image (uint8 ``[H, size, 3]``, RGB; ``H`` follows the frame format, see
    ``fundus.FRAME_FORMATS``) and an info dict: ``grade``, ``eye``, ``gradable``, ``ungradable_kind``
    (None when gradable), ``subtle``, ``lesions`` (counts by kind, confounders included),
    ``jpeg_quality`` (the quality to save it with), ``frame`` and ``fov`` (centre x, y and radius in
    px). When ``gradable`` is False a defect kind is drawn from ``UNGRADABLE_KINDS`` unless given;
    ``frame`` is drawn with ``fundus.FRAME_SHARES`` unless given.
    """
    if size < 32:
        raise ValueError(f"size must be at least 32 px, got {size}")
    if frame is None:
        frame = draw_frame(rng)
    elif frame not in FRAME_FORMATS:
        raise ValueError(f"Unknown frame {frame!r}; expected one of: {', '.join(FRAME_FORMATS)}")
    if eye is None:
        eye = "left" if rng.random() < 0.5 else "right"
    if gradable:
        ungradable_kind = None
    elif ungradable_kind is None:
        ungradable_kind = str(rng.choice(UNGRADABLE_KINDS))
    elif ungradable_kind not in UNGRADABLE_KINDS:
        raise ValueError(f"Unknown ungradable kind {ungradable_kind!r}; expected one of: {', '.join(UNGRADABLE_KINDS)}")

    geom = sample_geometry(rng, size, eye, off_centre=ungradable_kind == "off_centre", frame=frame)
    albedo = render_retina(rng, geom)  # [H, W, 3]
    tree = grow_vessels(rng, geom)
    plan = plan_lesions(rng, grade)
    arteries, veins = vessel_masks(tree, geom, beading=float(plan.counts["venous_beading"]), rng=rng)
    # Veins of severe NPDR are also darker and wider-looking; the factor keeps grade info subtle.
    vein = _VEIN * (0.94 if grade >= 3 else 1.0)
    albedo *= 1.0 - arteries[..., None] * (1.0 - _ARTERY)
    albedo *= 1.0 - veins[..., None] * (1.0 - vein)
    paint_lesions(albedo, rng, geom, tree, plan)
    camera = sample_camera(rng, ungradable_kind)
    image = apply_camera(albedo, geom, camera, rng, dust=plan.counts["dust"])
    info: dict[str, Any] = {
        "grade": int(grade),
        "eye": eye,
        "gradable": ungradable_kind is None,
        "ungradable_kind": ungradable_kind,
        "subtle": plan.subtle,
        "lesions": {k: int(plan.counts[k]) for k in LESION_KINDS + CONFOUNDER_KINDS},
        "jpeg_quality": camera.jpeg_quality,
        "frame": frame,
        "fov": (round(geom.cx, 2), round(geom.cy, 2), round(geom.radius, 2)),
    }
    return image, info
