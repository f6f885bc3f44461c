"""Generated images that are *not* fundus photographs, for the quality gate's negative set.

Flat colours, noise, gradients, a text-like page, a colourful natural-ish scene, a grey test card
with a bright disc, a red flat frame and a reddish "cat-like" furry texture. All seeded.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Maker = Callable[[np.random.Generator, int], np.ndarray]


def flat(rng: np.random.Generator, size: int) -> np.ndarray:
    colour = rng.integers(0, 256, 3)
    return np.broadcast_to(colour, (size, size, 3)).astype(np.uint8).copy()


def noise(rng: np.random.Generator, size: int) -> np.ndarray:
    return rng.integers(0, 256, (size, size, 3)).astype(np.uint8)


def gradient(rng: np.random.Generator, size: int) -> np.ndarray:
    t = np.linspace(0, 1, size, dtype=np.float32)
    a, b = rng.uniform(0, 1, 3), rng.uniform(0, 1, 3)
    ramp = t[None, :, None] if rng.uniform() < 0.5 else t[:, None, None]
    img = a * (1 - ramp) + b * ramp
    return (np.broadcast_to(img, (size, size, 3)) * 255).astype(np.uint8)


def text_page(rng: np.random.Generator, size: int) -> np.ndarray:
    page = np.full((size, size, 3), rng.integers(225, 256), np.uint8)
    line_h = max(6, size // 24)
    for top in range(line_h, size - line_h, 2 * line_h):
        x = size // 12
        while x < size - size // 12:
            w = int(rng.integers(line_h, 4 * line_h))
            page[top : top + line_h, x : min(x + w, size - size // 12)] = rng.integers(0, 60)
            x += w + line_h // 2
    return page


def scene(rng: np.random.Generator, size: int) -> np.ndarray:
    """Sky, hills and a few coloured blobs: a natural-ish colourful photo."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    img = np.zeros((size, size, 3), np.float32)
    horizon = 0.45 + 0.1 * np.sin(xx * rng.uniform(3, 9) + rng.uniform(0, 6))
    sky = yy < horizon
    img[sky] = np.array([0.45, 0.65, 0.95]) * (0.7 + 0.3 * (1 - yy[sky]))[:, None]
    img[~sky] = np.array([0.25, 0.55, 0.2]) * (0.6 + 0.4 * yy[~sky])[:, None]
    for _ in range(6):
        cx, cy, r = rng.uniform(0, 1), rng.uniform(0.3, 1), rng.uniform(0.03, 0.12)
        img[(xx - cx) ** 2 + (yy - cy) ** 2 < r**2] = rng.uniform(0, 1, 3)
    img += rng.normal(0, 0.03, img.shape)
    return (np.clip(img, 0, 1) * 255).astype(np.uint8)


def grey_card(rng: np.random.Generator, size: int) -> np.ndarray:
    """A grey disc with a test pattern on black: right shape, wrong colour."""
    yy, xx = np.mgrid[0:size, 0:size]
    c = (size - 1) / 2
    disc = np.hypot(yy - c, xx - c) < 0.45 * size
    level = rng.integers(90, 200)
    img = np.where(disc, level + 40 * ((xx // max(size // 16, 1) + yy // max(size // 16, 1)) % 2), 0)
    return np.repeat(img[:, :, None], 3, axis=2).astype(np.uint8)


def fur(rng: np.random.Generator, size: int) -> np.ndarray:
    """An orange furry texture filling the frame (a cat close-up, roughly)."""
    base = np.array([0.8, 0.5, 0.25]) * rng.uniform(0.7, 1.0)
    streaks = np.cumsum(rng.normal(0, 0.05, (size, size)), axis=0)
    streaks = (streaks - streaks.min()) / (np.ptp(streaks) + 1e-6)
    img = base[None, None, :] * (0.5 + 0.6 * streaks[:, :, None]) + rng.normal(0, 0.04, (size, size, 3))
    return (np.clip(img, 0, 1) * 255).astype(np.uint8)


NON_FUNDUS: dict[str, Maker] = {
    "flat": flat,
    "noise": noise,
    "gradient": gradient,
    "text_page": text_page,
    "scene": scene,
    "grey_card": grey_card,
    "fur": fur,
}
