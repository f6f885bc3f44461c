"""Reference images for an image-quality gate: non-fundus pictures and ungradable fundus photographs.

Meant for tests and calibration of a quality check (e.g. the service's gate): each example says
whether it is a fundus photograph at all and whether a grader could read it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

from training.synthetic.camera import UNGRADABLE_KINDS
from training.synthetic.fundus import FRAME_FORMATS
from training.synthetic.render import render_fundus


@dataclass(frozen=True)
class QualityExample:
    """One reference image: ``image`` is uint8 ``[H, W, 3]`` RGB (fundus ones in their camera frame)."""

    name: str
    image: np.ndarray
    is_fundus: bool
    gradable: bool


def _non_fundus(rng: np.random.Generator, size: int) -> list[QualityExample]:
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    noise = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
    gradient = np.stack([xx, yy, 1 - xx], axis=-1)
    scene = Image.new("RGB", (size, size), (110, 160, 230))  # sky, grass, sun
    draw = ImageDraw.Draw(scene)
    draw.rectangle((0, int(size * 0.6), size, size), fill=(60, 140, 50))
    draw.ellipse((size * 0.7, size * 0.1, size * 0.85, size * 0.25), fill=(250, 230, 120))
    document = Image.new("RGB", (size, size), (245, 245, 240))
    draw = ImageDraw.Draw(document)
    for line in range(3, 30):
        y = line * size / 32
        draw.rectangle((size * 0.1, y, size * rng.uniform(0.5, 0.9), y + size / 80), fill=(20, 20, 20))
    checker = ((np.floor(xx * 8) + np.floor(yy * 8)) % 2 * 255).astype(np.uint8)
    return [
        QualityExample("random_noise", noise, False, False),
        QualityExample("colour_gradient", (gradient * 255).astype(np.uint8), False, False),
        QualityExample("outdoor_scene", np.asarray(scene), False, False),
        QualityExample("text_document", np.asarray(document), False, False),
        QualityExample("checkerboard", np.repeat(checker[..., None], 3, axis=-1), False, False),
        QualityExample("blank_black", np.zeros((size, size, 3), np.uint8), False, False),
    ]


def quality_gate_examples(seed: int = 0, size: int = 256) -> list[QualityExample]:
    """Six non-fundus images (``size`` square), one ungradable fundus photograph per defect kind and one
    gradable one per camera frame format (``size`` px wide, frame drawn / as named)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xBAD]))
    examples = _non_fundus(rng, size)
    for kind in UNGRADABLE_KINDS:
        grade = int(rng.integers(0, 5))
        image, _ = render_fundus(rng, grade, size=size, gradable=False, ungradable_kind=kind)
        examples.append(QualityExample(f"ungradable_{kind}", image, True, False))
    for frame, grade in zip(FRAME_FORMATS, (0, 3, 1, 4), strict=True):
        image, _ = render_fundus(rng, grade, size=size, gradable=True, frame=frame)
        examples.append(QualityExample(f"gradable_{frame.replace(':', 'x')}_grade{grade}", image, True, True))
    return examples
