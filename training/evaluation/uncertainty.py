"""Binary uncertainty decomposition on numpy arrays of Monte Carlo probabilities.

Evaluation works on the saved outputs of S stochastic forward passes (``mc_probs`` of shape ``[S, N]``),
so it needs neither the model nor torch. The formulas are the ones of ``models.uncertainty`` (DESIGN.md §2,
natural log, unit nat), restated here so that the numbers in an evaluation report and the numbers the
service returns mean the same thing:

- p̄ = mean_s p_s (probability of referable DR);
- predictive entropy H[p̄], with H(p) = -p ln p - (1 - p) ln(1 - p) and 0 ln 0 = 0;
- expected entropy mean_s H[p_s] (aleatoric part);
- mutual information MI = H[p̄] - mean_s H[p_s], clipped at 0 against rounding, so 0 ≤ MI ≤ ln 2.

A test checks this module against ``models.uncertainty.binary_uncertainty`` whenever that is importable.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import entr

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class McUncertainty:
    """Per-image summary of S Monte Carlo passes; every field has shape ``[N]`` and entropies are in nats."""

    probability: FloatArray
    predictive_entropy: FloatArray
    expected_entropy: FloatArray
    mutual_information: FloatArray


def binary_entropy(p: ArrayLike) -> FloatArray:
    """Entropy in nats of a Bernoulli(p) variable, elementwise, with 0 ln 0 = 0 (``scipy.special.entr``)."""
    q = np.asarray(p, dtype=np.float64)
    return np.asarray(entr(q) + entr(1.0 - q), dtype=np.float64)


def validate_mc_probs(mc_probs: ArrayLike) -> FloatArray:
    """Return ``mc_probs`` as a float64 ``[S, N]`` array, or raise ``ValueError`` saying what is wrong."""
    arr = np.asarray(mc_probs, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(
            f"mc_probs must have shape [S, N] (MC samples x images); got shape {arr.shape}. "
            "For a deterministic model pass probs[None, :] (S = 1)."
        )
    if arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"mc_probs must hold at least one sample and one image; got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("mc_probs contains NaN or infinite values; check the model outputs")
    if arr.min() < 0.0 or arr.max() > 1.0:
        raise ValueError(
            f"mc_probs must be probabilities in [0, 1]; got range [{arr.min():.4g}, {arr.max():.4g}]. "
            "Apply a sigmoid to logits first."
        )
    return arr


def mc_uncertainty(mc_probs: ArrayLike) -> McUncertainty:
    """Decompose the uncertainty of ``mc_probs`` ``[S, N]`` into p̄, H[p̄], E_s H[p_s] and MI (nats)."""
    probs = validate_mc_probs(mc_probs)  # [S, N]
    p_bar = probs.mean(axis=0)  # [N]
    predictive = binary_entropy(p_bar)  # [N]
    expected = binary_entropy(probs).mean(axis=0)  # [N]
    mi = np.clip(predictive - expected, 0.0, None)  # [N]
    return McUncertainty(
        probability=p_bar,
        predictive_entropy=predictive,
        expected_entropy=expected,
        mutual_information=mi,
    )
