"""Binary uncertainty decomposition for numpy arrays of Monte Carlo probabilities.

Evaluation works on the saved outputs of S stochastic forward passes (``mc_probs`` of shape ``[S, N]``),
so it does not need the model. The maths is delegated to ``models.nn.uncertainty.binary_uncertainty`` (the
function the service uses), so that the numbers in an evaluation report and the numbers the service
returns are the same numbers (docs/architecture.md §3, natural log, unit nat):

- p̄ = mean_s p_s (probability of referable DR);
- predictive entropy H[p̄], with H(p) = -p ln p - (1 - p) ln(1 - p) and 0 ln 0 = 0;
- expected entropy mean_s H[p_s] (aleatoric part);
- mutual information MI = H[p̄] - mean_s H[p_s], clipped at 0 against rounding, so 0 ≤ MI ≤ ln 2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import ArrayLike, NDArray

from models.nn.uncertainty import binary_uncertainty

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class McUncertainty:
    """Per-image summary of S Monte Carlo passes; every field has shape ``[N]`` and entropies are in nats."""

    probability: FloatArray
    predictive_entropy: FloatArray
    expected_entropy: FloatArray
    mutual_information: FloatArray


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
    probs = validate_mc_probs(mc_probs)  # [S, N] float64
    u = binary_uncertainty(torch.from_numpy(probs))  # float64 tensors [N]
    return McUncertainty(
        probability=u.probability.numpy(),
        predictive_entropy=u.predictive_entropy.numpy(),
        expected_entropy=u.expected_entropy.numpy(),
        mutual_information=u.mutual_information.numpy(),
    )
