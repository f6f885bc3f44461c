"""The training step's host work against the step time: is a CUDA step bound by the GPU or by Python?

On a GPU the host issues a step's kernels and goes on (no step reads a value back: tests/training/
test_device_step.py); the step takes max(host work, GPU work). The host work is Python and torch's dispatch
of every operation, and does not depend on the model's width or the image size: the same operations run. So
it is measured on the CPU as the time of ``Trainer.train_step`` (augmentation, normalisation, the weight
draws, forward, loss, KL, backward, schedule, Adam) on a model and batch whose arithmetic is negligible
(width 2, 32 px, batch 2): an upper bound, since those kernels still run here. Torch's profiler counts the
operations a step dispatches. The GPU work of the full model's step is its FLOPs (torch's FlopCounterMode on
the meta device) at a stated rate. Example::

    nice .venv/bin/python benchmarks/train_step_host.py --steps 40
"""

from __future__ import annotations

import argparse
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from support.lease import step_flops
from training.config import TrainConfig
from training.data.prepare import prepare_data
from training.device_data import epoch_batches
from training.loop import Trainer
from training.synthetic.dataset import generate_dataset


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=40, help="timed steps (after 5 untimed)")
    ap.add_argument("--batch", type=int, default=2, help="images per step of the tiny model")
    ap.add_argument("--full-batch", type=int, default=32, help="images per step of the full model (FLOPs)")
    ap.add_argument("--full-size", type=int, default=512, help="input side of the full model's step (FLOPs)")
    ap.add_argument("--gpu-tflops", type=float, nargs="+", default=[400.0, 800.0],
                    help="GPU rates (bf16 TFLOP/s) to set the full model's step time at")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "synth"
        generate_dataset(data_dir, n_images=max(2 * args.batch, 48), seed=3, size=64, ungradable_fraction=0.0)
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
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            trainer.train_step(run, x, y, data, means_only=False)
    ops = sum(e.count for e in prof.key_averages() if e.key.startswith("aten::") and e.cpu_children == [])
    flops = step_flops(model="radial_vgg16_star", width=46, size=args.full_size, train_samples=1, device="meta")
    print(f"machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, 1 thread; "
          f"tiny step (width 2, 32 px, batch {args.batch}), {args.steps} timed steps")
    print(f"host work per step: {cpu * 1e3:.1f} ms CPU ({wall * 1e3:.1f} ms wall), {ops} operations dispatched")
    for tflops in args.gpu_tflops:
        gpu = flops * args.full_batch / (tflops * 1e12)
        print(f"full model step (width 46, {args.full_size} px, batch {args.full_batch}): "
              f"{flops * args.full_batch / 1e12:.2f} TFLOP -> {gpu * 1e3:.1f} ms at {tflops:.0f} TFLOP/s; "
              f"host work / GPU work = {cpu / gpu:.2f}")
    print(f"peak RSS {usage.ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
