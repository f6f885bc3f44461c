"""Layers that take and return a leading Monte Carlo sample axis: ``[S, B, ...] -> [S, B, ...]``.

Bayesian layers (:class:`BayesConv2d`, :class:`BayesLinear`) draw S independent weight sets per call, one
for each slice of the sample axis, and keep the last draw so :func:`models.nn.kl.kl_divergence` can estimate the
prior cross-entropy over the same samples.  Two execution strategies give the same numbers:

* ``"grouped"`` — one grouped convolution (groups = S) / one batched matmul for all S draws;
* ``"loop"`` — S sequential calls, one per draw.

MC-dropout and deterministic layers accept the same ``[S, B, ...]`` input so one VGG builder yields every
model family.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.nn.posteriors import PosteriorFamily, check_family, sample_noise, sigma_from_rho

Strategy = Literal["grouped", "loop"]
STRATEGIES: tuple[Strategy, ...] = ("grouped", "loop")


def check_strategy(name: str) -> Strategy:
    if name not in STRATEGIES:
        raise ValueError(f"Unknown execution strategy {name!r}; expected one of: {', '.join(STRATEGIES)}.")
    return name


class BayesianLayer(nn.Module):
    """Shared machinery: μ/ρ parameters of a weight and a bias, sampling, and the last draw."""

    weight_mu: nn.Parameter
    weight_rho: nn.Parameter
    bias_mu: nn.Parameter
    bias_rho: nn.Parameter

    def __init__(
        self, weight_shape: tuple[int, ...], out_features: int, *, posterior: str, rho_init: float, fan_in: int
    ) -> None:
        super().__init__()
        self.posterior: PosteriorFamily = check_family(posterior)
        # He initialisation of the means (appendix D.1), small constant σ via ρ.
        self.weight_mu = nn.Parameter(torch.randn(weight_shape) * math.sqrt(2.0 / fan_in))
        self.weight_rho = nn.Parameter(torch.full(weight_shape, float(rho_init)))
        self.bias_mu = nn.Parameter(torch.zeros(out_features))
        self.bias_rho = nn.Parameter(torch.full((out_features,), float(rho_init)))
        self.generator: torch.Generator | None = None
        self.use_mean = False
        self.last_sample: dict[str, Tensor] = {}  # "weight"/"bias" -> [S, *shape], kept for the KL term
        # weight and bias draws made outside the layer for its next forwards (a training step may draw every
        # layer's at once); None: the layer draws its own, as serving always does
        self.drawn: tuple[Tensor, Tensor] | None = None

    def sample_parameters(self, samples: int) -> tuple[Tensor, Tensor]:
        """Draw ``samples`` weight and bias tensors: ([S, *weight_shape], [S, out])."""
        if self.use_mean:
            w = self.weight_mu.unsqueeze(0).expand(samples, *self.weight_mu.shape)
            b = self.bias_mu.unsqueeze(0).expand(samples, *self.bias_mu.shape)
            self.last_sample = {}
            return w, b
        if self.drawn is not None:
            w, b = self.drawn
            if w.shape[0] != samples:
                raise ValueError(f"{samples} weight samples asked for, {w.shape[0]} drawn for this layer")
            self.last_sample = {"weight": w, "bias": b}
            return w, b
        dev, dt = self.weight_mu.device, self.weight_mu.dtype
        eps_w = sample_noise(self.posterior, tuple(self.weight_mu.shape), samples=samples,
                             generator=self.generator, device=dev, dtype=dt)
        eps_b = sample_noise(self.posterior, tuple(self.bias_mu.shape), samples=samples,
                             generator=self.generator, device=dev, dtype=dt)
        w = self.weight_mu + sigma_from_rho(self.weight_rho) * eps_w
        b = self.bias_mu + sigma_from_rho(self.bias_rho) * eps_b
        self.last_sample = {"weight": w, "bias": b}
        return w, b

    def extra_repr(self) -> str:
        return f"posterior={self.posterior}"


class BayesConv2d(BayesianLayer):
    """3×3 (or k×k) convolution with a posterior over its weight and bias; input ``[S, B, C, H, W]``."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int = 3,
        *,
        stride: int = 1,
        padding: int | None = None,
        posterior: str = "radial",
        rho_init: float = -6.0,
        strategy: str = "grouped",
    ) -> None:
        shape = (out_channels, in_channels, kernel_size, kernel_size)
        super().__init__(shape, out_channels, posterior=posterior, rho_init=rho_init,
                         fan_in=in_channels * kernel_size * kernel_size)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.stride = stride
        self.padding = kernel_size // 2 if padding is None else padding
        self.strategy: Strategy = check_strategy(strategy)

    def forward(self, x: Tensor) -> Tensor:
        s, b = x.shape[:2]  # x [S, B, C, H, W]
        w, bias = self.sample_parameters(s)  # [S, O, C, k, k], [S, O]
        if self.strategy == "loop":
            return torch.stack(
                [F.conv2d(x[i], w[i], bias[i], self.stride, self.padding) for i in range(s)]
            )
        xg = x.transpose(0, 1).reshape(b, s * self.in_channels, *x.shape[-2:])  # [B, S*C, H, W]
        y = F.conv2d(xg, w.reshape(s * self.out_channels, *w.shape[2:]), bias.reshape(-1),
                     self.stride, self.padding, groups=s)  # [B, S*O, H', W']
        return y.reshape(b, s, self.out_channels, *y.shape[-2:]).transpose(0, 1)  # [S, B, O, H', W']

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, stride={self.stride}, "
                f"posterior={self.posterior}, strategy={self.strategy}")


