"""Entry points: evaluate saved Monte Carlo predictions, and write the report (JSON + PNG plots).

Example (after a training run saved ``mc_probs`` ``[S, N]`` and ``labels`` ``[N]`` of the validation set)::

    from training.evaluation import evaluate_predictions, write_report
    report = evaluate_predictions(mc_probs, labels, n_bootstrap=200, seed=0, target_referral_rate=0.2)
    paths = write_report(report, "runs/radial/eval")   # evaluation.json + three PNGs
    calibration = report.calibration_summary()         # goes into the artifact's calibration.json

To evaluate a test set with the threshold fitted on validation, pass ``referral_threshold_mi=`` the
validation report's threshold: the report then states the referral rate it achieves on the test set.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.metrics import accuracy_score, roc_auc_score

from models.outcome.decision import is_referable, is_uncertain
from training.evaluation.calibration import ece_bootstrap_se, ece_calibrated_floor, reliability_bins
from training.evaluation.paired import strategy_differences
from training.evaluation.referral import (
    DEFAULT_FRACTIONS,
    STRATEGIES,
    ReferralCurve,
    Strategy,
    referral_curve,
    retained_metrics,
)
from training.evaluation.report import MI_QUANTILES, SUMMARY_FRACTIONS, EvaluationReport, MIHistogram, fraction_key
from training.evaluation.threshold import ReferralThreshold, mi_referral_threshold, referral_rate
from training.evaluation.uncertainty import McUncertainty, mc_uncertainty

logger = logging.getLogger(__name__)

REPORT_FILENAME = "evaluation.json"


def _check_labels(labels: ArrayLike, n: int) -> NDArray[np.int64]:
    y = np.asarray(labels)
    if y.ndim != 1 or y.size != n:
        raise ValueError(f"labels must have shape [N] = [{n}] to match mc_probs [S, N]; got {y.shape}")
    if not np.all((y == 0) | (y == 1)):
        raise ValueError("labels must be 0 (non-referable, grade < 2) or 1 (referable, grade >= 2)")
    y = y.astype(np.int64)
    if np.unique(y).size < 2:
        raise ValueError(
            f"labels hold a single class (all {int(y[0])}); ROC-AUC needs both referable and "
            "non-referable images in the evaluation set"
        )
    return y


def _mi_histogram(unc: McUncertainty, correct: NDArray[np.bool_], n_bins: int = 30) -> MIHistogram:
    mi = unc.mutual_information
    top = float(mi.max())
    edges = np.linspace(0.0, top if top > 0 else 1e-6, n_bins + 1)  # [n_bins + 1]
    c_ok, _ = np.histogram(mi[correct], bins=edges)
    c_bad, _ = np.histogram(mi[~correct], bins=edges)
    return MIHistogram(
        edges=tuple(float(e) for e in edges),
        count_correct=tuple(int(c) for c in c_ok),
        count_incorrect=tuple(int(c) for c in c_bad),
    )


def _curves(unc: McUncertainty, y: np.ndarray, *, fractions: Sequence[float], n_bootstrap: int, seed: int,
            decision_threshold: float) -> dict[Strategy, ReferralCurve]:
    """The referral curve of each strategy; a warning names the fractions where bootstrap resamples were skipped
    (a resample that kept a single class has no AUC)."""
    curves = {s: referral_curve(unc, y, s, fractions=fractions, n_bootstrap=n_bootstrap, seed=seed,
                                decision_threshold=decision_threshold) for s in STRATEGIES}
    for curve in curves.values():
        short = [f for f, u in zip(curve.fractions, curve.n_bootstrap_used, strict=True) if u < n_bootstrap]
        if short:
            logger.warning(
                "Referral by %s: some bootstrap resamples kept a single class at fractions %s and were "
                "skipped for the AUC standard error (counts in n_bootstrap_used)", curve.strategy, short,
            )
    return curves


def _threshold(mi: np.ndarray, target_referral_rate: float, referral_threshold_mi: float | None
               ) -> ReferralThreshold:
    """The MI threshold fitted for ``target_referral_rate`` on these images, or the given one with the rate it
    refers here."""
    if referral_threshold_mi is None:
        return mi_referral_threshold(mi, target_referral_rate)
    return ReferralThreshold(
        threshold=float(referral_threshold_mi),
        target_rate=float(target_referral_rate),
        achieved_rate=referral_rate(mi, referral_threshold_mi),
        n_referred=int(np.sum(is_uncertain(mi, referral_threshold_mi))),
        n=int(mi.size),
    )


def evaluate_predictions(
    mc_probs: ArrayLike,
    labels: ArrayLike,
    *,
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
    n_bootstrap: int = 200,
    seed: int = 0,
    decision_threshold: float = 0.5,
    target_referral_rate: float = 0.2,
    referral_threshold_mi: float | None = None,
    n_calibration_bins: int = 10,
) -> EvaluationReport:
    """Evaluate Monte Carlo predictions ``mc_probs`` ``[S, N]`` against 0/1 ``labels`` ``[N]``.

    Computes, on p̄ = mean_s p_s with "referable" meaning p̄ ≥ ``decision_threshold``: AUC and accuracy
    with no referral; referral curves by MI, by predictive entropy and at random over ``fractions``
    with ``n_bootstrap`` seeded bootstrap standard errors; MI − random and MI − entropy as paired-bootstrap
    differences with 95 % intervals at 0/10/20/30/50 % referred; ECE and reliability bins; the MI threshold for
    ``target_referral_rate`` (fitted on this set unless ``referral_threshold_mi`` is given) and the
    metrics on the images it keeps.
    """
    if not 0.0 <= decision_threshold <= 1.0:
        raise ValueError(f"decision_threshold must be a probability in [0, 1]; got {decision_threshold}")
    unc = mc_uncertainty(mc_probs)
    n_predictions = int(np.asarray(mc_probs).shape[0])  # per image: draws x head draws x views
    y = _check_labels(labels, unc.probability.size)
    p = unc.probability  # [N]
    mi = unc.mutual_information  # [N]
    predicted = is_referable(p, decision_threshold)  # [N]
    correct = predicted == (y == 1)  # [N]

    curves = _curves(unc, y, fractions=fractions, n_bootstrap=n_bootstrap, seed=seed,
                     decision_threshold=decision_threshold)
    auc_ref, acc_ref = retained_metrics(
        unc, y, SUMMARY_FRACTIONS, decision_threshold=decision_threshold, seed=seed
    )

    thr = _threshold(mi, target_referral_rate, referral_threshold_mi)
    keep = ~is_uncertain(mi, thr.threshold)  # [N] images the threshold does not refer
    auc_keep = float(roc_auc_score(y[keep], p[keep])) if np.unique(y[keep]).size == 2 else float("nan")
    acc_keep = float(accuracy_score(y[keep], predicted[keep])) if keep.any() else float("nan")

    rel = reliability_bins(p, y, n_bins=n_calibration_bins)
    paired = (strategy_differences(unc, y, fractions=(0.0, *SUMMARY_FRACTIONS, 0.5), n_bootstrap=n_bootstrap,
                                   seed=seed, decision_threshold=decision_threshold) if n_bootstrap >= 2 else ())
    return EvaluationReport(
        n_images=int(y.size),
        n_positive=int(y.sum()),
        n_predictions=n_predictions,
        decision_threshold=float(decision_threshold),
        auc=float(roc_auc_score(y, p)),
        accuracy=float(accuracy_score(y, predicted)),
        ece=rel.ece,
        reliability=rel,
        curves=curves,
        referral_threshold=thr,
        threshold_fitted=referral_threshold_mi is None,
        auc_at_threshold=auc_keep,
        accuracy_at_threshold=acc_keep,
        auc_at_referral=auc_ref,
        accuracy_at_referral=acc_ref,
        mean_mi_correct=float(mi[correct].mean()) if correct.any() else float("nan"),
        mean_mi_incorrect=float(mi[~correct].mean()) if (~correct).any() else float("nan"),
        mi_histogram=_mi_histogram(unc, correct),
        n_bootstrap=int(n_bootstrap),
        seed=int(seed),
        paired_differences=paired,
        mi_quantiles={fraction_key(q): float(v) for q, v in zip(MI_QUANTILES, np.quantile(mi, MI_QUANTILES),
                                                                  strict=True)},
        ece_se=(ece_bootstrap_se(p, y, n_bins=n_calibration_bins, n_bootstrap=n_bootstrap, seed=seed)
                if n_bootstrap >= 2 else float("nan")),
        ece_calibrated_floor=ece_calibrated_floor(p, n_bins=n_calibration_bins, seed=seed),
    )


def write_report(report: EvaluationReport, out_dir: str | Path) -> dict[str, Path]:
    """Write ``evaluation.json`` and the three PNG plots into ``out_dir``; return their paths by name.

    Keys: ``report``, ``referral_curves``, ``reliability``, ``mi_histogram``.
    """
    from training.evaluation.plots import (  # matplotlib is imported only when plotting
        plot_mi_histogram,
        plot_referral_curves,
        plot_reliability,
    )

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "report": out / REPORT_FILENAME,
        "referral_curves": out / "referral_curves.png",
        "reliability": out / "reliability.png",
        "mi_histogram": out / "mi_histogram.png",
    }
    paths["report"].write_text(json.dumps(report.to_dict(), indent=2, allow_nan=False) + "\n")
    plot_referral_curves(report, paths["referral_curves"])
    plot_reliability(report, paths["reliability"])
    plot_mi_histogram(report, paths["mi_histogram"])
    return paths


def read_report(path: str | Path) -> EvaluationReport:
    """Read an ``evaluation.json`` written by ``write_report``."""
    return EvaluationReport.from_dict(json.loads(Path(path).read_text()))
