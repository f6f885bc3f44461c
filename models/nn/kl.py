"""KL(q ‖ p) of a model's variational posterior, collected by walking its modules.

For each Bayesian tensor (every layer's weight and, separately, its bias):

    KL = −H[q] + CE(q, p),   H[q] = Σ log σ + c_family(D)   (analytic, appendix B),
                             CE(q, p) = −E_q[log p(w)] ≈ −(1/S) Σ_s log p(w_s)

where the w_s are the S samples drawn in the layer's **last forward pass** (so call this after the forward
whose NLL you are optimising, as the paper does).  With ``method="analytic"`` a Gaussian posterior against a
Gaussian prior uses the closed form instead (used in tests and available as a low-variance option).

The ELBO scaling (mean NLL + KL / N_train) lives in ``training``, not here.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from models.nn.layers import BayesianLayer
from models.nn.posteriors import entropy, sigma_from_rho
from models.nn.priors import PosteriorPrior, Prior, UnitGaussianPrior


def bayesian_layers(model: nn.Module) -> list[tuple[str, BayesianLayer]]:
    return [(name, m) for name, m in model.named_modules() if isinstance(m, BayesianLayer)]


def _analytic_gaussian_kl(mu: Tensor, sigma: Tensor, prior_mu: Tensor | float, prior_sigma: Tensor | float
                          ) -> Tensor:
    prior_sigma_t = torch.as_tensor(prior_sigma, dtype=mu.dtype, device=mu.device)
    return (torch.log(prior_sigma_t / sigma) + (sigma.pow(2) + (mu - prior_mu) ** 2)
            / (2 * prior_sigma_t.pow(2)) - 0.5).sum()


def kl_divergence(model: nn.Module, prior: Prior | None = None,
                  method: Literal["mc", "analytic"] = "mc") -> Tensor:
    """Sum of KL(q ‖ p) over every Bayesian tensor of ``model`` (a scalar tensor with gradients)."""
    prior = prior or UnitGaussianPrior()
    layers = bayesian_layers(model)
    if not layers:
        raise ValueError("kl_divergence: the model has no Bayesian layers.")
    total: Tensor | None = None
    for name, layer in layers:
        for part in ("weight", "bias"):
            mu: Tensor = getattr(layer, f"{part}_mu")
            rho: Tensor = getattr(layer, f"{part}_rho")
            pname = f"{name}.{part}" if name else part
            if method == "analytic":
                if layer.posterior != "gaussian":
                    raise ValueError(f"Analytic KL needs a Gaussian posterior; {pname} is {layer.posterior}.")
                if isinstance(prior, UnitGaussianPrior):
                    term = _analytic_gaussian_kl(mu, sigma_from_rho(rho), 0.0, 1.0)
                elif isinstance(prior, PosteriorPrior):
                    term = _analytic_gaussian_kl(mu, sigma_from_rho(rho), prior.mu[pname].to(mu),
                                                 prior.sigma[pname].to(mu))
                else:
                    raise ValueError(f"No closed-form KL for prior {type(prior).__name__}; use method='mc'.")
            else:
                if part not in layer.last_sample:
                    raise RuntimeError(
                        f"{pname}: no weight sample from a forward pass; run a sampling forward "
                        "(not under use_means) before kl_divergence(method='mc')."
                    )
                samples = layer.last_sample[part]  # [S, *shape]
                cross_entropy = -prior.log_prob(samples, pname).mean()
                term = cross_entropy - entropy(layer.posterior, rho)
            total = term if total is None else total + term
    assert total is not None
    return total
