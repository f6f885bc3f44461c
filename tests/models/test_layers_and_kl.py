"""Bayesian layers and the KL term: strategies agree, seeds reproduce, gradients reach every μ and ρ,
KL ≥ 0 and = 0 when posterior = prior, the MC KL estimate is unbiased for the analytic one."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from models.nn.kl import kl_divergence
from models.nn.layers import BayesConv2d, BayesLinear
from models.nn.posteriors import rho_from_sigma
from models.nn.priors import PosteriorPrior, ScaleMixturePrior, UnitGaussianPrior, prior_from_config
from models.nn.sampling import seeded, use_means
from models.nn.vgg import build_vgg16_star, mc_logits


@pytest.mark.parametrize("posterior", ["radial", "gaussian"])
def test_loop_and_grouped_strategies_agree(posterior: str) -> None:
    torch.manual_seed(0)
    grouped = BayesConv2d(3, 5, posterior=posterior, rho_init=-2.0, strategy="grouped")
    loop = BayesConv2d(3, 5, posterior=posterior, rho_init=-2.0, strategy="loop")
    loop.load_state_dict(grouped.state_dict())
    x = torch.randn(4, 2, 3, 9, 9)  # [S, B, C, H, W]
    with seeded(grouped, 3), seeded(loop, 3):
        a, b = grouped(x), loop(x)
    assert a.shape == (4, 2, 5, 9, 9)
    assert torch.allclose(a, b, atol=1e-5)
    lin_g = BayesLinear(6, 2, posterior=posterior, strategy="grouped")
    lin_l = BayesLinear(6, 2, posterior=posterior, strategy="loop")
    lin_l.load_state_dict(lin_g.state_dict())
    z = torch.randn(4, 3, 6)
    with seeded(lin_g, 1), seeded(lin_l, 1):
        assert torch.allclose(lin_g(z), lin_l(z), atol=1e-6)


def test_each_sample_uses_its_own_weights() -> None:
    layer = BayesConv2d(2, 2, posterior="radial", rho_init=0.0)
    x = torch.randn(1, 1, 2, 5, 5).expand(3, 1, 2, 5, 5)  # the same image in three samples
    y = layer(x)
    assert not torch.allclose(y[0], y[1])
    w = layer.last_sample["weight"]
    assert torch.allclose(y[2, 0], F.conv2d(x[2], w[2], layer.last_sample["bias"][2], 1, 1)[0], atol=1e-5)


def test_seeded_model_reproduces_and_unseeded_differs() -> None:
    model = build_vgg16_star(width=2, input_size=32, rho_init=-2.0)
    x = torch.randn(2, 3, 32, 32)
    with seeded(model, 42):
        a = mc_logits(model, x, 4)
    with seeded(model, 42):
        b = mc_logits(model, x, 4)
    c = mc_logits(model, x, 4)
    assert torch.equal(a, b)
    assert not torch.allclose(a, c)
    with use_means(model):
        m1, m2 = mc_logits(model, x, 2), mc_logits(model, x, 2)
    assert torch.equal(m1, m2) and torch.allclose(m1[0], m1[1], atol=1e-6)


@pytest.mark.parametrize("posterior", ["radial", "gaussian"])
def test_gradients_reach_every_mu_and_rho(posterior: str) -> None:
    model = build_vgg16_star(width=2, input_size=32, layer=posterior, rho_init=-3.0)
    x, y = torch.randn(3, 3, 32, 32), torch.tensor([0.0, 1.0, 1.0])
    logits = mc_logits(model, x, 2)[..., 0]
    nll = F.binary_cross_entropy_with_logits(logits, y.expand_as(logits))
    (nll + kl_divergence(model) / 100).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        assert p.grad.abs().sum() > 0, f"zero gradient for {name}"


def test_analytic_kl_is_zero_when_posterior_equals_prior_and_positive_otherwise() -> None:
    layer = BayesLinear(20, 10, posterior="gaussian")
    with torch.no_grad():
        for part in ("weight", "bias"):
            getattr(layer, f"{part}_mu").zero_()
            getattr(layer, f"{part}_rho").fill_(rho_from_sigma(1.0).item())
    assert kl_divergence(layer, method="analytic").item() == pytest.approx(0.0, abs=1e-4)
    torch.manual_seed(0)
    for _ in range(5):
        with torch.no_grad():
            layer.weight_mu.normal_()
            layer.weight_rho.normal_()
        assert kl_divergence(layer, method="analytic").item() > 0
    prior = PosteriorPrior.from_model(layer)
    assert kl_divergence(layer, prior, method="analytic").item() == pytest.approx(0.0, abs=1e-4)


def test_monte_carlo_kl_is_unbiased_for_the_analytic_kl() -> None:
    torch.manual_seed(1)
    layer = BayesLinear(8, 4, posterior="gaussian", rho_init=-1.0)
    x = torch.randn(1, 1, 8)
    estimates = []
    with seeded(layer, 5):
        for _ in range(4000):
            layer(x)
            estimates.append(kl_divergence(layer).item())
    est = torch.tensor(estimates, dtype=torch.float64)
    exact = kl_divergence(layer, method="analytic").item()
    assert abs(est.mean().item() - exact) < 4 * est.std().item() / math.sqrt(len(est))


def test_monte_carlo_kl_near_zero_at_prior_and_needs_a_sample() -> None:
    layer = BayesLinear(30, 30, posterior="gaussian")
    with pytest.raises(RuntimeError, match="no weight sample"):
        kl_divergence(layer)
    with torch.no_grad():
        layer.weight_mu.zero_(); layer.bias_mu.zero_()  # noqa: E702
        layer.weight_rho.fill_(rho_from_sigma(1.0).item()); layer.bias_rho.fill_(rho_from_sigma(1.0).item())  # noqa: E702
    layer(torch.randn(2000, 1, 30))  # 2000 MC samples
    # D = 930; the estimator's sd is sqrt(D/2)/sqrt(S) ≈ 0.48.
    assert abs(kl_divergence(layer).item()) < 2.5


def test_scale_mixture_log_prob_matches_hand_computation() -> None:
    prior = ScaleMixturePrior(pi=0.25, sigma1=1.0, sigma2=0.1)
    w = torch.tensor([[0.0, 0.3, -2.0]])
    expected = sum(
        math.log(0.25 * math.exp(-v * v / 2) / math.sqrt(2 * math.pi)
                 + 0.75 * math.exp(-v * v / 0.02) / (0.1 * math.sqrt(2 * math.pi)))
        for v in (0.0, 0.3, -2.0)
    )
    assert prior.log_prob(w, "x").item() == pytest.approx(expected, rel=1e-5)
    unit = UnitGaussianPrior().log_prob(w, "x").item()
    assert unit == pytest.approx(sum(-v * v / 2 - 0.5 * math.log(2 * math.pi) for v in (0.0, 0.3, -2.0)))


def test_prior_from_config_and_errors() -> None:
    assert isinstance(prior_from_config(None), UnitGaussianPrior)
    p = prior_from_config({"kind": "scale_mixture", "pi": 0.5, "sigma1": 1.0, "sigma2": 0.01})
    assert isinstance(p, ScaleMixturePrior) and p.to_config()["sigma2"] == 0.01
    with pytest.raises(ValueError, match="Unknown prior 'laplace'; expected one of: unit_gaussian"):
        prior_from_config({"kind": "laplace"})
