"""Which validation rule for the decision threshold keeps the test share of missed referable eyes under the
product's 5 % target, and what each costs in eyes answered automatically.

The operating point (``training.evaluation.operating_point``) takes the largest decision threshold that misses at
most ``max_missed_share`` of the referable validation eyes. This scores an artifact's validation and test patients
of each source with its serving draws (the service's preprocessing; every eye, without the quality gate), chooses
the operating point on the pooled validation eyes under the rules of ``training.evaluation.operating_rules``
(point shares of 3, 2 and 1 %; the largest share whose one-sided 95 % Clopper-Pearson bound is at most the 5 %
target), and applies each to the test eyes.

Printed as a markdown table, written with every eye's p̄, MI, label, split and source to ``--out``.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/operating_rules.py --artifact models/default \\
        --run <run dir holding the split's config.json> --manifest <odir-eyepacs manifest> --out <out>
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from training.evaluation.operating_rules import Eyes, rule_rows, table


def score_eyes(artifact_dir: Path | None, run: Path, manifest: Path, which: str, cache: Path) -> Eyes:
    from benchmarks.screening_eval import manifest_rows, odir_rows, score
    from models.artifact import load_artifact
    from training.evaluation.uncertainty import mc_uncertainty

    artifact = load_artifact(artifact_dir)
    parts = {"odir": odir_rows(run, which), "eyepacs": manifest_rows(manifest, run, which, "eyepacs")}
    probability, mi, label, source = [], [], [], []
    for name, rows in parts.items():
        u = mc_uncertainty(score(artifact, rows, cache))
        probability.append(u.probability)
        mi.append(u.mutual_information)
        label.append(np.array([int(r.grade >= 2) for r in rows]))
        source.append(np.array([name] * len(rows)))
    return Eyes(*(np.concatenate(a) for a in (probability, mi, label, source)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--artifact", type=Path, default=None, help="artifact directory (default: the embedded model)")
    parser.add_argument("--run", type=Path, required=True, help="a run whose config.json holds the patient split")
    parser.add_argument("--manifest", type=Path, required=True, help="the multi-source manifest (EyePACS rows)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    cache = args.out / "cache"
    val, test = (score_eyes(args.artifact, args.run, args.manifest, which, cache) for which in ("val", "test"))
    np.savez(args.out / "eyes.npz", **{f"{side}_{k}": getattr(e, k) for side, e in (("val", val), ("test", test))
                                       for k in ("probability", "mutual_information", "label", "source")})
    rows = rule_rows(val, test)
    (args.out / "rules.json").write_text(json.dumps(rows, indent=2) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
