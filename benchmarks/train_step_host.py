"""The training step's host work against the step time: is a CUDA step bound by the GPU or by Python?

On a GPU the host issues a step's kernels and goes on (no step reads a value back: tests/training/
test_device_step.py); the step takes max(host work, GPU work). The host work is Python and torch's dispatch
of every operation, and barely depends on the model's width or the image size: the same operations run. So
it is measured on the CPU as the time of ``Trainer.train_step`` (augmentation, normalisation, the weight
draws, forward, loss, KL, backward, schedule, Adam) on a model and batch whose arithmetic is negligible
(width 2, 32 px, batch 2): an upper bound, since those kernels still run here. Torch's profiler counts the
operations a step dispatches, by the step's phases (``training.loop.STEP_PHASES``). The augmentation's
resolution loss resizes each chosen image on its own, so its count grows with the batch: it is counted again
at the full model's batches. The GPU work of the full model's step is its FLOPs (torch's FlopCounterMode on
the meta device) at a stated rate, and at a stated fraction of that rate (utilisation). Example::

    nice .venv/bin/python benchmarks/train_step_host.py --steps 40
"""

from __future__ import annotations

import argparse
import platform
import resource
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import torch
from torch.autograd.profiler_util import FunctionEvent
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from support.lease import step_flops
from training.config import TrainConfig
from training.data.prepare import prepare_data
from training.device_data import epoch_batches
from training.loop import STEP_PHASES, Trainer
from training.synthetic.dataset import generate_dataset


def _phase(event: FunctionEvent) -> str:
    """The step phase an operation ran in: its nearest enclosing ``STEP_PHASES`` range, or "other"."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name in STEP_PHASES:
            return parent.name
        parent = parent.cpu_parent
    return "other"


def dispatched(fn: Callable[[], object]) -> Counter[str]:
    """The operations ``fn`` dispatches (leaf ``aten::`` operations, as torch's profiler records them), by phase."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return Counter(_phase(e) for e in prof.events() if e.name.startswith("aten::") and not e.cpu_children)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=40, help="timed steps (after 5 untimed)")
    ap.add_argument("--batch", type=int, default=2, help="images per step of the tiny model")
    ap.add_argument("--full-batch", type=int, nargs="+", default=[32, 64, 128, 256],
                    help="images per step of the full model (FLOPs)")
    ap.add_argument("--full-size", type=int, default=512, help="input side of the full model's step (FLOPs)")
    ap.add_argument("--gpu-tflops", type=float, nargs="+", default=[400.0, 800.0],
                    help="GPU rates (bf16 TFLOP/s) to set the full model's step time at")
    ap.add_argument("--utilisation", type=float, nargs="+", default=[1.0, 0.35],
                    help="fractions of each rate the step achieves")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "synth"
        n = max(2 * args.batch, 48)
        generate_dataset(data_dir, n_images=n, seed=3, size=64, ungradable_fraction=0.0)
        config = TrainConfig(data=str(data_dir), out=f"{tmp}/run", device="cpu", precision="fp32", width=2,
                             input_size=32, batch_size=args.batch, grad_sd_samples=0, epochs=2)
        trainer = Trainer(config, progress=False)
        data = prepare_data(trainer.config)
        run = trainer._start(data)
        x, y = next(epoch_batches(None, data.train, [list(range(args.batch))], torch.device("cpu"), 0))
        for _ in range(5):
            trainer.train_step(run, x, y, data, means_only=False)
        before = resource.getrusage(resource.RUSAGE_SELF)
        start = time.perf_counter()
        for _ in range(args.steps):
            trainer.train_step(run, x, y, data, means_only=False)
        wall = (time.perf_counter() - start) / args.steps
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (usage.ru_utime + usage.ru_stime - before.ru_utime - before.ru_stime) / args.steps
        ops = dispatched(lambda: trainer.train_step(run, x, y, data, means_only=False))
        # the augmentation alone at the full batches (the count, not the time: the kernels here are the CPU's)
        augment_ops = {b: sum(dispatched(lambda b=b: trainer._augment(x.repeat(b // args.batch + 1, 1, 1, 1)[:b],
                                                                      run.generators)).values())
                       for b in args.full_batch}
    print(f"machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, 1 thread; "
          f"tiny step (width 2, 32 px, batch {args.batch}), {args.steps} timed steps")
    print(f"host work per step: {cpu * 1e3:.1f} ms CPU ({wall * 1e3:.1f} ms wall), "
          f"{sum(ops.values())} operations dispatched: "
          + ", ".join(f"{phase} {ops[phase]}" for phase in (*STEP_PHASES, "other")))
    print("augmentation operations at the full batches: "
          + ", ".join(f"batch {b}: {count}" for b, count in augment_ops.items()))
    flops = step_flops(model="radial_vgg16_star", width=46, size=args.full_size, train_samples=1, device="meta")
    print(f"full model step (width 46, {args.full_size} px): {flops / 1e9:.1f} GFLOP per image (FlopCounterMode)")
    print("host work / GPU work, the host work taken as measured here plus the augmentation operations the batch "
          "adds, at the tiny step's time per operation:")
    per_op = cpu / max(sum(ops.values()), 1)
    for b in args.full_batch:
        host = cpu + per_op * max(augment_ops[b] - ops["augment"], 0)
        cells = []
        for tflops in args.gpu_tflops:
            for use in args.utilisation:
                gpu = flops * b / (tflops * 1e12 * use)
                cells.append(f"{tflops:.0f} TFLOP/s x {use:.0%}: {gpu * 1e3:.1f} ms, ratio {host / gpu:.2f}")
        print(f"  batch {b} ({flops * b / 1e12:.2f} TFLOP, host {host * 1e3:.1f} ms): " + "; ".join(cells))
    print(f"peak RSS {usage.ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
