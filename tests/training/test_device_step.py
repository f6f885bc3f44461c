"""The training step near the hardware (training.device_data and the loop's step): resident batches are the
DataLoader's to the bit, a step reads nothing back to the host, and the running sums kept on the device add
up exactly as the host's floats did."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch

from training.config import TrainConfig
from training.data.prepare import prepare_data
from training.device_data import DeviceSums, ResidentPixels, epoch_batches, loader_workers
from training.loop import Trainer, _batches

pytestmark = pytest.mark.training
CPU = torch.device("cpu")
HOST_READS = ("item", "tolist", "numpy", "__float__", "__int__", "__bool__")


def _config(data: Path, out: Path, **kw: object) -> TrainConfig:
    base: dict[str, object] = dict(data=str(data), out=str(out), device="cpu", precision="fp32", width=2,
                                   input_size=32, epochs=2, nll_epochs=1, batch_size=8, eval_samples=2,
                                   grad_sd_samples=0, rho_init=-3.0)
    return TrainConfig(**{**base, **kw})  # type: ignore[arg-type]


def _on_the_host_by_design() -> bool:
    """Whether the read in progress is of a tensor that lives on the host on CUDA too: Adam's step counters
    (torch keeps them on the CPU unless capturable), or the draws of color_jitter's CPU host generator."""
    frame = sys._getframe(2)
    code = frame.f_code
    if code.co_name == "_get_value" and "torch/optim" in code.co_filename.replace("\\", "/"):
        return True
    return code.co_name == "color_jitter" and frame.f_locals.get("host_generator") is not None


@contextmanager
def counted_host_reads() -> Iterator[dict[str, int]]:
    """Count every call that would read a tensor of the training device back to the host (a synchronisation
    on CUDA)."""
    counts = dict.fromkeys(HOST_READS, 0)
    saved = {name: getattr(torch.Tensor, name) for name in HOST_READS}

    def counting(name: str):
        def call(self, *args, **kwargs):
            if not _on_the_host_by_design():
                counts[name] += 1
            return saved[name](self, *args, **kwargs)
        return call

    for name in HOST_READS:
        setattr(torch.Tensor, name, counting(name))
    try:
        yield counts
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)


def test_resident_batches_are_the_dataloaders_to_the_bit(tiny_data: Path, tmp_path: Path) -> None:
    data = prepare_data(_config(tiny_data, tmp_path / "run"))  # the image cache: pixels in memory
    batches = _batches(len(data.train), _config(tiny_data, tmp_path / "run"), epoch=0)
    resident = list(epoch_batches(ResidentPixels(data.train, CPU), data.train, batches, CPU, 0))
    loaded = list(epoch_batches(None, data.train, batches, CPU, 0))
    assert len(resident) == len(loaded) == len(batches)
    for (xa, ya), (xb, yb) in zip(resident, loaded, strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb) and xa.is_contiguous()


@pytest.mark.parametrize("means_only", [True, False])
def test_a_training_step_reads_nothing_back_to_the_host(means_only: bool, tiny_data: Path, tmp_path: Path) -> None:
    trainer = Trainer(_config(tiny_data, tmp_path / "run"), progress=False)
    data = prepare_data(trainer.config)
    run = trainer._start(data)
    run.generators["augment_host"] = torch.Generator().manual_seed(1)  # as the trainer arranges it on CUDA
    x, y = next(epoch_batches(None, data.train, [list(range(8))], CPU, 0))
    with counted_host_reads() as counts:
        for _ in range(3):
            step = trainer.train_step(run, x, y, data, means_only=means_only)
    assert counts == dict.fromkeys(HOST_READS, 0), counts
    assert step.nll.ndim == 0 and step.correct.ndim == 0  # tensors, read later (DeviceSums.read)


def test_device_sums_add_up_as_the_hosts_floats_did() -> None:
    rng = np.random.default_rng(0)
    host = {"nll": 0.0, "kl": 0.0, "correct": 0.0, "n": 0.0, "steps": 0.0}
    sums = DeviceSums(dict(host), CPU)
    for _ in range(500):
        nll, kl = torch.tensor(rng.random(), dtype=torch.float32), torch.tensor(rng.random() * 1e4, dtype=torch.float32)
        correct, n = torch.tensor(int(rng.integers(0, 33))), int(rng.integers(1, 33))
        sums.add(nll, kl, correct, n)
        host["nll"] += nll.item() * n  # what the step did before: a host float per step
        host["kl"] += kl.item()
        host["correct"] += float(correct.item())
        host["n"] += float(n)
        host["steps"] += 1
    assert sums.read() == host  # exactly, not approximately


def test_loader_workers_default_to_the_cores_on_cuda_only() -> None:
    assert loader_workers(None, CPU) == 0 and loader_workers(3, CPU) == 3
    assert 0 <= loader_workers(None, torch.device("cuda")) <= 8
