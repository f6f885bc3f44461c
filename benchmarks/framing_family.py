"""The quality gate on the framing family: every framing, size and finish of real photographs, and their degradations.

Renders (``support.framing_family``, ``support.framings``) each sampled photograph of the shared data in every
framing (camera frame, padded circle, stretched ODIR-style, tight square clipped on four sides) x size (224-512
px) and framing x finish (JPEG q60-75, dark ring, notch, burned-in text), and one degradation of it (blur,
darkness, overexposure, eyelid shadow) in the same renders; generated non-fundus images likewise. The original's
verdict is the truth: a gradable original's renders must be accepted, a degraded render refused for its reason.

Photographs are split by patient into ``tune`` (thresholds were chosen looking at it) and ``report`` (what the
results page quotes); ``--split`` picks one. Prints markdown tables for docs/results-quality-gate.md: the
originals per set, and accept / refused-for-its-reason per framing x size (or finish) x truth. Rows go to
``--out`` as CSV; images are never written.

Example::

    PYTHONPATH=$PWD nice -n 10 .venv/bin/python benchmarks/framing_family.py --split report --per-set 40 \\
        --nonfundus 28 --workers 2 --out runs/framing-family/report.csv
"""

from __future__ import annotations

import argparse
import csv
import os
import resource
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path

from support.framing_family import (
    DEGRADED,
    Photo,
    judge_nonfundus,
    judge_photograph,
    photographs,
    refused_for_reason,
)
from support.framings import FINISHES, FRAMINGS, SIZES

TRUTHS = ("gradable", *sorted(DEGRADED), "non_fundus")
TARGET = {"gradable": 0.97}  # every other truth: 0.95 refused for its reason


def _photo_rows(indexed: tuple[int, Photo], originals_only: bool) -> list[dict[str, str]]:
    index, photo = indexed
    return judge_photograph(photo, index, degrade=not originals_only, family_too=not originals_only)


def _ok(row: dict[str, str]) -> bool:
    issues = row["issues"].split(";") if row["issues"] else []
    return not issues if row["truth"] == "gradable" else refused_for_reason(row["truth"], issues)


