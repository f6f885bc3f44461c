"""Variational posterior families over one weight tensor (paper eq. 3, appendix B).

Both families share the parametrisation  w = μ + σ ⊙ ε  with  σ = softplus(ρ);  they differ in ε:

* ``gaussian`` (MFVI, "Cartesian", Blundell et al. 2015):  ε ~ N(0, I).
* ``radial`` (Farquhar et al. 2020):  ε = r · u  with the direction u = ε'/‖ε'‖, ε' ~ N(0, I), normalised
  over the **whole flattened tensor once per Monte Carlo sample**, and the radius r ~ N(0, 1).  A bias is a
  separate tensor and therefore gets its own direction and radius (as in the authors' code).

The entropy of either posterior is  Σ log σ + c_family(D)  for a tensor of D elements; the constant does
not depend on μ or σ, so only  −Σ log σ  matters for optimisation, but :func:`entropy` returns the exact value
so that KL estimates are true KL divergences (and are tested against Monte Carlo estimates).
"""

from __future__ import annotations

import math
from typing import Literal, cast

import torch
import torch.nn.functional as F
from torch import Tensor

PosteriorFamily = Literal["gaussian", "radial"]
POSTERIOR_FAMILIES: tuple[PosteriorFamily, ...] = ("gaussian", "radial")

_EULER_GAMMA = 0.5772156649015329


def check_family(name: str) -> PosteriorFamily:
    """Return ``name`` as a posterior family or raise a ValueError listing the valid ones."""
    if name not in POSTERIOR_FAMILIES:
        raise ValueError(f"Unknown posterior {name!r}; expected one of: {', '.join(POSTERIOR_FAMILIES)}.")
    return cast(PosteriorFamily, name)


def sigma_from_rho(rho: Tensor) -> Tensor:
    """σ = softplus(ρ) = log(1 + e^ρ), computed stably."""
    return F.softplus(rho)


def rho_from_sigma(sigma: float | Tensor) -> Tensor:
    """Inverse softplus: the ρ whose softplus is σ (σ > 0)."""
    s = torch.as_tensor(sigma, dtype=torch.float64)
    return (s + torch.log(-torch.expm1(-s))).to(torch.float32)


def sample_noise(
    family: PosteriorFamily,
    shape: tuple[int, ...],
    *,
    samples: int,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Draw ε for ``samples`` independent Monte Carlo samples of a tensor of ``shape``.

    Returns ``[samples, *shape]``.  Noise is drawn on the generator's device (CPU when there is none given a
    CPU target) and then moved, so a seeded draw is the same on CPU and GPU.
    """
    gen_device = generator.device if generator is not None else device
    eps = torch.randn((samples, *shape), generator=generator, device=gen_device, dtype=torch.float32)
    if family == "radial":
        flat = eps.reshape(samples, -1)  # [S, D]
        direction = flat / flat.norm(dim=1, keepdim=True)  # uniform on the unit sphere S^{D-1}
        radius = torch.randn((samples, 1), generator=generator, device=gen_device, dtype=torch.float32)
        eps = (direction * radius).reshape(samples, *shape)
    elif family != "gaussian":
        check_family(family)
    return eps.to(device=device if device is not None else eps.device, dtype=dtype)


def entropy_constant(family: PosteriorFamily, numel: int) -> float:
    """c_family(D) in  H[q] = Σ log σ + c_family(D)  (the entropy of ε itself), in nats.

    Gaussian:  D/2 · (1 + log 2π).
    Radial:    ε = r·u has density  p(ε) = φ_{|r|}(‖ε‖) / (A_{D-1} ‖ε‖^{D-1})  with the half-normal density
               φ_{|r|} and the unit-sphere area  A_{D-1} = 2π^{D/2} / Γ(D/2), so
               H[ε] = ½ log(πe/2) + log A_{D-1} + (D-1) · E[log|r|],   E[log|r|] = -(γ + log 2)/2.
               (For D = 1 this reduces to the Gaussian ½ log 2πe.)
    """
    d = float(numel)
    if family == "gaussian":
        return 0.5 * d * (1.0 + math.log(2.0 * math.pi))
    if family == "radial":
        log_area = math.log(2.0) + 0.5 * d * math.log(math.pi) - math.lgamma(0.5 * d)
        half_normal_entropy = 0.5 * math.log(math.pi * math.e / 2.0)
        expected_log_radius = -0.5 * (_EULER_GAMMA + math.log(2.0))
        return half_normal_entropy + log_area + (d - 1.0) * expected_log_radius
    check_family(family)
    raise AssertionError("unreachable")


def entropy(family: PosteriorFamily, rho: Tensor) -> Tensor:
    """Exact entropy of the posterior over one tensor: Σ log σ + c_family(D) (appendix B)."""
    return torch.log(sigma_from_rho(rho)).sum() + entropy_constant(family, rho.numel())
