"""Where a model's errors are: AUC on subsets of the images, and per-grade summaries.

A single AUC hides whether a model misses referable eyes across the board or only a kind of eye that is
hard by construction.  The synthetic generator makes 30 % of its grade-2 eyes *subtle* (one or two faint
small haemorrhages, ``training.synthetic.lesions``); at 256 px these may be nearly invisible, which would cap
the AUC any model can reach at that input size.  ``subset_auc`` answers such questions with the same
Mann-Whitney AUC and bootstrap SE as the referral curves.

Example::

    keep = ~subtle                      # drop the subtle grade-2 eyes (positives), keep everything else
    subset_auc(p_mean, labels, keep)    # -> SubsetAUC(n_positive=..., n_negative=..., auc=..., se=...)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from models.outcome.decision import is_referable
from training.evaluation.referral import mann_whitney_auc


@dataclass(frozen=True)
class SubsetAUC:
    n_positive: int
    n_negative: int
    auc: float  # NaN when the subset lacks a class
    se: float  # bootstrap SE over the subset's images (NaN without resamples)


def subset_auc(scores: ArrayLike, labels: ArrayLike, keep: ArrayLike, *, n_bootstrap: int = 200,
               seed: int = 0) -> SubsetAUC:
    """AUC of ``scores`` for ``labels`` over the images where ``keep`` is true, with a bootstrap SE."""
    s, y, k = np.asarray(scores, float), np.asarray(labels, np.int64), np.asarray(keep, bool)
    if not (s.shape == y.shape == k.shape) or s.ndim != 1:
        raise ValueError(f"scores, labels and keep must be 1-D and the same length, got {s.shape}, {y.shape}, "
                         f"{k.shape}.")
    s, y = s[k], y[k]
    n_pos, n_neg = int(y.sum()), int(len(y) - y.sum())
    auc = mann_whitney_auc(y, s) if n_pos and n_neg else float("nan")
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(n_bootstrap if n_pos and n_neg else 0):
        i = rng.integers(0, len(y), len(y))
        if 0 < y[i].sum() < len(i):
            boots.append(mann_whitney_auc(y[i], s[i]))
    se = float(np.std(boots, ddof=1)) if len(boots) > 1 else float("nan")
    return SubsetAUC(n_pos, n_neg, auc, se)


@dataclass(frozen=True)
class GroupSummary:
    n: int
    mean_probability: float
    called_positive: float  # share with probability >= the decision threshold
    median_mi: float


def group_summaries(probability: ArrayLike, mutual_information: ArrayLike, groups: ArrayLike, *,
                    decision_threshold: float = 0.5) -> dict[str, GroupSummary]:
    """Per value of ``groups`` (e.g. the DR grade): count, mean p̄, share called positive, median MI."""
    p, mi, g = np.asarray(probability, float), np.asarray(mutual_information, float), np.asarray(groups)
    out: dict[str, GroupSummary] = {}
    for value in sorted(set(g.tolist())):
        m: NDArray[np.bool_] = g == value
        positive = float(is_referable(p[m], decision_threshold).mean())
        out[str(value)] = GroupSummary(int(m.sum()), float(p[m].mean()), positive, float(np.median(mi[m])))
    return out

