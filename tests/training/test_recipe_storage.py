"""Artifact storage of the trained posterior: fp32 by default, and the fp16 rounding-to-sd ratio is exact."""

from __future__ import annotations

import math

import pytest
import torch

from models.nn.layers import BayesLinear
from training.config import TrainConfig
from training.storage import rounding_to_sd, storage_line


def _layer(posterior: str, sigma: float) -> BayesLinear:
    layer = BayesLinear(8, 2, posterior=posterior, rho_init=-3.0)
    rho = math.log(math.expm1(sigma))  # softplus⁻¹(σ)
    with torch.no_grad():
        layer.weight_mu.fill_(1.0 + 2.0**-12)  # fp16 spacing at 1 is 2^-10: rounds to 1, error exactly 2^-12
        layer.bias_mu.fill_(0.5)  # exact in fp16: error 0
        layer.weight_rho.fill_(rho)
        layer.bias_rho.fill_(rho)
    return layer


@pytest.mark.parametrize(("posterior", "sd_factor"), [("gaussian", 1.0), ("radial", 1 / math.sqrt(16))])
def test_fp16_rounding_over_the_per_weight_sd(posterior: str, sd_factor: float) -> None:
    """Gaussian: per-weight sd σ. Radial over a D-element tensor: σ/√D (weight D = 16, bias D = 2)."""
    sigma = 2.0**-10
    report = rounding_to_sd(_layer(posterior, sigma), "fp16")
    assert report is not None and report.n == 16 + 2
    expected = 2.0**-12 / (sigma * sd_factor)  # 16 weights at this ratio, 2 biases at 0
    assert report.max == pytest.approx(expected, rel=1e-6)
    assert report.median == pytest.approx(expected, rel=1e-6)
    assert "NOT far below" in storage_line(report, "fp16")


def test_fp32_storage_is_the_default_and_rounds_far_below_the_sd() -> None:
    assert TrainConfig(data="", out="").weights_dtype == "fp32"
    report = rounding_to_sd(_layer("radial", 0.02), "fp32")
    assert report is not None and report.max < 1e-4
    assert "fp32" in storage_line(report, "fp32")


def test_non_bayesian_models_have_no_ratio() -> None:
    assert rounding_to_sd(torch.nn.Linear(3, 2), "fp16") is None
