"""The evidence two quality-gate bounds were set on: the patch sharpness and the depth of a frame's straight cut.

For one half of the patient split (``support.framing_family``) it prints:

- the patch sharpness (``models.image.quality``, median of 8 x 8 patches) of the natural ODIR-5K, EyePACS
  and IDRiD eyes the gate accepts, against that of each sampled photograph's blurred family renders with text
  burned in over the retina (the renders ``MIN_PATCH_SHARPNESS`` must refuse);
- how deep the straight cuts with black beyond them reach into the fitted disc (share of its diameter) on every
  natural eye, against each sampled photograph's eyelid renders (``models.image.fov.MAX_CUT_DEPTH``).

Usage::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/gate_evidence.py --split tune --per-set 12 --workers 2
"""

from __future__ import annotations

import argparse
import time
import zlib
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from models.image.fov import MAX_CUT_DEPTH, straight_cut_depth
from models.image.quality import MIN_PATCH_SHARPNESS, MIN_SHARPNESS, assess_quality
from support.framing_family import DEGRADED, Photo, decode, family, photographs
from support.framings import canonical


def natural(photo: Photo) -> tuple[str, bool, float, float]:
    """(name, accepted, patch sharpness, deepest cut) of a photograph as published."""
    rgb = decode(photo.path)
    report = assess_quality(rgb)
    return photo.name, report.gradable, report.measurements["patch_sharpness"], straight_cut_depth(rgb)


def renders(photo: Photo) -> list[tuple[str, str, float, float, float]]:
    """(name, kind, whole sharpness, patch sharpness, deepest cut) of its blurred text renders and eyelid renders.

    The same seeded renders as ``judge_photograph`` makes for a gradable photograph, for both degradations.
    """
    rgb = decode(photo.path)
    disc = canonical(rgb) if assess_quality(rgb).gradable else None
    if disc is None:
        return []
    rows = []
    for kind in ("blur", "obstructed"):
        rng = np.random.default_rng(zlib.crc32(photo.name.encode()))
        for _ in family(disc, rng):  # the gradable renders come first in the benchmark's sequence
            pass
        bad = DEGRADED[kind][0](disc, rng)
        for _framing, _size, finish, img in family(bad, rng):
            if kind == "blur" and finish != "text":
                continue
            m = assess_quality(img).measurements
            rows.append((photo.name, kind, m["sharpness"], m["patch_sharpness"], straight_cut_depth(img)))
    return rows


def _lowest(values: list[tuple[float, str]], n: int = 5) -> str:
    return ", ".join(f"{v:.2f} ({name})" for v, name in sorted(values)[:n])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=("tune", "report", "all"), default="tune")
    parser.add_argument("--per-set", type=int, default=12, help="photographs per set whose renders are made")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    start = time.perf_counter()
    eyes = [p for p in photographs(None, args.split) if p.source in ("odir", "eyepacs", "idrid")]
    sample = photographs(args.per_set, args.split)
    with ProcessPoolExecutor(args.workers) as pool:
        nat = list(pool.map(natural, eyes, chunksize=16))
        made = [row for part in pool.map(renders, sample) for row in part]
    accepted = [(patch, name) for name, ok, patch, _ in nat if ok]
    text = [(patch, whole, name) for name, kind, whole, patch, _ in made if kind == "blur"]
    lifted = [(patch, name) for patch, whole, name in text if whole >= MIN_SHARPNESS]
    print(f"split {args.split}: {len(nat)} natural eyes ({len(accepted)} accepted), {len(sample)} photographs "
          f"rendered; {time.perf_counter() - start:.0f} s wall")
    print(f"\npatch sharpness (bound >= {MIN_PATCH_SHARPNESS}):")
    print(f"  accepted natural eyes, lowest: {_lowest(accepted)}")
    print(f"  blurred renders with text: {len(text)}; highest: "
          + ", ".join(f"{p:.2f} ({n})" for p, _, n in sorted(text, reverse=True)[:5]))
    print(f"  ... of them {len(lifted)} with the whole picture's sharpness >= {MIN_SHARPNESS} (text lifts it); "
          f"patch sharpness {max(lifted)[0]:.2f} at most" if lifted else "  ... none lifted by its text")
    cuts = sorted(((depth, name, ok) for name, ok, _, depth in nat), reverse=True)
    lids = sorted(((depth, name) for name, kind, _, _, depth in made if kind == "obstructed"), reverse=True)
    print(f"\ndeepest straight cut, share of the diameter (bound <= {MAX_CUT_DEPTH}; deeper is fitted as an edge):")
    print("  natural eyes, deepest: " + ", ".join(
        f"{d:.3f} ({n}{'' if ok else ', refused'})" for d, n, ok in cuts[:5]))
    print(f"  eyelid renders: {len(lids)}; {sum(d > MAX_CUT_DEPTH for d, _ in lids)} of them fitted with a cut "
          f"deeper than the bound (refitted as an edge, so the lid's shade is measured)")


if __name__ == "__main__":
    main()
