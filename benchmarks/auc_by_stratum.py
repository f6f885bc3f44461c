"""Where does a model's AUC go? AUC on subsets of a synthetic test split, and per-grade summaries.

The synthetic generator makes 30 % of grade-2 eyes *subtle*: one or two faint small haemorrhages
(``training.synthetic.lesions``). If a model at a given input size cannot see them, they cap the AUC of
any model at that size, whatever its training. This reads a run's saved serving draws
(``<run>/eval_test/draws.npz``) and the data set's ``metadata.csv`` and prints:

- the AUC (± bootstrap SE) on all images, without the subtle grade-2 eyes, of the subtle grade-2 eyes
  against all non-referable eyes, and of each referable grade against all non-referable eyes;
- per grade 0–4 (and subtle grade 2): images, mean p̄, share called referable (p̄ ≥ 0.5), median MI.

Example (figures in docs/results-training.md, "The synthetic benchmark's ceiling")::

    .venv/bin/python benchmarks/auc_by_stratum.py --draws runs/default-v3/eval_test/draws.npz \\
        --data runs/synth-default
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from training.evaluation import mc_uncertainty
from training.evaluation.ensemble import load_draws
from training.evaluation.strata import group_summaries, subset_auc


def read_metadata(data: Path) -> dict[str, dict[str, str]]:
    with (data / "metadata.csv").open(newline="") as f:
        return {row["image"]: row for row in csv.DictReader(f)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draws", type=Path, required=True, help="a run's eval_test/draws.npz (or eval_val/)")
    ap.add_argument("--data", type=Path, required=True, help="the synthetic data set folder (metadata.csv)")
    ap.add_argument("--n-bootstrap", type=int, default=500)
    args = ap.parse_args(argv)

    draws = load_draws(args.draws)
    meta = read_metadata(args.data)
    try:
        rows = [meta[Path(i).stem] for i in draws.ids]
    except KeyError as exc:
        ap.error(f"{args.draws}: image {exc} is not in {args.data / 'metadata.csv'}; wrong --data?")
    grade = np.array([int(r["level"]) for r in rows])
    subtle = np.array([r["subtle"] == "1" for r in rows])
    labels = draws.labels
    if not np.array_equal(labels, (grade >= 2).astype(np.int64)):
        ap.error("the draws' labels are not grade >= 2 of metadata.csv; wrong --data?")
    unc = mc_uncertainty(draws.probs)
    p = unc.probability

    print(f"{args.draws}: {draws.probs.shape[0]} draws x {len(labels)} images, {int(labels.sum())} referable "
          f"({int(subtle.sum())} subtle grade-2)\n")
    negatives = labels == 0
    subsets = {
        "all images": np.ones_like(subtle),
        "without the subtle grade-2 eyes": ~subtle,
        "subtle grade-2 vs grades 0-1": subtle | negatives,
        "grade 2, not subtle, vs grades 0-1": ((grade == 2) & ~subtle) | negatives,
        "grade 3 vs grades 0-1": (grade == 3) | negatives,
        "grade 4 vs grades 0-1": (grade == 4) | negatives,
        "grade 1 vs grade 0 (not referable: does p̄ rise with lesions?)": grade <= 1,
    }
    print("| subset | referable | not referable | AUC ± SE |\n| --- | ---: | ---: | --- |")
    for name, keep in subsets.items():
        r = subset_auc(p, labels if "grade 1 vs" not in name else (grade == 1).astype(np.int64), keep,
                       n_bootstrap=args.n_bootstrap)
        print(f"| {name} | {r.n_positive} | {r.n_negative} | {r.auc:.3f} ± {r.se:.3f} |")

    group = np.where(subtle, "2 (subtle)", grade.astype(str))
    print("\n| grade | images | mean p̄ | called referable (p̄ ≥ 0.5) | median MI (nat) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for g, s in group_summaries(p, unc.mutual_information, group).items():
        print(f"| {g} | {s.n} | {s.mean_probability:.3f} | {100 * s.called_positive:.1f} % | {s.median_mi:.3g} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
