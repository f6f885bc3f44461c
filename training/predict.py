"""Monte Carlo predictions over a dataset: ``[S, N]`` probabilities of referable DR.

Bayesian models are evaluated through their **serving form** — ``models.nn.draws.ServingDraws``: the K fixed
posterior draws with the artifact's seed, each with its ``head_draws`` draws of the last layer, as
``Artifact.serving_draws()`` or, before the artifact exists, ``TrainConfig.serving_draws()`` hands them
out — so validation numbers, the calibrated MI threshold and the service's answers come from the same
networks. MC-dropout and deterministic baselines use seeded stochastic passes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeGuard

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from models.artifact.schema import ServingDraws
from models.nn.draws import DrawnNetwork, run_views
from models.nn.sampling import seeded
from models.nn.vgg import VGGStar, mc_logits
from models.platform.compute import resolve_strategy
from training.data.augment import normalise


def is_bayesian(model: nn.Module) -> TypeGuard[VGGStar]:
    """Whether ``model`` has a weight posterior with a serving form (radial/Gaussian VGG-16*)."""
    return isinstance(model, VGGStar) and model.config.is_bayesian


@torch.no_grad()
def _scored(x: torch.Tensor, drawn: DrawnNetwork | None, model: nn.Module, samples: int) -> torch.Tensor:
    """One batch's logits ``[S, B, 1]``: the fixed draws (channels-last, as the service), or a baseline's
    ``samples`` seeded stochastic passes."""
    x = x.contiguous(memory_format=torch.channels_last)
    return drawn(x) if drawn is not None else mc_logits(model, x, samples)


def mc_probabilities(
    model: nn.Module,
    dataset: Dataset[tuple[torch.Tensor, torch.Tensor, int]],
    *,
    mean: Sequence[float],
    std: Sequence[float],
    draws: ServingDraws,
    batch_size: int = 16,
    workers: int = 0,
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """(probabilities ``[S, N]``, labels ``[N]``) in dataset order; ``progress`` shows a bar on stderr.

    Bayesian models: S = K · M of ``draws`` (draw-major, as :class:`models.nn.draws.DrawnNetwork`), times 2 with
    ``draws.test_time_flip``: the mirrored images' S draws follow the images' own.
    MC-dropout and deterministic baselines run K seeded stochastic passes and have no head posterior:
    ``draws.head_draws`` must be 1 for them.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    if draws.head_draws != 1 and not is_bayesian(model):
        raise ValueError(f"head_draws={draws.head_draws}: only a Bayesian model's last layer has a posterior to draw")
    strategy, _ = resolve_strategy("auto", device=device.type)  # as the service: a loop on CPU, grouped on GPU
    drawn = draws.materialise(model, strategy=strategy).to(device) if is_bayesian(model) else None
    if drawn is not None:
        drawn = drawn.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # as the service
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=workers)
    probs: list[torch.Tensor] = []
    labels: list[torch.Tensor] = []
    with seeded(model, draws.draw_seed):
        n = len(loader.dataset)  # type: ignore[arg-type]
        desc = f"scoring {n} images x {draws.mc_samples} draws" + (" x 2 views" if draws.test_time_flip else "")
        for x, y, _ in tqdm(loader, desc=desc, unit="batch", disable=not progress):
            x = normalise(x.to(device), mean, std).contiguous(memory_format=torch.channels_last)  # as the service
            logits = run_views(lambda v: _scored(v, drawn, model, draws.mc_samples), x,
                               flip=draws.test_time_flip)  # [S, B, 1], as the service (models.nn.draws)
            probs.append(torch.sigmoid(logits[..., 0].double()).cpu())
            labels.append(y.cpu())
    model.train(was_training)
    return torch.cat(probs, dim=1).numpy(), torch.cat(labels).numpy().astype(np.int64)
