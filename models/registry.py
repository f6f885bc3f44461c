"""Named model builders (STYLE habit 3): ``create_model("radial_vgg16_star", width=8, input_size=64)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from models.vgg import VGGConfig, build_vgg16_star


def _vgg(layer: str) -> Callable[..., nn.Module]:
    def build(**kwargs: Any) -> nn.Module:
        return build_vgg16_star(VGGConfig(layer=layer, **kwargs))  # type: ignore[arg-type]
    build.__doc__ = f"VGG-16* with {layer} layers."
    return build


MODEL_BUILDERS: dict[str, Callable[..., nn.Module]] = {
    "radial_vgg16_star": _vgg("radial"),
    "gaussian_vgg16_star": _vgg("gaussian"),
    "dropout_vgg16_star": _vgg("dropout"),
    "deterministic_vgg16_star": _vgg("deterministic"),
}


def create_model(name: str, **kwargs: Any) -> nn.Module:
    """Build the model registered as ``name`` with keyword-only architecture arguments."""
    try:
        builder = MODEL_BUILDERS[name]
    except KeyError:
        raise ValueError(f"Unknown model {name!r}; expected one of: {', '.join(sorted(MODEL_BUILDERS))}.") from None
    return builder(**kwargs)
