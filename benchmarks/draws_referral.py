"""Referral by uncertainty from saved draws: each model alone and their ensemble, against random referral.

Reads the ``[S, N]`` draws that training saved (``<run>/eval_val/draws.npz``, ``eval_test/draws.npz``) for
models that scored the same images, and prints, for each model and for the ensemble of all of them (their
draws stacked: ``training.evaluation.ensemble``), the AUC and ECE on every image and the kept-eye AUC after
referring 10/20/30/50 % of the images by mutual information, minus the same after random referral and after
referral by predictive entropy, with paired bootstrap 95 % intervals; then the screening question: how many
non-referable eyes each deferral signal (none, MI, predictive entropy) lets the operating point's rule answer
automatically at the same bound on missed referable eyes. No model is run again.

Example::

    .venv/bin/python benchmarks/draws_referral.py --draws 256=runs/a/eval_val/draws.npz \\
        512=runs/b/eval_val/draws.npz --bootstrap 500
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from training.evaluation.ensemble import SavedDraws, evaluate_ensemble, load_draws, stack_members
from training.evaluation.operating_point import screening_operating_point
from training.evaluation.paired import PairedDifference
from training.evaluation.uncertainty import mc_uncertainty

FRACTIONS = ("10 %", "20 %", "30 %", "50 %")


def _cells(d: PairedDifference) -> str:
    """The differences at the fractions after 0 %, each with its interval."""
    return " | ".join(f"{x:+.3f} ({lo:+.3f}, {hi:+.3f})"
                      for x, lo, hi in list(zip(d.difference, d.ci_low, d.ci_high, strict=True))[1:])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draws", nargs="+", required=True, metavar="NAME=PATH", help="one saved draws.npz per model")
    ap.add_argument("--bootstrap", type=int, default=500, help="paired bootstrap resamples")
    ap.add_argument("--max-missed", type=float, default=0.03,
                    help="the operating point's bound on referable eyes answered no_referable_dr")
    args = ap.parse_args(argv)
    models: dict[str, SavedDraws] = {}
    for item in args.draws:
        name, _, path = item.partition("=")
        if not path:
            ap.error(f"--draws takes NAME=PATH, got {item!r}")
        models[name] = load_draws(path)
    sets = [(name, [draws]) for name, draws in models.items()]
    if len(models) > 1:
        sets.append((" + ".join(models), list(models.values())))
    print("| model | images | AUC | ECE | kept-eye AUC, MI − random: " + " | ".join(FRACTIONS)
          + " | MI − predictive entropy: " + " | ".join(FRACTIONS) + " |")
    print("|---" * (4 + 2 * len(FRACTIONS)) + "|")
    for name, members in sets:
        report = evaluate_ensemble(members, n_bootstrap=args.bootstrap)
        summary = report.calibration_summary()["validation"]
        diffs = {d.b: d for d in report.paired_differences if d.metric == "auc" and d.a == "mutual_information"}
        print(f"| {name} | {members[0].probs.shape[1]} | {summary['auc']:.3f} | {summary['ece']:.3f} | "
              f"{_cells(diffs['random'])} | {_cells(diffs['predictive_entropy'])} |")
    print()
    print(f"Non-referable eyes answered no_referable_dr at most {args.max_missed:.0%} of referable eyes missed "
          "(the screening operating point's rule, training.evaluation.operating_point), deferring by each signal:")
    print("| model | no deferral | deferral by MI (deferred) | deferral by predictive entropy (deferred) |")
    print("|---|---|---|---|")
    for name, members in sets:
        unc = mc_uncertainty(stack_members(members).probs)
        labels = members[0].labels
        cells = []
        for signal in (np.zeros_like(unc.mutual_information), unc.mutual_information, unc.predictive_entropy):
            op = screening_operating_point(unc.probability, signal, labels, max_missed_share=args.max_missed)
            cells.append(f"{op.auto_negative_share:.1%}" + (f" ({op.uncertain_share:.1%})" if signal.any() else ""))
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
