"""VGG-16* for retinopathy (appendix D.1 and the authors' code), over an MC-sample axis.

Five blocks of 2, 2, 3, 3, 3 3×3 convolutions with widths w·(1, 2, 4, 8, 8) (w = 46 for VGG-16*), the
first convolution with stride 2, 2×2 max-pooling after blocks 1–4, LeakyReLU(0.2) (or ReLU), then the
concatenated global mean and max pool (2·8w = 736 features) and one linear layer to the logits.

With w = 46 and one output, the Bayesian model has 7,603,571 weights and biases, i.e. 15,207,142
parameters counting μ and ρ.  The same builder makes the Bayesian (radial / gaussian), MC-dropout and
deterministic variants; the layer types are injected, ``forward`` returns one tensor of logits.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from functools import partial
from typing import Any, Literal

from torch import Tensor, nn

from models.nn.layers import (
    BayesConv2d,
    BayesLinear,
    DetConv2d,
    DetLinear,
    DropoutConv2d,
    DropoutLinear,
    GlobalMeanMaxPool,
    PerSample,
)

LayerKind = Literal["radial", "gaussian", "dropout", "deterministic"]
LAYER_KINDS: tuple[LayerKind, ...] = ("radial", "gaussian", "dropout", "deterministic")
ConvFactory = Callable[..., nn.Module]  # (in_ch, out_ch, *, stride) -> module on [S, B, C, H, W]
LinearFactory = Callable[..., nn.Module]  # (in_features, out_features) -> module on [S, B, F]


@dataclass(frozen=True)
class VGGConfig:
    """Architecture hyperparameters of a VGG-16*; stored verbatim in the model artifact."""

    width: int = 46
    in_channels: int = 3
    num_outputs: int = 1
    input_size: int = 512
    blocks: tuple[int, ...] = (2, 2, 3, 3, 3)
    first_stride: int = 2
    activation: Literal["leaky_relu", "relu"] = "leaky_relu"
    negative_slope: float = 0.2
    layer: LayerKind = "radial"
    dropout: float = 0.5
    rho_init: float = -6.0
    strategy: Literal["grouped", "loop"] = "grouped"

    def __post_init__(self) -> None:
        if self.layer not in LAYER_KINDS:
            raise ValueError(f"Unknown layer kind {self.layer!r}; expected one of: {', '.join(LAYER_KINDS)}.")
        if self.activation not in ("leaky_relu", "relu"):
            raise ValueError(f"Unknown activation {self.activation!r}; expected one of: leaky_relu, relu.")
        if self.width < 1 or len(self.blocks) != 5:
            raise ValueError(f"VGG-16* needs width >= 1 and 5 blocks, got width={self.width}, "
                             f"blocks={self.blocks}.")
        min_size = self.first_stride * 2 ** (len(self.blocks) - 1)
        if self.input_size < min_size:
            raise ValueError(f"input_size {self.input_size} is below the minimum {min_size} for this depth.")

    @property
    def widths(self) -> tuple[int, ...]:
        return tuple(self.width * m for m in (1, 2, 4, 8, 8))

    @property
    def is_bayesian(self) -> bool:
        return self.layer in ("radial", "gaussian")

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (tuples as lists) stored in the artifact's ``config.json`` under ``architecture``."""
        d = asdict(self)
        d["blocks"] = list(self.blocks)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> VGGConfig:
        """Parse :meth:`to_dict`'s form strictly: every field required and of its JSON type, none unknown.

        A stored architecture must be rebuilt exactly, so a missing field is an error rather than a default
        that may differ from what the weights were trained with. Raises :class:`ConfigFieldError` naming it.
        """
        reference = cls()
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(d) - set(known))
        if unknown:
            raise ConfigFieldError(unknown[0], f"is not a VGGConfig field; expected: {', '.join(sorted(known))}")
        kwargs: dict[str, Any] = {}
        for name in known:
            if name not in d:
                raise ConfigFieldError(name, "is missing")
            kwargs[name] = _json_value(name, d[name], getattr(reference, name))
        try:
            return cls(**kwargs)
        except ValueError as exc:
            raise ConfigFieldError("", f"is invalid: {exc}") from exc


