"""A site's operating point and the promise it makes, measured on eyes that chose nothing else.

The thresholds are the project's screening operating point (``training.evaluation.operating_point``) fitted on
the site's calibration eyes with the bound asked (``--miss-share``). What the card promises is not that
in-sample figure but the **cross-fitted** one (``training.evaluation.cross_fit``): thresholds fitted on half of
the patients and counted on the other half, both ways, over ``repeats`` random halves; its 95 % interval
resamples patients. The same figures are given for the parent's own thresholds on the same eyes, so the card
shows what adaptation changed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from sklearn.metrics import roc_auc_score

from training.evaluation.cross_fit import (
    Interval,
    bootstrap_weights,
    cross_fitted,
    interval,
    patient_groups,
    share_difference,
    weighted_aucs,
)
from training.evaluation.operating_point import outcome_shares, screening_operating_point
from training.evaluation.uncertainty import mc_uncertainty


@dataclass(frozen=True)
class SitePromise:
    decision_threshold: float
    referral_threshold_mi: float
    miss_share_bound: float
    in_sample: dict[str, float]  # missed_share, auto_negative_share, uncertain_share, referred_share at the thresholds
    missed: Interval  # cross-fitted share of referable eyes answered no_referable_dr
    automatic: Interval  # cross-fitted share of non-referable eyes answered no_referable_dr
    auc: Interval
    parent: dict[str, float]  # the parent as it serves, on the same eyes: auc, missed_share, auto_negative_share, ...
    n_eyes: int
    n_patients: int
    n_referable: int
    repeats: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def sentence(self) -> str:
        return (f"at most {self.miss_share_bound:.0%} of referable eyes missed in sample; out of sample "
                f"(cross-fitted by patient, {self.repeats} repeats) {self.missed.text(pct=True)} of referable eyes "
                f"missed and {self.automatic.text(pct=True)} of non-referable eyes answered automatically, on "
                f"{self.n_eyes} calibration eyes ({self.n_referable} referable, {self.n_patients} patients)")


def site_promise(probs: ArrayLike, labels: ArrayLike, patients: list[str], *, miss_share: float,
                 parent_probs: ArrayLike, parent_thresholds: tuple[float, float], repeats: int = 200,
                 n_bootstrap: int = 1000, seed: int = 0) -> SitePromise:
    """The operating point of the calibration eyes' draws ``probs`` ``[S, N]`` (see the module docstring).
    ``parent_probs``: the parent's draws on the same eyes (the same array when the weights are the parent's),
    ``parent_thresholds``: (decision threshold, MI threshold) the parent serves."""
    unc = mc_uncertainty(np.asarray(probs))
    p, mi = unc.probability, unc.mutual_information
    y = np.asarray(labels).astype(np.int64).ravel()
    op = screening_operating_point(p, mi, y, max_missed_share=miss_share)
    group = patient_groups(patients)
    rng = np.random.default_rng(seed)
    weights = bootstrap_weights(group, n_bootstrap, rng)
    halves = [rng.random(int(group.max()) + 1) < 0.5 for _ in range(repeats)]
    missed, auto = cross_fitted(p, mi, y, group, halves, miss_share)
    auc = float(roc_auc_score(y, p))
    return SitePromise(
        decision_threshold=op.decision_threshold, referral_threshold_mi=op.referral_threshold_mi,
        miss_share_bound=miss_share,
        in_sample={k: float(v) for k, v in outcome_shares(p, mi, y, decision_threshold=op.decision_threshold,
                                                           referral_threshold_mi=op.referral_threshold_mi).items()},
        missed=share_difference(missed, y == 1, weights), automatic=share_difference(auto, y == 0, weights),
        auc=interval(auc, weighted_aucs(p, y, weights)),
        parent=_as_served(np.asarray(parent_probs), y, parent_thresholds),
        n_eyes=int(y.size), n_patients=int(group.max()) + 1, n_referable=int(y.sum()), repeats=repeats)


def _as_served(probs: np.ndarray, y: np.ndarray, thresholds: tuple[float, float]) -> dict[str, float]:
    unc = mc_uncertainty(probs)
    shares = outcome_shares(unc.probability, unc.mutual_information, y, decision_threshold=thresholds[0],
                            referral_threshold_mi=thresholds[1])
    return {"auc": float(roc_auc_score(y, unc.probability)), **{k: float(v) for k, v in shares.items()}}
