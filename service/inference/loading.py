"""Build a :class:`~service.inference.scoring.Scorer` from a :class:`~service.inference.spec.ScorerSpec`.

Loading is its own concern: verify the artifact, resolve the machine-dependent ``auto`` choices (device,
precision, backend; decided in ``service.inference.platform``), materialise the K posterior draws with the
artifact's seed, and hand the scorer the artifact's own calibration and preprocessing contract. Scoring
(``service.inference.scoring``) then only runs images through what was loaded.

Example::

    scorer = load_scorer(ScorerSpec(model_dir=Path("models/default"), backend="torch", mc_samples=16))
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from models.cpu import CpuCapability, detect_cpu
from service.inference.backends import make_backend, resolve_device
from service.inference.imaging import ImagePipeline
from service.inference.platform import choose_backend, choose_precision
from service.inference.scoring import Scorer, ScorerIdentity

if TYPE_CHECKING:
    from service.inference.spec import ScorerSpec

logger = logging.getLogger(__name__)


def load_scorer(spec: ScorerSpec, *, cpu: CpuCapability | None = None) -> Scorer:
    """Load and verify the artifact, materialise the draws with its seed, build the backend.

    ``spec.mc_samples=None`` takes the artifact's K (the calibration was set for it); another K is
    allowed but logged, since the MI referral threshold then no longer matches exactly.
    ``backend="auto"``: ONNX Runtime for fp32 on CPU, else torch (``service.inference.platform.choose_backend``).
    ``precision="auto"`` is resolved from ``cpu`` (default: detected, ``spec.native_bf16`` overriding) and the
    artifact's measured drift (``service.inference.platform.choose_precision``); an explicit bf16/fp16 the CPU
    cannot run natively raises ``PrecisionUnavailableError``, a missing or tampered artifact
    ``models.artifact.ArtifactError``.
    """
    from models.artifact import DEFAULT_ARTIFACT_DIR, load_artifact
    from models.draws import materialise_draws

    artifact = load_artifact(spec.model_dir if spec.model_dir is not None else DEFAULT_ARTIFACT_DIR)
    cfg, cal = artifact.config, artifact.calibration
    k = cfg.mc_samples if spec.mc_samples is None else spec.mc_samples
    if k != cfg.mc_samples:
        logger.warning(
            "mc_samples=%d differs from the artifact's %d, for which its MI referral threshold was set",
            k,
            cfg.mc_samples,
        )
    dev = resolve_device(spec.device)
    cpu = cpu if cpu is not None else detect_cpu(override=spec.native_bf16)
    choice = choose_precision(spec.precision, device=dev, cpu=cpu,
                              backend="torch" if spec.backend == "auto" else spec.backend,
                              allowed=cal.allowed_precisions())
    precision = choice.precision
    backend, backend_reason = choose_backend(spec.backend, device=dev, precision=precision)
    if precision != "fp32" and precision not in cal.allowed_precisions():
        logger.warning(
            "precision=%s: reduced precision shifts the mutual information; with a narrow posterior the "
            "shift can exceed the MI referral threshold (%.3g nat) and flip referrals (default model 0.1.0: "
            "bf16 flipped 10 of 32, docs/benchmarks.md). Measure with benchmarks/precision_drift.py first.",
            precision,
            cal.referral_threshold_mi,
        )
    net = materialise_draws(artifact.build_model(), k=k, seed=cfg.draw_seed, head_draws=cfg.head_draws)
    draws_backend = make_backend(net, backend=backend, device=dev, precision=precision, strategy=spec.strategy,
                                 intra_op_threads=spec.threads)
    runtime = {
        "backend_requested": spec.backend,
        "backend_reason": backend_reason,
        "cpu": cpu.to_dict(),
        "precision_requested": choice.requested,
        "precision": precision,
        "precision_reason": choice.reason,
        "strategy_requested": spec.strategy,
        "strategy": draws_backend.strategy,
        "threads": spec.threads,
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
    pipeline = ImagePipeline(
        size=cfg.input_size,
        mean=cfg.mean,
        std=cfg.std,
        max_pixels=spec.max_pixels,
        max_bytes=spec.max_upload_bytes,
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
    return Scorer(
        backend=draws_backend,
        pipeline=pipeline,
        model_identity=identity,
        calibration=cal,
        model_card=artifact.model_card,
        precision=precision,
        runtime=runtime,
    )
