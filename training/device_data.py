"""What keeps a CUDA training step near the hardware: batches cut from pixels already on the device, running
sums kept on the device, and the number of data workers.

- ``ResidentPixels``: a data set whose pixels are in memory (packed shards, or the image cache) is copied to
  the GPU once as uint8 (3.5 GB for 4,437 eyes at 512 px) and each batch is indexed there: no DataLoader, no
  per-step host decode or host-to-device copy. A batch is the tensor ``ManifestDataset`` gives, to the bit
  (``to_tensor``: ``[3, H, W]`` float32 in [0, 1]), only made on the device.
- ``DeviceSums``: the epoch's running sums (NLL·n, KL, correct, n) accumulate in a float64 tensor on the
  training device, so a step never waits for the GPU to read a loss; the host reads them (one sync) at a
  logging interval, a checkpoint and the epoch's end. The additions are the ones the host made before, in the
  same order and precision, so the history rows are unchanged to the bit.
- ``loader_workers``: decoding workers where images are decoded per step on a CUDA machine.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader

from training.data.dataset import ManifestDataset

COPY_CHUNK = 256  # images per host-to-device copy when the pixels go to the GPU
SUM_KEYS = ("nll", "kl", "correct", "n")  # accumulated on the device; "steps" and "seconds" stay on the host


def loader_workers(requested: int | None, device: torch.device) -> int:
    """``requested``, or by default: on CUDA, cores − 1 up to 8 (decoding must keep up with the GPU); on the
    CPU, 0 (the workers would take cores from the step itself)."""
    if requested is not None:
        return requested
    return min(8, max((os.cpu_count() or 1) - 1, 0)) if device.type == "cuda" else 0


class ResidentPixels:
    """A data set's uint8 pixels and labels on ``device``; ``batches`` yields ``(x [B, 3, H, W], y [B])``."""

    def __init__(self, dataset: ManifestDataset, device: torch.device) -> None:
        if dataset.pixels is None:
            raise ValueError("ResidentPixels needs a data set with its pixels in memory (shards or the image cache)")
        pixels = dataset.pixels
        self.pixels = torch.empty(pixels.shape, dtype=torch.uint8, device=device)  # [N, H, W, 3]
        for start in range(0, len(pixels), COPY_CHUNK):  # a read-only memmap (the cache) is copied piecewise
            chunk = np.array(pixels[start:start + COPY_CHUNK], dtype=np.uint8, copy=True)
            self.pixels[start:start + len(chunk)] = torch.from_numpy(chunk).to(device)
        self.labels = dataset.labels.to(device)  # [N]
        self.device = device

    def batches(self, batches: Sequence[Sequence[int]]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        flat = torch.tensor([i for b in batches for i in b], dtype=torch.long).to(self.device, non_blocking=True)
        start = 0
        for b in batches:
            idx = flat[start:start + len(b)]
            start += len(b)
            x = self.pixels.index_select(0, idx).permute(0, 3, 1, 2).contiguous().float().div_(255.0)
            yield x, self.labels.index_select(0, idx)


def epoch_batches(resident: ResidentPixels | None, dataset: ManifestDataset, batches: list[list[int]],
                  device: torch.device, workers: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """An epoch's batches ``(x, y)`` on ``device``: cut from ``resident`` pixels when given, else read through a
    DataLoader with ``workers`` (pinned memory and asynchronous copies on CUDA)."""
    if resident is not None:
        yield from resident.batches(batches)
        return
    cuda = device.type == "cuda"
    for x, y, _ in DataLoader(dataset, batch_sampler=batches, pin_memory=cuda, num_workers=workers):
        yield x.to(device, non_blocking=cuda), y.to(device, non_blocking=cuda)


@dataclass(frozen=True)
class StepResult:
    """What one optimiser step measured on its batch: 0-d tensors on the training device (no host sync)."""

    nll: torch.Tensor  # mean NLL over the batch and the draws
    kl: torch.Tensor  # KL(q || p) of the whole network; 0 in the means-only epochs
    correct: torch.Tensor  # images whose mean logit is on the side of their label
    n: int  # images in the batch

    def add_to(self, sums: DeviceSums) -> None:
        """Accumulate into the epoch's running sums (``TrainState.epoch_sums``, kept on the device)."""
        sums.add(self.nll, self.kl, self.correct, self.n)


class DeviceSums:
    """The epoch's running sums on the training device (see the module docstring)."""

    def __init__(self, sums: dict[str, float], device: torch.device) -> None:
        self.sums = sums
        self.acc = torch.tensor([sums[k] for k in SUM_KEYS], dtype=torch.float64, device=device)
        self.one = torch.ones((), dtype=torch.float64, device=device)  # n enters by a kernel, not a copy

    def add(self, nll: torch.Tensor, kl: torch.Tensor, correct: torch.Tensor, n: int) -> None:
        """One step: ``nll`` the batch mean, ``kl`` the network's KL, ``correct`` the count (0-d tensors)."""
        self.acc += torch.stack([nll.detach().double() * n, kl.detach().double(), correct.double(), self.one * n])
        self.sums["steps"] += 1

    def read(self) -> dict[str, float]:
        """The sums, read to the host (the one synchronisation)."""
        self.sums.update(zip(SUM_KEYS, self.acc.tolist(), strict=True))
        return self.sums
