"""Metrics of the screening outcome: a counter per outcome, and MI histogram buckets on the scale of the
artifact's calibrated threshold (the embedded model's is ~1e-4 nat, far below any fixed 1e-2 bucket)."""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from models.artifact import Calibration
from service.inference.scoring import ImageScore, QualityReport, ScorerIdentity, ScreeningOutcome
from service.metrics import ServiceMetrics, mi_buckets

CAL = Calibration(referral_threshold_mi=1e-3, decision_threshold=0.5, target_referral_rate=0.2, dataset="constructed")


def score(outcome: ScreeningOutcome, mi: float, p: float = 0.3) -> ImageScore:
    gradable = outcome is not ScreeningOutcome.RETAKE_UNGRADABLE
    return ImageScore(probability=p, label=CAL.label(outcome, p), mutual_information=mi,
                      predictive_entropy=0.5, expected_entropy=0.5 - mi, refer_to_expert=False, referral_reasons=[],
                      quality=QualityReport(gradable=gradable, score=0.9 if gradable else 0.1, issues=[]),
                      outcome=outcome)


def identity(name: str, sha256: str) -> ScorerIdentity:
    return ScorerIdentity(name=name, version="1", sha256=sha256, mc_samples=16, head_draws=1, training_data="synthetic",
                          intended_use="tests only.")


def samples(metrics: ServiceMetrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    text = metrics.render().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_mi_buckets_resolve_the_embedded_models_scale() -> None:
    threshold = 1.0087068889053086e-06
    bounds = mi_buckets(threshold)
    assert bounds[0] == pytest.approx(threshold * 0.01, rel=1e-5)
    assert float(f"{threshold:.6g}") in bounds  # the referral boundary is a bucket edge
    assert bounds[-1] == math.log(2) and list(bounds) == sorted(bounds)
    assert sum(b < 1e-5 for b in bounds) >= 8  # most buckets where this model's MI actually lives
    assert mi_buckets(0.3) == (0.003, 0.009, 0.03, 0.075, 0.15, 0.225, 0.3, 0.45, 0.6, math.log(2))


def test_outcome_counter_and_threshold_histogram() -> None:
    metrics = ServiceMetrics()
    assert samples(metrics, "radscreen_outcomes_total") == {
        (("outcome", o.value),): 0.0 for o in ScreeningOutcome}  # zeros before the first image
    assert samples(metrics, "radscreen_mutual_information_count") == {}  # no model yet, no buckets yet
    metrics.set_model(identity("m", "a" * 64), referral_threshold_mi=1e-6)
    for outcome, mi in [(ScreeningOutcome.NO_REFERABLE_DR, 4e-7), (ScreeningOutcome.REFER_REFERABLE_DR, 9e-7),
                        (ScreeningOutcome.GRADER_REVIEW_UNCERTAIN, 3e-6), (ScreeningOutcome.NO_REFERABLE_DR, 1e-8)]:
        metrics.observe_score(score(outcome, mi))
    counts = samples(metrics, "radscreen_outcomes_total")
    assert counts[(("outcome", "no_referable_dr"),)] == 2 and counts[(("outcome", "refer_referable_dr"),)] == 1
    assert counts[(("outcome", "grader_review_uncertain"),)] == 1 and counts[(("outcome", "retake_ungradable"),)] == 0
    buckets = {dict(k)["le"]: v for k, v in samples(metrics, "radscreen_mutual_information_bucket").items()}
    assert buckets["1e-06"] == 3 and buckets["5e-07"] == 2 and buckets["1e-08"] == 1 and buckets["+Inf"] == 4
    # loading another model rebuilds the histogram on its threshold (no duplicate registration)
    metrics.set_model(identity("m2", "b" * 64), referral_threshold_mi=0.01)
    les = {dict(k)["le"] for k in samples(metrics, "radscreen_mutual_information_bucket")}
    assert "0.01" in les and "1e-06" not in les
