"""How the artifact spends its pass budget: network draws × views at equal forward passes, chosen on validation.

The service's work per photograph is ``passes`` = network draws (K) × views (1 = the image as taken, 2 = also
mirrored left-right: test-time flip), ``models.artifact.ServingDraws.passes``; the design fixes it at 16
(``PASS_BUDGET``). Head draws (M per network draw) cost no pass and are kept. This command scores the
validation patients of each source (split as the artifact's training split them, through the service's
preprocessing: ``ManifestDataset`` with the artifact's transform, original files) with every split whose passes
equal the budget (``16 × 1`` and ``8 × 2``) and, as the reference, the artifact's served option, then applies
``training.evaluation.pass_split.choose_pass_split``: per option the AUC and calibration, the value of its MI
as a deferral signal (kept-eye AUC after MI referral minus random, paired bootstrap), the screening operating
point fitted on all validation eyes and **cross-fitted** (fitted on half of the patients, counted on the other
half, repeated), and paired differences against the reference.

Each option's draws are saved to ``--out/draws-K{K}.npz`` (both views; the one-view option is their first
half) and reused by a rerun, so the command resumes. ``--apply DIR`` writes a copy of the artifact that serves
the chosen split with thresholds refitted on its validation draws (``training.reserve``).

Example (figures in docs/results-real-eyes.md, "The pass budget")::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/pass_split.py --artifact models/default \\
        --run <run dir holding the split's config.json> --manifest <odir-eyepacs manifest> --out runs/pass-split
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.screening_eval import manifest_rows
from models.artifact import Artifact, ServingDraws, load_artifact
from models.platform.cpu import detect_cpu
from training.data.dataset import ManifestDataset
from training.data.manifest import ManifestRow
from training.evaluation.ensemble import load_draws, save_draws
from training.evaluation.operating_point import clopper_pearson_upper, outcome_shares, screening_operating_point
from training.evaluation.pass_split import PassOption, choose_pass_split, split_table
from training.evaluation.screening import bootstrap_auc
from training.evaluation.uncertainty import mc_uncertainty
from training.predict import mc_probabilities
from training.reserve import Scored, reserve_artifact

SOURCES = ("odir", "eyepacs")


def eye_id(row: ManifestRow) -> str:
    return f"{row.source}/{row.path.name}"


def draws_for(artifact: Artifact, rows: list[ManifestRow], k: int, out: Path, cache: Path) -> np.ndarray:
    """``[2·K·M, N]``: K network draws of the artifact's seed on both views (first the image as taken),
    read from ``out/draws-K{k}.npz`` when a run before scored them."""
    path = out / f"draws-K{k}.npz"
    out.mkdir(parents=True, exist_ok=True)
    ids = [eye_id(r) for r in rows]
    if path.is_file():
        saved = load_draws(path)
        if list(saved.ids) != ids:
            raise SystemExit(f"{path} holds other images than this split: remove it to score again")
        return saved.probs
    draws = replace(artifact.serving_draws(), mc_samples=k, test_time_flip=True)
    dataset = ManifestDataset(rows, transform=artifact.image_transform()).use_cache(cache, workers=2, progress=True)
    cfg = artifact.config
    start = time.perf_counter()
    probs, labels = mc_probabilities(artifact.build_model(), dataset, mean=cfg.input.mean, std=cfg.input.std,
                                     draws=draws, progress=True)
    print(f"scored {len(rows)} eyes x {k} draws x 2 views in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    save_draws(path, probs, labels.astype(np.int64), ids)
    return probs


def option_probs(scored: np.ndarray, k: int, views: int, head_draws: int) -> np.ndarray:
    """One option's draws from both views' ``[2·K·M, N]``: all of them, or the first view's."""
    return scored if views == 2 else scored[: k * head_draws]


def test_line(option: PassOption, val_labels: np.ndarray, test_probs: np.ndarray, test_labels: np.ndarray,
              max_missed: float) -> str:
    """The option on the test patients at thresholds its validation draws chose: out of sample."""
    v, t = mc_uncertainty(option.probs), mc_uncertainty(test_probs)
    op = screening_operating_point(v.probability, v.mutual_information, val_labels, max_missed_share=max_missed)
    s = outcome_shares(t.probability, t.mutual_information, test_labels, decision_threshold=op.decision_threshold,
                       referral_threshold_mi=op.referral_threshold_mi)
    n_pos = int(test_labels.sum())
    lo, hi = bootstrap_auc(test_labels, t.probability, n_bootstrap=1000, seed=0)[1:]
    return (f"| {option.name} | {option.passes} | {roc_auc_score(test_labels, t.probability):.3f} ({lo:.3f}, "
            f"{hi:.3f}) | {s['missed']} of {n_pos} ({100 * s['missed_share']:.1f} %, upper 95 % "
            f"{100 * clopper_pearson_upper(int(s['missed']), n_pos):.1f} %) | {100 * s['auto_negative_share']:.1f} % | "
            f"{100 * s['uncertain_share']:.1f} % |")


