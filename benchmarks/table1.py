"""Seed 001 Table 1 on our SYNTHETIC benchmark: radial vs MFVI vs MC dropout vs deterministic vs ensembles.

One command makes the synthetic data, fits every model on the same data, split and budget, scores the
test images and the real IDRiD photographs (out-of-distribution check) and writes a markdown table::

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/table1.py --scale tiny     # minutes on a CPU
    python benchmarks/table1.py --scale paper                                  # width 16, 128 px, 8,000 images
    python benchmarks/table1.py --scale paper --epochs 8                       # the same, 8 epochs per model

Resumable: a finished run (its test draws and OOD draws saved, and trained for ``--epochs``) is skipped,
a half-trained one resumes exactly from its checkpoint, so rerunning the same command continues; a larger
``--epochs`` continues every finished run from its checkpoint and scores it again (copy the runs folder
first, or pass another ``--runs-dir``, to keep the shorter table). ``--runs`` fits a subset, so two
processes of one thread each can share a 2-core machine (the last one to finish writes the table). Data go
to ``data/table1-<scale>`` and runs to ``runs/table1-<scale>`` (both git-ignored); the table is written to
``runs/table1-<scale>/table1.md``, its figure to ``table1.png`` and the numbers to ``results.json`` there.

Runs: radial and deterministic with weight seeds 0, 1, 2 (the ensembles' members, and the seed-to-seed
spread of the single models), MFVI without tweaks (no NLL pre-training, ρ0 = −4), MFVI with the tweaks
(one NLL-only epoch on the means, ρ0 = −9, early stopping = the best epoch by validation NLL, which every
run uses), MC dropout. All share ``--split-seed 0``. Every number is on synthetic images and says nothing
about patients; the machine and its load go with any figure quoted from here.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from support.shared_data import IDRID as SHARED_IDRID  # noqa: E402
from training.cli import main as train_main  # noqa: E402
from training.config import TrainConfig  # noqa: E402
from training.data.photos import PhotoDataset, list_photos  # noqa: E402
from training.evaluation import evaluate_predictions, mc_uncertainty  # noqa: E402
from training.evaluation.ensemble import (  # noqa: E402
    DRAWS_FILENAME,
    SavedDraws,
    load_draws,
    method_differences,
    save_draws,
    stack_members,
)
from training.evaluation.ood import ood_auroc  # noqa: E402
from training.evaluation.plots import plot_method_comparison  # noqa: E402
from training.loop import BEST_WEIGHTS, build_model  # noqa: E402
from training.predict import is_bayesian, mc_probabilities  # noqa: E402
from training.synthetic.dataset import generate_dataset  # noqa: E402

IDRID = SHARED_IDRID  # $RADSCREEN_SHARED_DATA/idrid-lesion-54, default the shared/ folder beside the checkout
FRACTIONS = (0.0, 0.1, 0.2, 0.3, 0.5)
MI, ENTROPY = "mutual_information", "predictive_entropy"


@dataclass(frozen=True)
class Scale:
    n_images: int
    size: int
    width: int
    epochs: int
    batch_size: int = 16
    eval_samples: int = 4  # per-epoch validation draws (the final evaluation uses the 16 serving draws)
    n_bootstrap: int = 200


SCALES = {"tiny": Scale(n_images=1500, size=64, width=8, epochs=4),
          "paper": Scale(n_images=8000, size=128, width=16, epochs=20, eval_samples=8),
          # a pipeline check only (a minute or two): too small for any figure to mean anything
          "smoke": Scale(n_images=200, size=32, width=2, epochs=2, eval_samples=2, n_bootstrap=20)}


@dataclass(frozen=True)
class Run:
    name: str
    model: str
    seed: int
    extra: tuple[str, ...] = ()


# ordered so that an interrupted table already has one run of every method
RUNS = (
    Run("radial-s0", "radial_vgg16_star", 0),
    Run("det-s0", "deterministic_vgg16_star", 0),
    Run("mfvi", "gaussian_vgg16_star", 0, ("--nll-epochs", "0", "--rho-init", "-4")),
    Run("mfvi-tweaks", "gaussian_vgg16_star", 0, ("--nll-epochs", "1", "--rho-init", "-9")),
    Run("dropout", "dropout_vgg16_star", 0),
    Run("radial-s1", "radial_vgg16_star", 1),
    Run("det-s1", "deterministic_vgg16_star", 1),
    Run("radial-s2", "radial_vgg16_star", 2),
    Run("det-s2", "deterministic_vgg16_star", 2),
)
# table rows: (label, member runs, referral / OOD score)
ROWS = (
    ("Radial BNN", ("radial-s0",), MI),
    ("MFVI, no tweaks", ("mfvi",), MI),
    ("MFVI + tweaks", ("mfvi-tweaks",), MI),
    ("MC dropout", ("dropout",), MI),
    ("Deterministic", ("det-s0",), ENTROPY),
    ("Deep ensemble ×3", ("det-s0", "det-s1", "det-s2"), MI),
    ("Radial ensemble ×3", ("radial-s0", "radial-s1", "radial-s2"), MI),
)
SPREAD = (("Radial BNN, single", ("radial-s0", "radial-s1", "radial-s2"), MI),
          ("Deterministic, single", ("det-s0", "det-s1", "det-s2"), ENTROPY))
BASELINE = "Deterministic"


def make_data(root: Path, scale: Scale) -> Path:
    """The synthetic data set (skipped when it is already there with the same settings)."""
    info = root / "dataset.json"
    if info.is_file():
        meta = json.loads(info.read_text())
        if (meta.get("n_images"), meta.get("size"), meta.get("seed")) == (scale.n_images, scale.size, 1):
            return root
        raise SystemExit(f"{root} holds another data set ({meta.get('n_images')} images at {meta.get('size')} px); "
                         "remove it or use another --data-dir")
    print(f"synthesising {scale.n_images} images at {scale.size} px into {root}", flush=True)
    generate_dataset(root, n_images=scale.n_images, seed=1, size=scale.size, ungradable_fraction=0.0, workers=1)
    return root


def fit_argv(run: Run, data: Path, out: Path, scale: Scale) -> list[str]:
    return ["fit", "--data", str(data), "--out", str(out), "--model", run.model, "--width", str(scale.width),
            "--input-size", str(scale.size), "--epochs", str(scale.epochs), "--batch-size", str(scale.batch_size),
            "--seed", str(run.seed), "--split-seed", "0", "--eval-samples", str(scale.eval_samples),
            "--grad-sd-samples", "0", "--device", "cpu", "--no-progress", *run.extra]


def score_photos(run_dir: Path, photos: PhotoDataset) -> SavedDraws:
    """The run's best weights through the same draws as its test evaluation, on the IDRiD photographs."""
    cfg = TrainConfig.load(run_dir / "config.json")
    stats = json.loads((run_dir / "data.json").read_text())
    model = build_model(cfg)
    model.load_state_dict(load_file(str(run_dir / BEST_WEIGHTS)))
    draws = cfg.serving_draws() if is_bayesian(model) else replace(cfg.serving_draws(), head_draws=1)
    probs, _ = mc_probabilities(model, photos, mean=stats["mean"], std=stats["std"], draws=draws)  # [S, 54]
    path = save_draws(run_dir / "ood_idrid" / DRAWS_FILENAME, probs, np.zeros(probs.shape[1], np.int64),
                      [p.name for p in photos.paths])
    return load_draws(path)


