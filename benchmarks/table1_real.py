"""Seed 001 Table 1 on REAL eyes: radial vs MFVI vs MC dropout vs deterministic vs ensembles, per source.

One command fits every method of ``benchmarks/table1.py`` (the same nine runs: radial and deterministic with
weight seeds 0, 1, 2, MFVI with and without the paper's tweaks, MC dropout) on a multi-source manifest with
one recipe and one budget, scores each source's test patients and writes the table and its figures::

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/table1_real.py --manifest odir-eyepacs.csv \\
        --runs-dir /root/radscreen-table1/runs --cache-dir /root/radscreen-cache/images-128 \\
        --runs radial-s0 mfvi dropout det-s1 det-s2 &          # two processes of one thread each
    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/table1_real.py ... --runs det-s0 mfvi-tweaks radial-s1 radial-s2
    python benchmarks/table1_real.py ... --table-only --figures-dir docs/figures   # the table of what is done

The split is the product's 2.0.0 one (patients split 70/15/15 within each source, split seed 0; the copies of
``--train-only-copy`` train only; training draws weighted by ``--source-weight``). Every run gets the same
width, input size, augmentation, batch, epochs and steps per epoch (``--steps-per-epoch``), and the table
refuses runs trained otherwise. Each run's process CPU seconds (training, per-epoch validation and the final
scoring with the serving draws) are recorded in ``<run>/table1_run.json``.

Resumable: a finished run is skipped, a half-trained one resumes from its checkpoint, so rerunning the same
command continues. The table (``table1_real.md``, ``results.json`` in ``--runs-dir``) is computed from the
runs' saved draws only (``benchmarks/table1_real_rows.py``): ``--table-only`` re-scores every row from its
run directories; a row whose runs are not all finished is listed as unfinished, never estimated.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.table1 import RUNS, Run, trained_epochs  # noqa: E402
from benchmarks.table1_real_figures import (  # noqa: E402
    plot_other_disease,
    plot_referral,
    plot_sigma,
    plot_uncertainty_vs_probability,
)
from benchmarks.table1_real_render import render  # noqa: E402
from benchmarks.table1_real_rows import (  # noqa: E402
    ENTROPY,
    FRACTIONS,
    MI,
    row_differences,
    row_metrics,
    uncertainty_by_eye,
)
from training.cli import main as train_main  # noqa: E402
from training.evaluation.ensemble import DRAWS_FILENAME  # noqa: E402

RUN_RECORD = "table1_run.json"
# (label, member runs, the uncertainty it refers by): MI for the posteriors and MC dropout, predictive entropy
# for the deterministic network and its ensemble (their spread is the members' only, so entropy is their score);
# the radial posterior also by predictive entropy, the other uncertainty the product could serve
ROWS = (
    ("Radial BNN", ("radial-s0",), MI),
    ("Radial BNN, by entropy", ("radial-s0",), ENTROPY),  # the same posterior, referring by total uncertainty
    ("MFVI, no tweaks", ("mfvi",), MI),
    ("MFVI + tweaks", ("mfvi-tweaks",), MI),
    ("MC dropout", ("dropout",), MI),
    ("Deterministic", ("det-s0",), ENTROPY),
    ("Deep ensemble ×3", ("det-s0", "det-s1", "det-s2"), ENTROPY),
    ("Radial ensemble ×3", ("radial-s0", "radial-s1", "radial-s2"), MI),
)
BASELINE = "Radial BNN"
BAYESIAN = ("radial-s0", "radial-s1", "radial-s2", "mfvi", "mfvi-tweaks")


@dataclass(frozen=True)
class Budget:
    """What every run gets: the same network, images and number of optimiser steps."""

    width: int
    input_size: int
    epochs: int
    steps_per_epoch: int
    batch_size: int = 16
    eval_samples: int = 4  # per-epoch validation draws (the final scoring uses the 16 serving draws)
    n_bootstrap: int = 200


BUDGETS = {"cpu": Budget(width=16, input_size=128, epochs=4, steps_per_epoch=200),
           # a pipeline check only (tests): too small for any figure to mean anything
           "smoke": Budget(width=2, input_size=32, epochs=1, steps_per_epoch=1, eval_samples=2, n_bootstrap=20)}


def fit_argv(run: Run, args: argparse.Namespace, out: Path, budget: Budget) -> list[str]:
    """The ``radscreen-train fit`` command of one run: the recipe is the same for all but the method's flags."""
    weights = [a for w in args.source_weight for a in ("--source-weight", w)]
    copies = [a for c in args.train_only_copy for a in ("--train-only-copy", c)]
    return ["fit", "--layout", "manifest", "--data", str(args.manifest), "--out", str(out), "--model", run.model,
            "--width", str(budget.width), "--input-size", str(budget.input_size), "--epochs", str(budget.epochs),
            "--max-steps-per-epoch", str(budget.steps_per_epoch), "--batch-size", str(budget.batch_size),
            "--seed", str(run.seed), "--split-seed", "0", "--split", *map(str, args.split), *copies, *weights,
            "--eval-samples", str(budget.eval_samples), "--grad-sd-samples", "0", "--device", "cpu",
            "--precision", args.precision, "--no-progress", "--checkpoint-every", "50",
            *(["--cache-dir", str(args.cache_dir)] if args.cache_dir else []), *run.extra]


