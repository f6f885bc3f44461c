"""What an artifact's files hold: the typed ``config.json`` and ``calibration.json`` and their validation.

The layout of the directory is in the package docstring (``models/artifact/__init__.py``); how the files are
written, hashed and verified is ``models/artifact/storage.py``. Everything here is pure data: parsing a file's
JSON into a frozen dataclass whose ``__post_init__`` checks every field, with errors that name the file and
the dotted field (``config.json: field 'input.size' is 128 but architecture.input_size is 64``), and
``to_dict`` giving the JSON back (``from_dict(to_dict(x)) == x``).

The architecture section is ``{"builder": <name in models.nn.registry.ARCHITECTURES>, **VGGConfig.to_dict()}``;
``VGGConfig.from_dict`` (models/nn/vgg.py) is its one parser.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, cast

from models.image.preprocessing import LEGACY as LEGACY_PREPROCESSING
from models.image.preprocessing import PREPROCESSINGS
from models.image.transform import ImageTransform
from models.nn.draws import DrawnNetwork, materialise_draws
from models.nn.posteriors import POSTERIOR_FAMILIES
from models.nn.registry import DEFAULT_ARCHITECTURE, check_architecture
from models.nn.vgg import ConfigFieldError, VGGConfig, VGGStar
from models.outcome.decision import DiagnosisLabel, ScreeningOutcome, diagnosis_label, is_uncertain, screening_outcome

CONFIG_FORMAT_VERSION = 1
WEIGHTS_FILE = "weights.safetensors"
CONFIG_FILE = "config.json"
CALIBRATION_FILE = "calibration.json"
MODEL_CARD_FILE = "MODEL_CARD.md"
MANIFEST_FILE = "manifest.json"
REQUIRED_FILES = (WEIGHTS_FILE, CONFIG_FILE, CALIBRATION_FILE, MODEL_CARD_FILE)

POSTERIORS: tuple[str, ...] = POSTERIOR_FAMILIES
DEFAULT_PREPROCESSING = LEGACY_PREPROCESSING  # what artifacts without the field were trained with


class ArtifactError(ValueError):
    """An artifact is missing, malformed or fails verification; the message names the offending file."""


class JsonFields:
    """Typed reads from a parsed JSON object that fail with '<file>: field '<a.b>' ...'."""

    def __init__(self, data: Any, file: str, prefix: str = "") -> None:
        if not isinstance(data, Mapping):
            where = f"field '{prefix}'" if prefix else "top level"
            raise ArtifactError(f"{file}: {where} must be a JSON object, got {type(data).__name__}")
        self.data, self.file, self.prefix = data, file, prefix

    def _name(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def error(self, key: str, problem: str) -> ArtifactError:
        return ArtifactError(f"{self.file}: field '{self._name(key)}' {problem}")

    def raw(self, key: str, default: Any = ...) -> Any:
        if key not in self.data:
            if default is ...:
                raise self.error(key, "is missing")
            return default
        return self.data[key]

    def obj(self, key: str) -> JsonFields:
        return JsonFields(self.raw(key), self.file, self._name(key))

    def str_(self, key: str, default: Any = ...) -> str:
        value = self.raw(key, default)
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, f"must be a non-empty string, got {value!r}")
        return value

    def int_(self, key: str, default: Any = ...) -> int:
        value = self.raw(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"must be an integer, got {value!r}")
        return value

    def float_(self, key: str, default: Any = ...) -> float:
        value = self.raw(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise self.error(key, f"must be a finite number, got {value!r}")
        return float(value)

    def dict_(self, key: str, default: Any = ...) -> dict[str, Any]:
        value = self.raw(key, default)
        if not isinstance(value, Mapping):
            raise self.error(key, f"must be a JSON object, got {value!r}")
        return dict(value)


def _check(ok: bool, file: str, name: str, problem: str) -> None:
    if not ok:
        raise ArtifactError(f"{file}: field '{name}' {problem}")


def _architecture_from_dict(arch: JsonFields) -> tuple[str, VGGConfig]:
    """``(builder, VGGConfig)`` from the ``architecture`` section; every VGGConfig field is required."""
    builder = arch.str_("builder")
    try:
        check_architecture(builder)
    except ValueError as exc:
        raise arch.error("builder", f"is '{builder}': {exc}") from None
    try:
        return builder, VGGConfig.from_dict({k: v for k, v in arch.data.items() if k != "builder"})
    except ConfigFieldError as exc:
        if not exc.field:
            raise ArtifactError(f"{arch.file}: field 'architecture' is invalid: {exc.problem}") from exc
        raise arch.error(exc.field, exc.problem) from exc


# Bounds of every field that shapes serving memory and time: an operator-built artifact with an absurd
# value (K = 100000 draws, a 100000 px input) is refused at start-up, naming the field, instead of
# failing later trying to allocate gigabytes. Generous against every real model (default: 512 px,
# K = 16, width 46, blocks of 2-3 layers).
MAX_MC_SAMPLES = 256  # also the bound of the service's K setting (ScorerSpec.mc_samples)
# The design's work per photograph: network draws x views = 16 forward passes (head draws cost no pass). An
# artifact states its budget (config.json serving.pass_budget, written only when it is not this one); a budget
# over 16 is an explicit choice of whoever wrote the artifact, never a default (docs/uncertainty.md, "Passes").
PASS_BUDGET = 16
MAX_PASS_BUDGET = 2 * MAX_MC_SAMPLES
MAX_HEAD_DRAWS = 4096
MAX_INPUT_SIZE = 1024
MAX_WIDTH = 256  # channels of the first block (the last blocks have 8x)
MAX_BLOCK_LAYERS = 8
MAX_OUTPUTS = 16
MAX_FIRST_STRIDE = 8


def _check_serving_shape(arch: VGGConfig, f: str) -> None:
    _check(1 <= arch.width <= MAX_WIDTH, f, "architecture.width", f"must be in [1, {MAX_WIDTH}], got {arch.width}")
    _check(all(1 <= b <= MAX_BLOCK_LAYERS for b in arch.blocks), f, "architecture.blocks",
           f"must be 5 blocks of 1-{MAX_BLOCK_LAYERS} layers, got {list(arch.blocks)}")
    _check(arch.in_channels == 3, f, "architecture.in_channels", f"must be 3 (RGB), got {arch.in_channels}")
    _check(1 <= arch.num_outputs <= MAX_OUTPUTS, f, "architecture.num_outputs",
           f"must be in [1, {MAX_OUTPUTS}], got {arch.num_outputs}")
    _check(1 <= arch.first_stride <= MAX_FIRST_STRIDE, f, "architecture.first_stride",
           f"must be in [1, {MAX_FIRST_STRIDE}], got {arch.first_stride}")


@dataclass(frozen=True)
class ServingDraws:
    """An artifact's serving form as one value: ``mc_samples`` (K) network draws made with ``draw_seed``, each
    carrying ``head_draws`` (M) draws of the last layer; the names are ``config.json``'s ``serving`` section.

    ``test_time_flip`` scores each image twice, as taken and mirrored left-right (a right eye's mirror image
    looks like a left eye, and training flips at random), and pools the two orientations' draws: p̄ and the
    mutual information are then taken over ``samples`` = 2·K·M predictions, so the MI also counts the
    network's disagreement with itself across the mirror. It doubles the serving cost.

    The artifact hands it out (``Artifact.serving_draws()``, like torchvision's ``weights.transforms()``),
    and so does a training config for the artifact it will write (``TrainConfig.serving_draws()``):
    the service, evaluation, calibration, export and the benchmarks take K, the seed and M from it rather
    than unpacking them one by one.
    """

    mc_samples: int
    draw_seed: int
    head_draws: int = 1
    test_time_flip: bool = False  # each image also scored mirrored left-right; its draws join the K x M

    @property
    def views(self) -> int:
        """Orientations each image is scored in: 2 with ``test_time_flip`` (as taken, then mirrored), else 1."""
        return 2 if self.test_time_flip else 1

    @property
    def passes(self) -> int:
        """Forward passes of the network per image: K network draws x the views (head draws cost none)."""
        return self.mc_samples * self.views

    def split_text(self) -> str:
        """``"16 draws × 1 view"``: how the passes are spent, as the card and ``/v1/model`` say it."""
        return f"{self.mc_samples} draws × {self.views} view{'s' if self.views > 1 else ''}"

    @property
    def samples(self) -> int:
        """Predictions averaged per image: K network draws x M head draws x the views."""
        return self.mc_samples * self.head_draws * self.views

    def materialise(self, model: VGGStar, *, strategy: str = "grouped") -> DrawnNetwork:
        """The fixed network of these draws of ``model``'s posterior (:func:`materialise_draws`)."""
        return materialise_draws(model, mc_samples=self.mc_samples, seed=self.draw_seed, strategy=strategy,
                                 head_draws=self.head_draws)


@dataclass(frozen=True)
class ArtifactConfig:
    """Everything serving needs to rebuild the model and its input pipeline (``config.json``), in its sections:
    ``input`` is the image transform (``config.json``'s ``input``: size, preprocessing, channel mean/std) and
    ``serving`` the serving draws (``serving``: K, seed, head draws, test-time flip), each one value that the
    artifact hands out as it is (:meth:`image_transform`, :meth:`serving_draws`); ``pass_budget`` is
    ``serving.pass_budget``.

    ``input.size`` must equal ``architecture.input_size``: the service resizes to it and the
    architecture was built for it, and two numbers that can drift apart are a bug waiting to happen.
    """

    name: str
    version: str
    architecture: VGGConfig
    input: ImageTransform
    serving: ServingDraws
    posterior: str
    prior: dict[str, Any]
    training_data: str
    intended_use: str
    pass_budget: int = PASS_BUDGET  # most forward passes per image (draws x views) the artifact may serve
    positive_class: str = "referable"
    positive_definition: str = "EyePACS grade >= 2"
    channel_order: str = "RGB"
    created: str = ""  # ISO-8601 UTC; save_artifact fills it when empty
    format_version: int = CONFIG_FORMAT_VERSION
    builder: str = DEFAULT_ARCHITECTURE  # models.nn.registry.ARCHITECTURES name; stored as architecture.builder

    def __post_init__(self) -> None:
        f = CONFIG_FILE
        try:
            check_architecture(self.builder)
        except ValueError as exc:
            raise ArtifactError(f"{f}: field 'architecture.builder': {exc}") from None
        object.__setattr__(self, "input", replace(self.input, mean=_floats(self.input.mean),
                                                  std=_floats(self.input.std)))
        inp, serving = self.input, self.serving
        _check(bool(self.name.strip()), f, "name", "must be a non-empty string")
        _check(bool(self.version.strip()), f, "version", "must be a non-empty string")
        _check(
            self.format_version == CONFIG_FORMAT_VERSION,
            f,
            "format_version",
            f"is {self.format_version}; this code reads version {CONFIG_FORMAT_VERSION}",
        )
        if self.posterior not in POSTERIORS:
            raise ArtifactError(
                f"{f}: field 'posterior': Unknown posterior '{self.posterior}'; "
                f"expected one of: {', '.join(POSTERIORS)}"
            )
        _check(
            self.architecture.layer == self.posterior,
            f,
            "architecture.layer",
            f"is '{self.architecture.layer}' but the posterior is '{self.posterior}'; an artifact holds a "
            f"Bayesian model whose layers use its posterior family ({', '.join(POSTERIORS)})",
        )
        _check(0 < inp.size <= MAX_INPUT_SIZE, f, "input.size", f"must be in [1, {MAX_INPUT_SIZE}] px, got {inp.size}")
        _check_serving_shape(self.architecture, f)
        _check(
            inp.size == self.architecture.input_size,
            f,
            "input.size",
            f"is {inp.size} but architecture.input_size is {self.architecture.input_size}",
        )
        _check(len(inp.mean) == 3, f, "input.mean", f"must have 3 values (RGB), got {len(inp.mean)}")
        _check(len(inp.std) == 3, f, "input.std", f"must have 3 values (RGB), got {len(inp.std)}")
        _check(all(math.isfinite(s) and s > 0 for s in inp.std), f, "input.std", f"must be > 0, got {inp.std}")
        _check(all(math.isfinite(m) for m in inp.mean), f, "input.mean", f"must be finite, got {inp.mean}")
        _check(
            self.channel_order == "RGB", f, "input.channel_order",
            f"must be 'RGB', got {self.channel_order!r}",
        )
        _check(
            inp.preprocessing in PREPROCESSINGS,
            f,
            "input.preprocessing",
            f"is {inp.preprocessing!r}; expected one of: {', '.join(map(repr, PREPROCESSINGS))} "
            "(models/image/preprocessing.py)",
        )
        _check(1 <= serving.mc_samples <= MAX_MC_SAMPLES, f, "serving.mc_samples",
               f"must be in [1, {MAX_MC_SAMPLES}], got {serving.mc_samples}")
        _check(serving.draw_seed >= 0, f, "serving.draw_seed", f"must be >= 0, got {serving.draw_seed}")
        _check(1 <= serving.head_draws <= MAX_HEAD_DRAWS, f, "serving.head_draws",
               f"must be in [1, {MAX_HEAD_DRAWS}], got {serving.head_draws}")
        _check(isinstance(serving.test_time_flip, bool), f, "serving.test_time_flip",
               f"must be true or false, got {serving.test_time_flip!r}")
        _check(1 <= self.pass_budget <= MAX_PASS_BUDGET, f, "serving.pass_budget",
               f"must be in [1, {MAX_PASS_BUDGET}], got {self.pass_budget}")
        passes = serving.passes
        _check(passes <= self.pass_budget, f, "serving",
               f"serves {passes} forward passes per image ({serving.split_text()}), over its pass "
               f"budget of {self.pass_budget}; spend the budget differently (fewer draws, or one view) or state a "
               "larger serving.pass_budget")
        _check(
            self.training_data == "synthetic" or self.training_data.startswith("real: "),
            f,
            "training_data",
            f"must be 'synthetic' or 'real: <description>', got {self.training_data!r}",
        )
        _check(bool(self.intended_use.strip()), f, "intended_use", "must be a non-empty string")
        _check("kind" in self.prior, f, "prior.kind", "is missing")

    def image_transform(self) -> ImageTransform:
        """The callable that turns an image file or bytes into this model's input (its declared preprocessing)."""
        return self.input

    def serving_draws(self, mc_samples: int | None = None) -> ServingDraws:
        """The serving form: K draws with the artifact's seed and head draws; ``mc_samples`` replaces its K."""
        return self.serving if mc_samples is None else replace(self.serving, mc_samples=mc_samples)

    def to_dict(self) -> dict[str, Any]:
        """The ``config.json`` layout (nested sections, JSON types only)."""
        return {
            "format_version": self.format_version,
            "name": self.name,
            "version": self.version,
            "created": self.created,
            "architecture": {"builder": self.builder, **self.architecture.to_dict()},
            "input": {
                "size": self.input.size,
                "mean": list(self.input.mean),
                "std": list(self.input.std),
                "channel_order": self.channel_order,
                "preprocessing": self.input.preprocessing,
            },
            "classes": {"positive": self.positive_class, "definition": self.positive_definition},
            "posterior": self.posterior,
            "prior": self.prior,
            # head_draws and test_time_flip only when used, so an older artifact re-serialises byte for byte
            "serving": {"mc_samples": self.serving.mc_samples, "draw_seed": self.serving.draw_seed,
                        **({"head_draws": self.serving.head_draws} if self.serving.head_draws != 1 else {}),
                        **({"test_time_flip": True} if self.serving.test_time_flip else {}),
                        **({"pass_budget": self.pass_budget} if self.pass_budget != PASS_BUDGET else {})},
            "training_data": self.training_data,
            "intended_use": self.intended_use,
        }

    @classmethod
    def from_dict(cls, data: Any) -> ArtifactConfig:
        """Parse and validate ``config.json``; errors name the file and the dotted field."""
        top = JsonFields(data, CONFIG_FILE)
        inp, classes, serving = top.obj("input"), top.obj("classes"), top.obj("serving")
        builder, architecture = _architecture_from_dict(top.obj("architecture"))

        def triple(key: str) -> tuple[float, float, float]:
            raw = inp.raw(key)
            if not isinstance(raw, list) or len(raw) != 3:
                raise inp.error(key, f"must be a list of 3 numbers (RGB), got {raw!r}")
            values = JsonFields(dict(enumerate(raw)), CONFIG_FILE, f"input.{key}")
            return (values.float_(0), values.float_(1), values.float_(2))  # type: ignore[arg-type]

        return cls(
            format_version=top.int_("format_version"),
            name=top.str_("name"),
            version=top.str_("version"),
            created=top.raw("created", ""),
            builder=builder,
            architecture=architecture,
            input=_transform(inp.int_("size"), inp.str_("preprocessing", DEFAULT_PREPROCESSING),  # missing: legacy
                             triple("mean"), triple("std")),
            channel_order=inp.str_("channel_order"),
            positive_class=classes.str_("positive"),
            positive_definition=classes.str_("definition"),
            posterior=top.str_("posterior"),
            prior=top.dict_("prior"),
            serving=ServingDraws(
                mc_samples=serving.int_("mc_samples"),
                draw_seed=serving.int_("draw_seed"),
                head_draws=serving.int_("head_draws", 1),  # missing: an artifact from before head draws
                test_time_flip=serving.raw("test_time_flip", False),  # missing: one view; checked after
            ),
            pass_budget=_pass_budget(serving),
            training_data=top.str_("training_data"),
            intended_use=top.str_("intended_use"),
        )


def _floats(values: Any) -> tuple[float, float, float]:
    """A channel triple as floats (its length is checked with the other fields, naming the field)."""
    return cast(tuple[float, float, float], tuple(float(v) for v in values))


def _transform(size: int, preprocessing: str, mean: tuple[float, float, float], std: tuple[float, float, float]
               ) -> ImageTransform:
    """``config.json``'s ``input`` section; its own checks (size, preprocessing) as errors naming the field."""
    try:
        return ImageTransform(size=size, preprocessing=preprocessing, mean=mean, std=std)
    except ValueError as exc:
        field = "input.size" if size < 1 else "input.preprocessing"
        raise ArtifactError(f"{CONFIG_FILE}: field '{field}': {exc}") from None


def _pass_budget(serving: JsonFields) -> int:
    """``serving.pass_budget``; missing: the design's 16, or an artifact written before the budget existed
    (2.0.0 served 16 draws x 2 views) keeps its own passes, so it still loads and says it is over 16."""
    if "pass_budget" in serving.data:
        return serving.int_("pass_budget")
    k, flip = serving.int_("mc_samples"), serving.raw("test_time_flip", False)
    return max(PASS_BUDGET, k * (2 if flip is True else 1))


REDUCED_PRECISIONS = ("bf16", "fp16", "int8")
# The largest share of images a guard band may send back to fp32. bf16 runs the served network in ~0.6x
# fp32's time and int8 in ~0.35x (docs/results-benchmarks.md); at a quarter re-scored both stay clearly faster.
MAX_GUARD_SHARE = 0.25


@dataclass(frozen=True)
class GuardBand:
    """Half-widths around the decision threshold (p̄) and the MI threshold (nats) inside which a reduced
    precision's answer is replaced by fp32's; ``share_rescored``: the share of measured images inside."""

    probability: float
    mutual_information: float
    share_rescored: float


@dataclass(frozen=True)
class PrecisionPermit:
    """A precision the artifact lets serve, on ``images`` measured photographs; ``guard`` None = as it is."""

    precision: str
    guard: GuardBand | None
    images: int


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_guard_band(g: Any, f: str, name: str) -> None:
    _check(isinstance(g, Mapping), f, name, f"must be a JSON object, got {g!r}")
    for key in ("probability", "mutual_information", "share_rescored"):
        v = g.get(key)
        _check(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0, f,
               f"{name}.{key}", f"must be a finite non-negative number, got {v!r}")
    _check(_count(g.get("outcome_flips")), f, f"{name}.outcome_flips",
           f"must be a non-negative integer, got {g.get('outcome_flips')!r}")
    folds = g.get("cross_validated_flips")
    _check(isinstance(folds, list) and len(folds) > 0 and all(_count(x) for x in folds), f,
           f"{name}.cross_validated_flips", f"must be a list of non-negative integers, got {folds!r}")


@dataclass(frozen=True)
class Calibration:
    """Decision and referral settings fixed on validation data (``calibration.json``).

    ``referral_threshold_mi`` is the mutual information (nats) above which an image is referred; it was
    set as the validation-set quantile for ``target_referral_rate``. :meth:`is_uncertain`, :meth:`outcome`
    and :meth:`label` apply the rules of ``models.outcome.decision`` with these thresholds (the one place they are
    written).

    ``precision_drift`` records, per reduced precision ("bf16", "fp16", "int8"), what was measured against
    fp32 on this model (``benchmarks/drift_real.py --record`` on real photographs): ``images`` scored,
    ``label_flips``, ``referral_flips`` and ``outcome_flips`` (decisions that changed), ``max_abs_dp``,
    ``max_abs_dmi``, and optionally a ``guard_band`` (``probability``, ``mutual_information``: the half-widths
    around the two thresholds inside which the reduced path re-scores in fp32; ``outcome_flips`` and
    ``cross_validated_flips``: what was left flipped with it). :meth:`permits` says which precisions may
    serve and how; absent = never measured = fp32 only.
    """

    referral_threshold_mi: float
    target_referral_rate: float
    decision_threshold: float
    validation: dict[str, Any] = field(default_factory=dict)
    dataset: str = ""
    achieved_referral_rate: float | None = None
    precision_drift: dict[str, dict[str, Any]] = field(default_factory=dict)

    def permits(self) -> dict[str, PrecisionPermit]:
        """The precisions that may serve, fp32 always: a reduced precision whose measured drift flipped no
        decision serves as it is; one that flipped some serves only with a guard band under which no flip
        was left, on all the images and in both cross-validation folds, and which re-scores (in fp32) at
        most ``MAX_GUARD_SHARE`` of them — a wider band would cost more than the reduced precision saves."""
        out = {"fp32": PrecisionPermit("fp32", None, 0)}
        for prec, d in self.precision_drift.items():
            if d["label_flips"] == 0 and d["referral_flips"] == 0 and d.get("outcome_flips", 0) == 0:
                out[prec] = PrecisionPermit(prec, None, d["images"])
            elif ((g := d.get("guard_band")) and g["outcome_flips"] == 0 and not any(g["cross_validated_flips"])
                  and g["share_rescored"] <= MAX_GUARD_SHARE):
                out[prec] = PrecisionPermit(prec, GuardBand(float(g["probability"]), float(g["mutual_information"]),
                                                            float(g["share_rescored"])), d["images"])
        return out
    def is_uncertain(self, mutual_information: float) -> bool:
        """MI above ``referral_threshold_mi``: a human grader reviews the image
        (``models.outcome.decision.is_uncertain``)."""
        return is_uncertain(mutual_information, self.referral_threshold_mi)

    def outcome(self, *, gradable: bool, mutual_information: float, probability: float) -> ScreeningOutcome:
        """One photograph's screening outcome at these thresholds (``models.outcome.decision.screening_outcome``)."""
        return screening_outcome(gradable=gradable, mutual_information=mutual_information, probability=probability,
                                 referral_threshold_mi=self.referral_threshold_mi,
                                 decision_threshold=self.decision_threshold)

    def label(self, outcome: ScreeningOutcome, probability: float) -> DiagnosisLabel:
        """One photograph's diagnosis label, ``not_graded`` when ungradable
        (``models.outcome.decision.diagnosis_label``)."""
        return diagnosis_label(outcome, probability=probability, decision_threshold=self.decision_threshold)

    def allowed_precisions(self) -> frozenset[str]:
        """The precisions :meth:`permits` lets serve (fp32 always)."""
        return frozenset(self.permits())

    def __post_init__(self) -> None:
        f = CALIBRATION_FILE
        for prec, drift in self.precision_drift.items():
            name = f"precision_drift.{prec}"
            _check(prec in REDUCED_PRECISIONS, f, name,
                   f"is not a reduced precision; expected one of {', '.join(REDUCED_PRECISIONS)}")
            _check(isinstance(drift, Mapping), f, name, f"must be a JSON object, got {drift!r}")
            for key in ("images", "label_flips", "referral_flips", "outcome_flips"):
                if key == "outcome_flips" and key not in drift:
                    continue  # records made before outcomes were counted: label and referral flips cover them
                _check(_count(drift.get(key)), f, f"{name}.{key}",
                       f"must be a non-negative integer, got {drift.get(key)!r}")
            _check(drift["images"] > 0, f, f"{name}.images", "must be positive (a measurement on no images)")
            if "guard_band" in drift:
                _check_guard_band(drift["guard_band"], f, f"{name}.guard_band")
        _check(
            0.0 <= self.referral_threshold_mi <= math.log(2) + 1e-9,
            f,
            "referral_threshold_mi",
            f"must be in [0, ln 2] nats, got {self.referral_threshold_mi}",
        )
        _check(
            0.0 <= self.target_referral_rate <= 1.0,
            f,
            "target_referral_rate",
            f"must be in [0, 1], got {self.target_referral_rate}",
        )
        if self.achieved_referral_rate is not None:
            _check(
                0.0 <= self.achieved_referral_rate <= 1.0,
                f,
                "achieved_referral_rate",
                f"must be in [0, 1], got {self.achieved_referral_rate}",
            )
        _check(
            0.0 < self.decision_threshold < 1.0,
            f,
            "decision_threshold",
            f"must be in (0, 1), got {self.decision_threshold}",
        )
        _check(bool(self.dataset.strip()), f, "dataset", "must describe the calibration data")

    def to_dict(self) -> dict[str, Any]:
        return {
            "referral_threshold_mi": self.referral_threshold_mi,
            "target_referral_rate": self.target_referral_rate,
            "achieved_referral_rate": self.achieved_referral_rate,
            "decision_threshold": self.decision_threshold,
            "validation": self.validation,
            "dataset": self.dataset,
            **({"precision_drift": self.precision_drift} if self.precision_drift else {}),
        }

    @classmethod
    def from_dict(cls, data: Any) -> Calibration:
        top = JsonFields(data, CALIBRATION_FILE)
        achieved = top.raw("achieved_referral_rate", None)
        return cls(
            referral_threshold_mi=top.float_("referral_threshold_mi"),
            target_referral_rate=top.float_("target_referral_rate"),
            achieved_referral_rate=None if achieved is None else top.float_("achieved_referral_rate"),
            decision_threshold=top.float_("decision_threshold"),
            validation=top.dict_("validation"),
            dataset=top.str_("dataset"),
            precision_drift=top.dict_("precision_drift", {}),
        )