def run_all(scale: Scale, data: Path, runs_dir: Path, photos: PhotoDataset, only: set[str] | None = None) -> None:
    for run in RUNS:
        if only is not None and run.name not in only:
            continue
        out = runs_dir / run.name
        done = out / "table1_run.json"
        if run_done(out, scale.epochs):
            print(f"{run.name}: done, skipped", flush=True)
            continue
        resumed = (out / "checkpoint.pt").is_file()
        print(f"{run.name}: fitting ({'resuming' if resumed else 'new'})", flush=True)
        started = time.monotonic()
        if train_main(fit_argv(run, data, out, scale)) != 0:
            raise SystemExit(f"{run.name}: radscreen-train fit failed (its message is above)")
        fit_seconds = time.monotonic() - started
        score_photos(out, photos)
        done.write_text(json.dumps({"fit_seconds": fit_seconds, "resumed": resumed,
                                    "total_seconds": time.monotonic() - started}, indent=2) + "\n")
        print(f"{run.name}: {fit_seconds:.0f} s", flush=True)


def _score(draws: SavedDraws, strategy: str) -> np.ndarray:
    unc = mc_uncertainty(draws.probs)
    return unc.mutual_information if strategy == MI else unc.predictive_entropy  # [N]


def row_metrics(runs_dir: Path, members: tuple[str, ...], strategy: str, n_bootstrap: int) -> dict[str, Any]:
    """Everything one table row shows, from the members' saved draws (stacked for an ensemble)."""
    test = stack_members([load_draws(runs_dir / m / "eval_test" / DRAWS_FILENAME) for m in members])
    ood = stack_members([load_draws(runs_dir / m / "ood_idrid" / DRAWS_FILENAME) for m in members])
    report = evaluate_predictions(test.probs, test.labels, n_bootstrap=n_bootstrap, seed=0)
    curve, rand = report.curves[strategy], report.curves["random"]  # type: ignore[index]
    at = [curve.fractions.index(f) for f in FRACTIONS]
    s_test, s_ood = _score(test, strategy), _score(ood, strategy)
    times = [json.loads((runs_dir / m / "table1_run.json").read_text()) for m in members]
    # training time from the runs' histories: every epoch, whichever call (or session) trained it
    epoch_seconds = [row["seconds"] for m in members
                     for row in json.loads((runs_dir / m / "history.json").read_text()) if row["epoch"] >= 1]
    return {
        "members": list(members), "score": strategy, "n_test": report.n_images, "n_draws": report.n_predictions,
        "auc": [curve.auc[i] for i in at], "auc_se": [curve.auc_se[i] for i in at],
        "accuracy": [curve.accuracy[i] for i in at], "accuracy_se": [curve.accuracy_se[i] for i in at],
        "random_auc": [rand.auc[i] for i in at], "random_auc_se": [rand.auc_se[i] for i in at],
        "random_accuracy": [rand.accuracy[i] for i in at], "ece": report.ece,
        "ood_auroc": ood_auroc(s_test, s_ood), "median_score_test": float(np.median(s_test)),
        "median_score_idrid": float(np.median(s_ood)),
        "idrid_referable_share": float((mc_uncertainty(ood.probs).probability >= 0.5).mean()),
        "seconds": float(sum(epoch_seconds)), "median_epoch_seconds": float(np.median(epoch_seconds)),
        "resumed": any(t["resumed"] for t in times),
    }


