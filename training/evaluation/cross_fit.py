"""Patient-level resampling for the figures a screening programme is promised: bootstrap intervals and cross-fitting.

Both eyes of a patient move together: an interval resamples patients (``bootstrap_weights``: how often each
eye's patient was drawn), and the operating point is **cross-fitted** (``cross_fitted``): fitted on a random
half of the patients and counted on the other half, both ways, over many random halves, so that each eye's
miss or automatic answer comes from thresholds it did not choose. ``training.evaluation.pass_split`` (how an
artifact spends its passes) and ``training.adapt`` (a site's own operating point) report with them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from sklearn.metrics import roc_auc_score

from models.outcome.decision import is_referable, is_uncertain
from training.evaluation.operating_point import screening_operating_point


@dataclass(frozen=True)
class Interval:
    """A figure and its 95 % percentile interval."""

    value: float
    low: float
    high: float

    def text(self, signed: bool = False, digits: int = 3, pct: bool = False) -> str:
        def f(v: float) -> str:
            if not np.isfinite(v):
                return "n/a"
            return (f"{100 * v:+.1f}" if signed else f"{100 * v:.1f}") if pct else (
                f"{v:+.{digits}f}" if signed else f"{v:.{digits}f}")
        unit = " %" if pct else ""
        return f"{f(self.value)}{unit} ({f(self.low)}, {f(self.high)})"


def patient_groups(patients: Sequence[str]) -> NDArray[np.int64]:
    """Each eye's patient as an index 0..P-1."""
    _, inverse = np.unique(np.asarray(patients, dtype=object).astype(str), return_inverse=True)
    return inverse.astype(np.int64)


def bootstrap_weights(group: NDArray[np.int64], n: int, rng: np.random.Generator) -> NDArray[np.float64]:
    """``[n, N]`` eye weights: how often each eye's patient was drawn in each patient bootstrap sample."""
    g = int(group.max()) + 1
    counts = rng.multinomial(g, np.full(g, 1.0 / g), size=n)
    return counts[:, group].astype(np.float64)


def weighted_aucs(p: NDArray[np.float64], y: NDArray[np.int64], weights: NDArray[np.float64]) -> NDArray[np.float64]:
    out = np.full(len(weights), np.nan)
    for i, w in enumerate(weights):
        keep = w > 0
        if len(np.unique(y[keep])) == 2:
            out[i] = roc_auc_score(y[keep], p[keep], sample_weight=w[keep])
    return out


def interval(value: float, samples: NDArray[np.float64]) -> Interval:
    s = samples[np.isfinite(samples)]
    if s.size == 0:
        return Interval(float(value), float("nan"), float("nan"))
    return Interval(float(value), float(np.percentile(s, 2.5)), float(np.percentile(s, 97.5)))


def share_difference(diff: NDArray[np.float64], among: NDArray[np.bool_], weights: NDArray[np.float64]) -> Interval:
    """The mean of per-eye ``diff`` over the eyes ``among``, with its patient-bootstrap interval."""
    w = weights[:, among]
    samples = (w * diff[among]).sum(axis=1) / np.maximum(w.sum(axis=1), 1e-12)
    return interval(float(diff[among].mean()), samples)


def cross_fitted(p: NDArray[np.float64], mi: NDArray[np.float64], y: NDArray[np.int64], group: NDArray[np.int64],
                 halves: Sequence[NDArray[np.bool_]], max_missed_share: float
                 ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Per eye: the share of repeats in which it was answered no_referable_dr at thresholds fitted on the
    other half of the patients (``missed`` for referable eyes, ``auto`` for non-referable ones)."""
    answered = np.zeros(y.size)
    for half in halves:
        side = half[group]
        for fit in (side, ~side):
            count = ~fit
            if len(np.unique(y[fit])) < 2:
                continue
            op = screening_operating_point(p[fit], mi[fit], y[fit], max_missed_share=max_missed_share)
            negative = (~is_referable(p[count], op.decision_threshold)
                        & ~is_uncertain(mi[count], op.referral_threshold_mi))
            answered[count] += negative
    answered /= max(len(halves), 1)
    return answered * (y == 1), answered * (y == 0)


__all__ = ["Interval", "bootstrap_weights", "cross_fitted", "interval", "patient_groups", "share_difference",
           "weighted_aucs"]
