"""The evaluation report: one typed record of an evaluation, its JSON form, and the artifact's subset.

``EvaluationReport.to_dict()`` is plain JSON (NaN, for an undefined metric, becomes ``null``);
``from_dict`` rebuilds the same report. The plots are drawn from the report alone (it keeps the reliability
bins and the MI histogram, never per-image values), so a saved report can be re-plotted later.
``calibration_summary()`` is the part that goes into the model artifact's ``calibration.json``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, cast

from training.evaluation.calibration import ReliabilityBins
from training.evaluation.paired import PairedDifference
from training.evaluation.referral import ReferralCurve, Strategy
from training.evaluation.threshold import ReferralThreshold

SUMMARY_FRACTIONS: tuple[float, ...] = (0.1, 0.2, 0.3)
MI_QUANTILES: tuple[float, ...] = (0.05, 0.25, 0.5, 0.75, 0.95)  # the MI scale reported with every evaluation


@dataclass(frozen=True)
class MIHistogram:
    """Counts of mutual information (nats) per bin, split by whether the thresholded prediction was right.

    ``edges`` has one more entry than each count tuple.
    """

    edges: tuple[float, ...]
    count_correct: tuple[int, ...]
    count_incorrect: tuple[int, ...]


@dataclass(frozen=True)
class EvaluationReport:
    """Everything one evaluation measured; see ``training.evaluation.evaluate.evaluate_predictions``.

    ``auc_at_referral`` / ``accuracy_at_referral`` map a referral fraction (by MI) to the metric on the
    retained images; ``auc_at_threshold`` / ``accuracy_at_threshold`` are the metrics on the images the
    MI threshold keeps. Entropies and MI are in nats. NaN marks an undefined value.
    """

    SCHEMA_VERSION: ClassVar[int] = 1

    n_images: int
    n_positive: int
    # predictions per image the figures average over: network draws x head draws x views (not the network draws
    # alone: an artifact serving 8 draws x 64 head draws x 2 views makes 1,024)
    n_predictions: int
    decision_threshold: float
    auc: float
    accuracy: float
    ece: float
    reliability: ReliabilityBins
    curves: Mapping[Strategy, ReferralCurve]
    referral_threshold: ReferralThreshold
    threshold_fitted: bool
    auc_at_threshold: float
    accuracy_at_threshold: float
    auc_at_referral: Mapping[float, float]
    accuracy_at_referral: Mapping[float, float]
    mean_mi_correct: float
    mean_mi_incorrect: float
    mi_histogram: MIHistogram
    n_bootstrap: int
    seed: int
    # MI − random and MI − entropy on the same resamples (paired bootstrap, 95 % percentile intervals)
    paired_differences: tuple[PairedDifference, ...] = ()
    # the MI scale: quantiles of the per-image MI in nats, keys "0.05" ... "0.95" (MI_QUANTILES)
    mi_quantiles: Mapping[str, float] = field(default_factory=dict)
    # ECE's bootstrap SE and the ECE a perfectly calibrated model shows on these images by sampling alone
    # (training.evaluation.calibration); NaN in reports written before these fields
    ece_se: float = math.nan
    ece_calibrated_floor: float = math.nan

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: tuples become lists, fraction keys become strings, NaN becomes ``None``."""
        out: dict[str, Any] = {"schema_version": self.SCHEMA_VERSION}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if name == "curves":
                out[name] = {s: asdict(c) for s, c in value.items()}
            elif name == "paired_differences":
                out[name] = [asdict(d) for d in value]
            elif name == "mi_quantiles":
                out[name] = dict(value)
            elif name in ("auc_at_referral", "accuracy_at_referral"):
                out[name] = {fraction_key(f): v for f, v in value.items()}
            elif hasattr(value, "__dataclass_fields__"):
                out[name] = asdict(value)
            else:
                out[name] = value
        return cast(dict[str, Any], _json_safe(out))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvaluationReport:
        """Rebuild a report from ``to_dict()`` output (e.g. read back from ``evaluation.json``)."""
        version = data.get("schema_version")
        if version != cls.SCHEMA_VERSION:
            raise ValueError(
                f"Unsupported evaluation report schema_version {version!r}; this code reads "
                f"version {cls.SCHEMA_VERSION}. Re-run the evaluation to regenerate the report."
            )
        try:
            rel = data["reliability"]
            thr = data["referral_threshold"]
            hist = data["mi_histogram"]
            return cls(
                n_images=int(data["n_images"]),
                n_positive=int(data["n_positive"]),
                # "n_mc_samples": the key of reports written before it was named for what it counts
                n_predictions=int(data["n_predictions"] if "n_predictions" in data else data["n_mc_samples"]),
                decision_threshold=_f(data["decision_threshold"]),
                auc=_f(data["auc"]),
                accuracy=_f(data["accuracy"]),
                ece=_f(data["ece"]),
                reliability=ReliabilityBins(
                    edges=_floats(rel["edges"]),
                    count=_ints(rel["count"]),
                    mean_predicted=_floats(rel["mean_predicted"]),
                    observed_frequency=_floats(rel["observed_frequency"]),
                ),
                curves={cast(Strategy, s): _curve_from_dict(c) for s, c in data["curves"].items()},
                referral_threshold=ReferralThreshold(
                    threshold=_f(thr["threshold"]),
                    target_rate=_f(thr["target_rate"]),
                    achieved_rate=_f(thr["achieved_rate"]),
                    n_referred=int(thr["n_referred"]),
                    n=int(thr["n"]),
                ),
                threshold_fitted=bool(data["threshold_fitted"]),
                auc_at_threshold=_f(data["auc_at_threshold"]),
                accuracy_at_threshold=_f(data["accuracy_at_threshold"]),
                auc_at_referral={float(k): _f(v) for k, v in data["auc_at_referral"].items()},
                accuracy_at_referral={float(k): _f(v) for k, v in data["accuracy_at_referral"].items()},
                mean_mi_correct=_f(data["mean_mi_correct"]),
                mean_mi_incorrect=_f(data["mean_mi_incorrect"]),
                mi_histogram=MIHistogram(
                    edges=_floats(hist["edges"]),
                    count_correct=_ints(hist["count_correct"]),
                    count_incorrect=_ints(hist["count_incorrect"]),
                ),
                n_bootstrap=int(data["n_bootstrap"]),
                seed=int(data["seed"]),
                paired_differences=tuple(_paired_from_dict(d) for d in data.get("paired_differences", [])),
                mi_quantiles={str(k): _f(v) for k, v in data.get("mi_quantiles", {}).items()},
                ece_se=_f(data.get("ece_se")),
                ece_calibrated_floor=_f(data.get("ece_calibrated_floor")),
            )
        except KeyError as exc:
            raise ValueError(f"Evaluation report is missing the field {exc.args[0]!r}") from exc

    def calibration_summary(self) -> dict[str, Any]:
        """The subset stored in the model artifact's ``calibration.json`` (JSON-ready, NaN as ``None``)."""
        summary = {
            "referral_threshold_mi": self.referral_threshold.threshold,
            "target_referral_rate": self.referral_threshold.target_rate,
            "achieved_referral_rate": self.referral_threshold.achieved_rate,
            "decision_threshold": self.decision_threshold,
            "validation": {
                "n_images": self.n_images,
                "auc": self.auc,
                "accuracy": self.accuracy,
                "ece": self.ece,
                "ece_se": self.ece_se,
                "ece_calibrated_floor": self.ece_calibrated_floor,
                "auc_at_referral": {fraction_key(f): v for f, v in self.auc_at_referral.items()},
                "accuracy_at_referral": {fraction_key(f): v for f, v in self.accuracy_at_referral.items()},
                **({"mi_quantiles": dict(self.mi_quantiles)} if self.mi_quantiles else {}),
            },
        }
        return cast(dict[str, Any], _json_safe(summary))