def _pm(v: float, se: float) -> str:
    return f"{v:.3f} ± {se:.3f}" if math.isfinite(se) else f"{v:.3f}"


def render(results: dict[str, Any], scale_name: str, scale: Scale) -> str:
    rows, spread, diffs = results["rows"], results["spread"], results["differences"]
    pct = " | ".join(f"{int(f * 100)} %" for f in FRACTIONS)
    sep = "|---" * (len(FRACTIONS) + 1) + "|"
    n_test = next(iter(rows.values()))["n_test"]
    out = [f"SYNTHETIC benchmark, scale `{scale_name}`: VGG-16* width {scale.width}, {scale.size} px, "
           f"{scale.n_images} images (split 70/15/15 by patient, split seed 0; {n_test} test images), "
           f"{scale.epochs} epochs, batch {scale.batch_size}; ± = bootstrap SE ({scale.n_bootstrap} resamples).",
           "", "**AUC on the retained test images, by share referred** (by MI; deterministic: by predictive entropy)",
           "", f"| method | {pct} |", sep]
    out += [f"| {k} | " + " | ".join(_pm(v, s) for v, s in zip(r["auc"], r["auc_se"], strict=True)) + " |"
            for k, r in rows.items()]
    out += [f"| {k} (mean ± SD, 3 seeds) | " + " | ".join(f"{m:.3f} ± {s:.3f}" for m, s in
                                                           zip(r["auc_mean"], r["auc_sd"], strict=True)) + " |"
            for k, r in spread.items()]
    out += ["", "**Accuracy on the retained test images, by share referred**", "", f"| method | {pct} |", sep]
    out += [f"| {k} | " + " | ".join(_pm(v, s) for v, s in zip(r["accuracy"], r["accuracy_se"], strict=True)) + " |"
            for k, r in rows.items()]
    out += [f"| {k} (mean ± SD, 3 seeds) | " + " | ".join(f"{m:.3f} ± {s:.3f}" for m, s in
                                                           zip(r["accuracy_mean"], r["accuracy_sd"], strict=True))
            + " |" for k, r in spread.items()]
    out += ["", "**Random referral** (AUC / accuracy on the retained images, same models)", "",
            f"| method | {pct} |", sep]
    out += [f"| {k} | " + " | ".join(f"{a:.3f} / {c:.3f}" for a, c in
                                     zip(r["random_auc"], r["random_accuracy"], strict=True)) + " |"
            for k, r in rows.items()]
    out += ["", "**Calibration, out-of-distribution signal (IDRiD photographs vs synthetic test images), cost**", "",
            "| method | ECE | OOD AUROC | median score test / IDRiD (nat) | IDRiD called referable | draws | "
            "training time, s (median per epoch) |", "|---|---|---|---|---|---|---|"]
    for k, r in rows.items():
        out.append(f"| {k} | {r['ece']:.3f} | {r['ood_auroc']:.3f} | {r['median_score_test']:.2e} / "
                   f"{r['median_score_idrid']:.2e} | {r['idrid_referable_share']:.0%} | {r['n_draws']} | "
                   f"{r['seconds']:.0f} ({r['median_epoch_seconds']:.0f}) |")
    for k, r in spread.items():
        out.append(f"| {k} (mean ± SD, 3 seeds) | {r['ece_mean']:.3f} ± {r['ece_sd']:.3f} | "
                   f"{r['ood_auroc_mean']:.3f} ± {r['ood_auroc_sd']:.3f} | | | | |")
    out += ["", f"**Method − {BASELINE}** (AUC on the retained images; paired bootstrap on the same test images, "
            f"{results['n_bootstrap_paired']} resamples, 95 % interval)", "", f"| method | {pct} |", sep]
    for k, d in diffs.items():
        out.append(f"| {k} | " + " | ".join(f"{v:+.3f} [{lo:+.3f}, {hi:+.3f}]" for v, lo, hi in
                                             zip(d["difference"], d["ci_low"], d["ci_high"], strict=True)) + " |")
    return "\n".join(out) + "\n"


