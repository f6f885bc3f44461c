"""``radscreen-train``: synthesise data, fit, evaluate and export models.

Examples (each works on a fresh checkout after ``make setup``; a CPU-sized model, minutes on 2 cores)::

    radscreen-train synth --out data/synth --n 2000 --seed 1 --size 128
    radscreen-train fit --data data/synth --out runs/radial --artifact models/my-model \\
        --width 16 --input-size 128 --epochs 3
    radscreen-train synth --out data/synth-test --n 400 --seed 99 --size 128
    radscreen-train evaluate --artifact models/my-model --data data/synth-test --out runs/eval
    radscreen-train export --artifact models/my-model --out graph.onnx
    radscreen-train prune --artifact models/my-model --keep 0.25 --out models/my-model-snr25
    radscreen-train adapt --from models/default --data site/labels.csv --image-root site/images \
        --mode recalibrate --artifact models/site   # a programme's own graded photographs
    radscreen-train pack --data data/synth --out data/synth-shards --input-size 128   # for a GPU lease

Such a small run checks the pipeline; its uncertainty is not useful (docs/training.md, "A first run on a
CPU"). Without --width and --input-size, fit trains the full-size model (width 46, 256 px): about 20 min an
epoch on 2 CPU cores, hours for the default 10 epochs; use a GPU for it.
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import shutil
import sys
import time
from pathlib import Path

from training.cli_adapt import HANDLERS as ADAPT_HANDLERS
from training.cli_adapt import add_adapt_command
from training.cli_lease import HANDLERS as LEASE_HANDLERS
from training.cli_lease import add_lease_commands
from training.config import TrainConfig
from training.options import RUN, add_flags, values_of


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows an option's default after its help text, and keeps the examples' line breaks.

    No default is appended where it says nothing or is already said: required options, on/off flags and
    options without a default (None), and help texts that state their default in words.
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.required or action.default in (None, False) or "default" in text:
            return text
        return super()._get_help_string(action)


FIT_DEFAULTS = TrainConfig(data="", out="")
# what finalise may change of a finished run (how it is served and where its data now are); the rest as recorded
FINALISE_OPTIONS = ("data", "artifact", "device", "views", "mc_samples", "pass_budget", "workers",
                    "max_missed_share")
SYNTH_ENTRIES = frozenset({"train", "trainLabels.csv", "metadata.csv", "dataset.json"})


def _add_fit(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("fit", help="train a model with the ELBO and write its artifact",
                       description="Train with the ELBO (NLL-only epochs on the means first) and write the artifact "
                                   "(serving draws, MI threshold calibrated on validation, model card). Every "
                                   "setting of the run is a field of training.config.TrainConfig, its flag "
                                   "generated from the field (training.options).",
                       formatter_class=_HelpFormatter)
    add_flags(p, TrainConfig, defaults=FIT_DEFAULTS)
    x = next(g for g in p._action_groups if g.title == RUN)  # how this command runs, beside the config's run control
    x.add_argument("--native-bf16", choices=("detect", "yes", "no"), default="detect",
                   help="override the CPU's native-bf16 detection (as RADSCREEN_NATIVE_BF16 does for the service)")
    x.add_argument("--restart", action="store_true", help="delete an existing run directory first")
    x.add_argument("--stop-after-steps", type=int, default=None,
                   help="checkpoint and stop after N steps (rerun the same command to continue)")
    x.add_argument("--time-budget-min", type=float, default=None,
                   help="stop at the end of the epoch after which another would pass this many minutes, and write "
                        "the artifact from the best epoch so far (a GPU lease; the card lists the epochs trained)")
    x.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_manifest(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    m = sub.add_parser("manifest", help="write one manifest CSV of several sources (ODIR-5K, EyePACS)",
                       description="Write a --layout manifest CSV holding the eyes of several sources, each row "
                                   "naming its source (and, for EyePACS, its copy): training.data.sources. Every "
                                   "copy is written; a recipe leaves one out with --exclude-copy or keeps it for "
                                   "training only with --train-only-copy.",
                       formatter_class=_HelpFormatter)
    m.add_argument("--odir", default=None, help="the ODIR-5K folder holding labels.csv and images/")
    m.add_argument("--eyepacs", default=None, help="the EyePACS folder holding labels.csv and images/")
    m.add_argument("--exclude-other-disease", action="store_true",
                   help="ODIR: leave out the eyes with another eye disease and no DR")
    m.add_argument("--out", required=True, help="the CSV to write (image paths are stored relative to it)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="radscreen-train", description=__doc__, formatter_class=_HelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("synth", help="generate a synthetic fundus data set (EyePACS layout)",
                       description="Generate a synthetic fundus data set: train/*.jpeg, trainLabels.csv, "
                                   "metadata.csv, dataset.json. SYNTHETIC images, not for clinical use.",
                       formatter_class=_HelpFormatter)
    s.add_argument("--out", required=True, help="output folder; must be empty or absent unless --overwrite")
    s.add_argument("--overwrite", action="store_true",
                   help="clear an existing synthetic data set in --out first (refused if it holds other files)")
    s.add_argument("--n", type=int, default=2000, help="number of images")
    s.add_argument("--seed", type=int, default=0, help="generator seed (same seed, same images)")
    s.add_argument("--size", type=int, default=256, help="image side in pixels")
    s.add_argument("--ungradable-fraction", type=float, default=0.08, help="share of deliberately ungradable images")
    s.add_argument("--workers", type=int, default=2, help="worker processes")
    _add_fit(sub)
    _add_manifest(sub)
    e = sub.add_parser("evaluate", help="evaluate an artifact's serving draws on a labelled data set",
                       description="Score a labelled data set with the artifact's fixed serving draws and write "
                                   "evaluation.json, the per-draw probabilities (draws.npz) and PNG plots (referral "
                                   "curves, reliability, MI histogram).",
                       formatter_class=_HelpFormatter)
    e.add_argument("--artifact", default=None, help="artifact directory (default: the embedded model)")
    e.add_argument("--data", required=True, help="dataset folder or manifest CSV")
    e.add_argument("--out", required=True, help="report directory (JSON + PNG plots)")
    add_flags(e, TrainConfig, defaults=FIT_DEFAULTS, names=("layout", "gradable_only", "n_bootstrap"), grouped=False)
    e.add_argument("--no-progress", action="store_true", help="no progress bar")
    f = sub.add_parser("finalise", help="re-score a finished run's best weights and rewrite its artifact",
                       description="Score the validation (and test) eyes of a finished run with its best weights, "
                                   "fit the thresholds and write the artifact and its card again: to serve it with "
                                   "another serving option, or where the run's data now lives elsewhere. Only the "
                                   "settings below change; they are recorded in the run's config.json.",
                       formatter_class=_HelpFormatter)
    f.add_argument("--run", required=True, help="the run directory (config.json, best.safetensors, history)")
    add_flags(f, TrainConfig, defaults=FIT_DEFAULTS, names=FINALISE_OPTIONS, as_recorded=True, grouped=False)
    x = sub.add_parser("export", help="write the weight-free ONNX graph of an artifact's serving draws",
                       description="Write the ONNX graph of the K serving draws WITHOUT weights (a few KB): the "
                                   "weights are external initializers supplied at session creation. See "
                                   "docs/training.md for a runnable loading snippet.",
                       formatter_class=_HelpFormatter)
    x.add_argument("--artifact", default=None, help="artifact directory (default: the embedded model)")
    x.add_argument("--out", required=True, help="path of the .onnx file to write")
    _add_prune(sub)
    add_adapt_command(sub, _HelpFormatter)
    add_lease_commands(sub, _HelpFormatter)
    return parser


def _add_prune(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    r = sub.add_parser("prune", help="write a copy of an artifact with its lowest signal-to-noise weights removed",
                       description="Remove the weights whose posterior signal-to-noise |mu|*sqrt(D)/sigma (or |mu| "
                                   "with --method magnitude) is lowest, one threshold over every Bayesian layer, "
                                   "and write the pruned artifact (packed weights: its size falls with the share "
                                   "kept; a card naming the parent, the share kept and the measured effect).",
                       formatter_class=_HelpFormatter)
    r.add_argument("--artifact", default=None, help="the parent artifact (default: the embedded model)")
    r.add_argument("--keep", type=float, required=True, help="share of the weights kept, in (0, 1]: 0.25 = 25 %%")
    r.add_argument("--out", required=True, help="directory of the pruned artifact")
    r.add_argument("--method", choices=("snr", "magnitude"), default="snr", help="what ranks the weights")
    r.add_argument("--effect", default=None,
                   help="markdown file with the measured effect (benchmarks/prune_eval.py) for the card")
    r.add_argument("--overwrite", action="store_true", help="replace a non-empty --out")


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The ``TrainConfig`` of parsed ``fit`` arguments (``training.options``)."""
    return TrainConfig(**values_of(args, TrainConfig, defaults=FIT_DEFAULTS))


