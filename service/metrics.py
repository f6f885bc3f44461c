"""Prometheus metrics of one app instance (the table in docs/contracts.md), on its own registry.

Each ``create_app`` builds its own ``ServiceMetrics`` with a fresh ``CollectorRegistry``, so several
apps in one process (tests, benchmarks) never clash over metric names.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from models.outcome.decision import DiagnosisLabel, ScreeningOutcome
from service.inference.scoring import ImageScore, ScorerIdentity

__all__ = ["CONTENT_TYPE_LATEST", "ServiceMetrics"]

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128)
EXAM_IMAGE_BUCKETS = (1, 2, 3, 4, 6, 8, 16, 32, 64)
PACS_QUARANTINE_REASONS = ("identity", "grading", "report", "unreadable", "unfinished")
PROBABILITY_BUCKETS = tuple(round(0.1 * i, 1) for i in range(1, 11))
# MI bucket bounds as multiples of the artifact's calibrated referral threshold: MI lives on the scale of
# that threshold (5.4e-3 nat for the embedded model 2.0.0, 1.0e-3 for 1.0.0, 8.1e-4 for 0.3.0, 1e-6 for
# 0.1.0), so fixed bounds would hide drift.
MI_BUCKET_FACTORS = (0.01, 0.03, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0, 10.0, 100.0, 1000.0)
# A model that defers nothing by MI (threshold ln 2: deferring by it was no measured benefit on validation) has no
# scale to anchor on: a 1-2-5 ladder over the seven decades below ln 2 resolves any trained posterior's spread.
MI_LADDER = tuple(float(f"{m * 10.0 ** e:.6g}") for e in range(-7, 0) for m in (1, 2, 5))


class _GuardCollector(Collector):
    """Reads a guarded backend's re-scored count at scrape time (the backend counts; nothing is copied)."""

    def __init__(self, backend: object) -> None:
        self.backend = backend
        self.start = int(getattr(backend, "rescored", 0))

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(
            "radscreen_precision_rescored",
            "Images re-scored in fp32 because their reduced-precision answer lay inside the guard band around "
            "a threshold (0 without a guard band); divide by radscreen_outcomes_total for the share.",
            value=int(getattr(self.backend, "rescored", 0)) - self.start,
        )


def mi_buckets(referral_threshold_mi: float) -> tuple[float, ...]:
    """Histogram bounds for MI (nats) around ``referral_threshold_mi``; ``1.0`` is exactly the threshold.

    Bounds above ln 2 (the largest possible binary MI) are dropped and ln 2 is added last, so every bucket
    can be reached. A non-positive threshold falls back to a decade ladder from 1e-9 nat; a threshold at ln 2
    (the model defers nothing by MI) to a 1-2-5 ladder from 1e-7 nat, since there is no boundary to resolve.
    """
    if not referral_threshold_mi > 0:
        return (*tuple(10.0 ** e for e in range(-9, 0)), math.log(2))
    if referral_threshold_mi >= math.log(2) * (1 - 1e-9):
        return (*[b for b in MI_LADDER if b < math.log(2)], math.log(2))
    bounds = sorted({float(f"{f * referral_threshold_mi:.6g}") for f in MI_BUCKET_FACTORS})
    return (*[b for b in bounds if b < math.log(2)], math.log(2))


