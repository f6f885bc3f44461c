"""Time one ELBO training step of VGG-16* on random images: the figure to plan a long training run from.

A step is what ``training.loop`` does per batch minus augmentation (a few % of it): forward one weight draw
under the chosen autocast, binary NLL + KL/N, backward, an Adam (amsgrad) step. It prints wall-clock and
process CPU seconds per step (CPU seconds stay meaningful on a machine shared with other jobs, where wall
time does not), peak RSS and the CPU's flags.

Example (the 2.0.0 recipe's network; figures in docs/benchmarks.md, "Training speed")::

    nice -n 19 .venv/bin/python benchmarks/train_step_time.py --width 46 --input-size 256 --batch 16 \\
        --precision bf16 --steps 5 --n-train 8190
"""

from __future__ import annotations

import argparse
import platform
import resource
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.nn.kl import kl_divergence
from models.nn.priors import prior_from_config
from models.nn.registry import create_model
from models.nn.vgg import mc_logits
from models.platform.cpu import detect_cpu


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="radial_vgg16_star")
    ap.add_argument("--width", type=int, default=46)
    ap.add_argument("--input-size", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="bf16")
    ap.add_argument("--steps", type=int, default=5, help="timed steps (after one untimed warm-up step)")
    ap.add_argument("--n-train", type=int, default=8190, help="N of the KL/N term")
    args = ap.parse_args(argv)

    torch.manual_seed(0)
    model = create_model(args.model, width=args.width, input_size=args.input_size, rho_init=-4.0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, amsgrad=True)
    prior = prior_from_config({"kind": "unit_gaussian"})
    x = torch.randn(args.batch, 3, args.input_size, args.input_size).contiguous(memory_format=torch.channels_last)
    y = (torch.rand(args.batch) < 0.3).float()

    def step() -> None:
        if args.precision == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = mc_logits(model, x, 1)[..., 0].float()  # [1, B]
        else:
            logits = mc_logits(model, x, 1)[..., 0].float()
        nll = F.binary_cross_entropy_with_logits(logits, y.expand_as(logits))
        loss = nll + kl_divergence(model, prior) / args.n_train
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    step()
    walls, cpus = [], []
    for _ in range(args.steps):
        c0, t0 = _cpu_seconds(), time.monotonic()
        step()
        walls.append(time.monotonic() - t0)
        cpus.append(_cpu_seconds() - c0)
    print(f"{args.model} width {args.width}, {args.input_size} px, batch {args.batch}, {args.precision}, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}, {platform.machine()} "
          f"({detect_cpu().summary()})")
    print(f"wall s/step: {' '.join(f'{w:.2f}' for w in walls)} (median {sorted(walls)[len(walls) // 2]:.2f})")
    print(f"CPU s/step:  {' '.join(f'{c:.2f}' for c in cpus)} (median {sorted(cpus)[len(cpus) // 2]:.2f})")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
