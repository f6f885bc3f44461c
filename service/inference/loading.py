"""Build a :class:`~service.inference.scoring.Scorer` from a :class:`~service.inference.spec.ScorerSpec`:
:func:`load_scorer` is the one way to build one (the HTTP service, the batch job, every Ray actor, the
tests, benchmarks and doc generators all call it).

Loading is its own concern: verify the artifact, resolve the machine-dependent ``auto`` choices (device,
precision and strategy in ``models.platform.compute.resolve``, the backend in ``service.inference.platform``),
materialise the artifact's serving draws (``Artifact.serving_draws()``), and hand the scorer the artifact's
own calibration and image transform. Scoring (``service.inference.scoring``) then only runs images through
what was loaded.

Example::

    scorer = load_scorer(ScorerSpec(model_dir=Path("models/default"), backend="torch", mc_samples=16))
"""

from __future__ import annotations

import logging
from dataclasses import asdict

from models.artifact import Artifact, ArtifactError, load_artifact
from models.artifact.schema import PASS_BUDGET, ServingDraws
from models.nn.draws import DrawnNetwork
from models.platform.compute import Runtime, resolve
from models.platform.cpu import CpuCapability, detect_cpu
from models.serving.int8 import INT8_RANGES_FILE
from service.inference.backends import Backend, FlipViewsBackend, GuardedBackend, make_backend
from service.inference.imaging import ImagePipeline
from service.inference.platform import SERVICE_FIX, choose_backend
from service.inference.scoring import Scorer, ScorerIdentity
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
    artifact = _verified_artifact(spec)
    cfg, cal = artifact.config, artifact.calibration
    draws = _checked_draws(artifact, spec)
    cpu = cpu if cpu is not None else detect_cpu(override=spec.native_bf16)
    runtime = resolve(device=spec.device, precision=spec.precision, strategy=spec.strategy, backend=spec.backend,
                      cpu=cpu, permits=cal.permits(), fix=SERVICE_FIX)
    dev, precision = runtime.device, runtime.precision
    backend, backend_reason = choose_backend(spec.backend, device=dev, precision=precision)
    if precision != "fp32" and precision not in cal.allowed_precisions():
        logger.warning(
            "precision=%s: reduced precision shifts p and the mutual information; its shift can cross the "
            "decision or MI referral threshold (%.3g nat) and change outcomes, and this artifact carries no "
            "measurement that permits it. Measure with benchmarks/drift_real.py first.",
            precision,
            cal.referral_threshold_mi,
        )
    draws_backend = _draws_backend(draws.materialise(artifact.build_model()), backend, artifact, spec, runtime)
    report = {
        "backend_requested": spec.backend,
        "backend_reason": backend_reason,
        "cpu": cpu.to_dict(),
        "precision_requested": runtime.requested,
        "precision": precision,
        "precision_reason": runtime.reason,
        "strategy_requested": spec.strategy,
        "strategy": draws_backend.strategy,
        "threads": spec.threads,
        "guard_band": None if runtime.guard is None else asdict(runtime.guard),
    }
    identity = ScorerIdentity(name=cfg.name, version=cfg.version, sha256=artifact.sha256,
                              mc_samples=draws.mc_samples, head_draws=draws.head_draws,
                              test_time_flip=draws.test_time_flip, pass_budget=cfg.pass_budget,
                              training_data=cfg.training_data, intended_use=cfg.intended_use)
    pipeline = ImagePipeline.of(artifact.image_transform(), max_pixels=spec.max_pixels,
                                max_bytes=spec.max_upload_bytes, decode_timeout_s=spec.decode_timeout_s)
    logger.info(
        "model loaded",
        extra={
            "model": cfg.name,
            "version": cfg.version,
            "sha256": artifact.sha256,
            "backend": backend,
            "device": dev,
            "precision": precision,
            "precision_reason": runtime.reason,
            "strategy": draws_backend.strategy,
            "cpu": cpu.summary(),
            "mc_samples": draws.mc_samples,
            "test_time_flip": draws.test_time_flip,
            "passes": draws.passes,
        },
    )
    return Scorer(
        backend=draws_backend,
        pipeline=pipeline,
        model_identity=identity,
        calibration=cal,
        model_card=artifact.model_card,
        precision=precision,
        runtime=report,
    )


def _checked_draws(artifact: Artifact, spec: ScorerSpec) -> ServingDraws:
    """The serving draws at ``spec.mc_samples`` (None: the artifact's), refused over the artifact's pass budget;
    a budget over the design's, or a K other than the one the thresholds were set for, is logged."""
    cfg = artifact.config
    draws = artifact.serving_draws(spec.mc_samples)
    if draws.passes > cfg.pass_budget:
        raise ArtifactError(
            f"mc_samples={draws.mc_samples}: {draws.split_text()} is {draws.passes} forward passes per image, over "
            f"the artifact's pass budget of {cfg.pass_budget}; use at most {cfg.pass_budget // draws.views} draws")
    if cfg.pass_budget > PASS_BUDGET:
        logger.warning("the artifact serves up to %d forward passes per image (%s), over the design's %d",
                       cfg.pass_budget, draws.split_text(), PASS_BUDGET)
    if draws.mc_samples != cfg.serving.mc_samples:
        logger.warning("mc_samples=%d differs from the artifact's %d, for which its MI referral threshold was set",
                       draws.mc_samples, cfg.serving.mc_samples)
    return draws


def _verified_artifact(spec: ScorerSpec) -> Artifact:
    """The spec's artifact, verified (``models.artifact.load_artifact``); for a missing embedded default the
    error also names where the service and the batch job take another one from."""
    try:
        return load_artifact(spec.model_dir)  # None: the embedded default
    except ArtifactError as exc:
        if spec.model_dir is None:
            raise ArtifactError(f"{exc} (RADSCREEN_MODEL_DIR, or --model-dir)") from exc
        raise


def _draws_backend(net: DrawnNetwork, backend: str, artifact: Artifact, spec: ScorerSpec,
                   runtime: Runtime) -> Backend:
    """``backend`` running ``net`` as ``runtime`` says, on each image and its mirror when the artifact serves with
    ``test_time_flip`` (``FlipViewsBackend``); behind ``GuardedBackend`` when the precision's permit has a guard
    band (the images near a threshold are re-scored in fp32, both views)."""
    dev, cal = runtime.device, artifact.calibration
    ranges = artifact.directory / INT8_RANGES_FILE if INT8_RANGES_FILE in artifact.files else None

    def views(b: Backend) -> Backend:
        return FlipViewsBackend(b) if artifact.config.serving.test_time_flip else b

    draws_backend = views(make_backend(net, backend=backend, device=dev, precision=runtime.precision,
                                       strategy=runtime.strategy, intra_op_threads=spec.threads, int8_ranges=ranges))
    if runtime.guard is None:
        return draws_backend
    exact_backend, _ = choose_backend("auto", device=dev, precision="fp32")
    return GuardedBackend(
        draws_backend, views(make_backend(net, backend=exact_backend, device=dev, precision="fp32",
                                          strategy=runtime.strategy, intra_op_threads=spec.threads)),
        runtime.guard, decision_threshold=cal.decision_threshold, referral_threshold_mi=cal.referral_threshold_mi)
