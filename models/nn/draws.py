"""The serving form: K fixed posterior draws materialised once and run as one deterministic network.

At load the service draws K weight sets from the posterior with the seed recorded in the artifact; every
request then runs the same K draws, so answers are reproducible across restarts and replicas and no
sampling happens on the hot path.  The draws are taken exactly as a seeded ``K``-sample forward would take
them (layer by layer, weight then bias), so ``DrawnNetwork(x) == mc_logits(model, x, K)`` under
``seeded(model, seed)``.

Execution strategies (same numbers, different speed — see ``benchmarks/bench_core.py``):

* ``"grouped"``: the K draws are one network of grouped convolutions (groups = K) over ``[B, K·C, H, W]``;
  the first convolution needs no input replication (one conv with K·out filters on ``[B, C, H, W]``).
* ``"loop"``: K sequential passes, one per draw — the reference "16-pass loop" with fixed weights.

**Head draws** (``head_draws = M``, default 1): the final linear layer's posterior is drawn M times per
network draw, so the K expensive passes through the convolutions yield K·M logits per image, each from
a complete posterior sample (convolution draw k with head draw (k, m); the radial posterior factorises over
layers, so every pair is a draw from q).  The head is a 736 → 1 matrix at full width: its M draws cost a
few kFLOP per image.  The point is the variance of the MI estimate, not its cost: one radial head draw is
a single random direction and radius in a 737-dimensional space that every image shares, so at K = 16
the scale of MI moved by a factor 2–4 between draw seeds of default model 0.2.0, and M = 64 head draws
per network draw cut that to about 1.4 (docs/results-serving-estimator.md, "Head draws").  Output axis 0 is then ordered
draw-major: index ``k·M + m``.  With ``M = 1`` the draws and the graph are exactly those of the plain K-draw network.

``plan`` lists the operations in order — ``("conv", i)``, ``("act",)``, ``("pool",)``, ``("gpool",)``,
``("linear", i)`` — so other backends (ONNX) can rebuild the same graph from the tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.nn.layers import BayesConv2d, BayesLinear, PerSample, Strategy, check_strategy
from models.nn.sampling import seeded
from models.nn.vgg import VGGStar

Op = tuple[str] | tuple[str, int]


@dataclass(frozen=True)
class DrawnConv:
    weight: Tensor  # [K, out, in, kh, kw]
    bias: Tensor  # [K, out]
    stride: int
    padding: int


@dataclass(frozen=True)
class DrawnLinear:
    weight: Tensor  # [K, out, in]
    bias: Tensor  # [K, out]


Images = TypeVar("Images", np.ndarray, Tensor)


def run_views(run: Callable[[Images], Images], x: Images, *, flip: bool) -> Images:
    """Test-time flip, written once for every path that scores (the service's backends, training's and
    calibration's scoring): ``x`` ``[B, C, H, W]`` as taken and mirrored left-right (the width axis) go through
    ``run`` as one batch of 2B, and the predictions come back ``[2·S, B, O]``, **the image as taken first**
    (rows 0 … S − 1, S = K·M), then its mirror image (rows S … 2S − 1). Without ``flip``: ``run(x)``, ``[S, B, O]``.
    NumPy arrays (ONNX Runtime, the service's backends) and torch tensors (training) alike."""
    if not flip:
        return run(x)
    b = x.shape[0]
    if isinstance(x, np.ndarray):
        out = run(np.ascontiguousarray(np.concatenate([x, x[..., ::-1]])))
        return np.concatenate([out[:, :b], out[:, b:]])
    out = run(torch.cat([x, torch.flip(x, dims=(-1,))]))
    return torch.cat([out[:, :b], out[:, b:]])


class DrawnNetwork(nn.Module):
    """K fixed draws of a Bayesian VGG-16*: ``forward(x [B, C, H, W]) -> logits [K·M, B, O]``.

    ``head_draws`` (M) is how many draws of the last linear layer each of the K network draws carries: its
    :class:`DrawnLinear` then holds ``[K, M·O, in]`` (draw m of network draw k in rows ``m·O … m·O + O − 1``).
    """

    def __init__(self, plan: list[Op], convs: list[DrawnConv], linears: list[DrawnLinear], *,
                 activation: str, negative_slope: float, strategy: str = "grouped", head_draws: int = 1) -> None:
        super().__init__()
        if head_draws < 1 or linears[-1].weight.shape[1] % head_draws:
            raise ValueError(f"head_draws must be >= 1 and divide the last layer's {linears[-1].weight.shape[1]} "
                             f"rows, got {head_draws}.")
        self.plan = plan
        self.mc_samples = convs[0].weight.shape[0]  # K
        self.head_draws = head_draws
        self.num_outputs = linears[-1].weight.shape[1] // head_draws
        self.activation = activation
        self.negative_slope = negative_slope
        self.strategy: Strategy = check_strategy(strategy)
        self.conv_meta = [(c.stride, c.padding) for c in convs]
        # Buffers hold the grouped layout ([K*out, in, kh, kw], 4-D, so channels-last applies to them).
        for i, c in enumerate(convs):
            self.register_buffer(f"conv{i}_weight", c.weight.reshape(-1, *c.weight.shape[2:]).contiguous())
            self.register_buffer(f"conv{i}_bias", c.bias.reshape(-1).contiguous())
        for i, lin in enumerate(linears):
            self.register_buffer(f"linear{i}_weight", lin.weight.contiguous())
            self.register_buffer(f"linear{i}_bias", lin.bias.contiguous())
        self.n_convs, self.n_linears = len(convs), len(linears)

    @property
    def convs(self) -> list[DrawnConv]:
        out = []
        for i, (stride, padding) in enumerate(self.conv_meta):
            w: Tensor = getattr(self, f"conv{i}_weight")
            out.append(DrawnConv(w.reshape(self.mc_samples, -1, *w.shape[1:]), getattr(self, f"conv{i}_bias")
                                 .reshape(self.mc_samples, -1), stride, padding))
        return out

    @property
    def linears(self) -> list[DrawnLinear]:
        return [DrawnLinear(getattr(self, f"linear{i}_weight"), getattr(self, f"linear{i}_bias"))
                for i in range(self.n_linears)]

    def _act(self, x: Tensor) -> Tensor:
        return F.leaky_relu(x, self.negative_slope) if self.activation == "leaky_relu" else F.relu(x)

    @property
    def total_draws(self) -> int:
        """K·M: the logits per image (complete posterior samples) that one forward returns."""
        return self.mc_samples * self.head_draws

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() != 4:
            raise ValueError(f"DrawnNetwork expects images [B, C, H, W], got shape {tuple(x.shape)}.")
        if self.strategy == "loop":
            h = torch.stack([self._forward_one(x, d) for d in range(self.mc_samples)])
        else:
            h = self._forward_grouped(x)
        return self.split_head_draws(h)

    def split_head_draws(self, h: Tensor) -> Tensor:
        """``[K, B, M·O]`` -> ``[K·M, B, O]``, draw-major (index k·M + m)."""
        if self.head_draws == 1:
            return h
        k, b = h.shape[0], h.shape[1]
        return h.reshape(k, b, self.head_draws, self.num_outputs).transpose(1, 2).reshape(
            k * self.head_draws, b, self.num_outputs)

    def _forward_grouped(self, x: Tensor) -> Tensor:
        k, b = self.mc_samples, x.shape[0]
        h = x  # [B, C, H, W], becomes [B, K*C', H', W'] after the first conv
        for op in self.plan:
            if op[0] == "conv":
                i = op[1]  # type: ignore[misc]
                stride, padding = self.conv_meta[i]
                w, bias = getattr(self, f"conv{i}_weight"), getattr(self, f"conv{i}_bias")
                groups = 1 if i == 0 else k  # first conv: all K·out filters see the same image
                h = F.conv2d(h, w, bias, stride, padding, groups=groups)
            elif op[0] == "act":
                h = self._act(h)
            elif op[0] == "pool":
                h = F.max_pool2d(h, 2)
            elif op[0] == "gpool":
                c = h.shape[1] // k
                feats = torch.cat([h.mean(dim=(-2, -1)).reshape(b, k, c),
                                   h.amax(dim=(-2, -1)).reshape(b, k, c)], dim=-1)  # [B, K, 2C]
                h = feats.transpose(0, 1)  # [K, B, 2C]
            elif op[0] == "linear":
                i = op[1]  # type: ignore[misc]
                w, bias = getattr(self, f"linear{i}_weight"), getattr(self, f"linear{i}_bias")
                h = torch.baddbmm(bias.unsqueeze(1).to(h.dtype), h, w.transpose(1, 2).to(h.dtype))
        return h  # [K, B, M·O]

    def _forward_one(self, x: Tensor, d: int) -> Tensor:
        """Draw ``d`` alone — one ordinary deterministic forward pass."""
        h = x
        for op in self.plan:
            if op[0] == "conv":
                i = op[1]  # type: ignore[misc]
                stride, padding = self.conv_meta[i]
                w = getattr(self, f"conv{i}_weight")
                out = w.shape[0] // self.mc_samples
                bias = getattr(self, f"conv{i}_bias")
                h = F.conv2d(h, w[d * out:(d + 1) * out], bias[d * out:(d + 1) * out], stride, padding)
            elif op[0] == "act":
                h = self._act(h)
            elif op[0] == "pool":
                h = F.max_pool2d(h, 2)
            elif op[0] == "gpool":
                h = torch.cat([h.mean(dim=(-2, -1)), h.amax(dim=(-2, -1))], dim=-1)  # [B, 2C]
            elif op[0] == "linear":
                i = op[1]  # type: ignore[misc]
                h = F.linear(h, getattr(self, f"linear{i}_weight")[d].to(h.dtype),
                             getattr(self, f"linear{i}_bias")[d].to(h.dtype))
        return h  # [B, M·O]


@torch.no_grad()
def materialise_draws(model: VGGStar, *, mc_samples: int = 16, seed: int, strategy: str = "grouped",
                      head_draws: int = 1) -> DrawnNetwork:
    """Draw ``mc_samples`` (K) weight sets from ``model``'s posterior with ``seed`` and build the fixed network.

    The draws are made on the CPU generator in forward order, so they are identical across devices.
    ``head_draws`` (M) draws of the last linear layer are made per network draw, after the convolutions'
    draws, as one ``sample_parameters(k·M)`` call: with M = 1 this is exactly the plain K-draw network.
    """
    if not model.config.is_bayesian:
        raise ValueError(f"materialise_draws needs a Bayesian model (radial/gaussian), got {model.config.layer!r}.")
    if mc_samples < 1:
        raise ValueError(f"mc_samples must be >= 1, got {mc_samples}.")
    k = mc_samples
    if head_draws < 1:
        raise ValueError(f"head_draws must be >= 1, got {head_draws}.")
    plan: list[Op] = []
    convs: list[DrawnConv] = []
    linears: list[DrawnLinear] = []
    with seeded(model, seed):
        for m in model.features:
            if isinstance(m, BayesConv2d):
                w, b = m.sample_parameters(k)
                plan.append(("conv", len(convs)))
                convs.append(DrawnConv(w.detach().clone(), b.detach().clone(), m.stride, m.padding))
            elif isinstance(m, nn.LeakyReLU | nn.ReLU):
                plan.append(("act",))
            elif isinstance(m, PerSample):
                plan.append(("pool",))
            else:
                raise TypeError(f"materialise_draws: unsupported layer {type(m).__name__} in features.")
        plan.append(("gpool",))
        head = model.head
        if not isinstance(head, BayesLinear):
            raise TypeError(f"materialise_draws: unsupported head {type(head).__name__}.")
        w, b = head.sample_parameters(k * head_draws)  # [K·M, O, in], [K·M, O], draw-major
        plan.append(("linear", 0))
        linears.append(DrawnLinear(w.detach().reshape(k, -1, w.shape[-1]).clone(),
                                   b.detach().reshape(k, -1).clone()))
        for m in model.modules():  # the draws must not linger as 'last samples' for a KL term
            if isinstance(m, BayesConv2d | BayesLinear):
                m.last_sample = {}
    cfg = model.config
    return DrawnNetwork(plan, convs, linears, activation=cfg.activation, negative_slope=cfg.negative_slope,
                        strategy=strategy, head_draws=head_draws).eval()
