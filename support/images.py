"""Generated test images: a cheap fundus-like disc, a rendered synthetic fundus photograph, a blank frame.

Used by the tests and by the benchmarks (benchmarks/load_service.py, benchmarks/decode_peak.py), so they
upload the same kind of images the tests do. All seeded, all small.

- :func:`fundus_like`: red textured disc on black, ``uint8 [size, size, 3]``; milliseconds to make.
- :func:`fundus_png`: ``training.synthetic``'s renderer (grade 1, gradable) as PNG bytes; the quality gate's
  thresholds were set on this generator, so these always pass the gate.
- :func:`synthetic_jpegs`: ``n`` renders of the generator, grades cycling 0..4, as JPEG bytes (benchmarks).
- :data:`IDRID`: the folder of real photographs the tests read (never copied into the project).
- :func:`blank_png`: a uniform frame with no field of view (the gate refuses it: ``retake_ungradable``).
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from support.shared_data import IDRID as IDRID  # the 54 real IDRiD photographs ($RADSCREEN_SHARED_DATA)


def fundus_like(seed: int, size: int = 96) -> np.ndarray:
    """A cheap fundus-looking uint8 [size, size, 3] image: red disc on black, textured, seeded."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size]
    c = (size - 1) / 2
    r = np.hypot(yy - c, xx - c) / (0.46 * size)
    disc = r <= 1.0
    base = np.stack([0.75 - 0.2 * r, 0.35 - 0.1 * r, 0.15 - 0.05 * r], axis=-1)
    texture = rng.normal(0, 0.06, (size, size, 1)) + 0.08 * np.sin(xx / (2 + seed % 5))[..., None]
    img = np.clip(base + texture, 0, 1) * disc[..., None]
    return (img * 255).astype(np.uint8)


def encode(arr: np.ndarray, fmt: str = "PNG", **kwargs: object) -> bytes:
    """``uint8 [H, W, 3]`` (or ``[H, W]``) -> the bytes of one ``fmt`` file written by Pillow."""
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format=fmt, **kwargs)
    return buf.getvalue()


def fundus_png(seed: int, size: int = 256) -> bytes:
    """A generated, gradable fundus photograph (training.synthetic, grade 1) as PNG bytes."""
    from training.synthetic.render import render_fundus

    image, _ = render_fundus(np.random.default_rng(seed), 1, size=size, gradable=True, eye="left")  # [H, W, 3]
    return encode(image)


def synthetic_jpegs(n: int, size: int, seed: int) -> list[bytes]:
    """``n`` generated fundus photographs (training.synthetic, grades cycling 0..4, image ``i`` from the
    generator ``[seed, i]``) as quality-92 JPEG bytes."""
    from training.synthetic.render import render_fundus

    return [encode(render_fundus(np.random.default_rng([seed, i]), i % 5, size=size)[0], "JPEG", quality=92)
            for i in range(n)]


def blank_png(size: int = 128, value: int = 0) -> bytes:
    """A uniform image: no field of view, nothing to grade (the quality gate refuses it)."""
    return encode(np.full((size, size, 3), value, np.uint8))