def fraction_key(fraction: float) -> str:
    """JSON key of a referral fraction: ``0.1`` -> ``"0.1"`` (shortest round-tripping form)."""
    return repr(float(fraction))


def _paired_from_dict(d: Mapping[str, Any]) -> PairedDifference:
    return PairedDifference(
        a=str(d["a"]), b=str(d["b"]), metric=d["metric"], fractions=_floats(d["fractions"]),
        difference=_floats(d["difference"]), ci_low=_floats(d["ci_low"]), ci_high=_floats(d["ci_high"]),
        n_bootstrap=int(d["n_bootstrap"]), n_bootstrap_used=_ints(d["n_bootstrap_used"]),
    )


def _curve_from_dict(c: Mapping[str, Any]) -> ReferralCurve:
    return ReferralCurve(
        strategy=cast(Strategy, c["strategy"]),
        fractions=_floats(c["fractions"]),
        n_retained=_ints(c["n_retained"]),
        auc=_floats(c["auc"]),
        auc_se=_floats(c["auc_se"]),
        accuracy=_floats(c["accuracy"]),
        accuracy_se=_floats(c["accuracy_se"]),
        n_bootstrap=int(c["n_bootstrap"]),
        n_bootstrap_used=_ints(c["n_bootstrap_used"]),
    )


def _f(value: Any) -> float:
    """JSON number or ``null`` -> float (``null`` is an undefined metric, NaN)."""
    return float("nan") if value is None else float(value)


def _floats(values: Any) -> tuple[float, ...]:
    return tuple(_f(v) for v in values)


def _ints(values: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def _json_safe(obj: Any) -> Any:
    """Recursively turn tuples into lists and non-finite floats into ``None`` (JSON has no NaN)."""
    if isinstance(obj, Mapping):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
