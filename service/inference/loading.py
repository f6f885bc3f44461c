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
from dataclasses import asdict
from typing import TYPE_CHECKING

from models.compute import resolve_device
from models.cpu import CpuCapability, detect_cpu
from models.int8 import INT8_RANGES_FILE
from service.inference.backends import GuardedBackend, make_backend
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
    ``backend="auto"``: ONNX Runtime for fp32 and int8 on CPU, else torch (``service.inference.platform``).
    ``precision="auto"`` is resolved from ``cpu`` (default: detected, ``spec.native_bf16`` overriding) and what
    the artifact's real-eye record permits (``Calibration.permits``); a precision permitted only with a guard
    band runs behind ``GuardedBackend``. An explicit precision the CPU cannot run natively raises
    ``PrecisionUnavailableError``, a missing or tampered artifact ``models.artifact.ArtifactError``.
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
    choice = choose_precision(spec.precision, device=dev, cpu=cpu, backend=spec.backend, permits=cal.permits())
    precision = choice.precision
    backend, backend_reason = choose_backend(spec.backend, device=dev, precision=precision)
    if precision != "fp32" and precision not in cal.allowed_precisions():
        logger.warning(
            "precision=%s: reduced precision shifts p and the mutual information; its shift can cross the "
            "decision or MI referral threshold (%.3g nat) and change outcomes, and this artifact carries no "
            "measurement that permits it. Measure with benchmarks/drift_real.py first.",
            precision,
            cal.referral_threshold_mi,
        )
    net = materialise_draws(artifact.build_model(), k=k, seed=cfg.draw_seed, head_draws=cfg.head_draws)
    ranges = artifact.directory / INT8_RANGES_FILE if INT8_RANGES_FILE in artifact.files else None
    draws_backend = make_backend(net, backend=backend, device=dev, precision=precision, strategy=spec.strategy,
                                 intra_op_threads=spec.threads, int8_ranges=ranges)
    if choice.guard is not None:  # re-score the images near a threshold in fp32 (the record's guard band)
        exact_backend, _ = choose_backend("auto", device=dev, precision="fp32")
        draws_backend = GuardedBackend(
            draws_backend, make_backend(net, backend=exact_backend, device=dev, precision="fp32",
                                        strategy=spec.strategy, intra_op_threads=spec.threads),
            choice.guard, decision_threshold=cal.decision_threshold, referral_threshold_mi=cal.referral_threshold_mi)
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
        "guard_band": None if choice.guard is None else asdict(choice.guard),
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
    pipeline = ImagePipeline.of(artifact.image_transform(), max_pixels=spec.max_pixels,
                                max_bytes=spec.max_upload_bytes)
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
