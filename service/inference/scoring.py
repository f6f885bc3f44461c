"""The shared inference path: bytes -> PreparedImage -> ImageScore -> JSON-ready dict.

Plain Python/numpy/torch; no FastAPI. The HTTP service (through ``service.batcher``) and the batch
job (``service.batch``) both use exactly this module, so an image gets the same answer whichever
way it is scored.

Example::

    scorer = Scorer.from_artifact(Path("models/default"), backend="torch", mc_samples=16)
    prepared = prepare_image(Path("eye.jpg").read_bytes(), scorer.pipeline)   # may raise ImageRejected
    [score] = scorer.score_batch([prepared])
    body = score_payload(score, scorer)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from models.cpu import CpuCapability, detect_cpu
from models.decision import OUTCOME_TEXT, ScreeningOutcome, screening_outcome
from models.fov import fit_fov_circle
from models.uncertainty import binary_uncertainty
from service.inference.backends import Backend, make_backend, resolve_device
from service.inference.decode_deadline import DecodeDeadline
from service.inference.dicom import decode_photograph
from service.inference.imaging import ImagePipeline, ImageRejected
from service.inference.platform import PrecisionChoice, choose_backend, choose_precision
from service.inference.quality import QualityReport, assess_quality

__all__ = [
    "OUTCOME_TEXT",
    "ImagePipeline",
    "ImageRejected",
    "ImageScore",
    "PreparedImage",
    "QualityReport",
    "Scorer",
    "ScorerCalibration",
    "ScorerIdentity",
    "ScreeningOutcome",
    "prepare_image",
    "score_payload",
    "screening_outcome",
]

logger = logging.getLogger(__name__)

REASON_UNCERTAIN = "uncertain"
REASON_QUALITY = "image_quality"


@dataclass(frozen=True)
class PreparedImage:
    """A validated, quality-assessed, normalised image ready for the network."""

    pixels: np.ndarray  # float32 [C, H, W], normalised with the artifact's mean/std
    quality: QualityReport
    decode_ms: float


def prepare_image(data: bytes, pipeline: ImagePipeline, deadline: DecodeDeadline | None = None) -> PreparedImage:
    """Decode, validate, quality-check and preprocess one image; raises ImageRejected (400/413/415).

    JPEG/PNG/TIFF/WebP/BMP go through ``service.inference.imaging``, DICOM photographs through
    ``service.inference.dicom``; both end in the same uint8 RGB array, decoded by ``models.decode``'s rule
    for the model's input size. The FOV circle is fitted once on that frame and used by both the quality
    gate and the artifact's transform (``pipeline.transform``, the ``models.transform.ImageTransform``
    training ran on the same file).
    """
    start = time.perf_counter()
    transform = pipeline.transform
    rgb = decode_photograph(data, max_pixels=pipeline.max_pixels, max_bytes=pipeline.max_bytes, size=transform.size,
                            deadline=deadline)
    circle = fit_fov_circle(rgb)
    quality = assess_quality(rgb, circle)
    pixels = transform.normalise(transform.square(rgb, circle))  # [3, size, size]
    return PreparedImage(pixels=pixels, quality=quality, decode_ms=(time.perf_counter() - start) * 1e3)


@dataclass(frozen=True)
class ImageScore:
    """The model's answer for one image, with the referral decision already taken."""

    probability: float  # p̄ = mean over the K draws of P(referable)
    label: str  # "referable" | "non_referable" at the decision threshold
    mutual_information: float  # nats, in [0, ln 2]
    predictive_entropy: float
    expected_entropy: float
    refer_to_expert: bool  # the model defers this image to a human (uncertain or ungradable)
    referral_reasons: list[str]
    quality: QualityReport
    outcome: ScreeningOutcome  # what the clinic acts on: models.decision.screening_outcome