def trained_epochs(run_dir: Path) -> list[int]:
    """The epochs a run has trained (1..N), from its history; [] before its first epoch ends."""
    path = run_dir / "history.json"
    history = json.loads(path.read_text()) if path.is_file() else []
    return sorted(row["epoch"] for row in history if row["epoch"] >= 1)


def run_done(run_dir: Path, epochs: int) -> bool:
    """Fitted for exactly ``epochs`` epochs, with its test draws scored and its IDRiD draws saved."""
    return ((run_dir / "table1_run.json").is_file() and (run_dir / "ood_idrid" / DRAWS_FILENAME).is_file()
            and trained_epochs(run_dir) == list(range(1, epochs + 1)))


def check_budget(runs_dir: Path, epochs: int) -> None:
    """Every run of the table must have trained the same number of epochs (same budget per model).

    Counted from the run's history (epochs 1..N; a warm start's epoch-0 row is not training), not from its
    config.json, which keeps the plan the run was started with when a resume stops it earlier."""
    wrong = {}
    for run in RUNS:
        trained = trained_epochs(runs_dir / run.name)
        if trained != list(range(1, epochs + 1)):
            wrong[run.name] = f"trained epochs {trained[0] if trained else '-'}..{trained[-1] if trained else '-'}"
    if wrong:
        raise SystemExit(f"not the same budget ({epochs} epochs) for every run: "
                         + "; ".join(f"{k}: {v}" for k, v in wrong.items()))