class BayesLinear(BayesianLayer):
    """Linear layer with a posterior over its weight and bias; input ``[S, B, in]``."""

    def __init__(
        self, in_features: int, out_features: int, *, posterior: str = "radial", rho_init: float = -6.0,
        strategy: str = "grouped",
    ) -> None:
        super().__init__((out_features, in_features), out_features, posterior=posterior,
                         rho_init=rho_init, fan_in=in_features)
        self.in_features, self.out_features = in_features, out_features
        self.strategy: Strategy = check_strategy(strategy)

    def forward(self, x: Tensor) -> Tensor:
        w, bias = self.sample_parameters(x.shape[0])  # [S, O, I], [S, O]
        if self.strategy == "loop":
            return torch.stack([F.linear(x[i], w[i], bias[i]) for i in range(x.shape[0])])
        return torch.baddbmm(bias.unsqueeze(1), x, w.transpose(1, 2))  # [S, B, O]


def _fold(x: Tensor) -> Tensor:
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])  # [S*B, ...]


def _unfold(y: Tensor, s: int) -> Tensor:
    return y.reshape(s, y.shape[0] // s, *y.shape[1:])  # [S, B, ...]


class _MCDropout(nn.Module):
    """Dropout whose masks are drawn when sampling (not when ``.train()``), one per MC sample."""

    def __init__(self, p: float) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"Dropout probability must lie in [0, 1), got {p}.")
        self.p = p
        self.generator: torch.Generator | None = None
        self.use_mean = False

    def forward(self, x: Tensor) -> Tensor:
        if self.use_mean or self.p == 0.0:
            return x
        gen_device = self.generator.device if self.generator is not None else x.device
        keep = torch.rand(x.shape, generator=self.generator, device=gen_device) >= self.p
        return x * keep.to(x.device, x.dtype) / (1.0 - self.p)


class DetConv2d(nn.Module):
    """Deterministic convolution applied to every MC sample: ``[S, B, C, H, W]``."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 3, *, stride: int = 1,
                 padding: int | None = None) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride,
                              kernel_size // 2 if padding is None else padding)
        nn.init.kaiming_normal_(self.conv.weight, nonlinearity="relu")
        if self.conv.bias is not None:
            nn.init.zeros_(self.conv.bias)

    def forward(self, x: Tensor) -> Tensor:
        return _unfold(self.conv(_fold(x)), x.shape[0])


class DetLinear(nn.Module):
    """Deterministic linear layer applied to every MC sample: ``[S, B, in]``."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(x)


class DropoutConv2d(nn.Module):
    """MC dropout (Gal & Ghahramani 2016) on the input of a deterministic convolution."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 3, *, stride: int = 1,
                 padding: int | None = None, p: float = 0.5) -> None:
        super().__init__()
        self.dropout = _MCDropout(p)
        self.conv = DetConv2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(self.dropout(x))


class DropoutLinear(nn.Module):
    """MC dropout on the input of a deterministic linear layer."""

    def __init__(self, in_features: int, out_features: int, *, p: float = 0.5) -> None:
        super().__init__()
        self.dropout = _MCDropout(p)
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(self.dropout(x))


class PerSample(nn.Module):
    """Apply a 4-D module (pooling, …) to each sample of ``[S, B, C, H, W]``."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, x: Tensor) -> Tensor:
        return _unfold(self.module(_fold(x)), x.shape[0])


class GlobalMeanMaxPool(nn.Module):
    """Concatenated global mean and max pooling: ``[S, B, C, H, W] -> [S, B, 2C]`` (appendix D.1)."""

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([x.mean(dim=(-2, -1)), x.amax(dim=(-2, -1))], dim=-1)
