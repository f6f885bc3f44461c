"""``ScorerSpec``: everything needed to build a :class:`~service.inference.scoring.Scorer`, in one value.

The HTTP service, the local batch runner and every Ray actor build their scorer from the same spec with
``service.inference.loading.load_scorer(spec)``, the one way to build a scorer, so an image scored by any
of them goes through the same artifact, backend, precision, strategy, K draws and input limits. The spec is
a frozen, picklable dataclass of plain values: it travels to Ray workers as it is, and each process
resolves the machine-dependent ``auto`` choices (device, CPU capability, precision, backend) where it runs.

Each field is written here once: its type (a ``Literal`` gives the valid choices), default, bounds and
meaning (:class:`Knob`, in the field's metadata; :func:`knobs` lists them). Everything else is derived:

* the service settings (``ScorerSettings`` in service/settings.py: ``RADSCREEN_<FIELD>``, through
  ``spec_setting``), whose ``scorer_spec()`` gives the spec;
* the ``radscreen-batch score`` flags (``--<field-with-dashes>``, service/batch/cli.py), over the same
  ``RADSCREEN_*`` defaults;
* the loader (``service.inference.loading.load_scorer(spec)``), which reads the spec itself.

Example::

    spec = ScorerSpec(model_dir=Path("models/my-run"), device="cpu", mc_samples=16)
    scorer = load_scorer(spec)
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints

from models.artifact.schema import MAX_MC_SAMPLES
from models.platform.cpu import NativeBf16Setting

BackendSetting = Literal["auto", "torch", "onnxruntime"]
DeviceSetting = Literal["auto", "cpu", "cuda"]
PrecisionSetting = Literal["auto", "fp32", "bf16", "fp16", "int8"]
StrategySetting = Literal["auto", "grouped", "loop"]

DEFAULT_MAX_PIXELS = 40_000_000
DEFAULT_MAX_UPLOAD_BYTES = 20 * 1024 * 1024
DEFAULT_DECODE_TIMEOUT_S = 10.0
MAX_THREADS = 1024


@dataclass(frozen=True)
class Knob:
    """What the spec says about one field besides its type and default: its meaning and its bounds."""

    doc: str  # one line, shown as the setting's description and the flag's help
    ge: float | None = None  # smallest value allowed (None: no bound, or not a number)
    le: float | None = None  # largest value allowed
    default_text: str | None = None  # how an unset (None) default reads, e.g. "the artifact's"
    metavar: str | None = None  # the flag's value name in --help


def _knob(doc: str, *, ge: float | None = None, le: float | None = None, default_text: str | None = None,
          metavar: str | None = None) -> dict[str, Knob]:
    """A field's metadata: ``field(default=..., metadata=_knob("what it means", ge=1))``."""
    return {"knob": Knob(doc, ge, le, default_text, metavar)}


