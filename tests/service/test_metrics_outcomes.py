"""Metrics of the screening outcome: a counter per outcome, and MI histogram buckets on the scale of the
artifact's calibrated threshold (the embedded model's is ~1e-3 nat, below the resolution of fixed decade
buckets)."""

from __future__ import annotations

import json
import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from models.artifact import CALIBRATION_FILE, DEFAULT_ARTIFACT_DIR, Calibration
from models.image.quality import QualityReport
from models.outcome.decision import ScreeningOutcome
from service.inference.scoring import ImageScore, ScorerIdentity
from service.metrics import ServiceMetrics, mi_buckets

CAL = Calibration(referral_threshold_mi=1e-3, decision_threshold=0.5, target_referral_rate=0.2, dataset="constructed")


def score(outcome: ScreeningOutcome, mi: float, p: float = 0.3) -> ImageScore:
    gradable = outcome is not ScreeningOutcome.RETAKE_UNGRADABLE
    return ImageScore(probability=p, label=CAL.label(outcome, p), mutual_information=mi,
                      predictive_entropy=0.5, expected_entropy=0.5 - mi, refer_to_expert=False, referral_reasons=[],
                      quality=QualityReport(gradable=gradable, score=0.9 if gradable else 0.1, issues=[]),
                      outcome=outcome)


def identity(name: str, sha256: str) -> ScorerIdentity:
    return ScorerIdentity(name=name, version="1", sha256=sha256, mc_samples=16, head_draws=1, test_time_flip=False,
                          training_data="synthetic", intended_use="tests only.")


def samples(metrics: ServiceMetrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    text = metrics.render().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def shipped_calibration() -> Calibration:
    """The embedded default model's calibration (calibration.json alone; the weights are not read)."""
    return Calibration.from_dict(json.loads((DEFAULT_ARTIFACT_DIR / CALIBRATION_FILE).read_text(encoding="utf-8")))


def test_mi_buckets_cover_the_shipped_models_mi_and_resolve_its_threshold() -> None:
    calibration = shipped_calibration()
    threshold = calibration.referral_threshold_mi
    quantile = {float(q): v for q, v in calibration.validation["mi_quantiles"].items()}  # validation MI, nats
    bounds = mi_buckets(threshold)
    assert list(bounds) == sorted(set(bounds)) and bounds[-1] == math.log(2)  # up to the largest binary MI
    # the referral boundary is a bucket edge: the count at it is the images not referred for uncertainty
    assert any(b == pytest.approx(threshold, rel=1e-5) for b in bounds)
    # the validation spread (5-95 %) lies inside the finite buckets and is split over several of them
    assert bounds[0] < quantile[0.05] and quantile[0.95] < bounds[-2]
    assert sum(quantile[0.05] <= b <= quantile[0.95] for b in bounds) >= 5
    if threshold < math.log(2):  # resolution around the threshold: an edge between it and each neighbouring quartile
        assert any(quantile[0.25] <= b < threshold for b in bounds)
        assert any(threshold < b <= quantile[0.75] for b in bounds)
    else:  # nothing deferred by MI: the middle half of the validation MI still falls in two buckets or more
        assert any(quantile[0.25] <= b <= quantile[0.75] for b in bounds)


def test_a_model_that_defers_nothing_by_mi_gets_a_ladder_not_multiples_of_ln2() -> None:
    """Threshold ln 2 (no deferral by MI): multiples of it would put every trained posterior's MI (typically
    1e-4 to 0.03 nat) below the first edge; the ladder splits that range into many buckets."""
    bounds = mi_buckets(math.log(2))
    assert list(bounds) == sorted(set(bounds)) and bounds[-1] == math.log(2) and bounds[-2] < math.log(2)
    assert sum(5e-4 <= b <= 0.03 for b in bounds) >= 6
    assert bounds[0] <= 1e-6  # a near-deterministic posterior's MI is resolved too
    assert mi_buckets(math.log(2) * (1 - 1e-12)) == bounds  # ln 2 as stored in JSON (rounded) is the same case
    scaled = mi_buckets(0.01)
    assert any(b == pytest.approx(0.01) for b in scaled) and scaled != bounds  # a real threshold keeps its edge


def test_outcome_counter_and_threshold_histogram() -> None:
    metrics = ServiceMetrics()
    assert samples(metrics, "radscreen_outcomes_total") == {
        (("outcome", o.value),): 0.0 for o in ScreeningOutcome}  # zeros before the first image
    assert samples(metrics, "radscreen_mutual_information_count") == {}  # no model yet, no buckets yet
    metrics.set_model(identity("m", "a" * 64), referral_threshold_mi=1e-6)
    observed = [(ScreeningOutcome.NO_REFERABLE_DR, 4e-7), (ScreeningOutcome.REFER_REFERABLE_DR, 9e-7),
                (ScreeningOutcome.GRADER_REVIEW_UNCERTAIN, 3e-6), (ScreeningOutcome.NO_REFERABLE_DR, 1e-8)]
    for outcome, mi in observed:
        metrics.observe_score(score(outcome, mi))
    counts = samples(metrics, "radscreen_outcomes_total")
    assert counts[(("outcome", "no_referable_dr"),)] == 2 and counts[(("outcome", "refer_referable_dr"),)] == 1
    assert counts[(("outcome", "grader_review_uncertain"),)] == 1 and counts[(("outcome", "retake_ungradable"),)] == 0
    buckets = {float(dict(k)["le"]): v for k, v in samples(metrics, "radscreen_mutual_information_bucket").items()}
    assert set(buckets) == {*mi_buckets(1e-6), math.inf}
    assert buckets[1e-6] == 3  # the threshold's edge: the three at or below it
    assert all(count == sum(mi <= le for _, mi in observed) for le, count in buckets.items())  # cumulative counts
    # loading another model rebuilds the histogram on its threshold (no duplicate registration)
    metrics.set_model(identity("m2", "b" * 64), referral_threshold_mi=0.01)
    les = {dict(k)["le"] for k in samples(metrics, "radscreen_mutual_information_bucket")}
    assert "0.01" in les and "1e-06" not in les