def summarise(runs_dir: Path, scale: Scale) -> dict[str, Any]:
    rows = {label: row_metrics(runs_dir, members, strategy, scale.n_bootstrap) for label, members, strategy in ROWS}
    spread: dict[str, Any] = {}
    for label, members, strategy in SPREAD:
        singles = [row_metrics(runs_dir, (m,), strategy, scale.n_bootstrap) for m in members]
        entry: dict[str, Any] = {"members": list(members)}
        for key in ("auc", "accuracy", "ece", "ood_auroc"):
            values = np.array([s[key] for s in singles], np.float64)  # [seeds] or [seeds, F]
            entry[f"{key}_mean"] = values.mean(axis=0).tolist()
            entry[f"{key}_sd"] = values.std(axis=0, ddof=1).tolist()
        spread[label] = entry
    tests = {label: stack_members([load_draws(runs_dir / m / "eval_test" / DRAWS_FILENAME) for m in members])
             for label, members, _ in ROWS}
    paired = method_differences(tests, baseline=BASELINE, scores={label: s for label, _, s in ROWS},
                                fractions=FRACTIONS, n_bootstrap=scale.n_bootstrap, seed=0)
    differences = {k: {"difference": list(v["auc"].difference), "ci_low": list(v["auc"].ci_low),
                       "ci_high": list(v["auc"].ci_high)} for k, v in paired.items()}
    return {"rows": rows, "spread": spread, "differences": differences, "n_bootstrap_paired": scale.n_bootstrap}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", choices=sorted(SCALES), default="tiny")
    parser.add_argument("--data-dir", default=None, help="synthetic data folder (default: data/table1-<scale>)")
    parser.add_argument("--runs-dir", default=None, help="runs folder (default: runs/table1-<scale>)")
    parser.add_argument("--runs", nargs="+", choices=[r.name for r in RUNS], default=None,
                        help="fit only these runs (e.g. split the nine between two processes of one thread "
                             "each); the table is written once every run is done")
    parser.add_argument("--epochs", type=int, default=None,
                        help="epochs per model instead of the scale's (the same for every run: the table refuses "
                             "runs fitted for another number; a half-trained run resumes and stops there)")
    args = parser.parse_args(argv)
    scale = SCALES[args.scale]
    if args.epochs is not None:
        scale = replace(scale, epochs=args.epochs)
    if not IDRID.is_dir():
        raise SystemExit(f"the IDRiD photographs are not at {IDRID} (shared/ beside the checkout); "
                         "the OOD column needs them")
    data = make_data(Path(args.data_dir or ROOT / "data" / f"table1-{args.scale}"), scale)
    runs_dir = Path(args.runs_dir or ROOT / "runs" / f"table1-{args.scale}")
    runs_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    photos = PhotoDataset(list_photos(IDRID), size=scale.size)
    run_all(scale, data, runs_dir, photos, set(args.runs) if args.runs else None)
    missing = [r.name for r in RUNS if not run_done(runs_dir / r.name, scale.epochs)]
    if missing:
        print(f"not yet fitted for {scale.epochs} epochs: {', '.join(missing)}; the table is written once every "
              "run is done", flush=True)
        return 0
    check_budget(runs_dir, scale.epochs)
    results = summarise(runs_dir, scale)
    results.update({"scale": args.scale, "torch": torch.__version__, "threads": torch.get_num_threads(),
                    "machine": platform.processor() or platform.machine(),
                    "this_call_seconds": time.monotonic() - started})
    table = render(results, args.scale, scale)
    (runs_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (runs_dir / "table1.md").write_text(table)
    plot_method_comparison(results["rows"], FRACTIONS, runs_dir / "table1.png",
                           f"SYNTHETIC benchmark ({args.scale}: VGG-16* width {scale.width}, {scale.size} px, "
                           f"{scale.epochs} epochs): referral by MI (deterministic: predictive entropy)")
    print(table)
    print(f"this call: {results['this_call_seconds']:.0f} s; torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s); wrote {runs_dir / 'table1.md'}, table1.png and results.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
