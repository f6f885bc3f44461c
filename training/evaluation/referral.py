"""Referral curves: ROC-AUC and accuracy on the images a model keeps after deferring the most uncertain.

Convention of the paper (Table 1, §4.1.1): for a referral fraction f, the ranking by uncertainty is made on
the *whole* evaluation set, the round(f · N) most uncertain images are referred to an expert, and the
metrics are computed on the N - round(f · N) retained images. Three strategies are compared:

- ``mutual_information`` — refer by MI (epistemic uncertainty; what the service uses);
- ``predictive_entropy`` — refer by H[p̄] (total uncertainty);
- ``random`` — refer a uniformly random subset (baseline: on average it leaves the metrics unchanged).

Ties in the uncertainty (e.g. MI = 0 for a deterministic model, or duplicated images in a bootstrap
resample) are broken at random with the seeded generator, never by array position.

Standard errors are bootstrapped: resample the evaluation set with replacement, redo the ranking and the
whole curve on the resample, and take the standard deviation (ddof = 1) over resamples. A resample whose
retained set at some fraction holds a single class has no AUC there; it is skipped for that point, and the
number of resamples used per point is reported. Point estimates use ``sklearn.metrics``; the bootstrap (and
the extra orders averaged for the random baseline) use the equivalent Mann-Whitney form of the AUC (same
value to 1e-12, ties counted 1/2, about ten times faster than ``roc_auc_score``'s input checks allow).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal

import numpy as np
from numpy.typing import NDArray
from scipy.stats import rankdata
from sklearn.metrics import accuracy_score, roc_auc_score

from models.outcome.decision import is_referable
from training.evaluation.uncertainty import FloatArray, McUncertainty

Strategy = Literal["mutual_information", "predictive_entropy", "random"]
STRATEGIES: tuple[Strategy, ...] = ("mutual_information", "predictive_entropy", "random")
DEFAULT_FRACTIONS: tuple[float, ...] = tuple(k / 100 for k in range(0, 55, 5))  # 0, 5, ..., 50 %
IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class ReferralCurve:
    """Metrics on the retained images for each referral fraction of one strategy.

    All tuples are aligned with ``fractions``. NaN marks an undefined value (AUC of a single-class retained
    set; an SE from fewer than two usable resamples). ``n_bootstrap_used`` counts the resamples that gave
    an AUC at each fraction (accuracy is defined for every resample).
    """

    strategy: Strategy
    fractions: tuple[float, ...]
    n_retained: tuple[int, ...]
    auc: tuple[float, ...]
    auc_se: tuple[float, ...]
    accuracy: tuple[float, ...]
    accuracy_se: tuple[float, ...]
    n_bootstrap: int
    n_bootstrap_used: tuple[int, ...]


def check_fractions(fractions: Sequence[float]) -> tuple[float, ...]:
    """Validate referral fractions (each in [0, 1), strictly increasing) and return them as floats."""
    fr = tuple(float(f) for f in fractions)
    if not fr:
        raise ValueError("fractions must name at least one referral fraction, e.g. (0.0, 0.1, 0.2)")
    if any(not 0.0 <= f < 1.0 for f in fr):
        raise ValueError(f"referral fractions must lie in [0, 1) (1.0 would refer every image); got {fr}")
    if any(b <= a for a, b in pairwise(fr)):
        raise ValueError(f"referral fractions must be strictly increasing; got {fr}")
    return fr


def n_referred(n: int, fraction: float) -> int:
    """Number of images referred out of ``n`` at ``fraction``: round half up of fraction · n."""
    return int(np.floor(fraction * n + 0.5))


def referral_order(uncertainty: FloatArray | None, n: int, rng: np.random.Generator) -> IntArray:
    """Indices ``[n]`` from most to least uncertain; ``None`` means a random order (the baseline).

    Ties are broken by a random key, so equal uncertainties never favour array position.
    """
    tiebreak = rng.random(n)  # [n]
    if uncertainty is None:
        return np.argsort(tiebreak).astype(np.int64)
    # lexsort sorts by the last key first: descending uncertainty, then the random key.
    return np.lexsort((tiebreak, -uncertainty)).astype(np.int64)


def strategy_scores(strategy: Strategy, unc: McUncertainty) -> FloatArray | None:
    """The per-image score a strategy ranks by (higher = referred first); ``None`` for random referral."""
    if strategy == "mutual_information":
        return unc.mutual_information
    if strategy == "predictive_entropy":
        return unc.predictive_entropy
    if strategy == "random":
        return None
    raise ValueError(f"Unknown referral strategy {strategy!r}; expected one of: {', '.join(STRATEGIES)}")


def mann_whitney_auc(labels: NDArray[np.int64], scores: FloatArray) -> float:
    """ROC-AUC as the Mann-Whitney statistic (mid-ranks, ties 1/2); NaN unless both classes are present."""
    n_pos = int(labels.sum())
    n_neg = labels.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(scores)  # [n], average ranks for ties
    return float((ranks[labels == 1].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def curve_at(
    probability: FloatArray,
    labels: NDArray[np.int64],
    order: IntArray,
    fractions: Sequence[float],
    *,
    decision_threshold: float,
) -> tuple[list[int], list[float], list[float]]:
    """Point estimates (sklearn) for one ranking: retained counts, AUCs and accuracies per fraction."""
    n = labels.size
    n_retained: list[int] = []
    aucs: list[float] = []
    accs: list[float] = []
    for f in fractions:
        keep = order[n_referred(n, f) :]  # the least uncertain images
        y, p = labels[keep], probability[keep]
        n_retained.append(int(keep.size))
        aucs.append(float(roc_auc_score(y, p)) if np.unique(y).size == 2 else float("nan"))
        accs.append(float(accuracy_score(y, is_referable(p, decision_threshold))))
    return n_retained, aucs, accs


def _bootstrap_curve(
    probability: FloatArray,
    labels: NDArray[np.int64],
    order: IntArray,
    fractions: Sequence[float],
    decision_threshold: float,
) -> tuple[FloatArray, FloatArray]:
    """Fast AUCs and accuracies per fraction for one resample (Mann-Whitney AUC, boolean accuracy)."""
    n = labels.size
    aucs = np.empty(len(fractions))
    accs = np.empty(len(fractions))
    correct = is_referable(probability, decision_threshold) == (labels == 1)  # [n]
    for j, f in enumerate(fractions):
        keep = order[n_referred(n, f) :]
        aucs[j] = mann_whitney_auc(labels[keep], probability[keep])
        accs[j] = correct[keep].mean()
    return aucs, accs


def referral_curve(
    unc: McUncertainty,
    labels: NDArray[np.int64],
    strategy: Strategy,
    *,
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
    n_bootstrap: int = 200,
    seed: int = 0,
    decision_threshold: float = 0.5,
    n_random_orders: int = 20,
) -> ReferralCurve:
    """Referral curve of one strategy with bootstrapped standard errors.

    ``unc`` holds the per-image uncertainty ``[N]`` and ``labels`` the 0/1 truth ``[N]``. For the random
    strategy the point estimate is the mean over ``n_random_orders`` seeded random orders (a single random
    draw would make the baseline curve itself noisy); each bootstrap resample draws its own random order.
    """
    fr = check_fractions(fractions)
    if n_bootstrap < 0:
        raise ValueError(f"n_bootstrap must be >= 0; got {n_bootstrap}")
    scores = strategy_scores(strategy, unc)
    p = unc.probability
    n = labels.size
    point_rng, boot_rng = _strategy_rngs(seed, strategy)

    order = referral_order(scores, n, point_rng)
    n_retained, auc_list, acc_list = curve_at(p, labels, order, fr, decision_threshold=decision_threshold)
    auc, acc = np.asarray(auc_list), np.asarray(acc_list)  # [F]
    if scores is None and n_random_orders > 1:
        # Further random orders through the fast path (same values as sklearn, see mann_whitney_auc).
        extra = [
            _bootstrap_curve(p, labels, referral_order(None, n, point_rng), fr, decision_threshold)
            for _ in range(n_random_orders - 1)
        ]
        auc = np.mean([auc, *(e[0] for e in extra)], axis=0)  # NaN if any order kept a single class
        acc = np.mean([acc, *(e[1] for e in extra)], axis=0)

    boot_auc = np.full((n_bootstrap, len(fr)), np.nan)  # [B, F]
    boot_acc = np.full((n_bootstrap, len(fr)), np.nan)  # [B, F]
    for b in range(n_bootstrap):
        idx = boot_rng.integers(0, n, size=n)  # [N], with replacement
        s_b = None if scores is None else scores[idx]
        order = referral_order(s_b, n, boot_rng)
        boot_auc[b], boot_acc[b] = _bootstrap_curve(p[idx], labels[idx], order, fr, decision_threshold)

    used = np.sum(np.isfinite(boot_auc), axis=0)  # [F]
    return ReferralCurve(
        strategy=strategy,
        fractions=fr,
        n_retained=tuple(n_retained),
        auc=tuple(float(v) for v in auc),
        auc_se=tuple(_nan_std(boot_auc[:, j]) for j in range(len(fr))),
        accuracy=tuple(float(v) for v in acc),
        accuracy_se=tuple(_nan_std(boot_acc[:, j]) for j in range(len(fr))),
        n_bootstrap=n_bootstrap,
        n_bootstrap_used=tuple(int(u) for u in used),
    )


def _strategy_rngs(seed: int, strategy: Strategy) -> tuple[np.random.Generator, np.random.Generator]:
    """Generators for the point estimate and the bootstrap of one strategy, derived from ``seed``.

    One pair per strategy, so a curve does not depend on which other curves were computed before it.
    """
    ss = np.random.SeedSequence([seed, STRATEGIES.index(strategy)])
    point, boot = ss.spawn(2)
    return np.random.default_rng(point), np.random.default_rng(boot)


def _nan_std(values: FloatArray) -> float:
    """Sample standard deviation (ddof = 1) of the finite values; NaN with fewer than two."""
    finite = values[np.isfinite(values)]
    return float(np.std(finite, ddof=1)) if finite.size >= 2 else float("nan")


def retained_metrics(
    unc: McUncertainty,
    labels: NDArray[np.int64],
    fractions: Sequence[float],
    *,
    decision_threshold: float = 0.5,
    seed: int = 0,
) -> tuple[dict[float, float], dict[float, float]]:
    """AUC and accuracy after referral by MI at each fraction (point estimates, no bootstrap).

    Used for the summary figures (0, 10, 20, 30 % referred) whatever the plotted fractions are.
    """
    fr = check_fractions(fractions)
    point_rng, _ = _strategy_rngs(seed, "mutual_information")  # same ties broken as in the MI curve
    order = referral_order(unc.mutual_information, labels.size, point_rng)
    _, aucs, accs = curve_at(unc.probability, labels, order, fr, decision_threshold=decision_threshold)
    return dict(zip(fr, aucs, strict=True)), dict(zip(fr, accs, strict=True))
