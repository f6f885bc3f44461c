"""The MI referral threshold the service applies: chosen on validation data for a target referral rate.

Rule shared with the service (``models.outcome.decision.is_uncertain``): an image is referred as uncertain iff its
mutual information is strictly **above** the threshold. For a target rate r the threshold is the validation quantile
of MI at 1 - r: with distinct MI values and r · N an integer, exactly r · N validation images lie above it.

Ties: when many images share one MI value (a deterministic baseline has MI = 0 everywhere; fp16 outputs
quantise MI), no threshold can split them, so the achievable referral rates jump. The threshold is then the
candidate whose achieved rate is closest to the target, and of two equally close ones the one that refers
more (in screening a missed referral costs more than an extra expert read). Candidates are the observed MI
values themselves, plus one just below the smallest (refer everything); the achieved rate is reported so a
caller sees the gap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from models.outcome.decision import is_uncertain


@dataclass(frozen=True)
class ReferralThreshold:
    """An MI threshold (refer iff MI > threshold, nats) and the rates it was set for and achieves."""

    threshold: float
    target_rate: float
    achieved_rate: float
    n_referred: int
    n: int


def referral_rate(mutual_information: ArrayLike, threshold: float) -> float:
    """Fraction of images with MI strictly above ``threshold`` (the service's referral rule)."""
    mi = np.asarray(mutual_information, dtype=np.float64)
    if mi.size == 0:
        raise ValueError("referral_rate needs at least one MI value")
    return float(np.mean(is_uncertain(mi, threshold)))


def mi_referral_threshold(mutual_information: ArrayLike, target_rate: float = 0.2) -> ReferralThreshold:
    """Choose the MI threshold that refers the fraction ``target_rate`` of these (validation) images.

    ``mutual_information`` is ``[N]`` in nats. See the module docstring for the tie rule.
    """
    mi = np.asarray(mutual_information, dtype=np.float64).ravel()  # [N]
    if mi.size == 0:
        raise ValueError("mi_referral_threshold needs at least one validation MI value")
    if not np.all(np.isfinite(mi)):
        raise ValueError("mutual_information contains NaN or infinite values")
    if not 0.0 <= target_rate <= 1.0:
        raise ValueError(f"target_rate must be a fraction in [0, 1]; got {target_rate}")
    n = mi.size
    sorted_mi = np.sort(mi)  # [N] ascending
    values = np.unique(sorted_mi)  # [U] distinct candidates
    below_min = np.nextafter(values[0], -np.inf)
    candidates = np.concatenate([[below_min], values])  # [U + 1] ascending
    n_above = n - np.searchsorted(sorted_mi, candidates, side="right")  # [U + 1] descending
    rates = n_above / n
    gap = np.abs(rates - target_rate)
    # Closest rate wins; among equally close ones the lowest threshold (highest rate). np.argmin returns the
    # first minimum, and candidates are ascending, so that is the one that refers most. Round the gaps so
    # float noise in rates / target does not decide a genuine tie.
    best = int(np.argmin(np.round(gap, 12)))
    return ReferralThreshold(
        threshold=float(candidates[best]),
        target_rate=float(target_rate),
        achieved_rate=float(rates[best]),
        n_referred=int(n_above[best]),
        n=n,
    )