@dataclass(frozen=True)
class ScorerSpec:
    """What to load and how to run it; ``load_scorer(spec)`` builds the scorer (see the module docstring).

    ``model_dir=None`` means the embedded default artifact *of the process that loads it* (a Ray worker
    on another machine finds its own copy; the batch job checks every actor's sha256 against the driver's).
    ``mc_samples=None`` keeps the artifact's K (its MI threshold was calibrated for it); the draws' seed
    always comes from the artifact, so the K draws are the same wherever the spec is loaded.
    """

    model_dir: Path | None = field(default=None, metadata=_knob(
        "Artifact directory (weights.safetensors, config.json, calibration.json, manifest.json).",
        default_text="the embedded model"))
    backend: BackendSetting = field(default="auto", metadata=_knob(
        "Inference backend for the fixed posterior draws. 'auto' = ONNX Runtime's per-draw graph for fp32 "
        "and int8 on CPU (the fastest measured CPU paths), torch for bf16/fp16 and on GPU."))
    device: DeviceSetting = field(default="auto", metadata=_knob(
        "Compute device. 'auto' = cuda when available, else cpu."))
    precision: PrecisionSetting = field(default="auto", metadata=_knob(
        "Arithmetic of the K draws: fp32, bf16/fp16 (torch autocast) or int8 (ONNX Runtime, CPU). 'auto' = the "
        "fastest of int8, bf16 that this CPU runs natively AND whose drift measured on real photographs the "
        "artifact permits (with fp32 re-scoring near the thresholds where its record says so), else fp32 "
        "(service/inference/platform.py). An explicit precision the CPU only emulates fails at start."))
    native_bf16: NativeBf16Setting = field(default="detect", metadata=_knob(
        "Override the CPU's native-bf16 detection (/proc/cpuinfo avx512_bf16/amx_bf16/bf16) where it is "
        "wrong; 'detect' trusts the CPU."))
    strategy: StrategySetting = field(default="auto", metadata=_knob(
        "How the backend runs the K draws: one grouped network or a per-draw loop. 'auto' = loop on CPU, "
        "grouped on CUDA (measured in benchmarks/bench_core.py)."))
    mc_samples: int | None = field(default=None, metadata=_knob(
        "Fixed posterior draws K per image. The artifact's MI referral threshold was calibrated for its own "
        "K; another K is allowed and logged as a warning, up to the artifact's pass budget (K x its views, "
        "2 with test-time flip, at most serving.pass_budget: 16 unless the artifact states more).", ge=1,
        le=MAX_MC_SAMPLES, default_text="the artifact's",
        metavar="K"))
    threads: int | None = field(default=None, metadata=_knob(
        "Intra-op threads of torch / ONNX Runtime.", ge=1, le=MAX_THREADS, default_text="the library's (all cores)"))
    max_pixels: int = field(default=DEFAULT_MAX_PIXELS, metadata=_knob(
        "Largest width*height (and long side squared) accepted, checked before decoding; "
        "larger images are refused (image-too-large).", ge=1))
    max_upload_bytes: int = field(default=DEFAULT_MAX_UPLOAD_BYTES, metadata=_knob(
        "Largest image file accepted, in bytes.", ge=1024))
    decode_timeout_s: float = field(default=DEFAULT_DECODE_TIMEOUT_S, metadata=_knob(
        "Longest time one image may take to decode once a worker starts it; a slower one is refused "
        "(image-too-complex).", ge=0.001, le=600, metavar="SECONDS"))

    def __post_init__(self) -> None:
        """Refuse values the Scorer could only fail on later, naming the field and the valid choices or bounds."""
        hints = get_type_hints(ScorerSpec)
        for f in fields(self):
            value, knob = getattr(self, f.name), f.metadata["knob"]
            choices = literal_choices(hints[f.name])
            if choices and value not in choices:
                raise ValueError(f"unknown {f.name} {value!r}; expected one of: {', '.join(choices)}")
            if value is None or knob.ge is None:
                continue
            if not knob.ge <= value <= (knob.le if knob.le is not None else value):
                bounds = f"in [{knob.ge}, {knob.le}]" if knob.le is not None else f">= {knob.ge}"
                raise ValueError(f"{f.name} must be {bounds}, got {value}")
        if self.model_dir is not None and not isinstance(self.model_dir, Path):
            object.__setattr__(self, "model_dir", Path(self.model_dir))


def literal_choices(hint: Any) -> tuple[str, ...]:
    """The choices of a ``Literal`` type (``()`` for any other type)."""
    return tuple(get_args(hint)) if get_origin(hint) is Literal else ()


@dataclass(frozen=True)
class SpecField:
    """One field of :class:`ScorerSpec` as the settings and the flags derive it: name, type, default, knob."""

    name: str
    hint: Any  # the resolved annotation, e.g. Literal["auto", "cpu", "cuda"] or int | None
    default: Any
    knob: Knob

    @property
    def choices(self) -> tuple[str, ...]:
        return literal_choices(self.hint)

    @property
    def value_type(self) -> type:
        """The type a flag parses its text into (``Path``, ``int``, ``float`` or ``str``)."""
        if self.choices:
            return str
        kinds = [t for t in get_args(self.hint) or (self.hint,) if t is not type(None)]
        return kinds[0]

    @property
    def bounds_text(self) -> str:
        """The allowed range in words (``1-256``, ``>= 1024``), ``""`` when unbounded."""
        if self.knob.ge is None:
            return ""
        return f"{self.knob.ge:g}-{self.knob.le:g}" if self.knob.le is not None else f">= {self.knob.ge:g}"

    @property
    def default_text(self) -> str:
        return self.knob.default_text if self.default is None and self.knob.default_text else str(self.default)


def knobs() -> tuple[SpecField, ...]:
    """Every field of :class:`ScorerSpec`, in order, with what the spec says about it."""
    hints = get_type_hints(ScorerSpec)
    return tuple(SpecField(f.name, hints[f.name], f.default, f.metadata["knob"]) for f in fields(ScorerSpec))
