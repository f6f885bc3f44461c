"""The model artifact: the one thing training hands to serving.

An artifact is a directory::

    weights.safetensors   state_dict of the Bayesian model (mu and rho of every layer), fp32 or fp16
    config.json           architecture + its arguments, input contract, class meaning, posterior, prior,
                          serving draws (K, seed), training-data provenance, intended use
    calibration.json      MI referral threshold, target/achieved referral rate, decision threshold,
                          validation metrics, dataset description
    MODEL_CARD.md         human-readable card (intended use, data provenance, limitations)
    manifest.json         {"format": "radscreen-artifact/1", "files": {name: sha256}}

The model's identity is the sha256 of ``manifest.json``'s bytes: it changes when any listed file changes.
``load_artifact`` refuses a directory whose files do not match the manifest, naming the offending file.
Files present in the directory but not listed in the manifest are ignored with a logged warning (they
are never read, so they cannot change the model's behaviour).

Example::

    sha = save_artifact("models/default", model=model, config=cfg, calibration=cal, model_card=card)
    art = load_artifact("models/default")
    net = art.build_model()            # VGGStar in eval mode, fp32, weights loaded strictly
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as load_safetensors_bytes
from safetensors.torch import save as save_safetensors_bytes
from torch import nn

from models.posteriors import POSTERIOR_FAMILIES
from models.preprocessing import LEGACY as LEGACY_PREPROCESSING
from models.preprocessing import PREPROCESSINGS
from models.vgg import VGGConfig, VGGStar, build_vgg16_star

logger = logging.getLogger(__name__)

ARTIFACT_FORMAT = "radscreen-artifact/1"
CONFIG_FORMAT_VERSION = 1
WEIGHTS_FILE = "weights.safetensors"
CONFIG_FILE = "config.json"
CALIBRATION_FILE = "calibration.json"
MODEL_CARD_FILE = "MODEL_CARD.md"
MANIFEST_FILE = "manifest.json"
REQUIRED_FILES = (WEIGHTS_FILE, CONFIG_FILE, CALIBRATION_FILE, MODEL_CARD_FILE)

POSTERIORS: tuple[str, ...] = POSTERIOR_FAMILIES
WEIGHT_DTYPES = {torch.float32: "float32", torch.float16: "float16"}
DEFAULT_PREPROCESSING = LEGACY_PREPROCESSING  # what artifacts without the field were trained with
DEFAULT_ARTIFACT_DIR = Path(__file__).parent / "default"


class ArtifactError(ValueError):
    """An artifact is missing, malformed or fails verification; the message names the offending file."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _Fields:
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

    def obj(self, key: str) -> _Fields:
        return _Fields(self.raw(key), self.file, self._name(key))

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


