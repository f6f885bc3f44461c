"""Evaluation of Monte Carlo predictions: referral curves, calibration, MI threshold, plots, JSON report.

Works on numpy arrays (``mc_probs`` ``[S, N]``, ``labels`` ``[N]``), so it needs no model; see
``training.evaluation.evaluate`` for a worked example.
"""

from training.evaluation.calibration import ReliabilityBins, expected_calibration_error, reliability_bins
from training.evaluation.evaluate import evaluate_predictions, read_report, write_report
from training.evaluation.paired import PairedDifference, ReferralArm, paired_bootstrap, strategy_arm
from training.evaluation.referral import (
    DEFAULT_FRACTIONS,
    STRATEGIES,
    ReferralCurve,
    Strategy,
    referral_curve,
)
from training.evaluation.report import EvaluationReport, MIHistogram
from training.evaluation.threshold import ReferralThreshold, mi_referral_threshold, referral_rate
from training.evaluation.uncertainty import McUncertainty, mc_uncertainty

__all__ = [
    "DEFAULT_FRACTIONS",
    "STRATEGIES",
    "EvaluationReport",
    "MIHistogram",
    "McUncertainty",
    "PairedDifference",
    "ReferralArm",
    "ReferralCurve",
    "ReferralThreshold",
    "ReliabilityBins",
    "Strategy",
    "evaluate_predictions",
    "expected_calibration_error",
    "mc_uncertainty",
    "mi_referral_threshold",
    "paired_bootstrap",
    "read_report",
    "referral_curve",
    "referral_rate",
    "reliability_bins",
    "strategy_arm",
    "write_report",
]
