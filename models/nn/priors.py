"""Priors over weights, used through the Monte Carlo cross-entropy  −E_q[log p(w)].

* :class:`UnitGaussianPrior` — N(0, I), the paper's default.
* :class:`ScaleMixturePrior` — Blundell et al. (2015):  π N(0, σ₁²) + (1 − π) N(0, σ₂²)  per weight.
* :class:`PosteriorPrior` — a previous (trained) posterior used as the prior (appendix C, continual learning):
  the Gaussian form  N(μ_prior, σ_prior²)  whose log-density's μ/σ-dependent part is eq. 44.

Every prior returns ``log_prob(w, name) -> [S]``: the log density of each of S sampled tensors, summed over
the tensor's elements; ``name`` is the parameter's qualified name (``"features.0.weight"``).
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from models.nn.posteriors import sigma_from_rho

_LOG_2PI = math.log(2.0 * math.pi)


class Prior(Protocol):
    def log_prob(self, w: Tensor, name: str) -> Tensor: ...  # w [S, *shape] -> [S]

    def to_config(self) -> dict[str, Any]: ...


class UnitGaussianPrior:
    """p(w) = N(0, I)."""

    def log_prob(self, w: Tensor, name: str) -> Tensor:
        return (-0.5 * w.pow(2) - 0.5 * _LOG_2PI).flatten(1).sum(1)

    def to_config(self) -> dict[str, Any]:
        return {"kind": "unit_gaussian"}


class ScaleMixturePrior:
    """p(w) = Π_i [π N(w_i; 0, σ₁²) + (1 − π) N(w_i; 0, σ₂²)]  (Blundell et al. 2015, eq. 7)."""

    def __init__(self, pi: float = 0.5, sigma1: float = 1.0, sigma2: float = math.exp(-6.0)) -> None:
        if not 0.0 < pi < 1.0:
            raise ValueError(f"Scale-mixture weight pi must lie in (0, 1), got {pi}.")
        if sigma1 <= 0 or sigma2 <= 0:
            raise ValueError(f"Scale-mixture sigmas must be positive, got {sigma1}, {sigma2}.")
        self.pi, self.sigma1, self.sigma2 = pi, sigma1, sigma2

    def log_prob(self, w: Tensor, name: str) -> Tensor:
        c1 = math.log(self.pi) - math.log(self.sigma1) - 0.5 * _LOG_2PI
        c2 = math.log1p(-self.pi) - math.log(self.sigma2) - 0.5 * _LOG_2PI
        a = c1 - 0.5 * (w / self.sigma1).pow(2)
        b = c2 - 0.5 * (w / self.sigma2).pow(2)
        return torch.logaddexp(a, b).flatten(1).sum(1)

    def to_config(self) -> dict[str, Any]:
        return {"kind": "scale_mixture", "pi": self.pi, "sigma1": self.sigma1, "sigma2": self.sigma2}


class PosteriorPrior:
    """A trained posterior (μ, σ per weight, frozen) used as the prior for the next task (appendix C)."""

    def __init__(self, mu: dict[str, Tensor], sigma: dict[str, Tensor]) -> None:
        missing = set(mu) ^ set(sigma)
        if missing:
            raise ValueError(f"PosteriorPrior needs both mu and sigma for: {sorted(missing)}")
        self.mu = {k: v.detach().clone() for k, v in mu.items()}
        self.sigma = {k: v.detach().clone() for k, v in sigma.items()}

    @classmethod
    def from_model(cls, model: nn.Module) -> PosteriorPrior:
        """Freeze the current posterior of every Bayesian tensor of ``model`` (``<name>_mu``/``<name>_rho``)."""
        mu: dict[str, Tensor] = {}
        sigma: dict[str, Tensor] = {}
        params = dict(model.named_parameters())
        for pname, param in params.items():
            if pname.endswith("_mu") and pname[: -len("_mu")] + "_rho" in params:
                base = pname[: -len("_mu")]  # "features.0.weight"
                mu[base] = param
                sigma[base] = sigma_from_rho(params[base + "_rho"])
        if not mu:
            raise ValueError("Model has no Bayesian parameters (<name>_mu / <name>_rho) to use as a prior.")
        return cls(mu, sigma)

    def log_prob(self, w: Tensor, name: str) -> Tensor:
        if name not in self.mu:
            raise KeyError(f"PosteriorPrior has no entry for parameter {name!r}; known: {sorted(self.mu)[:5]}…")
        mu = self.mu[name].to(w.device, w.dtype)
        sigma = self.sigma[name].to(w.device, w.dtype)
        z = (w - mu) / sigma
        return (-0.5 * z.pow(2) - torch.log(sigma) - 0.5 * _LOG_2PI).flatten(1).sum(1)

    def to_config(self) -> dict[str, Any]:
        return {"kind": "posterior", "parameters": len(self.mu)}


PRIOR_KINDS = ("unit_gaussian", "scale_mixture")
# the posterior of the artifact a run starts from (TrainConfig.init_from), frozen at the start: continual learning
PARENT_POSTERIOR = "parent_posterior"


def is_parent_posterior(cfg: dict[str, Any] | None) -> bool:
    return bool(cfg) and (cfg or {}).get("kind") == PARENT_POSTERIOR


def prior_from_config(cfg: dict[str, Any] | None) -> Prior:
    """Build a prior from its config dict (``{"kind": "unit_gaussian"}`` by default). ``{"kind":
    "parent_posterior"}`` stands for the starting artifact's posterior, which only the trainer has: here it is
    the unit Gaussian, replaced by ``PosteriorPrior.from_model`` once the artifact's weights are loaded."""
    cfg = dict(cfg or {"kind": "unit_gaussian"})
    kind = cfg.pop("kind", "unit_gaussian")
    if kind in ("unit_gaussian", PARENT_POSTERIOR):
        return UnitGaussianPrior()
    if kind == "scale_mixture":
        return ScaleMixturePrior(**cfg)
    raise ValueError(
        f"Unknown prior {kind!r}; expected one of: {', '.join((*PRIOR_KINDS, PARENT_POSTERIOR))} "
        "(a posterior prior is built in code with PosteriorPrior.from_model)."
    )