def _fit(args: argparse.Namespace) -> int:
    from models.platform.cpu import detect_cpu
    from training.checkpoint import CHECKPOINT_FILE
    from training.data.prepare import prepare_data
    from training.finalise import COMMAND_FILE, finalise_run, summary_lines, training_command
    from training.loop import Trainer

    config = config_from_args(args)
    # before any data is read: a precision this machine cannot run natively stops here
    trainer = Trainer(config, progress=not args.no_progress, cpu=detect_cpu(override=args.native_bf16))
    config = trainer.config  # precision 'auto' resolved: the card names what ran
    out = Path(args.out)
    if args.restart and out.exists():  # only once the settings are known to be good
        shutil.rmtree(out)
    command = " ".join(shlex.quote(a) for a in ["radscreen-train", *args.argv])
    record = out / COMMAND_FILE  # the run's training command, kept for a later finalise's card
    if not record.exists() or not (out / CHECKPOINT_FILE).exists():  # a resumed run keeps the one it began with;
        out.mkdir(parents=True, exist_ok=True)  # a start that failed before its first checkpoint does not count
        record.write_text(command + "\n", encoding="utf-8")
    started = time.monotonic()
    data = prepare_data(config, progress=not args.no_progress)
    deadline = started + args.time_budget_min * 60 if args.time_budget_min is not None else None
    state = trainer.fit(data, stop_after_steps=args.stop_after_steps, deadline=deadline)
    elapsed = time.monotonic() - started
    timed_out = deadline is not None and state.epoch < config.epochs and state.step_in_epoch == 0
    if timed_out:
        print(f"time budget: stopped after {state.epoch} of {config.epochs} epochs; the artifact is the best of them")
    elif state.epoch < config.epochs:
        print(f"stopped at epoch {state.epoch + 1} step {state.step_in_epoch} (step budget); rerun to continue")
        return 0
    result = finalise_run(config, data=data, command=training_command(out) or command, train_seconds=elapsed)
    print(f"trained {state.epoch} epochs ({state.global_step} steps) in {elapsed / 60:.1f} min; "
          f"best epoch {state.best_epoch}")
    for line in summary_lines(result):
        print(line)
    return 0