def run_done(run_dir: Path, budget: Budget) -> bool:
    """Fitted with ``budget`` for all its epochs, its validation and test draws saved."""
    record = run_dir / RUN_RECORD
    return (record.is_file() and _trained(json.loads(record.read_text()).get("budget", {})) == _trained(asdict(budget))
            and all((run_dir / f"eval_{s}" / DRAWS_FILENAME).is_file() for s in ("val", "test"))
            and trained_epochs(run_dir) == list(range(1, budget.epochs + 1)))


def _trained(budget: dict[str, Any]) -> dict[str, Any]:
    """The part of a budget that shapes the trained run (the bootstrap size only changes the scoring)."""
    return {k: v for k, v in budget.items() if k != "n_bootstrap"}


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def fit_runs(args: argparse.Namespace, budget: Budget, only: set[str] | None) -> None:
    for run in RUNS:
        if only is not None and run.name not in only:
            continue
        out = args.runs_dir / run.name
        if run_done(out, budget):
            print(f"{run.name}: done, skipped", flush=True)
            continue
        calls_path = out / "table1_calls.json"  # CPU seconds of every call that ended (a killed call is lost)
        calls = json.loads(calls_path.read_text()) if calls_path.is_file() else []
        resumed = (out / "checkpoint.pt").is_file()
        print(f"{run.name}: fitting ({'resuming' if resumed else 'new'})", flush=True)
        cpu0, wall0 = _cpu_seconds(), time.monotonic()
        code = train_main(fit_argv(run, args, out, budget))
        calls.append({"cpu_seconds": _cpu_seconds() - cpu0, "wall_seconds": time.monotonic() - wall0,
                      "resumed": resumed, "exit": code})
        out.mkdir(parents=True, exist_ok=True)
        calls_path.write_text(json.dumps(calls, indent=2) + "\n")
        if code != 0:
            raise SystemExit(f"{run.name}: radscreen-train fit failed (its message is above)")
        epoch_seconds = sum(float(r["seconds"]) for r in json.loads((out / "history.json").read_text())
                            if r["epoch"] >= 1)
        record = {"budget": asdict(budget), "cpu_seconds": sum(c["cpu_seconds"] for c in calls),
                  "wall_seconds": sum(c["wall_seconds"] for c in calls), "epoch_wall_seconds": epoch_seconds,
                  "calls": len(calls), "resumed": any(c["resumed"] for c in calls)}
        (out / RUN_RECORD).write_text(json.dumps(record, indent=2) + "\n")
        print(f"{run.name}: {record['cpu_seconds']:.0f} CPU s", flush=True)


def summarise(runs_dir: Path, budget: Budget) -> dict[str, Any]:
    """Every row whose runs are all done (re-scored from their run directories); the others listed."""
    done = {r.name for r in RUNS if run_done(runs_dir / r.name, budget)}
    rows: dict[str, Any] = {}
    unfinished: dict[str, list[str]] = {}
    for label, members, strategy in ROWS:
        missing = [m for m in members if m not in done]
        if missing:
            unfinished[label] = missing
            continue
        rows[label] = row_metrics(runs_dir, members, strategy, n_bootstrap=budget.n_bootstrap)
        records = [json.loads((runs_dir / m / RUN_RECORD).read_text()) for m in members]
        rows[label]["cpu_seconds"] = sum(r["cpu_seconds"] for r in records)
        rows[label]["epoch_wall_seconds"] = sum(r["epoch_wall_seconds"] for r in records)
    base = next((m, s) for label, m, s in ROWS if label == BASELINE)
    if BASELINE in rows:
        for label, members, strategy in ROWS:
            if label in rows and label != BASELINE:
                rows[label]["vs_radial"] = row_differences(runs_dir, members, strategy, *base,
                                                           n_bootstrap=budget.n_bootstrap)
    return {"rows": rows, "unfinished": unfinished, "budget": asdict(budget), "fractions": list(FRACTIONS),
            "baseline": BASELINE, "runs_done": sorted(done)}


