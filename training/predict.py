"""Monte Carlo predictions over a dataset: ``[S, N]`` probabilities of referable DR.

Bayesian models are evaluated through their **serving form** — the K fixed posterior draws of
``models.draws`` with the artifact's seed — so validation numbers, the calibrated MI threshold and the
service's answers come from the same 16 networks.  MC-dropout and deterministic baselines use seeded
stochastic passes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from models.draws import materialise_draws
from models.sampling import seeded
from models.vgg import VGGStar, mc_logits
from training.data.augment import normalise


@torch.no_grad()
def mc_probabilities(
    model: nn.Module,
    dataset: Dataset[tuple[torch.Tensor, torch.Tensor, int]],
    *,
    mean: Sequence[float],
    std: Sequence[float],
    samples: int,
    seed: int,
    batch_size: int = 16,
    workers: int = 0,
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """(probabilities ``[S, N]``, labels ``[N]``) in dataset order; ``progress`` shows a bar on stderr."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    drawn = (materialise_draws(model, k=samples, seed=seed, strategy="loop" if device.type == "cpu" else "grouped")
             .to(device) if isinstance(model, VGGStar) and model.config.is_bayesian else None)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=workers)
    probs: list[torch.Tensor] = []
    labels: list[torch.Tensor] = []
    with seeded(model, seed):
        for x, y, _ in tqdm(loader, desc=f"scoring {len(loader.dataset)} images x {samples} draws",  # type: ignore[arg-type]
                            unit="batch", disable=not progress):
            x = normalise(x.to(device), mean, std)
            logits = drawn(x) if drawn is not None else mc_logits(model, x, samples)  # [S, B, 1]
            probs.append(torch.sigmoid(logits[..., 0].double()).cpu())
            labels.append(y.cpu())
    model.train(was_training)
    return torch.cat(probs, dim=1).numpy(), torch.cat(labels).numpy().astype(np.int64)
