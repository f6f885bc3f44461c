"""The quality gate on every ODIR-5K eye: acceptance by category, reasons, and a contact sheet of rejections.

Each photograph goes through the service's own decode (``decode_rgb`` at the size the service decodes to)
and the gate (``measure`` + ``judge``); the measures are written to a CSV so thresholds can be studied
without decoding again (``--measures``), and the accept table by category (normal, DR, other eye disease)
is printed as markdown for docs/results-real-eyes.md. ``--sheet`` writes a contact sheet of rejected normal and
DR eyes with their reasons (a PNG for the docs; never commit photographs themselves).

Example::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/quality_real.py --out runs/quality-odir \\
        --sheet docs/figures/quality-rejected-odir.png
"""

from __future__ import annotations

import argparse
import csv
import os
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from models.image.decode import DECODE_SIDE
from models.image.quality import QualityMeasures, judge, measure
from service.inference.imaging import decode_rgb
from support.shared_data import ODIR

CATEGORIES = ("normal_fundus", "dr_keyword", "other_non_dr")


def _measure(path: str) -> dict[str, float | str]:
    data = Path(path).read_bytes()
    rgb = decode_rgb(data, max_pixels=50_000_000, max_bytes=len(data) + 1, size=DECODE_SIDE)
    return {"image": path, **measure(rgb).as_dict()}


def measures_table(labels: Path, out_csv: Path, workers: int, sample: int | None = None) -> list[dict[str, str]]:
    """Measure the images of ``labels`` (ODIR labels.csv) once; rows of labels + measures, cached in ``out_csv``.

    ``sample``: that many eyes per category (seeded), else every eye.
    """
    with labels.open(newline="") as f:
        rows = list(csv.DictReader(f))
    if sample is not None:
        rng = np.random.default_rng(0)
        picked = []
        for cat in CATEGORIES:
            members = [r for r in rows if r["category"] == cat]
            picked += [members[i] for i in sorted(rng.choice(len(members), min(sample, len(members)), replace=False))]
        rows = picked
    if not out_csv.is_file():
        paths = [str(labels.parent / r["image"]) for r in rows]
        with ProcessPoolExecutor(workers) as pool:
            measured = list(pool.map(_measure, paths, chunksize=32))
        out_csv.parent.mkdir(parents=True, exist_ok=True)
        with out_csv.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=[*rows[0].keys(), *list(measured[0])[1:]])
            writer.writeheader()
            for r, m in zip(rows, measured, strict=True):
                writer.writerow({**r, **{k: v for k, v in m.items() if k != "image"}})
    with out_csv.open(newline="") as f:
        return list(csv.DictReader(f))


def to_measures(row: dict[str, str]) -> QualityMeasures:
    f = {k: float(v) for k, v in row.items() if k in QualityMeasures.__dataclass_fields__ and k != "has_circle"}
    return QualityMeasures(
        has_circle=row["has_circle"] in ("1.0", "True", "1"),
        channel_mean=(float(row["mean_r"]), float(row["mean_g"]), float(row["mean_b"])),
        channel_std=(float(row["std_r"]), float(row["std_g"]), float(row["std_b"])),
        **{k: v for k, v in f.items() if k not in ("channel_mean", "channel_std")},
    )


def accept_table(rows: list[dict[str, str]]) -> str:
    lines = ["| category | eyes | gradable | share | rejections (reason: count) |", "|---|---|---|---|---|"]
    for cat in (*CATEGORIES, "all"):
        sel = [r for r in rows if cat in ("all", r["category"])]
        reports = [judge(to_measures(r)) for r in sel]
        ok = sum(rep.gradable for rep in reports)
        reasons = Counter(";".join(rep.issues) for rep in reports if not rep.gradable)
        listed = ", ".join(f"{k} {v}" for k, v in reasons.most_common()) or "-"
        lines.append(f"| {cat} | {len(sel)} | {ok} | {100 * ok / max(len(sel), 1):.1f} % | {listed} |")
    return "\n".join(lines)


def contact_sheet(rows: list[dict[str, str]], labels: Path, out: Path, *, limit: int = 48, tile: int = 160) -> int:
    """Rejected normal and DR eyes, each with its reasons; returns how many were rejected in all."""
    rejected = []
    for r in rows:
        if r["category"] == "other_non_dr":
            continue
        rep = judge(to_measures(r))
        if not rep.gradable:
            rejected.append((r, rep.issues))
    cols = 8
    shown = rejected[:limit]
    n_rows = max(1, (len(shown) + cols - 1) // cols)
    sheet = Image.new("RGB", (cols * tile, n_rows * (tile + 28)), "white")
    draw = ImageDraw.Draw(sheet)
    for i, (r, issues) in enumerate(shown):
        with Image.open(labels.parent / r["image"]) as im:
            thumb = im.convert("RGB").resize((tile, tile))
        x, y = (i % cols) * tile, (i // cols) * (tile + 28)
        sheet.paste(thumb, (x, y))
        draw.text((x + 2, y + tile + 1), f"{r['category'][:6]} g{r['dr_grade']}", fill="black")
        draw.text((x + 2, y + tile + 13), ";".join(issues)[:28], fill="darkred")
    out.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(out)
    return len(rejected)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labels", type=Path, default=ODIR / "labels.csv")
    parser.add_argument("--out", type=Path, default=Path("runs/quality-odir"), help="folder of measures.csv")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--sheet", type=Path, default=None, help="write a contact sheet of rejected eyes here")
    parser.add_argument("--sample", type=int, default=None, help="eyes per category (seeded); default: every eye")
    args = parser.parse_args()
    name = "measures.csv" if args.sample is None else f"measures-sample{args.sample}.csv"
    rows = measures_table(args.labels, args.out / name, args.workers, args.sample)
    print(accept_table(rows))
    per_measure: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r["category"] != "other_non_dr":
            for k in ("sharpness", "red_share", "red_over_green", "fov_iou", "fov_inlier_share", "mean_luma"):
                per_measure[k].append(float(r[k]))
    for k, v in per_measure.items():
        q = np.percentile(v, [1, 5, 50])
        print(f"{k}: 1 % {q[0]:.3g}, 5 % {q[1]:.3g}, median {q[2]:.3g}")
    if args.sheet:
        n = contact_sheet(rows, args.labels, args.sheet)
        print(f"wrote {args.sheet} ({n} rejected normal/DR eyes, first 48 shown)")


if __name__ == "__main__":
    main()
