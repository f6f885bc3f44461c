"""``radscreen-train``: synthesise data, fit, evaluate and export models.

Examples (each works on a fresh checkout after ``make setup``)::

    radscreen-train synth --out data/synth --n 2000 --seed 1 --size 256
    radscreen-train fit --data data/synth --out runs/radial --epochs 10 --artifact models/my-model
    radscreen-train evaluate --artifact models/my-model --data data/synth-test --out runs/eval
    radscreen-train export --artifact models/my-model --out graph.onnx
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
from training.config import LAYOUTS, TrainConfig


def _add_fit(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("fit", help="train a model with the ELBO and write its artifact")
    d = TrainConfig(data="", out="")
    p.add_argument("--data", required=True, help="dataset folder (synthetic/EyePACS/APTOS) or manifest CSV")
    p.add_argument("--layout", choices=LAYOUTS, default=d.layout)
    p.add_argument("--out", required=True, help="run directory (checkpoints, logs, reports)")
    p.add_argument("--artifact", default=None, help="artifact directory (default: <out>/artifact)")
    p.add_argument("--name", default=d.name)
    p.add_argument("--version", default=d.version)
    p.add_argument("--model", default=d.model, help="registry name, e.g. radial_vgg16_star, gaussian_vgg16_star")
    p.add_argument("--width", type=int, default=d.width)
    p.add_argument("--input-size", type=int, default=d.input_size)
    p.add_argument("--rho-init", type=float, default=d.rho_init)
    p.add_argument("--prior", default="unit_gaussian",
                   help="unit_gaussian, or scale_mixture:PI,SIGMA1,SIGMA2 (e.g. scale_mixture:0.5,1,0.0025)")
    p.add_argument("--epochs", type=int, default=d.epochs)
    p.add_argument("--nll-epochs", type=int, default=d.nll_epochs)
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--train-samples", type=int, default=d.train_samples)
    p.add_argument("--eval-samples", type=int, default=d.eval_samples)
    p.add_argument("--max-steps-per-epoch", type=int, default=None)
    p.add_argument("--checkpoint-every", type=int, default=d.checkpoint_every)
    p.add_argument("--precision", choices=("fp32", "bf16"), default=d.precision)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--draw-seed", type=int, default=d.draw_seed)
    p.add_argument("--target-referral-rate", type=float, default=d.target_referral_rate)
    p.add_argument("--split", type=float, nargs=3, default=list(d.split), metavar=("TRAIN", "VAL", "TEST"),
                   help="patient-level split fractions")
    p.add_argument("--include-ungradable", action="store_true")
    p.add_argument("--no-augment", action="store_true")
    p.add_argument("--preprocessing", choices=sorted(PREPROCESSING_BY_NAME), default=FOV_LOCAL_MEAN,
                   help="image preprocessing contract (models/preprocessing.py); stored in the artifact")
    p.add_argument("--workers", type=int, default=d.workers)
    p.add_argument("--device", default=d.device)
    p.add_argument("--restart", action="store_true", help="delete an existing run directory first")
    p.add_argument("--stop-after-steps", type=int, default=None,
                   help="checkpoint and stop after N steps (rerun the same command to continue)")
    p.add_argument("--no-progress", action="store_true")


def _parse_prior(text: str) -> dict[str, object]:
    if text == "unit_gaussian":
        return {"kind": "unit_gaussian"}
    if text.startswith("scale_mixture:"):
        pi, s1, s2 = (float(v) for v in text.split(":", 1)[1].split(","))
        return {"kind": "scale_mixture", "pi": pi, "sigma1": s1, "sigma2": s2}
    raise SystemExit(f"--prior: unknown prior {text!r}; expected unit_gaussian or scale_mixture:PI,SIGMA1,SIGMA2")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="radscreen-train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("synth", help="generate a synthetic fundus data set (EyePACS layout)")
    s.add_argument("--out", required=True)
    s.add_argument("--n", type=int, default=2000)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--size", type=int, default=256)
    s.add_argument("--ungradable-fraction", type=float, default=0.08)
    s.add_argument("--workers", type=int, default=2)
    _add_fit(sub)
    e = sub.add_parser("evaluate", help="evaluate an artifact's serving draws on a labelled data set")
    e.add_argument("--artifact", default=None, help="artifact directory (default: the embedded model)")
    e.add_argument("--data", required=True)
    e.add_argument("--layout", choices=LAYOUTS, default="synthetic")
    e.add_argument("--out", required=True, help="report directory (JSON + PNG plots)")
    e.add_argument("--include-ungradable", action="store_true")
    e.add_argument("--n-bootstrap", type=int, default=200)
    x = sub.add_parser("export", help="write the weight-free ONNX graph of an artifact's serving draws")
    x.add_argument("--artifact", default=None)
    x.add_argument("--out", required=True)
    return parser


def _fit(args: argparse.Namespace) -> int:
    from training.finalise import finalise_run, summary_lines
    from training.loop import Trainer, prepare_data

    out = Path(args.out)
    if args.restart and out.exists():
        shutil.rmtree(out)
    config = TrainConfig(
        data=args.data, layout=args.layout, out=args.out, artifact=args.artifact, name=args.name,
        version=args.version, model=args.model, width=args.width, input_size=args.input_size,
        rho_init=args.rho_init, prior=_parse_prior(args.prior), epochs=args.epochs, nll_epochs=args.nll_epochs,
        batch_size=args.batch_size, lr=args.lr, train_samples=args.train_samples, eval_samples=args.eval_samples,
        max_steps_per_epoch=args.max_steps_per_epoch, checkpoint_every=args.checkpoint_every,
        precision=args.precision, seed=args.seed, draw_seed=args.draw_seed,
        target_referral_rate=args.target_referral_rate, split=tuple(args.split),
        gradable_only=not args.include_ungradable,
        augment=not args.no_augment, workers=args.workers, device=args.device,
        preprocessing=PREPROCESSING_BY_NAME[args.preprocessing])
    started = time.monotonic()
    data = prepare_data(config)
    state = Trainer(config, progress=not args.no_progress).fit(data, stop_after_steps=args.stop_after_steps)
    elapsed = time.monotonic() - started
    if state.epoch < config.epochs:
        print(f"stopped at epoch {state.epoch + 1} step {state.step_in_epoch} (step budget); rerun to continue")
        return 0
    command = " ".join(shlex.quote(a) for a in ["radscreen-train", *args.argv])
    result = finalise_run(config, data=data, command=command, train_seconds=elapsed)
    print(f"trained {state.epoch} epochs ({state.global_step} steps) in {elapsed / 60:.1f} min; "
          f"best epoch {state.best_epoch}")
    for line in summary_lines(result):
        print(line)
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from models.artifact import load_artifact
    from training.data.dataset import ManifestDataset
    from training.evaluation import evaluate_predictions, write_report
    from training.loop import read_rows
    from training.predict import mc_probabilities

    artifact = load_artifact(args.artifact)
    cfg = artifact.config
    rows = read_rows(TrainConfig(data=args.data, out=args.out, layout=args.layout,
                                 gradable_only=not args.include_ungradable))
    dataset = ManifestDataset(list(rows), size=cfg.input_size, preprocessing=cfg.preprocessing)
    probs, labels = mc_probabilities(artifact.build_model(), dataset, mean=cfg.mean, std=cfg.std,
                                     samples=cfg.mc_samples, seed=cfg.draw_seed)
    report = evaluate_predictions(probs, labels, n_bootstrap=args.n_bootstrap,
                                  decision_threshold=artifact.calibration.decision_threshold,
                                  referral_threshold_mi=artifact.calibration.referral_threshold_mi)
    paths = write_report(report, args.out)
    print(json.dumps(report.calibration_summary(), indent=2))
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


def _export(args: argparse.Namespace) -> int:
    from models.artifact import load_artifact
    from models.draws import materialise_draws
    from models.onnx_backend import export_graph

    artifact = load_artifact(args.artifact)
    net = materialise_draws(artifact.build_model(), k=artifact.config.mc_samples, seed=artifact.config.draw_seed)
    path = export_graph(net, Path(args.out))
    print(f"wrote {path} ({Path(path).stat().st_size} bytes; weights are injected at load, not stored)")
    return 0


def _synth(args: argparse.Namespace) -> int:
    from training.synthetic.dataset import generate_dataset

    manifest = generate_dataset(Path(args.out), n_images=args.n, seed=args.seed, size=args.size,
                                ungradable_fraction=args.ungradable_fraction, workers=args.workers, progress=True)
    print(f"wrote {manifest}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # the model card records the command that was actually run
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    handlers = {"synth": _synth, "fit": _fit, "evaluate": _evaluate, "export": _export}
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