def _vgg_config_from_dict(arch: _Fields) -> VGGConfig:
    """Rebuild a VGGConfig from ``architecture``; every field is required (no silent defaults)."""
    builder = arch.str_("builder")
    if builder != "vgg16_star":
        raise arch.error("builder", f"is '{builder}'; expected one of: vgg16_star")
    known = {f.name: f for f in dataclasses.fields(VGGConfig)}
    unknown = sorted(set(arch.data) - set(known) - {"builder"})
    if unknown:
        raise arch.error(unknown[0], f"is not a VGGConfig field; expected: {', '.join(sorted(known))}")
    kwargs: dict[str, Any] = {}
    reference = VGGConfig()
    for name in known:
        default = getattr(reference, name)
        if isinstance(default, bool):
            value: Any = arch.raw(name)
            if not isinstance(value, bool):
                raise arch.error(name, f"must be true or false, got {value!r}")
        elif isinstance(default, int):
            value = arch.int_(name)
        elif isinstance(default, float):
            value = arch.float_(name)
        elif isinstance(default, str):
            value = arch.str_(name)
        elif isinstance(default, tuple):
            value = arch.raw(name)
            if not isinstance(value, list) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in value
            ):
                raise arch.error(name, f"must be a list of integers, got {value!r}")
            value = tuple(value)
        else:
            value = arch.raw(name)
        kwargs[name] = value
    try:
        return VGGConfig(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ArtifactError(f"{arch.file}: field 'architecture' is invalid: {exc}") from exc


def _vgg_config_to_dict(cfg: VGGConfig) -> dict[str, Any]:
    out: dict[str, Any] = {"builder": "vgg16_star"}
    for name, value in dataclasses.asdict(cfg).items():
        out[name] = list(value) if isinstance(value, tuple) else value
    return out


@dataclass(frozen=True)
class ArtifactConfig:
    """Everything serving needs to rebuild the model and its input pipeline (``config.json``).

    ``input_size`` must equal ``architecture.input_size``: the service resizes to it and the
    architecture was built for it, and two numbers that can drift apart are a bug waiting to happen.
    """

    name: str
    version: str
    architecture: VGGConfig
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    posterior: str
    prior: dict[str, Any]
    draw_seed: int
    training_data: str
    intended_use: str
    input_size: int = 0  # 0 = take architecture.input_size
    mc_samples: int = 16
    positive_class: str = "referable"
    positive_definition: str = "EyePACS grade >= 2"
    channel_order: str = "RGB"
    preprocessing: str = DEFAULT_PREPROCESSING
    created: str = ""  # ISO-8601 UTC; save_artifact fills it when empty
    format_version: int = CONFIG_FORMAT_VERSION

    def __post_init__(self) -> None:
        f = CONFIG_FILE
        if self.input_size == 0:
            object.__setattr__(self, "input_size", self.architecture.input_size)
        object.__setattr__(self, "mean", tuple(float(v) for v in self.mean))
        object.__setattr__(self, "std", tuple(float(v) for v in self.std))
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
        _check(self.input_size > 0, f, "input.size", f"must be positive, got {self.input_size}")
        _check(
            self.input_size == self.architecture.input_size,
            f,
            "input.size",
            f"is {self.input_size} but architecture.input_size is {self.architecture.input_size}",
        )
        _check(len(self.mean) == 3, f, "input.mean", f"must have 3 values (RGB), got {len(self.mean)}")
        _check(len(self.std) == 3, f, "input.std", f"must have 3 values (RGB), got {len(self.std)}")
        _check(
            all(math.isfinite(s) and s > 0 for s in self.std), f, "input.std", f"must be > 0, got {self.std}"
        )
        _check(all(math.isfinite(m) for m in self.mean), f, "input.mean", f"must be finite, got {self.mean}")
        _check(
            self.channel_order == "RGB", f, "input.channel_order",
            f"must be 'RGB', got {self.channel_order!r}",
        )
        _check(
            self.preprocessing in PREPROCESSINGS,
            f,
            "input.preprocessing",
            f"is {self.preprocessing!r}; expected one of: {', '.join(map(repr, PREPROCESSINGS))} "
            "(models/preprocessing.py)",
        )
        _check(self.mc_samples > 0, f, "serving.mc_samples", f"must be positive, got {self.mc_samples}")
        _check(self.draw_seed >= 0, f, "serving.draw_seed", f"must be >= 0, got {self.draw_seed}")
        _check(
            self.training_data == "synthetic" or self.training_data.startswith("real: "),
            f,
            "training_data",
            f"must be 'synthetic' or 'real: <description>', got {self.training_data!r}",
        )
        _check(bool(self.intended_use.strip()), f, "intended_use", "must be a non-empty string")
        _check("kind" in self.prior, f, "prior.kind", "is missing")

    def to_dict(self) -> dict[str, Any]:
        """The ``config.json`` layout (nested sections, JSON types only)."""
        return {
            "format_version": self.format_version,
            "name": self.name,
            "version": self.version,
            "created": self.created,
            "architecture": _vgg_config_to_dict(self.architecture),
            "input": {
                "size": self.input_size,
                "mean": list(self.mean),
                "std": list(self.std),
                "channel_order": self.channel_order,
                "preprocessing": self.preprocessing,
            },
            "classes": {"positive": self.positive_class, "definition": self.positive_definition},
            "posterior": self.posterior,
            "prior": self.prior,
            "serving": {"mc_samples": self.mc_samples, "draw_seed": self.draw_seed},
            "training_data": self.training_data,
            "intended_use": self.intended_use,
        }

    @classmethod
    def from_dict(cls, data: Any) -> ArtifactConfig:
        """Parse and validate ``config.json``; errors name the file and the dotted field."""
        top = _Fields(data, CONFIG_FILE)
        inp, classes, serving = top.obj("input"), top.obj("classes"), top.obj("serving")

        def triple(key: str) -> tuple[float, float, float]:
            raw = inp.raw(key)
            if not isinstance(raw, list) or len(raw) != 3:
                raise inp.error(key, f"must be a list of 3 numbers (RGB), got {raw!r}")
            values = _Fields(dict(enumerate(raw)), CONFIG_FILE, f"input.{key}")
            return (values.float_(0), values.float_(1), values.float_(2))  # type: ignore[arg-type]

        return cls(
            format_version=top.int_("format_version"),
            name=top.str_("name"),
            version=top.str_("version"),
            created=top.raw("created", ""),
            architecture=_vgg_config_from_dict(top.obj("architecture")),
            input_size=inp.int_("size"),
            mean=triple("mean"),
            std=triple("std"),
            channel_order=inp.str_("channel_order"),
            preprocessing=inp.str_("preprocessing", DEFAULT_PREPROCESSING),  # missing: legacy
            positive_class=classes.str_("positive"),
            positive_definition=classes.str_("definition"),
            posterior=top.str_("posterior"),
            prior=top.dict_("prior"),
            mc_samples=serving.int_("mc_samples"),
            draw_seed=serving.int_("draw_seed"),
            training_data=top.str_("training_data"),
            intended_use=top.str_("intended_use"),
        )


@dataclass(frozen=True)
class Calibration:
    """Decision and referral settings fixed on validation data (``calibration.json``).

    ``referral_threshold_mi`` is the mutual information (nats) above which an image is referred; it was
    set as the validation-set quantile for ``target_referral_rate``.

    ``precision_drift`` records, per reduced precision ("bf16", "fp16"), what
    ``benchmarks/precision_drift.py --record`` measured against fp32 on this model: ``images`` scored,
    ``label_flips`` and ``referral_flips`` (decisions that changed), ``max_abs_dp``, ``max_abs_dmi``. A
    precision is allowed for ``precision=auto`` only when it was measured and flipped nothing
    (:meth:`allowed_precisions`); absent = never measured = fp32.
    """

    referral_threshold_mi: float
    target_referral_rate: float
    decision_threshold: float
    validation: dict[str, Any] = field(default_factory=dict)
    dataset: str = ""
    achieved_referral_rate: float | None = None
    precision_drift: dict[str, dict[str, Any]] = field(default_factory=dict)

    def allowed_precisions(self) -> frozenset[str]:
        """fp32, plus every reduced precision whose measured drift flipped no label and no referral."""
        ok = {p for p, d in self.precision_drift.items() if d["label_flips"] == 0 and d["referral_flips"] == 0}
        return frozenset({"fp32", *ok})

    def __post_init__(self) -> None:
        f = CALIBRATION_FILE
        for prec, drift in self.precision_drift.items():
            name = f"precision_drift.{prec}"
            _check(prec in ("bf16", "fp16"), f, name, "is not a reduced precision; expected bf16 or fp16")
            _check(isinstance(drift, Mapping), f, name, f"must be a JSON object, got {drift!r}")
            for key in ("images", "label_flips", "referral_flips"):
                value = drift.get(key)
                _check(isinstance(value, int) and not isinstance(value, bool) and value >= 0, f,
                       f"{name}.{key}", f"must be a non-negative integer, got {value!r}")
            _check(drift["images"] > 0, f, f"{name}.images", "must be positive (a measurement on no images)")
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
        top = _Fields(data, CALIBRATION_FILE)
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


def _json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n").encode("utf-8")


def _weights_bytes(model: nn.Module, dtype: torch.dtype) -> bytes:
    """Serialise the state_dict; floating tensors are cast to ``dtype`` (fp32 or fp16)."""
    tensors = {
        name: (t.detach().to(dtype) if t.is_floating_point() else t.detach()).cpu().contiguous().clone()
        for name, t in model.state_dict().items()
    }
    # One metadata key only: safetensors writes metadata in hash-map order, and the file bytes must be
    # deterministic so that the same model always has the same identity.
    return save_safetensors_bytes(tensors, metadata={"format": "pt"})


def save_artifact(
    directory: str | Path,
    *,
    model: nn.Module,
    config: ArtifactConfig,
    calibration: Calibration,
    model_card: str,
    weights_dtype: torch.dtype = torch.float32,
    overwrite: bool = False,
) -> str:
    """Write an artifact directory atomically and return its sha256 (of ``manifest.json``).

    Files are written to a temporary sibling directory which is renamed into place, so a reader never
    sees a half-written artifact. An existing non-empty ``directory`` is replaced only with
    ``overwrite=True``.
    """
    if weights_dtype not in WEIGHT_DTYPES:
        raise ValueError(f"weights_dtype must be torch.float32 or torch.float16, got {weights_dtype}")
    if not model_card.strip():
        raise ValueError("model_card is empty; the artifact must state intended use and limitations")
    target = Path(directory)
    if target.exists() and any(target.iterdir()) and not overwrite:
        raise FileExistsError(f"{target} already exists and is not empty; pass overwrite=True to replace it")
    if not config.created:
        config = dataclasses.replace(config, created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))

    contents = {
        WEIGHTS_FILE: _weights_bytes(model, weights_dtype),
        CONFIG_FILE: _json_bytes(config.to_dict()),
        CALIBRATION_FILE: _json_bytes(calibration.to_dict()),
        MODEL_CARD_FILE: model_card.encode("utf-8"),
    }
    manifest = _json_bytes(
        {"format": ARTIFACT_FORMAT, "files": {name: _sha256(data) for name, data in contents.items()}}
    )
    contents[MANIFEST_FILE] = manifest

    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    staging.chmod(0o755)  # mkdtemp makes it 0700: a service running as another user could not read it
    try:
        for name, data in contents.items():
            with open(staging / name, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        if target.exists():
            retired = target.with_name(f".{target.name}.old-{os.getpid()}")
            target.rename(retired)
            staging.rename(target)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return _sha256(manifest)


def replace_calibration(directory: str | Path, calibration: Calibration) -> str:
    """Rewrite a verified artifact's ``calibration.json`` (e.g. with a measured ``precision_drift``) and its
    manifest; weights, config and card are untouched. Returns the new sha256 (the identity changes: the
    decisions the artifact allows changed). Each file is replaced atomically (write + rename).
    """
    root = Path(directory)
    load_artifact(root)  # verify before touching anything
    _, files = _read_manifest(root)
    data = _json_bytes(calibration.to_dict())
    files[CALIBRATION_FILE] = _sha256(data)
    manifest = _json_bytes({"format": ARTIFACT_FORMAT, "files": files})
    for name, content in ((CALIBRATION_FILE, data), (MANIFEST_FILE, manifest)):
        tmp = root / f".{name}.tmp-{os.getpid()}"
        tmp.write_bytes(content)
        os.replace(tmp, root / name)
    return _sha256(manifest)


@dataclass(frozen=True)
class Artifact:
    """A verified artifact: parsed config, calibration and card; weights are read on demand."""

    config: ArtifactConfig
    calibration: Calibration
    model_card: str
    sha256: str
    directory: Path
    files: dict[str, str]  # name -> sha256, from the manifest

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The stored weights as fp32 CPU tensors, re-verified against the manifest as they are read."""
        data = (self.directory / WEIGHTS_FILE).read_bytes()
        _verify_hash(WEIGHTS_FILE, data, self.files[WEIGHTS_FILE])
        tensors = load_safetensors_bytes(data)
        return {k: (v.float() if v.is_floating_point() else v) for k, v in tensors.items()}

    def build_model(self) -> VGGStar:
        """The Bayesian VGG-16* with the stored weights (loaded strictly), fp32, eval mode."""
        model = build_vgg16_star(self.config.architecture)
        try:
            model.load_state_dict(self.state_dict(), strict=True)
        except RuntimeError as exc:
            raise ArtifactError(
                f"{WEIGHTS_FILE}: does not match the architecture in {CONFIG_FILE}: {exc}"
            ) from exc
        return model.float().eval()


def _verify_hash(name: str, data: bytes, expected: str) -> None:
    got = _sha256(data)
    if got != expected:
        raise ArtifactError(
            f"{name}: sha256 mismatch (expected {expected}, got {got}) — "
            "the artifact was modified or corrupted"
        )


def _read_manifest(root: Path) -> tuple[bytes, dict[str, str]]:
    path = root / MANIFEST_FILE
    if not path.is_file():
        raise ArtifactError(f"{MANIFEST_FILE}: missing in {root}; this is not a verified artifact directory")
    raw = path.read_bytes()
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"{MANIFEST_FILE}: not valid JSON ({exc})") from exc
    top = _Fields(data, MANIFEST_FILE)
    fmt = top.str_("format")
    if fmt != ARTIFACT_FORMAT:
        raise top.error("format", f"is '{fmt}'; this code reads '{ARTIFACT_FORMAT}'")
    files = top.dict_("files")
    for name, digest in files.items():
        if Path(name).name != name or name in ("", ".", ".."):
            raise top.error("files", f"lists '{name}', which is not a plain file name in the artifact")
        if not isinstance(digest, str) or len(digest) != 64:
            raise top.error(f"files.{name}", f"must be a sha256 hex digest, got {digest!r}")
    missing = [name for name in REQUIRED_FILES if name not in files]
    if missing:
        raise ArtifactError(f"{MANIFEST_FILE}: does not list required file(s): {', '.join(missing)}")
    return raw, files


def _parse_json(name: str, data: bytes) -> Any:
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"{name}: not valid JSON ({exc})") from exc


def load_artifact(directory: str | Path | None = None) -> Artifact:
    """Open and verify an artifact directory (default: the embedded one); raises ArtifactError naming
    the offending file.

    Checks: the directory exists; ``manifest.json`` is present and well formed and lists every required
    file; every listed file exists and matches its sha256; config and calibration parse and validate.
    Unlisted files are ignored with a warning.
    """
    root = Path(directory) if directory is not None else DEFAULT_ARTIFACT_DIR
    if not root.is_dir():
        if root.resolve() == DEFAULT_ARTIFACT_DIR.resolve():
            raise ArtifactError(
                f"The embedded default artifact is missing ({root}): it has not been built into this "
                "checkout. Train and export one (radscreen-train), or point RADSCREEN_MODEL_DIR at an "
                "artifact directory."
            )
        raise ArtifactError(f"Artifact directory {root} does not exist")
    manifest_bytes, files = _read_manifest(root)
    contents: dict[str, bytes] = {}
    for name, expected in files.items():
        path = root / name
        if not path.is_file():
            raise ArtifactError(f"{name}: listed in {MANIFEST_FILE} but missing from {root}")
        data = path.read_bytes()
        _verify_hash(name, data, expected)
        if name != WEIGHTS_FILE:  # the weights are re-read (and re-verified) by Artifact.state_dict
            contents[name] = data
    unlisted = sorted(p.name for p in root.iterdir() if p.name not in files and p.name != MANIFEST_FILE)
    if unlisted:
        logger.warning("Artifact %s: ignoring files not in the manifest: %s", root, ", ".join(unlisted))

    config = ArtifactConfig.from_dict(_parse_json(CONFIG_FILE, contents[CONFIG_FILE]))
    calibration = Calibration.from_dict(_parse_json(CALIBRATION_FILE, contents[CALIBRATION_FILE]))
    try:
        card = contents[MODEL_CARD_FILE].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ArtifactError(f"{MODEL_CARD_FILE}: not valid UTF-8 ({exc})") from exc
    return Artifact(
        config=config,
        calibration=calibration,
        model_card=card,
        sha256=_sha256(manifest_bytes),
        directory=root,
        files=dict(files),
    )