def _finalise(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from training.finalise import finalise_run, summary_lines, training_command

    run = Path(args.run)
    config = TrainConfig.load(run / "config.json")
    changes = values_of(args, TrainConfig, names=FINALISE_OPTIONS)  # the flags given; the rest as recorded
    config = replace(config, out=str(run), **changes)
    command = " ".join(shlex.quote(a) for a in ["radscreen-train", *args.argv])
    trained_by = training_command(run)
    if trained_by is None:
        print(f"{run}: no command.txt (a run made before fit kept its command): the card names this finalise "
              "command only; write the fit command there first to keep the card's lineage", file=sys.stderr)
    result = finalise_run(config, command=trained_by or command, reserved_by=command if trained_by else None)
    config.save(run / "config.json")  # only once the artifact it describes was written
    for line in summary_lines(result):
        print(line)
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from models.artifact import load_artifact
    from training.data.dataset import ManifestDataset
    from training.data.prepare import read_rows
    from training.evaluation import evaluate_predictions, write_report
    from training.evaluation.by_source import report_by_source
    from training.evaluation.ensemble import DRAWS_FILENAME, save_draws
    from training.finalise import image_ids
    from training.predict import mc_probabilities

    artifact = load_artifact(args.artifact)
    cfg = artifact.config
    rows = read_rows(TrainConfig(data=args.data, out=args.out, layout=args.layout, gradable_only=args.gradable_only))
    listed = len(rows) if not args.gradable_only else len(read_rows(TrainConfig(
        data=args.data, out=args.out, layout=args.layout, gradable_only=False)))
    dataset = ManifestDataset(list(rows), transform=artifact.image_transform())
    probs, labels = mc_probabilities(artifact.build_model(), dataset, mean=cfg.input.mean, std=cfg.input.std,
                                     draws=artifact.serving_draws(), progress=not args.no_progress)
    report = evaluate_predictions(probs, labels, n_bootstrap=args.n_bootstrap,
                                  decision_threshold=artifact.calibration.decision_threshold,
                                  referral_threshold_mi=artifact.calibration.referral_threshold_mi)
    paths = write_report(report, args.out)
    # the per-draw probabilities (the mirrored images' after the images' own when the artifact serves with
    # test-time flip), so referral comparisons and serving options need no re-scoring
    paths["draws"] = save_draws(Path(args.out) / DRAWS_FILENAME, probs, labels, image_ids(rows))
    by_source = Path(args.out) / "by_source.json"
    if report_by_source(probs, labels, rows, by_source, n_bootstrap=args.n_bootstrap,
                        decision_threshold=artifact.calibration.decision_threshold,
                        referral_threshold_mi=artifact.calibration.referral_threshold_mi) is not None:
        paths["by_source"] = by_source  # a manifest with a source column: the figures per source as well
    print(json.dumps(_evaluation_summary(report.calibration_summary(), data=args.data, images=len(rows),
                                         listed=listed), indent=2))
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


def _evaluation_summary(calibration: dict[str, object], *, data: str, images: int, listed: int) -> dict[str, object]:
    """What ``evaluate`` prints: the metrics of *these* images (the artifact's calibration summary stores its
    validation split's under ``validation``), how many were evaluated, and how many were left out as ungradable."""
    metrics = dict(calibration)
    measured = metrics.pop("validation")
    return {
        "data": data,
        "images_evaluated": images,
        "ungradable_left_out": listed - images,
        "metrics": measured,
        "artifact_referral_threshold_mi": metrics.pop("referral_threshold_mi"),
        "referral_rate_at_that_threshold": metrics.pop("achieved_referral_rate"),
        **metrics,
    }


def _export(args: argparse.Namespace) -> int:
    from models.artifact import load_artifact
    from models.serving.onnx_backend import export_graph

    net = load_artifact(args.artifact).serving_network()
    path = export_graph(net, Path(args.out))
    print(f"wrote {path} ({Path(path).stat().st_size} bytes; weights are injected at load, not stored)")
    return 0


def _prune(args: argparse.Namespace) -> int:
    from models.artifact import load_artifact
    from training.pruning import prune_artifact

    if not 0.0 < args.keep <= 1.0:
        raise ValueError(f"--keep is a share in (0, 1] (0.25 keeps 25 %), got {args.keep}")
    effect = Path(args.effect).read_text(encoding="utf-8") if args.effect else None
    sha = prune_artifact(load_artifact(args.artifact), args.out, keep=args.keep, method=args.method, effect=effect,
                         overwrite=args.overwrite)
    size = sum(p.stat().st_size for p in Path(args.out).iterdir() if p.is_file())
    print(f"wrote {args.out} (sha256 {sha}, {size / 2**20:.1f} MiB)")
    return 0


def _synth(args: argparse.Namespace) -> int:
    from training.synthetic.dataset import generate_dataset

    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not args.overwrite:
            raise SystemExit(f"synth: {out} is not empty; choose an empty folder or pass --overwrite to clear it "
                             "(an old data set would otherwise mix its images and labels with the new one).")
        foreign = sorted(p.name for p in out.iterdir() if p.name not in SYNTH_ENTRIES) if out.is_dir() else [out.name]
        if foreign:
            raise SystemExit(f"synth --overwrite: {out} holds files a synthetic data set does not "
                             f"({', '.join(foreign[:5])}); refusing to delete them.")
        shutil.rmtree(out)
    manifest = generate_dataset(Path(args.out), n_images=args.n, seed=args.seed, size=args.size,
                                ungradable_fraction=args.ungradable_fraction, workers=args.workers, progress=True)
    print(f"wrote {manifest}")
    return 0


def _manifest(args: argparse.Namespace) -> int:
    from training.data.sources import build_sources_manifest, source_counts, write_sources_manifest

    rows = build_sources_manifest(odir=Path(args.odir) if args.odir else None,
                                  eyepacs=Path(args.eyepacs) if args.eyepacs else None,
                                  include_other_disease=not args.exclude_other_disease)
    path = write_sources_manifest(rows, Path(args.out))
    print(json.dumps(source_counts(rows), indent=2))
    print(f"wrote {path} ({len(rows)} eyes)")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # the model card records the command that was actually run
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    handlers = {"synth": _synth, "fit": _fit, "finalise": _finalise, "evaluate": _evaluate, "export": _export,
                "manifest": _manifest, "prune": _prune,
                **ADAPT_HANDLERS, **LEASE_HANDLERS}
    try:
        return handlers[args.command](args)
    except KeyboardInterrupt:  # Ctrl-C: fit resumes from its last checkpoint (every --checkpoint-every steps)
        resume = " without --restart" if getattr(args, "restart", False) else ""
        print(f"interrupted: rerun the same command{resume} to resume" if args.command in ("fit", "adapt")
              else "interrupted",
              file=sys.stderr)
        return 130
    except (ValueError, OSError) as exc:  # settings, manifests, artifacts, unreadable images, this machine
        if args.verbose:
            raise
        print(f"radscreen-train {args.command}: {exc} (rerun with -v for the traceback)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