def originals_table(rows: list[dict[str, str]]) -> str:
    """Per set and category: how many originals the gate finds gradable, and why it refuses the rest."""
    groups: dict[tuple[str, str], list[dict[str, str]]] = defaultdict(list)
    for r in rows:
        if r["framing"] == "original":
            groups[(r["set"], r["truth"])].append(r)
    lines = ["| set | category | photographs | gradable | share | refusals (issues: count) |",
             "|---|---|---|---|---|---|"]
    for (name, category), members in sorted(groups.items()):
        ok = sum(not r["issues"] for r in members)
        reasons: dict[str, int] = defaultdict(int)
        for r in members:
            if r["issues"]:
                reasons[r["issues"]] += 1
        listed = ", ".join(f"{k} {v}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])) or "-"
        lines.append(f"| {name} | {category} | {len(members)} | {ok} | {100 * ok / len(members):.1f} % | {listed} |")
    return "\n".join(lines)


def family_table(rows: list[dict[str, str]]) -> tuple[str, list[str]]:
    """Rows framing x (size or finish), columns truth: share accepted (gradable) or refused for its reason.

    Returns the table and the cells below target.
    """
    cells: dict[tuple[str, str, str], list[bool]] = defaultdict(list)
    for r in rows:
        if r["framing"] == "original":
            continue
        variant = r["size"] if r["finish"] == "plain" else r["finish"]
        cells[(r["framing"], variant, r["truth"])].append(_ok(r))
    header = "| framing | size / finish | " + " | ".join(TRUTHS) + " |"
    lines = [header, "|---|---|" + "---|" * len(TRUTHS)]
    missed = []
    for framing in FRAMINGS:
        for variant in (*map(str, SIZES), *FINISHES[1:]):
            out = []
            for truth in TRUTHS:
                hits = cells.get((framing, variant, truth), [])
                if not hits:
                    out.append("-")
                    continue
                share = sum(hits) / len(hits)
                flag = "" if share >= TARGET.get(truth, 0.95) else " **below**"
                if flag:
                    missed.append(f"{framing} {variant} {truth}: {sum(hits)}/{len(hits)}")
                out.append(f"{sum(hits)}/{len(hits)} ({100 * share:.0f} %){flag}")
            lines.append(f"| {framing} | {variant} | " + " | ".join(out) + " |")
    totals = []
    for truth in TRUTHS:
        hits = [ok for (_, _, t), v in cells.items() if t == truth for ok in v]
        totals.append(f"{sum(hits)}/{len(hits)} ({100 * sum(hits) / max(len(hits), 1):.1f} %)")
    lines.append("| **all** | | " + " | ".join(totals) + " |")
    return "\n".join(lines), missed


def framing_table(rows: list[dict[str, str]]) -> str:
    """Rows framing (every size and finish pooled), columns truth: the targets read per framing."""
    cells: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for r in rows:
        if r["framing"] != "original":
            cells[(r["framing"], r["truth"])].append(_ok(r))
    lines = ["| framing | " + " | ".join(TRUTHS) + " |", "|---|" + "---|" * len(TRUTHS)]
    for framing in FRAMINGS:
        out = []
        for truth in TRUTHS:
            hits = cells.get((framing, truth), [])
            share = sum(hits) / max(len(hits), 1)
            flag = " **below**" if hits and share < TARGET.get(truth, 0.95) else ""
            out.append(f"{sum(hits)}/{len(hits)} ({100 * share:.1f} %){flag}" if hits else "-")
        lines.append(f"| {framing} | " + " | ".join(out) + " |")
    return "\n".join(lines)


def print_tables(rows: list[dict[str, str]], list_refused: bool) -> None:
    """The originals, the family per framing x size or finish, per framing, and the misses."""
    print(originals_table(rows) + "\n")
    if list_refused:
        print("\n".join(f"  {r['set']} {r['truth']} {r['name']}: {r['details']}" for r in rows
                        if r["framing"] == "original" and r["issues"]) + "\n")
    table, missed = family_table(rows)
    print(table + "\n")
    print(framing_table(rows) + "\n")
    print("cells below target: " + ("; ".join(missed) if missed else "none"))
    for line in failures(rows):
        print("  " + line)


def failures(rows: list[dict[str, str]], limit: int = 30) -> list[str]:
    """The first renders that missed their truth, for reading (set, name, render, issues)."""
    return [f"{r['set']} {r['name']} {r['truth']} {r['framing']} {r['size']} {r['finish']}: {r['issues'] or 'accepted'}"
            for r in rows if r["framing"] != "original" and not _ok(r)][:limit]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", choices=("tune", "report", "all"), default="report")
    parser.add_argument("--per-set", type=int, default=40, help="photographs per set (seeded); the family of each")
    parser.add_argument("--originals", type=int, default=None,
                        help="also judge this many more originals per set without a family (cheap: target 3)")
    parser.add_argument("--nonfundus", type=int, default=28, help="generated non-fundus images (in turn per kind)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("runs/framing-family/rows.csv"))
    parser.add_argument("--list-refused", action="store_true",
                        help="print every refused original with its findings (measure, value, threshold)")
    parser.add_argument("--tables-from", type=Path, default=None,
                        help="print the tables of an earlier run's rows CSV (its --out) without judging again")
    args = parser.parse_args()
    if args.tables_from:
        with args.tables_from.open(newline="") as f:
            print_tables(list(csv.DictReader(f)), args.list_refused)
        return
    start = time.perf_counter()
    photos = photographs(args.per_set, args.split, args.seed)
    extra: list[Photo] = []
    if args.originals:
        chosen = {p.path for p in photos}
        extra = [p for p in photographs(args.originals, args.split, args.seed + 100) if p.path not in chosen]
    rows: list[dict[str, str]] = []
    with ProcessPoolExecutor(args.workers) as pool:
        for part in pool.map(partial(_photo_rows, originals_only=False), enumerate(photos)):
            rows += part
        for part in pool.map(partial(_photo_rows, originals_only=True), enumerate(extra)):
            rows += part
        nonfundus = range(args.nonfundus * 2) if args.split == "all" else [
            i for i in range(args.nonfundus * 2) if (i % 2 == 0) == (args.split == "tune")]
        for part in pool.map(judge_nonfundus, nonfundus):
            rows += part
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    renders = sum(r["framing"] != "original" for r in rows)
    print(f"split {args.split}: {len(photos)} photographs with their family, {len(extra)} more originals, "
          f"{len(nonfundus)} non-fundus images; {renders} renders judged; {time.perf_counter() - start:.0f} s wall, "
          f"{usage.ru_utime + usage.ru_stime:.0f} s CPU in workers, peak RSS of a worker "
          f"{usage.ru_maxrss / 1024:.0f} MiB; rows in {args.out}\n")
    print_tables(rows, args.list_refused)


if __name__ == "__main__":
    main()
