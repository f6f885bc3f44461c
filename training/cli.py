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

from models.preprocessing import BY_NAME as PREPROCESSING_BY_NAME
from models.preprocessing import FOV_LOCAL_MEAN
from training.cli_adapt import HANDLERS as ADAPT_HANDLERS
from training.cli_adapt import add_adapt_command
from training.cli_lease import HANDLERS as LEASE_HANDLERS
from training.cli_lease import add_lease_commands
from training.config import FLIP_MODES, LAYOUTS, OPTIMIZERS, PRECISIONS, SCHEDULES, SELECT_BY, TrainConfig


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


SYNTH_ENTRIES = frozenset({"train", "trainLabels.csv", "metadata.csv", "dataset.json"})


def _add_fit(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("fit", help="train a model with the ELBO and write its artifact",
                       description="Train with the ELBO (NLL-only epochs on the means first) and write the artifact "
                                   "(serving draws, MI threshold calibrated on validation, model card).",
                       formatter_class=_HelpFormatter)
    d = TrainConfig(data="", out="")
    g = p.add_argument_group("data and output")
    g.add_argument("--data", required=True, help="dataset folder (synthetic/EyePACS/APTOS) or manifest CSV")
    g.add_argument("--layout", choices=LAYOUTS, default=d.layout, help="how --data is organised")
    g.add_argument("--out", required=True, help="run directory (checkpoints, logs, reports)")
    g.add_argument("--artifact", default=None, help="artifact directory (default: <out>/artifact)")
    g.add_argument("--name", default=d.name, help="model name written into the artifact")
    g.add_argument("--version", default=d.version, help="model version written into the artifact")
    g.add_argument("--split", type=float, nargs=3, default=list(d.split), metavar=("TRAIN", "VAL", "TEST"),
                   help="patient-level split fractions")
    g.add_argument("--include-ungradable", action="store_true",
                   help="train on ungradable images too (by default they are the quality gate's job)")
    g.add_argument("--exclude-other-disease", action="store_true",
                   help="odir layout, or a manifest with a category column: leave out the eyes with another eye "
                        "disease and no DR (kept by default as non-referable: they are part of a real screening "
                        "population)")
    g.add_argument("--no-augment", action="store_true", help="switch off the geometric/photometric augmentation")
    g.add_argument("--no-color-jitter", action="store_true",
                   help="keep the geometric augmentation but switch off the photometric one (contrast, colour "
                        "balance, resolution loss)")
    g.add_argument("--no-frame-cuts", action="store_true",
                   help="switch off the framing augmentation (camera-frame and tight-crop cuts, notches)")
    g.add_argument("--no-cache", action="store_true",
                   help="decode and preprocess every image at every use instead of once into <out>/cache")
    g.add_argument("--preprocessing", choices=sorted(PREPROCESSING_BY_NAME), default=FOV_LOCAL_MEAN,
                   help="image preprocessing contract (models/preprocessing.py); stored in the artifact")
    g.add_argument("--workers", type=int, default=None,
                   help="DataLoader worker processes (default: on CUDA cores - 1 up to 8, where images are decoded "
                        "per step; on the CPU 0)")
    g.add_argument("--cache-dir", default=None,
                   help="where the preprocessed images are kept (default: <out>/cache); runs on the same images "
                        "can share one")
    g.add_argument("--source-weight", action="append", default=[], metavar="SOURCE=WEIGHT",
                   help="a manifest with a source column: that source's share of the training draws (give one per "
                        "source, e.g. --source-weight odir=0.5 --source-weight eyepacs=0.5; normalised to sum to "
                        "1); without it every training image is drawn once an epoch")
    g.add_argument("--exclude-copy", action="append", default=[], metavar="COPY",
                   help="leave the images of this copy (the manifest's copy column, e.g. stretched-256) out of "
                        "every split")
    g.add_argument("--train-only-copy", action="append", default=[], metavar="COPY",
                   help="train on the images of this copy but leave them out of validation and test (the patient "
                        "split is made first, so validation and test patients do not change)")
    g.add_argument("--train-fraction", type=float, default=d.train_fraction, metavar="F",
                   help="train on this share of the training patients (a learning curve's arm: within each source "
                        "and referable stratum, nested across fractions); validation and test do not change")
    g.add_argument("--weights-dtype", choices=("fp32", "fp16"), default=d.weights_dtype,
                   help="artifact storage of μ and ρ (fp16: calibrated after the cast, rounding/sd ratio in the card)")
    m = p.add_argument_group("model")
    m.add_argument("--model", default=d.model,
                   help="registry name: radial_vgg16_star, gaussian_vgg16_star (MFVI), dropout_vgg16_star, "
                        "deterministic_vgg16_star")
    m.add_argument("--width", type=int, default=d.width, help="channels of the first VGG-16* block")
    m.add_argument("--input-size", type=int, default=d.input_size, help="image side in pixels")
    m.add_argument("--rho-init", type=float, default=d.rho_init, help="initial ρ of every weight (σ0 = softplus(ρ))")
    m.add_argument("--prior", default="unit_gaussian",
                   help="unit_gaussian, or scale_mixture:PI,SIGMA1,SIGMA2 (e.g. scale_mixture:0.5,1,0.0025)")
    m.add_argument("--init-from", default=None, metavar="ARTIFACT",
                   help="start from this artifact's trained μ and ρ (same architecture and preprocessing; its "
                        "channel mean/std are kept; fresh optimiser): continue a model whose run is gone, or "
                        "fine-tune on new data. Usually with --nll-epochs 0")
    r = p.add_argument_group("optimisation recipe (defaults: the authors' Adam lr 1e-3, amsgrad, ρ0 = -4)")
    r.add_argument("--epochs", type=int, default=d.epochs, help="total epochs, NLL-only ones included")
    r.add_argument("--nll-epochs", type=int, default=d.nll_epochs, help="first epochs: NLL on the means only")
    r.add_argument("--batch-size", type=int, default=d.batch_size, help="images per optimiser step")
    r.add_argument("--optimizer", choices=OPTIMIZERS, default=d.optimizer, help="Adam or AdamW")
    r.add_argument("--no-amsgrad", action="store_true", help="plain Adam/AdamW moments instead of amsgrad")
    r.add_argument("--lr", type=float, default=d.lr, help="learning rate of the means (and non-Bayesian weights)")
    r.add_argument("--rho-lr", type=float, default=d.rho_lr, help="learning rate of the ρ group (default: --lr)")
    r.add_argument("--kl-weight", type=float, default=d.kl_weight,
                   help="λ in NLL + λ·KL/N_train: 1 = the full ELBO (default); below 1 tempers it, and the card "
                        "says so (the validation ELBO is always reported at λ = 1)")
    r.add_argument("--weight-decay", type=float, default=d.weight_decay, help="on the means only, never on ρ")
    r.add_argument("--lr-schedule", choices=SCHEDULES, default=d.lr_schedule,
                   help="per-epoch lr factor: constant, cosine (to 0 at the end) or step")
    r.add_argument("--lr-step-epochs", type=int, default=d.lr_step_epochs, help="step schedule: epochs per step")
    r.add_argument("--lr-gamma", type=float, default=d.lr_gamma, help="step schedule: factor per step")
    r.add_argument("--lr-warmup-steps", type=int, default=d.lr_warmup_steps,
                   help="linear lr ramp over the first N optimiser steps (use with --init-from: fresh Adam "
                        "moments otherwise take full-size steps on a trained posterior)")
    r.add_argument("--train-samples", type=int, default=d.train_samples, help="MC weight samples per training step")
    r.add_argument("--select-by", choices=SELECT_BY, default=d.select_by,
                   help="the best epoch minimises this validation score")
    r.add_argument("--grad-sd-samples", type=int, default=d.grad_sd_samples,
                   help="gradient estimates per epoch for the NLL-gradient SD diagnostic (0: off)")
    r.add_argument("--precision", choices=PRECISIONS, default=d.precision,
                   help="autocast during training: auto = bf16 only where the device runs it natively (CUDA "
                        "with bf16, a CPU with AVX-512-BF16/AMX), else fp32; bf16 where it would be emulated "
                        "(~70x slower) is refused")
    r.add_argument("--native-bf16", choices=("detect", "yes", "no"), default="detect",
                   help="override the CPU's native-bf16 detection (as RADSCREEN_NATIVE_BF16 does for the service)")
    r.add_argument("--seed", type=int, default=d.seed,
                   help="seed of the weights, data order and augmentation (and of the split unless --split-seed)")
    r.add_argument("--split-seed", type=int, default=d.split_seed,
                   help="seed of the patient-level split (default: --seed); fix it to train ensemble members "
                        "or seed replicates on the same split")
    v = p.add_argument_group("validation and serving")
    v.add_argument("--eval-samples", type=int, default=d.eval_samples, help="serving draws per image per epoch")
    v.add_argument("--draw-seed", type=int, default=d.draw_seed, help="seed of the artifact's fixed serving draws")
    v.add_argument("--head-draws", type=int, default=d.head_draws,
                   help="draws of the last layer per serving draw: steadies the MI estimate at no real cost "
                        "(docs/results-science.md, 'Head draws'); 1 = the plain K draws")
    v.add_argument("--test-time-flip", choices=FLIP_MODES, default=d.test_time_flip,
                   help="on: serve on each image and its mirror image, p and MI over both orientations' draws "
                        "(each draw costs two passes; calibration and the test figures use it too); auto: choose "
                        "on the validation eyes between the serving draws x 1 view and half as many draws x 2 "
                        "views, at equal passes (training.evaluation.serving_choice, docs/uncertainty.md)")
    v.add_argument("--mc-samples", type=int, default=d.mc_samples,
                   help="posterior draws the artifact serves (each costs one forward pass per view)")
    v.add_argument("--pass-budget", type=int, default=d.pass_budget,
                   help="most forward passes per image (draws x views) the artifact may serve; the design's "
                        "budget is 16, a larger one is an explicit choice the card states")
    v.add_argument("--target-referral-rate", type=float, default=d.target_referral_rate,
                   help="share of validation images the MI threshold refers (without --max-missed-share)")
    v.add_argument("--max-missed-share", type=float, default=None,
                   help="the screening operating point: choose the decision and MI thresholds together on "
                        "validation so that at most this share of referable eyes is answered no_referable_dr, "
                        "answering as many non-referable eyes as possible (e.g. 0.03; docs/training.md)")
    x = p.add_argument_group("run control")
    x.add_argument("--max-steps-per-epoch", type=int, default=None, help="cap on steps per epoch (quick runs)")
    x.add_argument("--checkpoint-every", type=int, default=d.checkpoint_every,
                   help="steps between checkpoints (one is also written at every epoch end)")
    x.add_argument("--checkpoint-minutes", type=float, default=None,
                   help="minutes between checkpoints instead of --checkpoint-every steps, and one at the end "
                        "(default: 10 on CUDA, where a step takes milliseconds; unset on the CPU)")
    x.add_argument("--val-every", type=int, default=d.val_every,
                   help="epochs between validations (the last epoch is always validated; an epoch not validated "
                        "cannot be the best)")
    x.add_argument("--device", default=d.device, help="auto (cuda when available, else cpu), cpu or cuda")
    x.add_argument("--restart", action="store_true", help="delete an existing run directory first")
    x.add_argument("--stop-after-steps", type=int, default=None,
                   help="checkpoint and stop after N steps (rerun the same command to continue)")
    x.add_argument("--time-budget-min", type=float, default=None,
                   help="stop at the end of the epoch after which another would pass this many minutes, and write "
                        "the artifact from the best epoch so far (a GPU lease; the card lists the epochs trained)")
    x.add_argument("--no-progress", action="store_true", help="no progress bar")


def _parse_prior(text: str) -> dict[str, object]:
    if text == "unit_gaussian":
        return {"kind": "unit_gaussian"}
    if text.startswith("scale_mixture:"):
        pi, s1, s2 = (float(v) for v in text.split(":", 1)[1].split(","))
        return {"kind": "scale_mixture", "pi": pi, "sigma1": s1, "sigma2": s2}
    raise SystemExit(f"--prior: unknown prior {text!r}; expected unit_gaussian or scale_mixture:PI,SIGMA1,SIGMA2")


def _parse_weights(items: list[str]) -> dict[str, float] | None:
    """``["odir=0.5", "eyepacs=0.5"]`` -> ``{"odir": 0.5, "eyepacs": 0.5}``; None when none are given."""
    weights: dict[str, float] = {}
    for item in items:
        name, _, value = item.partition("=")
        try:
            weights[name.strip()] = float(value)
        except ValueError:
            raise SystemExit(f"--source-weight: expected SOURCE=WEIGHT, got {item!r}") from None
        if not name.strip() or not weights[name.strip()] > 0:
            raise SystemExit(f"--source-weight: expected SOURCE=WEIGHT with a positive weight, got {item!r}")
    return weights or None


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
    e.add_argument("--layout", choices=LAYOUTS, default="synthetic", help="how --data is organised")
    e.add_argument("--out", required=True, help="report directory (JSON + PNG plots)")
    e.add_argument("--include-ungradable", action="store_true",
                   help="evaluate ungradable images too (by default they are left out, as the quality gate would "
                        "refuse them; the summary says how many)")
    e.add_argument("--n-bootstrap", type=int, default=200, help="bootstrap resamples for SEs and 95 %% intervals")
    e.add_argument("--no-progress", action="store_true", help="no progress bar")
    f = sub.add_parser("finalise", help="re-score a finished run's best weights and rewrite its artifact",
                       description="Score the validation (and test) eyes of a finished run with its best weights, "
                                   "fit the thresholds and write the artifact and its card again: to serve it with "
                                   "another serving option, or where the run's data now lives elsewhere. Only the "
                                   "settings below change; they are recorded in the run's config.json.",
                       formatter_class=_HelpFormatter)
    f.add_argument("--run", required=True, help="the run directory (config.json, best.safetensors, history)")
    f.add_argument("--data", default=None, help="where the run's data set is now (default: as recorded)")
    f.add_argument("--artifact", default=None, help="artifact directory to write (default: as recorded)")
    f.add_argument("--device", default=None, help="scoring device (default: as recorded)")
    f.add_argument("--test-time-flip", choices=FLIP_MODES, default=None,
                   help="the serving option (see fit --test-time-flip; default: as recorded)")
    f.add_argument("--mc-samples", type=int, default=None,
                   help="posterior draws the artifact serves (see fit --mc-samples; default: as recorded)")
    f.add_argument("--pass-budget", type=int, default=None,
                   help="forward passes per image the artifact may serve (see fit --pass-budget; default: as "
                        "recorded)")
    f.add_argument("--workers", type=int, default=None, help="data loader workers (default: as recorded)")
    f.add_argument("--max-missed-share", type=float, default=None,
                   help="the screening operating point's bound on referable validation eyes answered "
                        "no_referable_dr (see fit --max-missed-share; default: as recorded)")
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
    """The ``TrainConfig`` of parsed ``fit`` arguments."""
    return TrainConfig(
        data=args.data, layout=args.layout, out=args.out, artifact=args.artifact, name=args.name,
        version=args.version, model=args.model, width=args.width, input_size=args.input_size,
        rho_init=args.rho_init, prior=_parse_prior(args.prior), epochs=args.epochs, nll_epochs=args.nll_epochs,
        batch_size=args.batch_size, lr=args.lr, train_samples=args.train_samples, eval_samples=args.eval_samples,
        max_steps_per_epoch=args.max_steps_per_epoch, checkpoint_every=args.checkpoint_every,
        checkpoint_minutes=args.checkpoint_minutes, val_every=args.val_every,
        precision=args.precision, seed=args.seed, split_seed=args.split_seed, draw_seed=args.draw_seed,
        target_referral_rate=args.target_referral_rate, max_missed_share=args.max_missed_share,
        split=tuple(args.split), head_draws=args.head_draws, test_time_flip=args.test_time_flip,
        pass_budget=args.pass_budget, mc_samples=args.mc_samples,
        gradable_only=not args.include_ungradable, include_other_disease=not args.exclude_other_disease,
        augment=not args.no_augment, color_jitter=not args.no_color_jitter, frame_cuts=not args.no_frame_cuts,
        cache_images=not args.no_cache,
        workers=args.workers, device=args.device, rho_lr=args.rho_lr, kl_weight=args.kl_weight,
        optimizer=args.optimizer, amsgrad=not args.no_amsgrad, weight_decay=args.weight_decay,
        lr_schedule=args.lr_schedule, lr_step_epochs=args.lr_step_epochs, lr_gamma=args.lr_gamma,
        lr_warmup_steps=args.lr_warmup_steps,
        select_by=args.select_by, grad_sd_samples=args.grad_sd_samples, weights_dtype=args.weights_dtype,
        preprocessing=PREPROCESSING_BY_NAME[args.preprocessing], init_from=args.init_from,
        source_weights=_parse_weights(args.source_weight), exclude_copies=tuple(args.exclude_copy),
        train_only_copies=tuple(args.train_only_copy), train_fraction=args.train_fraction, cache_dir=args.cache_dir)


def _fit(args: argparse.Namespace) -> int:
    from models.cpu import detect_cpu
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
    changes = {k: v for k, v in (("data", args.data), ("artifact", args.artifact), ("device", args.device),
                                 ("test_time_flip", args.test_time_flip), ("pass_budget", args.pass_budget),
                                 ("mc_samples", args.mc_samples),
                                 ("workers", args.workers),
                                 ("max_missed_share", args.max_missed_share)) if v is not None}
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
    rows = read_rows(TrainConfig(data=args.data, out=args.out, layout=args.layout,
                                 gradable_only=not args.include_ungradable))
    listed = len(rows) if args.include_ungradable else len(read_rows(TrainConfig(
        data=args.data, out=args.out, layout=args.layout, gradable_only=False)))
    dataset = ManifestDataset(list(rows), transform=artifact.image_transform())
    probs, labels = mc_probabilities(artifact.build_model(), dataset, mean=cfg.mean, std=cfg.std,
                                     draws=artifact.serving_draws(), progress=not args.no_progress)
    report = evaluate_predictions(probs, labels, n_bootstrap=args.n_bootstrap,
                                  decision_threshold=artifact.calibration.decision_threshold,
                                  referral_threshold_mi=artifact.calibration.referral_threshold_mi)
    paths = write_report(report, args.out)
    # the per-draw probabilities (the mirrored images' after the images' own when the artifact serves with
    # test_time_flip), so referral comparisons and serving options need no re-scoring
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
    from models.onnx_backend import export_graph

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