def options_from(artifact: Artifact, scored: dict[int, np.ndarray], budget: int) -> list[PassOption]:
    """Every split at the budget, then the served option as the reference (unless it is one of them)."""
    m = artifact.serving_draws().head_draws
    served = artifact.serving_draws()
    splits = [(budget, 1), (budget // 2, 2)]
    if (served.mc_samples, served.views) not in splits:
        splits.append((served.mc_samples, served.views))
    options = []
    for k, views in splits:
        options.append(PassOption(draws=k, views=views, head_draws=m, probs=option_probs(scored[k], k, views, m),
                                  served=(k, views) == (served.mc_samples, served.views)))
    return options


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifact", default=None, help="artifact directory (default: the embedded model)")
    parser.add_argument("--run", type=Path, required=True, help="run directory holding the split's config.json")
    parser.add_argument("--manifest", type=Path, required=True, help="the multi-source manifest it was split from")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget", type=int, default=16, help="forward passes per photograph (default 16)")
    parser.add_argument("--repeats", type=int, default=200, help="cross-fitting repeats (halves of the patients)")
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--max-missed-share", type=float, default=None,
                        help="the operating point's bound (default: the artifact's own)")
    parser.add_argument("--apply", type=Path, default=None,
                        help="write the artifact re-served with the chosen split here")
    parser.add_argument("--version", default=None, help="version of the --apply artifact")
    parser.add_argument("--test", action="store_true",
                        help="also score the test patients (the chosen split; every split whose draws a run before "
                             "saved under --out/test) and print them at thresholds fitted on validation")
    args = parser.parse_args()
    if args.apply is not None and args.apply.exists() and any(args.apply.iterdir()):
        parser.error(f"--apply {args.apply}: exists and is not empty; give a new directory (nothing is deleted)")
    if args.budget < 2 or args.budget % 2:
        parser.error(f"--budget must be an even number of passes >= 2, got {args.budget}")
    artifact = load_artifact(args.artifact)
    rows = [r for s in SOURCES for r in manifest_rows(args.manifest, args.run, "val", s)]
    args.out.mkdir(parents=True, exist_ok=True)
    ks = sorted({args.budget, args.budget // 2, artifact.serving_draws().mc_samples}, reverse=True)
    scored = {k: draws_for(artifact, rows, k, args.out, args.out / "cache") for k in ks}
    labels = np.array([int(r.referable) for r in rows])
    max_missed = (args.max_missed_share if args.max_missed_share is not None
                  else artifact.calibration.validation["operating_point"]["max_missed_share"])
    choice = choose_pass_split(options_from(artifact, scored, args.budget), labels,
                               patients=[f"{r.source}/{r.patient_id}" for r in rows],
                               sources=[r.source for r in rows], budget=args.budget,
                               max_missed_share=max_missed, repeats=args.repeats, n_bootstrap=args.bootstrap)
    record = {"artifact": f"{artifact.config.name} {artifact.config.version}", "images": len(rows),
              "machine": f"{platform.node()} {detect_cpu().summary()}", **choice.as_dict()}
    (args.out / "pass_split.json").write_text(json.dumps(record, indent=2) + "\n")
    print(split_table(choice))
    options = options_from(artifact, scored, args.budget)
    chosen = next(o for o in options if o.name == choice.chosen)
    test = None
    if args.test or args.apply is not None:
        test_rows = [r for s in SOURCES for r in manifest_rows(args.manifest, args.run, "test", s)]
        test_labels = np.array([int(r.referable) for r in test_rows])
        test_scored = {k: draws_for(artifact, test_rows, k, args.out / "test", args.out / "cache-test")
                       for k in sorted({chosen.draws} | {k for k in ks if (args.out / "test" / f"draws-K{k}.npz")
                                                         .is_file()})}
        print("\nTest patients, at thresholds each split's validation draws chose:\n")
        print("| split | passes | AUC (95 % CI) | referable answered no_referable_dr | non-referable answered "
              "no_referable_dr | deferred |\n| --- | ---: | --- | --- | ---: | ---: |")
        for o in options:
            if o.draws in test_scored:
                print(test_line(o, labels, option_probs(test_scored[o.draws], o.draws, o.views, o.head_draws),
                                test_labels, max_missed))
        test = Scored(option_probs(test_scored[chosen.draws], chosen.draws, chosen.views, chosen.head_draws),
                      test_labels, test_rows)
    if args.apply is not None:
        draws = ServingDraws(mc_samples=chosen.draws, draw_seed=artifact.serving_draws().draw_seed,
                             head_draws=chosen.head_draws, test_time_flip=chosen.views == 2)
        sha = reserve_artifact(artifact, args.apply, draws=draws, val=Scored(chosen.probs, labels, rows), test=test,
                               choice=choice, version=args.version,
                               command=" ".join(["benchmarks/pass_split.py", *sys.argv[1:]]))
        print(f"wrote {args.apply} (sha256 {sha[:12]}…)")


if __name__ == "__main__":
    main()
