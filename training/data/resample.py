"""The augmentation's resolution loss for a whole batch in a constant number of operations.

A lower-resolution camera is simulated by resizing an image down to its own size (antialiased bilinear) and
back up (bilinear), as ``F.interpolate`` does. Each image has its own size, so done with ``F.interpolate`` it
takes a few operations per image, which a GPU's host dispatches one by one: at batch 256 more than the rest
of the training step (benchmarks/train_step_host.py). Both resizes are linear and separable, so an image
``X`` [C, H, W] becomes ``R_H X R_Wᵀ``, where ``R = U · D`` is the [S, S] matrix of the down-resize ``D``
(torch's antialiased bilinear weights: a triangle of half-width max(1, S / s) around each output pixel's
centre, renormalised over the pixels inside the image) followed by the up-resize ``U`` (bilinear,
``align_corners=False``). The matrices of every image are built at once, padded to the largest small size,
and applied by two batched products: the same resampling as ``F.interpolate`` to float rounding
(tests/training/test_augment.py compares them).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def _resize_matrices(size: int, small: Sequence[int], device: torch.device) -> Tensor:
    """``[n, size, size]``: for each image the matrix of resizing a side of ``size`` to ``small[i]`` and back."""
    smallf = torch.tensor(small, dtype=torch.float32).to(device, non_blocking=True).view(-1, 1, 1)
    # down: row j of image i weighs input pixel k by tri((k + 0.5 - c_j) / a) with c_j = (j + 0.5) · size / small
    # and a = max(1, size / small), renormalised over the image (torch's antialiased bilinear weights)
    scale = size / smallf
    j = torch.arange(max(small), device=device, dtype=torch.float32).view(1, -1, 1)
    k = torch.arange(size, device=device, dtype=torch.float32).view(1, 1, -1)
    down = (1 - ((k + 0.5 - scale * (j + 0.5)) / scale.clamp(min=1.0)).abs()).clamp(min=0.0)
    down = down * (j < smallf)  # rows past the image's own small size are padding
    down = down / down.sum(-1, keepdim=True).clamp(min=1e-12)  # [n, max(small), size]
    # up: output pixel i reads src = (i + 0.5) · small / size − 0.5 (at least 0) between floor(src) and the next
    i = torch.arange(size, device=device, dtype=torch.float32).view(1, -1, 1)
    src = ((i + 0.5) * (smallf / size) - 0.5).clamp(min=0.0)
    i0 = src.floor()
    i1 = torch.minimum(i0 + 1, smallf - 1)
    q = j.view(1, 1, -1)
    up = (q == i0) * (1 - (src - i0)) + (q == i1) * (src - i0)  # [n, size, max(small)]
    return up @ down


def resolution_loss(x: Tensor, sides: Sequence[tuple[int, int]]) -> Tensor:
    """Each image ``x[i]`` ([n, C, H, W]) resized to ``sides[i]`` (height, width) and back to H × W."""
    n, _, h, w = x.shape
    if len(sides) != n:
        raise ValueError(f"{len(sides)} sizes for {n} images")
    rows = _resize_matrices(h, [s[0] for s in sides], x.device).to(x.dtype)  # [n, H, H]
    square = h == w and all(a == b for a, b in sides)  # a square image resized to a square: one set of matrices
    cols = rows if square else _resize_matrices(w, [s[1] for s in sides], x.device).to(x.dtype)  # [n, W, W]
    return rows.unsqueeze(1) @ x @ cols.transpose(1, 2).unsqueeze(1)
