"""``radscreen-train adapt``: a programme's own graded photographs adapt an artifact (``training.adapt``)."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from training.adapt import MODES, AdaptRequest, TuneOptions, adapt


def add_adapt_command(sub: argparse._SubParsersAction[argparse.ArgumentParser],
                      formatter: type[argparse.HelpFormatter]) -> None:
    a = sub.add_parser(
        "adapt", help="adapt an artifact to a screening programme from its own graded photographs",
        description="From a parent artifact and a programme's labelled photographs, write a site artifact that the "
                    "service, the batch job and the PACS path load unchanged. recalibrate: the weights kept, both "
                    "thresholds fitted on the site's eyes; posterior-prior: fine-tuned with the parent's radial "
                    "posterior as the prior, then recalibrated on eyes the fine-tuning never saw; finetune: the "
                    "same without the prior. The card states the site's operating point and its cross-fitted "
                    "promise (docs/adapting.md). Stopped, the same command resumes from --run.",
        formatter_class=formatter)
    a.add_argument("--from", dest="parent", default="models/default", help="the parent artifact")
    a.add_argument("--data", required=True,
                   help="LABELS.csv: image (relative to --image-root), grade (0-4) or referable (0/1), optional "
                        "patient and eye")
    a.add_argument("--image-root", required=True, help="the folder the image column is relative to")
    a.add_argument("--mode", required=True, choices=MODES, help="what adaptation does")
    a.add_argument("--artifact", required=True, help="folder of the site artifact (new or empty)")
    a.add_argument("--run", default=None,
                   help="the run folder: gate verdicts, checkpoints, scores; rerun to resume (default: "
                        "<artifact>.run)")
    a.add_argument("--miss-share", type=float, default=None,
                   help="the operating point's bound on referable calibration eyes answered no_referable_dr "
                        "(default: the parent's)")
    a.add_argument("--calibration-share", type=float, default=0.5,
                   help="share of the patients kept for the thresholds (fine-tuning modes)")
    defaults = TuneOptions()
    a.add_argument("--epochs", type=int, default=defaults.epochs, help="fine-tuning epochs")
    a.add_argument("--lr", type=float, default=defaults.lr, help="learning rate of the means")
    a.add_argument("--rho-lr", type=float, default=defaults.rho_lr, help="learning rate of rho")
    a.add_argument("--prior-weight", type=float, default=defaults.prior_weight,
                   help="posterior-prior: lambda in NLL + lambda*KL(q||parent)/N; 1 = the full ELBO")
    a.add_argument("--batch-size", type=int, default=defaults.batch_size, help="fine-tuning batch")
    a.add_argument("--precision", choices=("auto", "fp32", "bf16"), default=defaults.precision,
                   help="fine-tuning autocast (auto: bf16 where the CPU runs it natively)")
    a.add_argument("--seed", type=int, default=0, help="split, fine-tuning and cross-fitting seed")
    a.add_argument("--repeats", type=int, default=200, help="random patient halves of the cross-fitted promise")
    a.add_argument("--name", default=None, help="the site artifact's name (default: <parent>-site)")
    a.add_argument("--version", default=None, help="its version (default: <parent's>+site)")
    a.add_argument("--no-progress", action="store_true", help="no progress bars")


def _adapt(args: argparse.Namespace) -> int:
    tune = TuneOptions(epochs=args.epochs, lr=args.lr, rho_lr=args.rho_lr, prior_weight=args.prior_weight,
                       batch_size=args.batch_size, seed=args.seed, precision=args.precision)
    out = Path(args.artifact)
    run_dir = Path(args.run) if args.run else out.with_name(out.name + ".run")
    req = AdaptRequest(parent=Path(args.parent), labels=Path(args.data), image_root=Path(args.image_root),
                       mode=args.mode, out=out, run_dir=run_dir,
                       miss_share=args.miss_share, calibration_share=args.calibration_share, tune=tune,
                       name=args.name, version=args.version, repeats=args.repeats, seed=args.seed)
    result = adapt(req, command="radscreen-train " + shlex.join(args.argv), progress=not args.no_progress)
    print(f"wrote {out} (sha256 {result.sha256})")
    print(f"site operating point: {result.promise.sentence()}")
    return 0


HANDLERS = {"adapt": _adapt}
