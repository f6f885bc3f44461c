"""Sampler distributions match theory (fixed seeds): the radial radius is |N(0,1)| and its direction is
uniform on the sphere whatever the layer size; the Gaussian radius concentrates at √D (the soap bubble)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from models.nn.layers import BayesConv2d
from models.nn.posteriors import (
    check_family,
    entropy,
    entropy_constant,
    rho_from_sigma,
    sample_noise,
    sigma_from_rho,
)

N = 4000


def _layer_noise(posterior: str, in_ch: int, out_ch: int, seed: int) -> torch.Tensor:
    """ε = (w − μ)/σ recovered from a real layer's weight samples: [N, D]."""
    layer = BayesConv2d(in_ch, out_ch, posterior=posterior, rho_init=-3.0)
    g = torch.Generator().manual_seed(seed)
    layer.generator = g
    with torch.no_grad():
        w, _ = layer.sample_parameters(N)
        eps = (w - layer.weight_mu) / sigma_from_rho(layer.weight_rho)
    return eps.reshape(N, -1).double()


@pytest.mark.parametrize(("in_ch", "out_ch"), [(1, 1), (2, 3), (16, 32)])  # D = 9, 54, 4608
def test_radial_radius_is_half_normal_for_any_layer_size(in_ch: int, out_ch: int) -> None:
    radius = _layer_noise("radial", in_ch, out_ch, seed=1).norm(dim=1).numpy()
    result = stats.kstest(radius, stats.halfnorm.cdf)
    assert result.pvalue > 1e-3, f"radius not |N(0,1)|: KS p={result.pvalue:.4f}"
    assert abs(radius.mean() - math.sqrt(2 / math.pi)) < 0.05


@pytest.mark.parametrize(("in_ch", "out_ch"), [(1, 1), (2, 3), (16, 32)])
def test_radial_direction_is_uniform_on_the_sphere(in_ch: int, out_ch: int) -> None:
    eps = _layer_noise("radial", in_ch, out_ch, seed=2)
    d = eps.shape[1]
    u = eps / eps.norm(dim=1, keepdim=True)
    rng = np.random.default_rng(0)
    v = torch.from_numpy(rng.standard_normal(d))
    v = v / v.norm()
    # For u uniform on S^{D-1}, (u·v + 1)/2 ~ Beta((D-1)/2, (D-1)/2) for any fixed unit v.
    t = ((u @ v).numpy() + 1) / 2
    a = (d - 1) / 2
    result = stats.kstest(t, stats.beta(a, a).cdf)
    assert result.pvalue > 1e-3, f"direction not uniform: KS p={result.pvalue:.4f}"
    # No preferred axis: the mean direction is near zero (|mean| ~ 1/sqrt(N)).
    assert u.mean(dim=0).norm() < 3 * math.sqrt(1 / N) * 1.5


def test_gaussian_radius_is_the_soap_bubble() -> None:
    eps = _layer_noise("gaussian", 16, 32, seed=3)
    d = eps.shape[1]
    radius = eps.norm(dim=1).numpy()
    assert stats.kstest(radius, stats.chi(d).cdf).pvalue > 1e-3
    # Concentrated on a thin shell at √D, far from the mean: nothing near the radial scale of ~1.
    assert abs(radius.mean() / math.sqrt(d) - 1) < 0.01
    assert radius.min() > 0.9 * math.sqrt(d)


def test_radial_and_bias_draws_are_independent() -> None:
    layer = BayesConv2d(4, 4, posterior="radial", rho_init=-3.0)
    layer.generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        w, b = layer.sample_parameters(N)
        rw = ((w - layer.weight_mu) / sigma_from_rho(layer.weight_rho)).reshape(N, -1).norm(dim=1)
        rb = ((b - layer.bias_mu) / sigma_from_rho(layer.bias_rho)).norm(dim=1)
    corr = np.corrcoef(rw.numpy(), rb.numpy())[0, 1]
    assert abs(corr) < 0.06


@pytest.mark.parametrize("family", ["gaussian", "radial"])
def test_seeded_noise_reproduces_and_unseeded_differs(family: str) -> None:
    f = check_family(family)
    a = sample_noise(f, (3, 5), samples=4, generator=torch.Generator().manual_seed(9))
    b = sample_noise(f, (3, 5), samples=4, generator=torch.Generator().manual_seed(9))
    c = sample_noise(f, (3, 5), samples=4)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_softplus_parametrisation_round_trips() -> None:
    sigma = torch.tensor([1e-4, 0.01, 0.5, 2.0])
    assert torch.allclose(sigma_from_rho(rho_from_sigma(sigma)), sigma, rtol=1e-4)


def test_unknown_family_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="Unknown posterior 'radal'; expected one of: gaussian, radial"):
        check_family("radal")


def test_gaussian_entropy_matches_monte_carlo() -> None:
    g = torch.Generator().manual_seed(11)
    rho = torch.randn(6, 5, generator=g) - 1.0
    sigma = sigma_from_rho(rho).double()
    mu = torch.randn(6, 5, generator=g).double()
    eps = sample_noise("gaussian", (6, 5), samples=200_000, generator=g).double()
    w = mu + sigma * eps
    log_q = torch.distributions.Normal(mu, sigma).log_prob(w).flatten(1).sum(1)
    mc, se = -log_q.mean().item(), log_q.std().item() / math.sqrt(len(log_q))
    assert abs(entropy("gaussian", rho).item() - mc) < 4 * se + 1e-3


@pytest.mark.parametrize("d", [2, 7, 50])
def test_radial_entropy_constant_matches_monte_carlo(d: int) -> None:
    # ε = r·u has density  φ_{|r|}(‖ε‖) / (A_{D-1} ‖ε‖^{D-1});  estimate −E[log p(ε)] by sampling ε.
    g = torch.Generator().manual_seed(d)
    eps = sample_noise("radial", (d,), samples=400_000, generator=g).double()
    r = eps.norm(dim=1)
    log_area = math.log(2) + d / 2 * math.log(math.pi) - math.lgamma(d / 2)
    log_p = torch.from_numpy(stats.halfnorm.logpdf(r.numpy())) - log_area - (d - 1) * torch.log(r)
    mc, se = -log_p.mean().item(), log_p.std().item() / math.sqrt(len(log_p))
    assert abs(entropy_constant("radial", d) - mc) < 4 * se


def test_radial_entropy_equals_gaussian_in_one_dimension() -> None:
    assert entropy_constant("radial", 1) == pytest.approx(entropy_constant("gaussian", 1), rel=1e-12)
