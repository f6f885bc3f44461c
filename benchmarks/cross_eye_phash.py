"""Could a perceptual hash tell "the same photograph as both eyes" from a real pair of eyes? The evidence.

The exam identity rule (``service.screening.identity``, rule 5) compares exact pixel digests
(``service.inference.prepare.pixel_digest``): no false matches, but a re-encoded copy escapes it. This measures
what a 64-bit DCT perceptual hash (grey 32 x 32 Lanczos thumbnail of the decoded frame, the 8 x 8 lowest DCT
coefficients but DC, each against their median) would do, per data set, on the real left/right pairs of the same
patients (what it must never match) and on copies of the right eye re-encoded (JPEG quality 75) or resized to
3/4 (what it should match); and the L vs mirrored-R distance (a flip-invariant variant). It also times
``pixel_digest`` on the decoded frames. Frames are decoded as the service does for a 256 px model.

Measured (2026-12-04, first patients of each labels.csv with both eyes), Hamming distance in bits:

- ODIR-5K, 1,100 patients: copies re-encoded <= 4 (p99 2), resized <= 6 (p99 2); L vs R min 6, p1 12, median 26;
  false matches at <= 4: 0/1100, at <= 6: 1/1100, at <= 8: 3/1100; L vs mirrored R min 2 (6/1100 at <= 4).
- EyePACS, 1,200 patients: copies re-encoded <= 2, resized <= 4; L vs R min 8, p1 12, median 24; false
  matches at <= 6: 0/1200, at <= 8: 2/1200; L vs mirrored R min 4 (5/1200 at <= 4).

So a threshold of 4 bits would have caught every re-encoded copy with no false match among 2,300 real pairs, but
with 2 bits between the farthest copy and the nearest real pair, a threshold chosen on these same pairs, and no
measure on ungradable (dark, washed-out) pairs, whose thumbnails are near-uniform: not shipped. A flip-invariant
hash would refuse real visits (L vs mirrored R as close as 2 bits).

Usage::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/cross_eye_phash.py --patients 1100 odir-5k eyepacs-5k
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # support/ is not installed: run from any folder

from service.inference.dicom import decode_photograph
from service.inference.prepare import pixel_digest
from support.shared_data import shared_data_dir

THRESHOLDS = (4, 6, 8, 10, 12)
_K = np.arange(32)
DCT = np.cos(np.pi * (2 * _K[None, :] + 1) * _K[:, None] / 64)  # [32, 32] DCT-II basis (unnormalised)


def phash(rgb: np.ndarray) -> np.ndarray:
    """63 bits: the 8 x 8 lowest DCT coefficients of the grey 32 x 32 thumbnail (DC dropped) above their median."""
    grey = np.asarray(Image.fromarray(rgb).convert("L").resize((32, 32), Image.Resampling.LANCZOS), np.float64)
    low = (DCT @ grey @ DCT.T)[:8, :8].ravel()[1:]  # [63]
    return np.asarray(low > np.median(low))


def bits(a: np.ndarray, b: np.ndarray) -> int:
    return int(np.count_nonzero(a != b))


def decode(data: bytes) -> np.ndarray:
    return decode_photograph(data, max_pixels=60_000_000, max_bytes=50 << 20, size=256)


def reencoded(rgb: np.ndarray) -> np.ndarray:
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, "JPEG", quality=75)
    return decode(buf.getvalue())


def pairs(name: str, patients: int) -> list[dict[str, Path]]:
    root = shared_data_dir() / name
    by_patient: dict[str, dict[str, Path]] = defaultdict(dict)
    with (root / "labels.csv").open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            by_patient[row["patient"]][row["eye"]] = root / "images" / Path(row["image"]).name
    return [p for p in by_patient.values() if {"left", "right"} <= set(p)][:patients]


def study(name: str, patients: int) -> None:
    lr, mirrored, copies, resized, hash_ms, mpx = [], [], [], [], [], []
    start = time.perf_counter()
    for pair in pairs(name, patients):
        right, left = decode(pair["right"].read_bytes()), decode(pair["left"].read_bytes())
        t = time.perf_counter()
        pixel_digest(right)
        hash_ms.append((time.perf_counter() - t) * 1e3)
        mpx.append(right.shape[0] * right.shape[1] / 1e6)
        hr, hl = phash(right), phash(left)
        lr.append(bits(hr, hl))
        mirrored.append(bits(phash(np.ascontiguousarray(right[:, ::-1])), hl))
        copies.append(bits(hr, phash(reencoded(right))))
        small = Image.fromarray(right).resize((right.shape[1] * 3 // 4, right.shape[0] * 3 // 4))
        resized.append(bits(hr, phash(np.asarray(small))))
    a_lr, a_mirrored, a_copies, a_resized = (np.array(v) for v in (lr, mirrored, copies, resized))
    print(f"{name}: {len(lr)} patients with both eyes ({time.perf_counter() - start:.0f} s); pixel_digest median "
          f"{np.median(hash_ms):.2f} ms at a median {np.median(mpx):.2f} Mpx frame")
    print(f"  copies: re-encoded JPEG q75 max {a_copies.max()} (p99 {np.percentile(a_copies, 99):.0f}), resized 3/4 "
          f"max {a_resized.max()} (p99 {np.percentile(a_resized, 99):.0f})")
    print(f"  L vs R: min {a_lr.min()}, p1 {np.percentile(a_lr, 1):.0f}, median {np.median(a_lr):.0f}; L vs mirrored "
          f"R: min {a_mirrored.min()}, p1 {np.percentile(a_mirrored, 1):.0f}, median {np.median(a_mirrored):.0f}")
    for th in THRESHOLDS:
        print(f"  <= {th:2d} bits: L vs R false matches {np.sum(a_lr <= th)}/{len(a_lr)}, L vs mirrored R "
              f"{np.sum(a_mirrored <= th)}/{len(a_mirrored)}, re-encoded copies caught {np.sum(a_copies <= th)}/"
              f"{len(a_copies)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("datasets", nargs="+", help="folders of $RADSCREEN_SHARED_DATA: odir-5k, eyepacs-5k")
    parser.add_argument("--patients", type=int, default=300, help="first patients with both eyes, per data set")
    args = parser.parse_args()
    for name in args.datasets:
        study(name, args.patients)


if __name__ == "__main__":
    main()
