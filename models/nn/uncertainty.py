"""Predictive uncertainty of a binary classifier from S Monte Carlo probabilities (natural log, nats).

    p̄ = (1/S) Σ_s p_s,   H[p̄] = −p̄ log p̄ − (1−p̄) log(1−p̄),   E_s H[p_s],
    MI = H[p̄] − E_s H[p_s]   ∈ [0, ln 2]   (mutual information between the prediction and the weights:
                                            the model's *epistemic* uncertainty, used for referral).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

LN2 = 0.6931471805599453


@dataclass(frozen=True)
class BinaryUncertainty:
    probability: Tensor  # [B]  p̄
    predictive_entropy: Tensor  # [B]  H[p̄]
    expected_entropy: Tensor  # [B]  mean_s H[p_s]  (aleatoric part)
    mutual_information: Tensor  # [B]  H[p̄] − mean_s H[p_s]


def binary_entropy(p: Tensor) -> Tensor:
    """H[p] in nats, 0 at p ∈ {0, 1}."""
    return -(torch.xlogy(p, p) + torch.xlogy(1.0 - p, 1.0 - p))


def binary_uncertainty(probs: Tensor) -> BinaryUncertainty:
    """All uncertainty measures for ``probs`` of shape ``[S, B]`` (computed in float64, returned float64)."""
    if probs.dim() != 2:
        raise ValueError(f"binary_uncertainty expects probabilities [S, B], got shape {tuple(probs.shape)}.")
    p = probs.to(torch.float64).clamp(0.0, 1.0)
    mean = p.mean(dim=0)
    predictive = binary_entropy(mean)
    expected = binary_entropy(p).mean(dim=0)
    mi = (predictive - expected).clamp(min=0.0)  # ≥ 0 by Jensen; clamp float round-off
    return BinaryUncertainty(mean, predictive, expected, mi)


def binary_uncertainty_from_logits(logits: Tensor) -> BinaryUncertainty:
    """Same as :func:`binary_uncertainty` from logits ``[S, B]`` or ``[S, B, 1]``."""
    if logits.dim() == 3 and logits.shape[-1] == 1:
        logits = logits[..., 0]
    return binary_uncertainty(torch.sigmoid(logits.to(torch.float64)))