class ConfigFieldError(ValueError):
    """A stored architecture field is missing, unknown or of the wrong type; ``field`` names it ('' = whole)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"field '{field}' {problem}" if field else problem)
        self.field, self.problem = field, problem


def _json_value(name: str, value: Any, default: Any) -> Any:
    """``value`` checked against the JSON type of the field's ``default`` (bool, int, float, str, int list)."""
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigFieldError(name, f"must be true or false, got {value!r}")
    elif isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigFieldError(name, f"must be an integer, got {value!r}")
    elif isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ConfigFieldError(name, f"must be a finite number, got {value!r}")
        value = float(value)
    elif isinstance(default, str):
        if not isinstance(value, str) or not value.strip():
            raise ConfigFieldError(name, f"must be a non-empty string, got {value!r}")
    elif isinstance(default, tuple):
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise ConfigFieldError(name, f"must be a list of integers, got {value!r}")
        value = tuple(value)
    return value


class VGGStar(nn.Module):
    """VGG-16* on ``[S, B, C, H, W]`` returning logits ``[S, B, num_outputs]``."""

    def __init__(self, config: VGGConfig, *, conv_layer: ConvFactory, linear_layer: LinearFactory) -> None:
        super().__init__()
        self.config = config
        act: nn.Module = (nn.LeakyReLU(config.negative_slope) if config.activation == "leaky_relu"
                          else nn.ReLU())
        layers: list[nn.Module] = []
        in_ch = config.in_channels
        for block_idx, (n_convs, width) in enumerate(zip(config.blocks, config.widths, strict=True)):
            for conv_idx in range(n_convs):
                stride = config.first_stride if block_idx == 0 and conv_idx == 0 else 1
                layers += [conv_layer(in_ch, width, stride=stride), act]
                in_ch = width
            if block_idx < len(config.blocks) - 1:
                layers.append(PerSample(nn.MaxPool2d(2)))
        self.features = nn.Sequential(*layers)
        self.pool = GlobalMeanMaxPool()
        self.head = linear_layer(2 * in_ch, config.num_outputs)

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() != 5:
            raise ValueError(f"VGGStar expects [S, B, C, H, W], got shape {tuple(x.shape)}; "
                             "use mc_logits(model, images, samples) for [B, C, H, W] images.")
        return self.head(self.pool(self.features(x)))  # [S, B, O]


def layer_factories(config: VGGConfig) -> tuple[ConvFactory, LinearFactory]:
    """The conv and linear layer factories for ``config.layer``."""
    if config.is_bayesian:
        conv = partial(BayesConv2d, posterior=config.layer, rho_init=config.rho_init, strategy=config.strategy)
        lin = partial(BayesLinear, posterior=config.layer, rho_init=config.rho_init, strategy=config.strategy)
        return conv, lin
    if config.layer == "dropout":
        def dropout_conv(in_ch: int, out_ch: int, *, stride: int = 1) -> nn.Module:
            # No dropout on the input image itself, as in standard MC-dropout CNNs.
            p = 0.0 if in_ch == config.in_channels and stride == config.first_stride else config.dropout
            return DropoutConv2d(in_ch, out_ch, stride=stride, p=p)
        return dropout_conv, partial(DropoutLinear, p=config.dropout)
    return DetConv2d, DetLinear


def build_vgg16_star(config: VGGConfig | None = None, **overrides: Any) -> VGGStar:
    """Build a VGG-16* of the family ``config.layer``; keyword overrides replace config fields."""
    unknown = sorted(set(overrides) - {f.name for f in fields(VGGConfig)})
    if unknown:
        raise ValueError(f"Unknown VGGConfig fields: {unknown}; expected some of: "
                         f"{sorted(f.name for f in fields(VGGConfig))}.")
    cfg = replace(config or VGGConfig(), **overrides)
    conv, lin = layer_factories(cfg)
    return VGGStar(cfg, conv_layer=conv, linear_layer=lin)


def mc_logits(model: nn.Module, images: Tensor, samples: int) -> Tensor:
    """Logits ``[S, B, O]`` of ``samples`` Monte Carlo passes over images ``[B, C, H, W]`` in one call."""
    return model(images.unsqueeze(0).expand(samples, *images.shape))


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
