"""Paired bootstrap of referral-curve differences (MI − random, MI − entropy, method − method), 95 % intervals.

Two curves measured on the same images are correlated: an image that is hard for one ranking is hard for the
other.  Comparing their separate bootstrap SEs overstates the uncertainty of the difference, so each
resample here draws ONE set of image indices and evaluates both arms on it; the interval is the 2.5–97.5 %
percentile of the resampled differences.  Two arms that rank identically give a difference of exactly 0 on
every resample — an unpaired comparison would not.

An *arm* is a probability per image (what the retained images are scored with) and a ranking score (higher
= referred first; ``None`` = random referral).  For a random arm the point estimate averages
``n_random_orders`` orders and each resample averages ``random_orders_per_resample``, so the baseline's own
order noise does not dominate the interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from training.evaluation.referral import (
    DEFAULT_FRACTIONS,
    _bootstrap_curve,
    check_fractions,
    referral_order,
    strategy_scores,
)
from training.evaluation.uncertainty import FloatArray, McUncertainty

Metric = Literal["auc", "accuracy"]
METRICS: tuple[Metric, ...] = ("auc", "accuracy")


@dataclass(frozen=True)
class ReferralArm:
    """One referral strategy of one model: ``probability`` ``[N]`` and ranking ``scores`` ``[N]`` (None: random)."""

    name: str
    probability: FloatArray
    scores: FloatArray | None


@dataclass(frozen=True)
class PairedDifference:
    """``a − b`` of one metric on the retained images, per referral fraction, with a paired 95 % interval.

    ``n_bootstrap_used`` counts the resamples where both arms had the metric defined (AUC needs both classes).
    """

    a: str
    b: str
    metric: Metric
    fractions: tuple[float, ...]
    difference: tuple[float, ...]
    ci_low: tuple[float, ...]
    ci_high: tuple[float, ...]
    n_bootstrap: int
    n_bootstrap_used: tuple[int, ...]


def strategy_arm(unc: McUncertainty, strategy: str, name: str | None = None) -> ReferralArm:
    """The arm of one model referring by ``strategy`` (mutual_information, predictive_entropy or random)."""
    return ReferralArm(name or strategy, unc.probability, strategy_scores(strategy, unc))  # type: ignore[arg-type]


def _arm_curve(arm: ReferralArm, labels: NDArray[np.int64], idx: NDArray[np.int64], fr: tuple[float, ...],
               threshold: float, rng: np.random.Generator, orders: int) -> tuple[FloatArray, FloatArray]:
    """(AUC [F], accuracy [F]) of ``arm`` on the images ``idx``; a random arm averages ``orders`` orders."""
    p, y = arm.probability[idx], labels[idx]
    if arm.scores is not None:
        return _bootstrap_curve(p, y, referral_order(arm.scores[idx], idx.size, rng), fr, threshold)
    runs = [_bootstrap_curve(p, y, referral_order(None, idx.size, rng), fr, threshold) for _ in range(orders)]
    return np.mean([r[0] for r in runs], axis=0), np.mean([r[1] for r in runs], axis=0)


def paired_bootstrap(
    a: ReferralArm,
    b: ReferralArm,
    labels: ArrayLike,
    *,
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
    n_bootstrap: int = 1000,
    seed: int = 0,
    decision_threshold: float = 0.5,
    n_random_orders: int = 20,
    random_orders_per_resample: int = 5,
) -> dict[Metric, PairedDifference]:
    """Paired bootstrap of ``a − b`` for AUC and accuracy on the retained images at each referral fraction."""
    y = np.asarray(labels).astype(np.int64)  # [N]
    n = y.size
    if a.probability.shape != (n,) or b.probability.shape != (n,):
        raise ValueError(f"both arms need one probability per image [N] = [{n}]; "
                         f"got {a.probability.shape} and {b.probability.shape}")
    if n_bootstrap < 2:
        raise ValueError(f"n_bootstrap must be >= 2 for an interval; got {n_bootstrap}")
    fr = check_fractions(fractions)
    point_rng, boot_rng = (np.random.default_rng(s) for s in np.random.SeedSequence([seed, 7]).spawn(2))
    every = np.arange(n)
    pa = _arm_curve(a, y, every, fr, decision_threshold, point_rng, n_random_orders)
    pb = _arm_curve(b, y, every, fr, decision_threshold, point_rng, n_random_orders)
    diffs = {m: np.full((n_bootstrap, len(fr)), np.nan) for m in METRICS}  # [B, F] each
    for i in range(n_bootstrap):
        idx = boot_rng.integers(0, n, size=n)  # [N], the SAME resample for both arms
        ra = _arm_curve(a, y, idx, fr, decision_threshold, boot_rng, random_orders_per_resample)
        rb = _arm_curve(b, y, idx, fr, decision_threshold, boot_rng, random_orders_per_resample)
        diffs["auc"][i], diffs["accuracy"][i] = ra[0] - rb[0], ra[1] - rb[1]
    out: dict[Metric, PairedDifference] = {}
    for k, metric in enumerate(METRICS):
        d = diffs[metric]
        lo, hi, used = [], [], []
        for j in range(len(fr)):
            finite = d[:, j][np.isfinite(d[:, j])]
            used.append(int(finite.size))
            lo.append(float(np.percentile(finite, 2.5)) if finite.size >= 2 else float("nan"))
            hi.append(float(np.percentile(finite, 97.5)) if finite.size >= 2 else float("nan"))
        out[metric] = PairedDifference(a.name, b.name, metric, fr, tuple(float(v) for v in pa[k] - pb[k]),
                                       tuple(lo), tuple(hi), n_bootstrap, tuple(used))
    return out


def strategy_differences(unc: McUncertainty, labels: ArrayLike, *, fractions: Sequence[float],
                         n_bootstrap: int, seed: int, decision_threshold: float) -> tuple[PairedDifference, ...]:
    """MI − random and MI − entropy (AUC and accuracy) for one model's predictions."""
    mi = strategy_arm(unc, "mutual_information")
    out: list[PairedDifference] = []
    for other in ("random", "predictive_entropy"):
        res = paired_bootstrap(mi, strategy_arm(unc, other), labels, fractions=fractions, n_bootstrap=n_bootstrap,
                               seed=seed, decision_threshold=decision_threshold)
        out += [res["auc"], res["accuracy"]]
    return tuple(out)
