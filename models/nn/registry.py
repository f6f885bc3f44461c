"""Named model builders: ``create_model("radial_vgg16_star", width=8, input_size=64)``.

Two tables, one per kind of caller:

- ``ARCHITECTURES``: the architecture named in an artifact's ``config.json`` (``architecture.builder``), built
  from its stored config; ``models.artifact`` builds every served network through :func:`build_architecture`.
- ``MODEL_BUILDERS``: the names training takes (``radscreen-train fit --model``), one per layer family, with
  keyword-only architecture arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from models.nn.vgg import VGGConfig, VGGStar, build_vgg16_star

DEFAULT_ARCHITECTURE = "vgg16_star"
ARCHITECTURES: dict[str, Callable[[VGGConfig], VGGStar]] = {
    "vgg16_star": build_vgg16_star,
}


def check_architecture(name: str) -> str:
    """``name`` if it is a registered architecture, else ValueError listing the valid ones."""
    if name not in ARCHITECTURES:
        raise ValueError(f"Unknown architecture {name!r}; expected one of: {', '.join(sorted(ARCHITECTURES))}.")
    return name


def build_architecture(name: str, config: VGGConfig) -> VGGStar:
    """Build the architecture registered as ``name`` from its stored config."""
    return ARCHITECTURES[check_architecture(name)](config)


def _vgg(layer: str) -> Callable[..., nn.Module]:
    def build(**kwargs: Any) -> nn.Module:
        return build_architecture("vgg16_star", VGGConfig(layer=layer, **kwargs))  # type: ignore[arg-type]
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