class ServiceMetrics:
    """All collectors of the service, registered on ``self.registry``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "radscreen_requests",
            "HTTP requests by route template and status code.",
            ["endpoint", "status"],
            registry=r,
        )
        self.request_latency = Histogram(
            "radscreen_request_latency_seconds",
            "HTTP request latency (whole request).",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_wait = Histogram(
            "radscreen_queue_wait_seconds",
            "Time an image waited in the micro-batch queue.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.inference = Histogram(
            "radscreen_inference_seconds",
            "Time of one batched forward of the K draws.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "radscreen_batch_size", "Images per batched forward.", buckets=BATCH_BUCKETS, registry=r
        )
        self.queue_depth = Gauge("radscreen_queue_depth", "Images waiting in the queue.", registry=r)
        self.predictions = Counter("radscreen_predictions", "Predictions by label.", ["label"], registry=r)
        self.referrals = Counter(
            "radscreen_referrals", "Referrals to an expert by reason.", ["reason"], registry=r
        )
        self.probability = Histogram(
            "radscreen_probability",
            "Predicted referable-DR probability (drift watch).",
            buckets=PROBABILITY_BUCKETS,
            registry=r,
        )
        self.outcomes = Counter(
            "radscreen_outcomes",
            "Screening outcomes (retake_ungradable, grader_review_uncertain, refer_referable_dr, no_referable_dr).",
            ["outcome"],
            registry=r,
        )
        # Created by set_model(): its buckets come from the loaded artifact's calibrated MI threshold.
        self.mutual_information: Histogram | None = None
        self.model_info = Gauge(
            "radscreen_model_info", "The loaded model (value 1).", ["name", "version", "sha256"], registry=r
        )
        self.ready = Gauge("radscreen_ready", "1 when the model is loaded and warm.", registry=r)
        self._guard: _GuardCollector | None = None
        # pre-create the label sets we know so dashboards see zeros instead of gaps
        for label in DiagnosisLabel:
            self.predictions.labels(label=label.value)
        for reason in ("uncertain", "image_quality"):
            self.referrals.labels(reason=reason)
        for outcome in ScreeningOutcome:
            self.outcomes.labels(outcome=outcome.value)
        self._add_client_disconnects(r)
        self._add_exams(r)
        self._add_pacs(r)

    def _add_exams(self, r: CollectorRegistry) -> None:
        """Patient visits scored by POST /v1/exams: by exam outcome, and photographs per exam."""
        self.exams = Counter(
            "radscreen_exams",
            "Screening exams (patient visits) by exam outcome (models.outcome.decision.exam_decision).",
            ["outcome"],
            registry=r,
        )
        self.exam_images = Histogram(
            "radscreen_exam_images", "Photographs per screening exam (both eyes).", buckets=EXAM_IMAGE_BUCKETS,
            registry=r,
        )
        for outcome in ScreeningOutcome:
            self.exams.labels(outcome=outcome.value)

    def observe_exam(self, outcome: ScreeningOutcome, images: int) -> None:
        """Count one scored exam (its photographs are counted one by one by :meth:`observe_score`)."""
        self.exams.labels(outcome=outcome.value).inc()
        self.exam_images.observe(images)

    def _add_pacs(self, r: CollectorRegistry) -> None:
        """DICOM in and out (service.pacs): labels are fixed words, never an identifier or a UID."""
        self.pacs_instances = Counter(
            "radscreen_pacs_instances",
            "DICOM instances received, by path (stow / cstore) and result (stored / refused).",
            ["path", "result"], registry=r,
        )
        self.pacs_results = Counter(
            "radscreen_pacs_results",
            "Exam results (SR) by event: built (new result object), duplicate (the same SR UID again: not resent), "
            "refused (the study's instances are not one patient's visit: not graded).",
            ["event"], registry=r,
        )
        self.pacs_deliveries = Counter(
            "radscreen_pacs_deliveries",
            "Attempts to store a result in the archive, by result (delivered / failed).", ["result"], registry=r,
        )
        self.pacs_outbox = Gauge(
            "radscreen_pacs_outbox", "Results waiting for the archive (read from the spool when scraped).", registry=r)
        self.pacs_oldest_undelivered = Gauge(
            "radscreen_pacs_oldest_undelivered_seconds",
            "Age of the oldest result not yet accepted by the archive (0 when none waits; read from the spool when "
            "scraped).", registry=r,
        )
        self.pacs_quarantines = Counter(
            "radscreen_pacs_quarantines",
            "Studies set aside instead of graded, by reason: identity (not one patient's visit, or one photograph as "
            "both eyes), grading (scoring raised), report (the SR could not be built), unreadable (no instance "
            "readable), unfinished (two passes ended with the process).", ["reason"], registry=r,
        )
        self.pacs_quarantined = Gauge(
            "radscreen_pacs_quarantined", "Studies held in quarantine now (read from the spool when scraped).",
            registry=r)
        self.pacs_grading_paused = Gauge(
            "radscreen_pacs_grading_paused",
            "1 while grading is paused because the spool cannot be written (disk full or failing).", registry=r)
        self.pacs_grading_pass = Gauge(
            "radscreen_pacs_grading_pass_timestamp_seconds",
            "Unix time as of which the last completed grading pass judged every spooled study (0 before the first); "
            "a grader that stopped stops moving it.", registry=r)
        for path in ("stow", "cstore"):
            for result in ("stored", "refused"):
                self.pacs_instances.labels(path=path, result=result)
        for event in ("built", "duplicate", "refused"):
            self.pacs_results.labels(event=event)
        for result in ("delivered", "failed"):
            self.pacs_deliveries.labels(result=result)
        for reason in PACS_QUARANTINE_REASONS:
            self.pacs_quarantines.labels(reason=reason)

    def _add_client_disconnects(self, r: CollectorRegistry) -> None:
        """Requests the client abandoned: counted, logged at info, never scored or 5xx."""
        self.client_disconnects = Counter(
            "radscreen_client_disconnects",
            "Requests abandoned by the client before the answer, by stage (upload / processing).",
            ["stage"],
            registry=r,
        )
        for stage in ("upload", "processing"):
            self.client_disconnects.labels(stage=stage)

    def observe_score(self, score: ImageScore) -> None:
        """Count one prediction: outcome, label, referral reasons, probability and MI distributions."""
        self.outcomes.labels(outcome=score.outcome.value).inc()
        self.predictions.labels(label=score.label.value).inc()
        for reason in score.referral_reasons:
            self.referrals.labels(reason=reason).inc()
        self.probability.observe(score.probability)
        if self.mutual_information is not None:
            self.mutual_information.observe(score.mutual_information)

    def set_model(self, identity: ScorerIdentity, referral_threshold_mi: float | None = None) -> None:
        """Label the model-info gauge; with a threshold, (re)build the MI histogram on its scale."""
        if referral_threshold_mi is not None:
            if self.mutual_information is not None:
                self.registry.unregister(self.mutual_information)
            self.mutual_information = Histogram(
                "radscreen_mutual_information",
                "Mutual information in nats (drift watch); bucket bounds are multiples of the calibrated "
                "referral threshold (le equal to the threshold is the referral boundary), or a 1-2-5 ladder "
                "when the model defers nothing by MI (threshold ln 2).",
                buckets=mi_buckets(referral_threshold_mi),
                registry=self.registry,
            )
        self.model_info.clear()
        self.model_info.labels(
            name=identity.name, version=identity.version, sha256=identity.sha256
        ).set(1)

    def watch_guard(self, backend: object) -> None:
        """Expose ``radscreen_precision_rescored_total``: images whose reduced-precision answer lay inside the
        guard band and were re-scored in fp32 (``service.inference.backends.GuardedBackend``), counted from
        now on (after the warm-up); 0 when the precision serves without a guard band."""
        if self._guard is not None:
            self.registry.unregister(self._guard)
        self._guard = _GuardCollector(backend)
        self.registry.register(self._guard)

    def render(self) -> bytes:
        """The Prometheus text exposition of this registry."""
        return generate_latest(self.registry)
