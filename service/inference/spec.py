"""``ScorerSpec``: everything needed to build a :class:`~service.inference.scoring.Scorer`, in one value.

The HTTP service, the local batch runner and every Ray actor build their scorer from the same spec
(``spec.load()``), so an image scored by any of them goes through the same artifact, backend, precision,
strategy, K draws and input limits. The spec is a frozen, picklable dataclass of plain values: it travels
to Ray workers as it is, and each process resolves the machine-dependent ``auto`` choices (device, CPU
capability, precision, backend) where it runs.

Where it comes from:

* the HTTP service: ``Settings.scorer_spec()`` (``RADSCREEN_*`` variables, service/settings.py);
* the batch job: the ``radscreen-batch score`` flags over the same ``RADSCREEN_*`` defaults
  (``ScorerSettings`` in service/settings.py, built by service/batch/cli.py).

Example::

    spec = ScorerSpec(model_dir=Path("models/my-run"), device="cpu", mc_samples=16)
    scorer = spec.load()
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, get_args

from models.artifact.schema import MAX_MC_SAMPLES
from models.cpu import NativeBf16Setting

if TYPE_CHECKING:
    from service.inference.scoring import Scorer

BackendSetting = Literal["auto", "torch", "onnxruntime"]
DeviceSetting = Literal["auto", "cpu", "cuda"]
PrecisionSetting = Literal["auto", "fp32", "bf16", "fp16"]
StrategySetting = Literal["auto", "grouped", "loop"]

DEFAULT_MAX_PIXELS = 40_000_000
DEFAULT_MAX_BYTES = 20 * 1024 * 1024

_CHOICES: dict[str, tuple[str, ...]] = {
    "backend": get_args(BackendSetting),
    "device": get_args(DeviceSetting),
    "precision": get_args(PrecisionSetting),
    "strategy": get_args(StrategySetting),
    "native_bf16": get_args(NativeBf16Setting),
}


@dataclass(frozen=True)
class ScorerSpec:
    """What to load and how to run it; ``load()`` builds the scorer (see the module docstring).

    ``model_dir=None`` means the embedded default artifact *of the process that loads it* (a Ray worker
    on another machine finds its own copy; the batch job checks every actor's sha256 against the driver's).
    ``mc_samples=None`` keeps the artifact's K (its MI threshold was calibrated for it); the draws' seed
    always comes from the artifact, so the K draws are the same wherever the spec is loaded.
    """

    model_dir: Path | None = None
    backend: BackendSetting = "auto"  # auto: ONNX Runtime for fp32 on CPU, else torch (platform.choose_backend)
    device: DeviceSetting = "auto"  # auto: cuda when available, else cpu
    precision: PrecisionSetting = "auto"  # auto: bf16 only where measured safe and native (platform.choose_precision)
    native_bf16: NativeBf16Setting = "detect"  # override of the CPU's native-bf16 detection
    strategy: StrategySetting = "auto"  # auto: per-draw loop on CPU, grouped on CUDA
    mc_samples: int | None = None  # K fixed posterior draws; None: the artifact's
    threads: int | None = None  # intra-op threads of torch / ONNX Runtime; None: the library's
    max_pixels: int = DEFAULT_MAX_PIXELS  # largest width*height accepted (checked before decoding)
    max_bytes: int = DEFAULT_MAX_BYTES  # largest image file accepted

    def __post_init__(self) -> None:
        """Refuse values the Scorer could only fail on later, naming the field and the valid choices."""
        for name, choices in _CHOICES.items():
            value = getattr(self, name)
            if value not in choices:
                raise ValueError(f"unknown {name} {value!r}; expected one of: {', '.join(choices)}")
        if self.mc_samples is not None and not 1 <= self.mc_samples <= MAX_MC_SAMPLES:
            raise ValueError(f"mc_samples must be in [1, {MAX_MC_SAMPLES}], got {self.mc_samples}")
        for name in ("threads", "max_pixels", "max_bytes"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if self.model_dir is not None and not isinstance(self.model_dir, Path):
            object.__setattr__(self, "model_dir", Path(self.model_dir))

    def load(self) -> Scorer:
        """Load and verify the artifact and build the scorer on this machine.

        The CPU is detected here (``models.cpu.detect_cpu``, ``native_bf16`` overriding) and every ``auto``
        resolved from it (``service.inference.loading.load_scorer``); an explicit bf16 the CPU cannot run
        natively raises ``PrecisionUnavailableError``, a missing or tampered artifact
        ``models.artifact.ArtifactError``.
        """
        from service.inference.loading import load_scorer

        return load_scorer(self)
