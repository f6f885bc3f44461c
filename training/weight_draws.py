"""The training step's weight draws and KL over every Bayesian tensor at once, in a few operations.

Each Bayesian layer draws its own weights (``models.nn.layers``: per tensor, a normal draw, its norm, a radius, the
softplus, the sum) and ``models.nn.kl.kl_divergence`` walks the layers again for the KL: some forty operations
per tensor, forward and backward, that a GPU's host must dispatch each step whatever the model's size
(benchmarks/train_step_host.py). Here the step sees the network's posterior as one vector of D elements, the
means and ρ of its T tensors concatenated in the model's order:

* the noise: one normal draw of S·D values, laid out tensor by tensor and, within a tensor, sample by sample,
  so each (tensor, sample) is a contiguous piece; for the radial posterior the pieces' norms in one multi-tensor
  operation (``torch._foreach_norm``), S·T radii in one draw, and the direction times its radius
  ``ε = r · e / ‖e‖`` in one product; the Gaussian posterior uses ``e`` as it is;
* the weights: ``w = μ + softplus(ρ) · ε`` on the flat vector, handed to the layers as views
  (``BayesianLayer.drawn``) for the forward;
* the KL: ``CE(q, p) − H[q]`` with the prior's log density summed over the flat draws and the entropy
  ``Σ log σ + Σ_t c(D_t)``, the same terms ``kl_divergence`` adds tensor by tensor.

The posterior is the layers' own: every tensor's every sample has its own direction, uniform on its sphere, and
its own radius ~ N(0, 1), independent of every other (tests/training/test_weight_draws.py checks the
distribution and the KL against the layer-wise path). Only the order in which the generator's numbers are used
differs, so a run's draws differ from the layer-wise ones; serving never comes here (its draws are the
layers' own, ``models.nn.draws``). A prior that depends on the tensor's name (a previous posterior) or a model
whose layers mix posterior families keeps the layer-wise path (:meth:`FlatPosterior.supports`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.nn.kl import bayesian_layers
from models.nn.layers import BayesianLayer
from models.nn.posteriors import entropy_constant
from models.nn.priors import Prior, ScaleMixturePrior, UnitGaussianPrior

PARTS = ("weight", "bias")


@dataclass(frozen=True)
class FlatDraw:
    """One step's draws: the flat weights ``[S, D]`` (with gradients to μ and ρ) and the flat σ ``[D]``."""

    weights: Tensor
    sigma: Tensor


class FlatPosterior:
    """Every Bayesian tensor of ``model`` as one vector (see the module docstring)."""

    def __init__(self, model: nn.Module) -> None:
        layers = [layer for _, layer in bayesian_layers(model)]
        if not layers or not self.supports(model):
            raise ValueError("FlatPosterior needs Bayesian layers of one posterior family")
        self.layers: list[BayesianLayer] = layers
        self.family = layers[0].posterior
        self.mus = [getattr(layer, f"{part}_mu") for layer in layers for part in PARTS]
        self.rhos = [getattr(layer, f"{part}_rho") for layer in layers for part in PARTS]
        self.sizes = [p.numel() for p in self.mus]
        self.shapes = [tuple(p.shape) for p in self.mus]
        self.numel = sum(self.sizes)
        self.entropy_constant = sum(entropy_constant(self.family, d) for d in self.sizes)
        self._pieces: dict[int, tuple[list[int], Tensor]] = {}  # samples -> piece sizes, and on the device

    @staticmethod
    def supports(model: nn.Module, prior: Prior | None = None) -> bool:
        """Whether the flat path draws ``model``'s posterior: Bayesian layers of one family, and a prior whose log
        density is the same function of every element (unit Gaussian, scale mixture)."""
        families = {layer.posterior for _, layer in bayesian_layers(model)}
        prior_ok = prior is None or isinstance(prior, UnitGaussianPrior | ScaleMixturePrior)
        return len(families) == 1 and prior_ok

    def _piece_sizes(self, samples: int, device: torch.device) -> tuple[list[int], Tensor]:
        if samples not in self._pieces:
            sizes = [d for d in self.sizes for _ in range(samples)]  # tensor by tensor, sample by sample
            self._pieces[samples] = (sizes, torch.tensor(sizes, device=device))
        return self._pieces[samples]

    def noise(self, samples: int, generator: torch.Generator) -> Tensor:
        """ε ``[S, D]`` on the generator's device: every (tensor, sample) its own draw of the layers' family."""
        device = generator.device
        e = torch.randn(samples * self.numel, generator=generator, device=device)  # tensor-major pieces
        if self.family == "radial":
            sizes, sizes_t = self._piece_sizes(samples, device)
            norms = torch.stack(torch._foreach_norm(e.split(sizes)))  # [T·S]
            radius = torch.randn(len(sizes), generator=generator, device=device)  # one N(0, 1) per piece
            e = e * (radius / norms).repeat_interleave(sizes_t, output_size=e.numel())
        if samples == 1:
            return e.view(1, self.numel)
        return torch.cat([p.view(samples, d) for p, d in
                          zip(e.split([d * samples for d in self.sizes]), self.sizes, strict=True)], dim=1)

    def draw(self, samples: int, generator: torch.Generator) -> FlatDraw:
        """The step's weights ``w = μ + softplus(ρ) · ε`` as one ``[S, D]`` tensor."""
        mu = torch.cat([p.reshape(-1) for p in self.mus])
        sigma = F.softplus(torch.cat([p.reshape(-1) for p in self.rhos]))
        eps = self.noise(samples, generator).to(mu.dtype)
        return FlatDraw(mu + sigma * eps, sigma)

    @contextmanager
    def drawn(self, draw: FlatDraw) -> Iterator[None]:
        """The layers forward with ``draw``'s weights (as views of it) for the duration of the block."""
        samples = draw.weights.shape[0]
        if any(layer.use_mean for layer in self.layers):
            raise RuntimeError("a flat draw for layers held at their means (models.nn.sampling.use_means)")
        views = [w.view(samples, *shape) for w, shape in
                 zip(draw.weights.split(self.sizes, dim=1), self.shapes, strict=True)]
        for i, layer in enumerate(self.layers):
            layer.drawn = (views[2 * i], views[2 * i + 1])
        try:
            yield
        finally:
            for layer in self.layers:
                layer.drawn = None

    def kl(self, draw: FlatDraw, prior: Prior) -> Tensor:
        """KL(q ‖ p) of the whole posterior on ``draw``: the prior cross-entropy by Monte Carlo over its samples
        minus the exact entropy, as ``models.nn.kl.kl_divergence`` with ``method="mc"``."""
        cross_entropy = -prior.log_prob(draw.weights, "").mean()  # log p summed over every element, per sample
        return cross_entropy - (torch.log(draw.sigma).sum() + self.entropy_constant)
