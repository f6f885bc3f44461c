"""How faithfully the artifact stores the trained posterior: the rounding of μ against the per-weight sd.

A radial posterior over a tensor of D elements has per-coordinate standard deviation σ/√D (ε = r·u with u
uniform on the unit sphere: E[u_i²] = 1/D, E[r²] = 1), a Gaussian one σ.  Storing μ in fp16 moves each mean by
up to half an fp16 ulp; when that is not far below the per-weight sd, the served posterior is not the trained
one.  fp32 storage is the default; :func:`rounding_to_sd` is what the model card states for fp16.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from models.nn.kl import bayesian_layers
from models.nn.posteriors import sigma_from_rho

DTYPES = {"fp32": torch.float32, "fp16": torch.float16}


@dataclass(frozen=True)
class RoundingReport:
    """|round(μ) − μ| / sd_i over every Bayesian mean: its median, 99th percentile and maximum."""

    dtype: str
    median: float
    p99: float
    max: float
    n: int


def rounding_to_sd(model: nn.Module, dtype: str) -> RoundingReport | None:
    """Ratio of the storage rounding of each μ (and of σ through ρ's rounding, ignored here: ρ's rounding
    changes σ by a relative 1e-3 at most in fp16) to the per-weight posterior sd; None for non-Bayesian models."""
    ratios: list[torch.Tensor] = []
    for _, layer in bayesian_layers(model):
        for part in ("weight", "bias"):
            mu = getattr(layer, f"{part}_mu").detach().double()  # [*shape]
            sigma = sigma_from_rho(getattr(layer, f"{part}_rho").detach().double())  # [*shape]
            sd = sigma / mu.numel() ** 0.5 if layer.posterior == "radial" else sigma
            rounded = mu.to(DTYPES[dtype]).double()
            ratios.append(((rounded - mu).abs() / sd).flatten())
    if not ratios:
        return None
    r = torch.cat(ratios)
    q = torch.quantile(r, torch.tensor([0.5, 0.99], dtype=r.dtype, device=r.device)) if r.numel() <= 2**24 else \
        torch.tensor([float(r.median()), float(r.sort().values[int(0.99 * (r.numel() - 1))])])
    return RoundingReport(dtype, float(q[0]), float(q[1]), float(r.max()), r.numel())


def storage_line(report: RoundingReport | None, dtype: str) -> str:
    """One model-card line on how μ and ρ are stored and what the rounding costs."""
    if dtype == "fp32" or report is None:
        return (f"- Storage: μ and ρ in {dtype}" + (" (rounding ≈ 6e-8 relative, far below any posterior sd)."
                                                     if dtype == "fp32" else "."))
    verdict = ("far below the posterior sd" if report.p99 < 0.01 else
               "NOT far below the posterior sd: the served posterior differs from the trained one; store fp32")
    return (f"- Storage: μ and ρ in {dtype}; |rounding of μ| / per-weight posterior sd: median {report.median:.3g}, "
            f"99th percentile {report.p99:.3g}, max {report.max:.3g} over {report.n:,} means — {verdict}.")