def write_figures(runs_dir: Path, results: dict[str, Any], out: Path, title: str) -> list[Path]:
    rows = results["rows"]
    if not rows:
        return []
    members = {label: (m, s) for label, m, s in ROWS if label in rows}
    eyes = {label: uncertainty_by_eye(runs_dir, m, s) for label, (m, s) in members.items()}
    aurocs = {label: (r["other_vs_normal"] or {}).get("auroc") for label, r in rows.items()}
    paths = [plot_referral(rows, FRACTIONS, out / "table1_real_referral.png", title),
             plot_uncertainty_vs_probability(eyes, out / "table1_real_mi_vs_p.png"),
             plot_other_disease(eyes, aurocs, out / "table1_real_other_disease.png")]
    bayesian = {name: runs_dir / name for name in BAYESIAN if name in results["runs_done"]}
    if bayesian:
        paths.append(plot_sigma(bayesian, out / "table1_real_sigma.png"))
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", type=Path, required=True, help="manifest CSV with source (and copy) columns")
    parser.add_argument("--runs-dir", type=Path, required=True, help="one folder per run, the table and results")
    parser.add_argument("--cache-dir", type=Path, default=None, help="preprocessed images shared by every run")
    parser.add_argument("--budget", choices=sorted(BUDGETS), default="cpu")
    parser.add_argument("--width", type=int, default=None)
    parser.add_argument("--input-size", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--steps-per-epoch", type=int, default=None)
    parser.add_argument("--n-bootstrap", type=int, default=None)
    parser.add_argument("--split", type=float, nargs=3, default=[0.7, 0.15, 0.15], metavar=("TRAIN", "VAL", "TEST"),
                        help="patient split within each source, split seed 0 (the product's 2.0.0 split)")
    parser.add_argument("--source-weight", nargs="*", default=["odir=0.5", "eyepacs=0.5"], metavar="SOURCE=W")
    parser.add_argument("--train-only-copy", nargs="*", default=["stretched-256"], metavar="COPY")
    parser.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto")
    parser.add_argument("--runs", nargs="+", choices=[r.name for r in RUNS], default=None,
                        help="fit only these runs (two processes of one thread each share a 2-core machine)")
    parser.add_argument("--table-only", action="store_true", help="fit nothing: score the finished runs")
    parser.add_argument("--figures-dir", type=Path, default=None, help="where the PNGs go (default: --runs-dir)")
    args = parser.parse_args(argv)
    overrides = {k: getattr(args, k) for k in ("width", "input_size", "epochs", "steps_per_epoch", "n_bootstrap")
                 if getattr(args, k) is not None}
    budget = replace(BUDGETS[args.budget], **overrides)
    args.runs_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    if not args.table_only:
        fit_runs(args, budget, set(args.runs) if args.runs else None)
        if any(not run_done(args.runs_dir / r.name, budget) for r in RUNS):
            print("not every run is fitted yet; the table is written by the last process to finish "
                  "(or --table-only for the rows that are)", flush=True)
            return 0
    results = summarise(args.runs_dir, budget)
    results.update({"manifest": str(args.manifest), "torch": torch.__version__, "threads": torch.get_num_threads(),
                    "machine": platform.processor() or platform.machine(),
                    "this_call_seconds": time.monotonic() - started})
    table = render(results)
    (args.runs_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.runs_dir / "table1_real.md").write_text(table)
    title = (f"real eyes, {budget.input_size} px, VGG-16* width {budget.width}, "
             f"{budget.epochs} x {budget.steps_per_epoch} steps of {budget.batch_size}")
    figures = write_figures(args.runs_dir, results, args.figures_dir or args.runs_dir, title)
    print(table)
    print(f"wrote {args.runs_dir / 'table1_real.md'}, results.json and {len(figures)} figures", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
