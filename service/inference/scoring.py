"""The shared inference path's second half: PreparedImage -> ImageScore.

Plain Python/numpy/torch; no FastAPI. The HTTP service (through ``service.batcher``) and the batch
job (``service.batch``) both use exactly this module, so an image gets the same answer whichever
way it is scored. Building the scorer is ``service.inference.loading.load_scorer``; the image path (bytes
-> ``PreparedImage``) is ``service.inference.prepare``; the JSON shape of an answer is
``service.screening.payload.score_payload`` (the API layer).

Example::

    scorer = load_scorer(ScorerSpec(model_dir=Path("models/default"), backend="torch", mc_samples=16))
    prepared = prepare_image(Path("eye.jpg").read_bytes(), scorer.pipeline)   # may raise ImageRejected
    [score] = scorer.score_batch([prepared])
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from models.artifact.schema import PASS_BUDGET, Calibration
from models.image.quality import QualityReport
from models.nn.uncertainty import binary_uncertainty
from models.outcome.decision import DiagnosisLabel, ScreeningOutcome
from service.inference.backends import Backend
from service.inference.imaging import ImagePipeline
from service.inference.prepare import PreparedImage

logger = logging.getLogger(__name__)

REASON_UNCERTAIN = "uncertain"
REASON_QUALITY = "image_quality"


@dataclass(frozen=True)
class ImageScore:
    """The model's answer for one image, with the referral decision already taken."""

    probability: float  # p̄ = mean over the K draws of P(referable)
    label: DiagnosisLabel  # referable | non_referable at the decision threshold; not_graded when ungradable
    mutual_information: float  # nats, in [0, ln 2]
    predictive_entropy: float
    expected_entropy: float
    refer_to_expert: bool  # the model defers this image to a human (uncertain or ungradable)
    referral_reasons: list[str]
    quality: QualityReport
    outcome: ScreeningOutcome  # what the clinic acts on: models.outcome.decision.screening_outcome


@dataclass(frozen=True)
class ScorerIdentity:
    """Which model answers: shown in every response (``model``), the FHIR Device, batch rows and the
    ``radscreen_model_info`` metric. ``to_dict`` is the JSON form, keys in this order."""

    name: str
    version: str
    sha256: str  # of the artifact's manifest.json: the model's identity
    mc_samples: int  # K draws actually averaged (may differ from the artifact's, with a warning)
    head_draws: int  # draws of the last layer per network draw (the artifact's; models.nn.draws)
    test_time_flip: bool  # each image also scored mirrored, the draws pooled (the artifact's serving option)
    training_data: str  # "synthetic" or "real: <description>"
    intended_use: str
    pass_budget: int = PASS_BUDGET  # the artifact's (models.artifact.ArtifactConfig.pass_budget)

    @property
    def passes(self) -> int:
        """Forward passes per image: K draws x the views (2 with the flip)."""
        return self.mc_samples * (2 if self.test_time_flip else 1)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        budget = d.pop("pass_budget")
        head = {k: d.pop(k) for k in ("name", "version", "sha256", "mc_samples", "head_draws", "test_time_flip")}
        return {**head, "passes": self.passes, "pass_budget": budget, **d}


class Scorer:
    """K fixed posterior draws behind one backend, plus the artifact's preprocessing and thresholds."""

    def __init__(
        self,
        *,
        backend: Backend,
        pipeline: ImagePipeline,
        model_identity: ScorerIdentity,
        calibration: Calibration,  # the artifact's: thresholds and the rules that apply them
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
            if cal.is_uncertain(mi):
                reasons.append(REASON_UNCERTAIN)
            if not im.quality.gradable:
                reasons.append(REASON_QUALITY)
            outcome = cal.outcome(gradable=im.quality.gradable, mutual_information=mi, probability=p)
            out.append(
                ImageScore(
                    probability=p,
                    label=cal.label(outcome, p),
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
