"""Calibration of the predicted probability of referable DR: reliability bins and ECE.

Definition used throughout (the "positive-class" ECE, the reading of the paper's Figure 3):

- the interval [0, 1] is cut into ``n_bins`` equal-width bins; image i falls in bin
  b = min(floor(p̄_i · n_bins), n_bins - 1), so bin b holds [b/n, (b+1)/n) and the last bin also holds 1.0;
- per bin: n_b images, mean predicted probability conf_b = mean(p̄_i), observed frequency
  freq_b = mean(y_i) (fraction of referable images);
- ECE = Σ_b (n_b / N) · |freq_b - conf_b|; empty bins contribute nothing.

A perfectly calibrated model (y ~ Bernoulli(p̄)) has ECE → 0 as N grows (a finite sample leaves a small
positive bias of order sqrt(n_bins / N)); a model that says 0.95 for events that happen 70 % of the time
has ECE near 0.25.

On a few hundred images that bias is the size of the targets people set (ECE ≤ 0.03), so an ECE is
reported with two reference figures: its bootstrap standard error (:func:`ece_bootstrap_se`), and the
ECE a perfectly calibrated model with the same predictions would show by sampling alone
(:func:`ece_calibrated_floor`). Both use the identity n_b · |freq_b − conf_b| = |Σ_{i∈b} y_i − Σ_{i∈b} p̄_i|,
i.e. ECE = (1/N) Σ_b |Σ_{i∈b} (y_i − p̄_i)|.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from training.evaluation.uncertainty import FloatArray


@dataclass(frozen=True)
class ReliabilityBins:
    """Per-bin calibration statistics for ``n_bins`` equal-width bins of the predicted probability.

    ``edges`` has ``n_bins + 1`` entries; the other tuples have ``n_bins`` entries. ``mean_predicted`` and
    ``observed_frequency`` are NaN for empty bins (``count`` 0).
    """

    edges: tuple[float, ...]
    count: tuple[int, ...]
    mean_predicted: tuple[float, ...]
    observed_frequency: tuple[float, ...]

    @property
    def n_bins(self) -> int:
        return len(self.count)

    @property
    def ece(self) -> float:
        """Expected calibration error of these bins (see the module docstring)."""
        count = np.asarray(self.count, dtype=np.float64)
        gap = np.abs(np.asarray(self.observed_frequency) - np.asarray(self.mean_predicted))
        filled = count > 0
        return float(np.sum(count[filled] * gap[filled]) / count.sum())


def _check_probs_labels(probs: ArrayLike, labels: ArrayLike) -> tuple[FloatArray, FloatArray]:
    p = np.asarray(probs, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    if p.ndim != 1 or y.shape != p.shape:
        raise ValueError(f"probs and labels must be 1-D arrays of equal length; got {p.shape} and {y.shape}")
    if p.size == 0:
        raise ValueError("calibration needs at least one image")
    if np.any((p < 0.0) | (p > 1.0)) or not np.all(np.isfinite(p)):
        raise ValueError("probs must be finite probabilities in [0, 1]")
    if not np.all((y == 0.0) | (y == 1.0)):
        raise ValueError("labels must be 0 (non-referable) or 1 (referable)")
    return p, y


def _bin_index(p: FloatArray, n_bins: int) -> NDArray[np.int64]:
    """``[N]`` equal-width reliability bin of each probability, the last bin closed at 1.

    floor(p · n) rather than np.digitize on linspace edges: linspace(0, 1, 11)[3] is 0.30000000000000004,
    which would put p = 0.3 in the bin below.
    """
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1; got {n_bins}")
    return np.minimum(np.floor(p * n_bins).astype(np.int64), n_bins - 1)


def reliability_bins(probs: ArrayLike, labels: ArrayLike, *, n_bins: int = 10) -> ReliabilityBins:
    """Bin ``probs`` ``[N]`` into ``n_bins`` equal-width bins and compare confidence with label frequency."""
    p, y = _check_probs_labels(probs, labels)
    idx = _bin_index(p, n_bins)  # [N]
    count = np.bincount(idx, minlength=n_bins)  # [n_bins]
    sum_p = np.bincount(idx, weights=p, minlength=n_bins)
    sum_y = np.bincount(idx, weights=y, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_p = np.where(count > 0, sum_p / count, np.nan)
        freq = np.where(count > 0, sum_y / count, np.nan)
    edges = np.arange(n_bins + 1, dtype=np.float64) / n_bins
    return ReliabilityBins(
        edges=tuple(float(e) for e in edges),
        count=tuple(int(c) for c in count),
        mean_predicted=tuple(float(v) for v in mean_p),
        observed_frequency=tuple(float(v) for v in freq),
    )


def expected_calibration_error(probs: ArrayLike, labels: ArrayLike, *, n_bins: int = 10) -> float:
    """ECE of the predicted probability ``probs`` ``[N]`` against 0/1 ``labels`` ``[N]``, equal-width bins."""
    return reliability_bins(probs, labels, n_bins=n_bins).ece


def _bin_onehot(p: FloatArray, n_bins: int) -> FloatArray:
    """``[N, n_bins]`` indicator of each image's reliability bin (the binning of :func:`reliability_bins`)."""
    return np.eye(n_bins, dtype=np.float64)[_bin_index(p, n_bins)]


def ece_bootstrap_se(probs: ArrayLike, labels: ArrayLike, *, n_bins: int = 10, n_bootstrap: int = 200,
                     seed: int = 0) -> float:
    """Bootstrap standard error of the ECE: its SD over ``n_bootstrap`` seeded resamples of the images."""
    if n_bootstrap < 2:
        raise ValueError(f"n_bootstrap must be >= 2; got {n_bootstrap}")
    p, y = _check_probs_labels(probs, labels)
    onehot = _bin_onehot(p, n_bins)  # [N, n_bins]
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(p.size, np.full(p.size, 1.0 / p.size), size=n_bootstrap)  # [R, N] resample counts
    gaps = (weights * (y - p)) @ onehot  # [R, n_bins] Σ_{i∈b} (y_i − p_i) per resample
    return float(np.std(np.abs(gaps).sum(axis=1) / p.size, ddof=1))


def ece_calibrated_floor(probs: ArrayLike, *, n_bins: int = 10, n_draws: int = 200, seed: int = 0) -> float:
    """The ECE that a perfectly calibrated model with these predictions shows by sampling alone.

    The mean ECE over ``n_draws`` seeded label sets y_i ~ Bernoulli(p̄_i): an observed ECE near this value
    is indistinguishable from perfect calibration on this many images; the excess over it is miscalibration.
    """
    if n_draws < 1:
        raise ValueError(f"n_draws must be >= 1; got {n_draws}")
    p = np.asarray(probs, dtype=np.float64)
    _check_probs_labels(p, np.zeros_like(p))
    onehot = _bin_onehot(p, n_bins)  # [N, n_bins]
    rng = np.random.default_rng(seed)
    y = (rng.random((n_draws, p.size)) < p).astype(np.float64)  # [D, N] labels of a calibrated model
    gaps = (y - p) @ onehot  # [D, n_bins]
    return float(np.mean(np.abs(gaps).sum(axis=1) / p.size))
