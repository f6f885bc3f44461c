"""Where would the ELBO put σ? The ELBO of a trained model along the ray σ → c·σ, μ held fixed.

Training to the ELBO's plateau at full size is out of reach on a CPU (Adam moves ρ by ≈ lr per step, so
σ grows by about e^(lr·steps)). This measures instead, on a trained artifact, what the two terms of the
per-example negative ELBO do when every σ is multiplied by c and the means stay where training left them:

- the expected NLL E_q[NLL] (mean over draws of the single-draw NLL: the ELBO's data term), the NLL of the
  averaged prediction p̄ (what serving scores), and the AUC of p̄;
- KL/N: the KL of the scaled posterior from the prior (the project's Monte Carlo KL, one draw) over the
  training-set size N;
- the negative ELBO = E_q[NLL] + KL/N, and the median MI of the K draws.

If the negative ELBO still falls steeply at large c while the NLL is unharmed, the trained σ sits far below
the ELBO's optimum and the optimiser's step budget, not the data, set it. Where the NLL rises, the profile
shows what the ELBO would give up to get there. (A ray is one direction: the true optimum may set each
layer's σ differently; it is at least as low as the lowest point found here. ``--layers`` scales only some
layers, to probe such directions.)

Example (figures in docs/results-training.md, "Where the ELBO would put σ")::

    .venv/bin/python benchmarks/elbo_sigma_profile.py --model-dir models/default --data runs/synth-default \\
        --split 0.8 0.1 0.1 --split-seed 1 --images 147 --scales 1 4 16 64 256 1024
"""

from __future__ import annotations

import argparse
import platform
import re
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Subset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.artifact import load_artifact
from models.artifact.schema import ServingDraws
from models.nn.kl import kl_divergence
from models.nn.priors import prior_from_config
from models.nn.sampling import sampling_generator
from models.nn.vgg import mc_logits
from training.config import LAYOUTS, TrainConfig
from training.data.prepare import prepare_data
from training.evaluation import mc_uncertainty
from training.evaluation.referral import mann_whitney_auc
from training.predict import mc_probabilities


def inverse_softplus(sigma: torch.Tensor) -> torch.Tensor:
    return sigma + torch.log(-torch.expm1(-sigma))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-dir", type=Path, required=True, help="a radial/Gaussian artifact")
    ap.add_argument("--data", required=True, help="the data set it was trained on (its validation split is scored)")
    ap.add_argument("--layout", choices=LAYOUTS, default="synthetic", help="how --data is organised")
    ap.add_argument("--train-only-copy", action="append", default=[], metavar="COPY",
                    help="manifest layout: a copy kept out of validation (as the run that trained it did)")
    ap.add_argument("--n-train", type=int, default=None,
                    help="N in KL/N (default: the training split's size, as the run's ELBO used)")
    ap.add_argument("--split", type=float, nargs=3, default=(0.8, 0.1, 0.1))
    ap.add_argument("--split-seed", type=int, default=1)
    ap.add_argument("--images", type=int, default=147, help="validation images scored (evenly spaced)")
    ap.add_argument("--draws", type=int, default=8, help="posterior draws per image at each scale")
    ap.add_argument("--scales", type=float, nargs="+", default=[1, 4, 16, 64, 256, 1024])
    ap.add_argument("--layers", default=None, metavar="REGEX",
                    help="scale only the Bayesian layers whose name matches (e.g. 'features\\.(1[0-9]|2[0-9])$' "
                         "for blocks 3-5); the others keep their trained σ")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kl-weights", type=float, nargs="*", default=[],
                    help="also report, for each λ, the scale c minimising E_q[NLL] + λ·KL/N along the ray")
    args = ap.parse_args(argv)
    chosen = re.compile(args.layers) if args.layers else None

    artifact = load_artifact(args.model_dir)
    model = artifact.build_model()
    arch = artifact.config.architecture
    cfg = TrainConfig(data=args.data, out="", layout=args.layout, width=arch.width, input_size=arch.input_size,
                      split=tuple(args.split), seed=args.split_seed, init_from=str(args.model_dir),
                      preprocessing=artifact.config.input.preprocessing, cache_images=False,
                      train_only_copies=tuple(args.train_only_copy))
    data = prepare_data(cfg)  # the artifact's channel statistics, the run's split (images decoded when scored)
    n_train = args.n_train or len(data.train)
    step = max(1, len(data.val) // args.images)
    val = Subset(data.val, list(range(0, len(data.val), step))[: args.images])
    prior = prior_from_config(dict(artifact.config.prior))
    rho0 = {n: p.detach().clone() for n, p in model.named_parameters() if n.endswith("_rho")}
    probe = torch.zeros(1, arch.in_channels, arch.input_size, arch.input_size)

    print(f"{artifact.config.name} {artifact.config.version} ({args.model_dir}); {len(val)} validation images of "
          f"{args.data}, {args.draws} draws, N_train = {n_train}; {platform.machine()}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; scaled: {args.layers or 'every layer'}\n")
    rows: list[tuple[float, float, float, float]] = []  # c, E_q[NLL], KL/N, AUC(p̄)
    print("| c | mean σ | E_q[NLL] | NLL(p̄) | AUC(p̄) | KL/N (nat) | −ELBO (nat) | median MI (nat) | s |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for c in args.scales:
        started = time.monotonic()
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n.endswith("_rho") and (chosen is None or chosen.search(n.rsplit(".", 1)[0])):
                    p.copy_(inverse_softplus(F.softplus(rho0[n].double()) * c).float())
            with sampling_generator(model, torch.Generator().manual_seed(args.seed)):
                mc_logits(model, probe, 1)  # one posterior draw for the KL's cross-entropy term
                kl_n = float(kl_divergence(model, prior)) / n_train
        probs, labels = mc_probabilities(model, val, mean=data.mean, std=data.std,
                                         draws=ServingDraws(args.draws, args.seed))
        ps = probs.clip(1e-7, 1 - 1e-7)
        expected_nll = float(-(labels * np.log(ps) + (1 - labels) * np.log(1 - ps)).mean())
        unc = mc_uncertainty(probs)
        pb = unc.probability.clip(1e-7, 1 - 1e-7)
        nll_bar = float(-(labels * np.log(pb) + (1 - labels) * np.log(1 - pb)).mean())
        sigma = float(torch.cat([F.softplus(p.detach()).flatten() for n, p in model.named_parameters()
                                 if n.endswith("_rho")]).mean())
        print(f"| {c:g} | {sigma:.3g} | {expected_nll:.4f} | {nll_bar:.4f} | "
              f"{mann_whitney_auc(labels.astype(np.int64), pb):.3f} | {kl_n:.6g} | {expected_nll + kl_n:.6g} | "
              f"{float(np.median(unc.mutual_information)):.3g} | {time.monotonic() - started:.0f} |", flush=True)
        rows.append((c, expected_nll, kl_n, mann_whitney_auc(labels.astype(np.int64), pb)))
    for weight in args.kl_weights:  # where a tempered objective would stop along this ray
        c, nll, kl_n, auc = min(rows, key=lambda r: r[1] + weight * r[2])
        edge = (" (the largest scored: it may lie beyond)" if c == max(args.scales) else
                " (the smallest scored: it may lie below)" if c == min(args.scales) else "")
        print(f"λ = {weight:g}: E_q[NLL] + λ·KL/N is lowest at c = {c:g}{edge} of those scored "
              f"(E_q[NLL] {nll:.4f}, AUC(p̄) {auc:.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
