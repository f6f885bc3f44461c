"""Accept/reject table of the quality gate on real (IDRiD) and synthetic photographs, per reason.

Prints two markdown tables for docs/results-quality-gate.md:

1. per image set: how many images, how many gradable, how many rejected *for the expected reason*,
   and which issues were reported;
2. per measure: its range (min / median / max) on the gradable real and synthetic photographs and
   on the degraded set it must catch, next to its threshold: the evidence the thresholds were set on.

Real photographs: ``../shared/data/idrid-lesion-54`` (54 IDRiD images, CC BY 4.0), at 1024 px and
resized to 565, 2048 and 4288 px wide, and their degradations (support/degradations.py).
Synthetic: ``training.synthetic.render_fundus`` renders (gradable and each ungradable kind) and the
generated non-fundus images (support/nonfundus.py).

Example::

    PYTHONPATH=$PWD python benchmarks/quality_table.py --synthetic 60 --seed 2026
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Iterable

import numpy as np
from PIL import Image

from models.image import quality
from models.image.quality import QualityMeasures, judge, measure
from support.degradations import DEGRADATIONS
from support.nonfundus import NON_FUNDUS
from support.shared_data import IDRID  # $RADSCREEN_SHARED_DATA/idrid-lesion-54
from training.synthetic.camera import UNGRADABLE_KINDS
from training.synthetic.render import render_fundus

EXPECTED_SYNTHETIC = {
    "blur": "blurred",
    "dark": "too_dark",
    "overexposed": "overexposed",
    "eyelash": None,  # any reason: the generator's eyelash renders are also blurred
    "off_centre": "no_field_of_view",
}
# measure -> (threshold, direction, degraded set that it must catch)
MEASURES = {
    "sharpness": (quality.MIN_SHARPNESS, ">=", "real: strong_blur"),
    "patch_sharpness": (quality.MIN_PATCH_SHARPNESS, ">=", "real: strong_blur"),
    "mean_luma": (quality.MIN_MEAN_LUMA, ">=", "real: darkened_10pct"),
    "saturated_fraction": (quality.MAX_SATURATED, "<=", "real: overexposed"),
    "shadow_fraction": (quality.MAX_SHADOW, "<=", "real: eyelid_shadow"),
    "blockiness": (quality.MAX_BLOCKINESS, "<=", "real: jpeg_blocking"),
    "red_share": (quality.MIN_RED_SHARE, ">=", "non-fundus: grey_card"),
    "fov_inlier_share": (quality.MIN_INLIER_SHARE, ">=", "non-fundus: scene"),
    "fov_offset": (quality.MAX_FOV_OFFSET, "<=", "synthetic: off_centre"),
    "fov_radius": (quality.MIN_FOV_RADIUS, ">=", "synthetic: off_centre"),
}


def widen(rgb: np.ndarray, width: int) -> np.ndarray:
    h, w = rgb.shape[:2]
    return np.asarray(Image.fromarray(rgb).resize((width, round(h * width / w)), Image.Resampling.BICUBIC))


def row(name: str, ms: list[QualityMeasures], expected: str | None, *, gradable_expected: bool) -> str:
    reports = [judge(m) for m in ms]
    gradable = sum(r.gradable for r in reports)
    issues = Counter(i for r in reports for i in r.issues)
    if gradable_expected:
        right = f"{gradable}/{len(ms)} gradable"
    elif expected is None:
        right = f"{len(ms) - gradable}/{len(ms)} rejected"
    else:
        right = f"{sum(expected in r.issues for r in reports)}/{len(ms)} `{expected}`"
    listed = ", ".join(f"{k} {v}" for k, v in issues.most_common()) or "-"
    return f"| {name} | {len(ms)} | {gradable} | {right} | {listed} |"


def spread(values: Iterable[float]) -> str:
    v = np.asarray(list(values))
    return f"{v.min():.3g} / {np.median(v):.3g} / {v.max():.3g}" if v.size else "-"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--synthetic", type=int, default=60, help="gradable synthetic renders (and 1/5 as many per defect)")
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--stride", type=int, default=1, help="use every n-th IDRiD photograph")
    args = p.parse_args(argv)

    sets: dict[str, list[QualityMeasures]] = {}
    lines = ["| image set | n | gradable | rejected for its reason | issues reported |", "|---|---|---|---|---|"]
    files = sorted(IDRID.glob("*.jpg"))[:: args.stride]
    if not files:
        raise SystemExit(f"no IDRiD photographs at {IDRID}")
    real = [np.asarray(Image.open(f).convert("RGB")) for f in files]
    sets["real: IDRiD 1024 px"] = [measure(a) for a in real]
    lines.append(row("real: IDRiD (1024 px wide)", sets["real: IDRiD 1024 px"], None, gradable_expected=True))
    for width in (565, 2048, 4288):
        ms = [measure(widen(a, width)) for a in real]
        lines.append(row(f"real: IDRiD resized to {width} px", ms, None, gradable_expected=True))
    for k, (name, (degrade, issue)) in enumerate(sorted(DEGRADATIONS.items())):
        rng = np.random.default_rng(args.seed + k)
        sets[f"real: {name}"] = [measure(degrade(a, rng)) for a in real]
        lines.append(row(f"real: {name}", sets[f"real: {name}"], issue, gradable_expected=False))

    rng = np.random.default_rng(args.seed)
    sets["synthetic: gradable"] = [
        measure(render_fundus(rng, i % 5, size=256 if i % 2 else 512, gradable=True)[0]) for i in range(args.synthetic)
    ]
    lines.append(row("synthetic: gradable (256 and 512 px)", sets["synthetic: gradable"], None, gradable_expected=True))
    for kind in UNGRADABLE_KINDS:
        n = max(4, args.synthetic // 5)
        ms = [measure(render_fundus(rng, i % 5, size=256, gradable=False, ungradable_kind=kind)[0]) for i in range(n)]
        sets[f"synthetic: {kind}"] = ms
        lines.append(row(f"synthetic: {kind}", ms, EXPECTED_SYNTHETIC.get(kind), gradable_expected=False))
    for name, make in NON_FUNDUS.items():
        ms = [measure(make(rng, 256)) for _ in range(4)]
        sets[f"non-fundus: {name}"] = ms
        lines.append(row(f"non-fundus: {name}", ms, None, gradable_expected=False))
    print("\n".join(lines))

    print("\n| measure | threshold | real gradable (min / median / max) | synthetic gradable | must catch | there |")
    print("|---|---|---|---|---|---|")
    for key, (threshold, op, target) in MEASURES.items():

        def values(name: str, key: str = key) -> list[float]:
            return [float(getattr(m, key)) for m in sets.get(name, [])]

        print(
            f"| `{key}` | {op} {threshold:g} | {spread(values('real: IDRiD 1024 px'))} | "
            f"{spread(values('synthetic: gradable'))} | {target} | {spread(values(target))} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
