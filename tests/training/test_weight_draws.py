"""The training step's flat weight draws and KL (training.weight_draws) are the layers' posterior: each tensor's
every sample has a radius ~ N(0, 1) and a direction uniform on its sphere, independent of every other tensor's;
the KL is the layer-wise KL on the same draws, with the same gradients; and a layer left alone still draws its
own weights exactly as serving does."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats
from torch import nn

from models.nn.kl import kl_divergence
from models.nn.layers import BayesConv2d, BayesLinear
from models.nn.posteriors import sample_noise, sigma_from_rho
from models.nn.priors import PosteriorPrior, ScaleMixturePrior, UnitGaussianPrior
from models.nn.sampling import seeded
from training.config import TrainConfig
from training.data.prepare import prepare_data
from training.device_data import epoch_batches
from training.loop import Trainer
from training.weight_draws import FlatPosterior

N = 4000


def _net(posterior: str = "radial") -> nn.Sequential:
    """Tensors of D = 1, 2, 9, 54, 4608 elements: the sizes where a wrong norm or a shared radius would show."""
    torch.manual_seed(0)
    return nn.Sequential(BayesConv2d(1, 1, posterior=posterior, rho_init=-3.0),
                         BayesConv2d(2, 3, posterior=posterior, rho_init=-3.0),
                         BayesConv2d(16, 32, posterior=posterior, rho_init=-3.0),
                         BayesLinear(2, 1, posterior=posterior, rho_init=-3.0))


def _noise_by_tensor(flat: FlatPosterior, seed: int) -> list[torch.Tensor]:
    eps = flat.noise(N, torch.Generator().manual_seed(seed)).double()  # [N, D]
    return list(eps.split(flat.sizes, dim=1))  # the model's tensors in order: [N, D_t] each


def test_each_tensors_radius_is_a_standard_normal_and_its_direction_uniform_on_its_sphere() -> None:
    flat = FlatPosterior(_net())
    assert flat.sizes == [9, 1, 54, 3, 4608, 32, 2, 1]
    rng = np.random.default_rng(0)
    for d, eps in zip(flat.sizes, _noise_by_tensor(flat, seed=1), strict=True):
        radius = eps.norm(dim=1).numpy()
        assert stats.kstest(radius, stats.halfnorm.cdf).pvalue > 1e-3, f"D={d}: radius not |N(0,1)|"
        if d == 1:  # the direction of a scalar is its sign: a fair coin
            assert abs((eps[:, 0] > 0).double().mean().item() - 0.5) < 4 * 0.5 / math.sqrt(N)
            continue
        u = eps / eps.norm(dim=1, keepdim=True)
        v = torch.from_numpy(rng.standard_normal(d))
        v = v / v.norm()
        a = (d - 1) / 2  # (u·v + 1)/2 ~ Beta((D-1)/2, (D-1)/2) for u uniform on S^{D-1}
        assert stats.kstest(((u @ v).numpy() + 1) / 2, stats.beta(a, a).cdf).pvalue > 1e-3, f"D={d}: direction"
        assert u.mean(dim=0).norm() < 4.5 / math.sqrt(N)


def test_the_tensors_draws_are_independent_and_the_samples_too() -> None:
    flat = FlatPosterior(_net())
    radii = np.stack([e.norm(dim=1).numpy() for e in _noise_by_tensor(flat, seed=2)])  # [T, N]
    corr = np.corrcoef(radii)
    assert np.abs(corr[~np.eye(len(radii), dtype=bool)]).max() < 0.07  # |r| ~ 1/sqrt(N) = 0.016 if independent
    eps = flat.noise(2, torch.Generator().manual_seed(3))
    assert not torch.equal(eps[0], eps[1])


def test_the_gaussian_family_is_an_isotropic_normal() -> None:
    flat = FlatPosterior(_net("gaussian"))
    for d, eps in zip(flat.sizes, _noise_by_tensor(flat, seed=4), strict=True):
        assert stats.kstest(eps.norm(dim=1).numpy(), stats.chi(d).cdf).pvalue > 1e-3, f"D={d}"


@pytest.mark.parametrize("prior", [UnitGaussianPrior(), ScaleMixturePrior()], ids=["unit", "mixture"])
@pytest.mark.parametrize("samples", [1, 3])
def test_the_kl_and_its_gradients_are_the_layer_wise_ones_on_the_same_draws(prior: object, samples: int) -> None:
    net = _net()
    flat = FlatPosterior(net)
    draw = flat.draw(samples, torch.Generator().manual_seed(5))
    with flat.drawn(draw):
        for layer in flat.layers:  # what a forward does: each layer takes its part of the flat draw
            layer.sample_parameters(samples)
    assert all(layer.drawn is None for layer in flat.layers)
    ours = flat.kl(draw, prior)  # type: ignore[arg-type]
    theirs = kl_divergence(net, prior)  # type: ignore[arg-type]
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-3)
    g_ours = torch.autograd.grad(ours, list(net.parameters()), retain_graph=True)
    g_theirs = torch.autograd.grad(theirs, list(net.parameters()))
    for a, b in zip(g_ours, g_theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_the_layers_forward_on_the_flat_draw() -> None:
    net = _net()
    flat = FlatPosterior(net)
    draw = flat.draw(2, torch.Generator().manual_seed(6))
    w = draw.weights.split(flat.sizes, dim=1)
    layer = flat.layers[1]
    with flat.drawn(draw):
        got_w, got_b = layer.sample_parameters(2)
        with pytest.raises(ValueError, match="3 weight samples asked for, 2 drawn"):
            layer.sample_parameters(3)
    assert torch.equal(got_w, w[2].view(2, 3, 2, 3, 3)) and torch.equal(got_b, w[3])
    mu, sigma = layer.weight_mu, sigma_from_rho(layer.weight_rho)
    eps = (got_w - mu) / sigma
    noise = flat.noise(2, torch.Generator().manual_seed(6))[:, 9 + 1:9 + 1 + 54]  # the same generator's ε
    torch.testing.assert_close(eps.flatten(1), noise, rtol=1e-3, atol=1e-4)


def test_a_layer_left_alone_draws_its_own_weights_as_serving_does() -> None:
    net = _net()
    flat = FlatPosterior(net)
    with flat.drawn(flat.draw(1, torch.Generator().manual_seed(7))):
        pass
    layer = flat.layers[2]
    with seeded(net, 8):
        w, b = layer.sample_parameters(4)
    g = torch.Generator().manual_seed(8)
    eps_w = sample_noise("radial", tuple(layer.weight_mu.shape), samples=4, generator=g)
    eps_b = sample_noise("radial", tuple(layer.bias_mu.shape), samples=4, generator=g)
    assert torch.equal(w, layer.weight_mu + sigma_from_rho(layer.weight_rho) * eps_w)
    assert torch.equal(b, layer.bias_mu + sigma_from_rho(layer.bias_rho) * eps_b)


def test_a_named_prior_or_mixed_families_keep_the_layer_wise_path() -> None:
    net = _net()
    assert FlatPosterior.supports(net, UnitGaussianPrior()) and FlatPosterior.supports(net, ScaleMixturePrior())
    assert not FlatPosterior.supports(net, PosteriorPrior.from_model(net))
    mixed = nn.Sequential(BayesConv2d(1, 1, posterior="radial"), BayesLinear(2, 1, posterior="gaussian"))
    assert not FlatPosterior.supports(mixed)
    with pytest.raises(ValueError, match="one posterior family"):
        FlatPosterior(mixed)


@pytest.mark.training
def test_the_trainer_draws_flat_for_a_radial_network_and_layer_wise_otherwise(tiny_data: Path, tmp_path: Path) -> None:
    base: dict[str, object] = dict(data=str(tiny_data), device="cpu", precision="fp32", width=2, input_size=32,
                                   epochs=2, batch_size=4, grad_sd_samples=0)
    radial = TrainConfig(out=str(tmp_path / "radial"), **base)  # type: ignore[arg-type]
    trainer = Trainer(radial, progress=False)
    data = prepare_data(trainer.config)
    run = trainer._start(data)
    assert run.flat is not None and len(run.flat.layers) == 14  # 13 convolutions and the head
    x, y = next(epoch_batches(None, data.train, [[0, 1, 2, 3]], torch.device("cpu"), 0))
    step = trainer.train_step(run, x, y, data, means_only=False)
    assert torch.isfinite(step.kl) and float(step.kl) > 0
    assert all(layer.drawn is None and layer.generator is None for layer in run.flat.layers)  # nothing left set
    dropout = TrainConfig(out=str(tmp_path / "dropout"), model="dropout_vgg16_star", **base)  # type: ignore[arg-type]
    (tmp_path / "dropout").mkdir()
    assert Trainer(dropout, progress=False)._start(data).flat is None