@dataclass(frozen=True)
class ScorerCalibration:
    """Thresholds from the artifact's calibration.json."""

    referral_threshold_mi: float  # refer when MI > this (nats)
    decision_threshold: float  # label referable when p̄ >= this
    target_referral_rate: float
    dataset: str
    validation: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ScorerIdentity:
    """Which model answers: shown in every response (``model``), the FHIR Device, batch rows and the
    ``radscreen_model_info`` metric. ``to_dict`` is the JSON form, keys in this order."""

    name: str
    version: str
    sha256: str  # of the artifact's manifest.json: the model's identity
    mc_samples: int  # K draws actually averaged (may differ from the artifact's, with a warning)
    head_draws: int  # draws of the last layer per network draw (the artifact's; models.draws)
    training_data: str  # "synthetic" or "real: <description>"
    intended_use: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Scorer:
    """K fixed posterior draws behind one backend, plus the artifact's preprocessing and thresholds."""

    def __init__(
        self,
        *,
        backend: Backend,
        pipeline: ImagePipeline,
        model_identity: ScorerIdentity,
        calibration: ScorerCalibration,
        model_card: str = "",
        precision: str = "fp32",
        runtime: dict[str, Any] | None = None,
    ) -> None:
        self.backend = backend
        self.pipeline = pipeline
        self.model_identity = model_identity
        self.calibration = calibration
        self.model_card = model_card
        self.precision = precision
        # how the machine shaped the run: cpu capability, precision/strategy and why (service.inference.platform)
        self.runtime: dict[str, Any] = runtime or {"precision": precision, "strategy": getattr(
            backend, "strategy", "unknown")}

    @classmethod
    def from_artifact(
        cls,
        model_dir: Path | None = None,
        *,
        backend: str = "auto",
        device: str = "auto",
        precision: str = "auto",
        strategy: str = "auto",
        mc_samples: int | None = None,
        max_pixels: int = 40_000_000,
        max_bytes: int = 20 * 1024 * 1024,
        cpu: CpuCapability | None = None,
        threads: int | None = None,
    ) -> Scorer:
        """Load and verify the artifact, materialise the draws with its seed, build the backend.

        ``mc_samples=None`` takes the artifact's K (the calibration was set for it); another K is
        allowed but logged, since the MI referral threshold then no longer matches exactly.
        ``backend="auto"``: ONNX Runtime for fp32 on CPU, else torch (``service.inference.platform.choose_backend``).
        ``precision="auto"`` is resolved from ``cpu`` (default: detected) and the artifact's measured
        drift (``service.inference.platform.choose_precision``); an explicit bf16/fp16 the CPU cannot run natively
        raises ``PrecisionUnavailableError``.
        """
        from models.artifact import DEFAULT_ARTIFACT_DIR, load_artifact
        from models.draws import materialise_draws

        artifact = load_artifact(model_dir if model_dir is not None else DEFAULT_ARTIFACT_DIR)
        cfg, cal = artifact.config, artifact.calibration
        k = cfg.mc_samples if mc_samples is None else mc_samples
        if k != cfg.mc_samples:
            logger.warning(
                "mc_samples=%d differs from the artifact's %d, for which its MI referral threshold was set",
                k,
                cfg.mc_samples,
            )
        dev = resolve_device(device)  # type: ignore[arg-type]
        cpu = cpu if cpu is not None else detect_cpu()
        choice: PrecisionChoice = choose_precision(precision, device=dev, cpu=cpu,
                                                   backend="torch" if backend == "auto" else backend,
                                                   allowed=cal.allowed_precisions())
        precision = choice.precision
        requested_backend = backend
        backend, backend_reason = choose_backend(backend, device=dev, precision=precision)
        if precision != "fp32" and precision not in cal.allowed_precisions():
            logger.warning(
                "precision=%s: reduced precision shifts the mutual information; with a narrow posterior the "
                "shift can exceed the MI referral threshold (%.3g nat) and flip referrals (default model 0.1.0: "
                "bf16 flipped 10 of 32, docs/benchmarks.md). Measure with benchmarks/precision_drift.py first.",
                precision,
                cal.referral_threshold_mi,
            )
        net = materialise_draws(artifact.build_model(), k=k, seed=cfg.draw_seed, head_draws=cfg.head_draws)
        draws_backend = make_backend(net, backend=backend, device=dev, precision=precision, strategy=strategy,
                                     intra_op_threads=threads)
        runtime = {
            "backend_requested": requested_backend,
            "backend_reason": backend_reason,
            "cpu": cpu.to_dict(),
            "precision_requested": choice.requested,
            "precision": precision,
            "precision_reason": choice.reason,
            "strategy_requested": strategy,
            "strategy": draws_backend.strategy,
            "threads": threads,
        }
        identity = ScorerIdentity(
            name=cfg.name,
            version=cfg.version,
            sha256=artifact.sha256,
            mc_samples=k,
            head_draws=cfg.head_draws,
            training_data=cfg.training_data,
            intended_use=cfg.intended_use,
        )
        calibration = ScorerCalibration(
            referral_threshold_mi=cal.referral_threshold_mi,
            decision_threshold=cal.decision_threshold,
            target_referral_rate=cal.target_referral_rate,
            dataset=cal.dataset,
            validation=dict(cal.validation),
        )
        pipeline = ImagePipeline(
            size=cfg.input_size,
            mean=cfg.mean,
            std=cfg.std,
            max_pixels=max_pixels,
            max_bytes=max_bytes,
            preprocessing=cfg.preprocessing,
        )
        logger.info(
            "model loaded",
            extra={
                "model": cfg.name,
                "version": cfg.version,
                "sha256": artifact.sha256,
                "backend": backend,
                "device": dev,
                "precision": precision,
                "precision_reason": choice.reason,
                "strategy": draws_backend.strategy,
                "cpu": cpu.summary(),
                "k": k,
            },
        )
        return cls(
            backend=draws_backend,
            pipeline=pipeline,
            model_identity=identity,
            calibration=calibration,
            model_card=artifact.model_card,
            precision=precision,
            runtime=runtime,
        )

    def forward(self, x: np.ndarray) -> np.ndarray:
        """float32 [B, C, H, W] -> per-draw probabilities float64 [K, B]."""
        logits = self.backend.run(x)  # [K, B, O]
        return torch.sigmoid(torch.from_numpy(logits[..., 0]).double()).numpy()

    def score_batch(self, images: Sequence[PreparedImage]) -> list[ImageScore]:
        """Score several prepared images with ONE batched forward of the K draws."""
        if not images:
            return []
        x = np.stack([im.pixels for im in images]).astype(np.float32, copy=False)  # [B, C, H, W]
        unc = binary_uncertainty(torch.from_numpy(self.forward(x)))  # each [B]
        cal = self.calibration
        out: list[ImageScore] = []
        for i, im in enumerate(images):
            p = float(unc.probability[i])
            mi = float(unc.mutual_information[i])
            reasons = []
            if mi > cal.referral_threshold_mi:
                reasons.append(REASON_UNCERTAIN)
            if not im.quality.gradable:
                reasons.append(REASON_QUALITY)
            outcome = screening_outcome(
                gradable=im.quality.gradable, mutual_information=mi, probability=p,
                referral_threshold_mi=cal.referral_threshold_mi, decision_threshold=cal.decision_threshold,
            )
            out.append(
                ImageScore(
                    probability=p,
                    label="referable" if p >= cal.decision_threshold else "non_referable",
                    mutual_information=mi,
                    predictive_entropy=float(unc.predictive_entropy[i]),
                    expected_entropy=float(unc.expected_entropy[i]),
                    refer_to_expert=bool(reasons),
                    referral_reasons=reasons,
                    quality=im.quality,
                    outcome=outcome,
                )
            )
        return out

    def warmup(self, batch_sizes: Sequence[int] = (1,)) -> None:
        """Run the backend once per batch size so first requests do not pay allocation/JIT costs."""
        size = self.pipeline.size
        for b in batch_sizes:
            self.backend.run(np.zeros((b, 3, size, size), dtype=np.float32))

    @property
    def disclaimer(self) -> str:
        ident = self.model_identity
        return (
            f"Decision support only, not a diagnosis. Model {ident.name} {ident.version} "
            f"(sha256 {ident.sha256[:12]}), trained on {ident.training_data} data. "
            f"Intended use: {ident.intended_use} A clinician must review every result."
        )


def score_payload(score: ImageScore, scorer: Scorer) -> dict[str, Any]:
    """The /v1/predict response body for one image (docs/architecture.md §6), minus request_id, study_id, timing_ms."""
    cal = scorer.calibration
    return {
        "model": scorer.model_identity.to_dict(),
        "diagnosis": {
            "referable_dr_probability": score.probability,
            "label": score.label,
            "decision_threshold": cal.decision_threshold,
        },
        "uncertainty": {
            "mutual_information": score.mutual_information,
            "predictive_entropy": score.predictive_entropy,
            "expected_entropy": score.expected_entropy,
            "unit": "nat",
            "referral_threshold": cal.referral_threshold_mi,
        },
        "quality": {
            "gradable": score.quality.gradable,
            "score": score.quality.score,
            "issues": list(score.quality.issues),
        },
        "refer_to_expert": score.refer_to_expert,
        "referral_reasons": list(score.referral_reasons),
        "outcome": score.outcome.value,
        "outcome_reason": OUTCOME_TEXT[score.outcome],
        "disclaimer": scorer.disclaimer,
    }
