"""How an artifact is stored: written atomically, hashed into a manifest, verified before it is read.

Two formats: ``radscreen-artifact/1`` stores every tensor dense; ``radscreen-artifact/2`` is written for a
pruned model (``models.nn.pruning``) and stores its pruned weight tensors packed (keep-mask and kept values),
which :meth:`Artifact.state_dict` unpacks to the same dense tensors. Code that knows only format 1 refuses a
format-2 manifest by name instead of misreading its weights. A model without pruned weights is always written
as format 1, so its identity does not depend on this code.

The identity of a model is the sha256 of ``manifest.json``'s bytes, which lists every file's sha256: it
changes when any listed file changes. :func:`load_artifact` refuses a directory whose files do not match the
manifest, naming the offending file; files in the directory but not in the manifest are ignored with a
logged warning (never read, so they cannot change the model's behaviour). What the files hold, and their
validation, is ``models/artifact/schema.py``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as load_safetensors_bytes
from safetensors.torch import save as save_safetensors_bytes
from torch import nn

from models.artifact.schema import (
    CALIBRATION_FILE,
    CONFIG_FILE,
    MANIFEST_FILE,
    MODEL_CARD_FILE,
    REQUIRED_FILES,
    WEIGHTS_FILE,
    ArtifactConfig,
    ArtifactError,
    Calibration,
    JsonFields,
    ServingDraws,
)
from models.image.transform import ImageTransform
from models.io.atomic import atomic_write_bytes, fsync_dir, fsync_file
from models.nn.draws import DrawnNetwork
from models.nn.pruning import is_packed, pack_state_dict, pruned_mask, unpack_state_dict, weight_prefixes
from models.nn.registry import build_architecture
from models.nn.vgg import VGGStar

logger = logging.getLogger(__name__)

ARTIFACT_FORMAT = "radscreen-artifact/1"
PACKED_ARTIFACT_FORMAT = "radscreen-artifact/2"  # pruned weight tensors stored packed (models.nn.pruning)
READ_FORMATS = (ARTIFACT_FORMAT, PACKED_ARTIFACT_FORMAT)
WEIGHT_DTYPES = {torch.float32: "float32", torch.float16: "float16"}
DEFAULT_ARTIFACT_DIR = Path(__file__).parent.parent / "default"  # models/default


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n").encode("utf-8")


def _weights_bytes(model: nn.Module, dtype: torch.dtype) -> tuple[bytes, str]:
    """Serialise the state_dict (floating tensors cast to ``dtype``, fp32 or fp16) and name its format: a
    model with pruned weights is stored packed (format 2), any other dense (format 1)."""
    tensors = {
        name: (t.detach().to(dtype) if t.is_floating_point() else t.detach()).cpu().contiguous().clone()
        for name, t in model.state_dict().items()
    }
    fmt = ARTIFACT_FORMAT
    if any(bool(pruned_mask(tensors[p + "_mu"], tensors[p + "_rho"]).any()) for p in weight_prefixes(tensors)):
        tensors, fmt = pack_state_dict(tensors), PACKED_ARTIFACT_FORMAT
    # One metadata key only: safetensors writes metadata in hash-map order, and the file bytes must be
    # deterministic so that the same model always has the same identity.
    return save_safetensors_bytes(tensors, metadata={"format": "pt"}), fmt


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

    weights, fmt = _weights_bytes(model, weights_dtype)
    contents = {
        WEIGHTS_FILE: weights,
        CONFIG_FILE: _json_bytes(config.to_dict()),
        CALIBRATION_FILE: _json_bytes(calibration.to_dict()),
        MODEL_CARD_FILE: model_card.encode("utf-8"),
    }
    manifest = _json_bytes(
        {"format": fmt, "files": {name: _sha256(data) for name, data in contents.items()}}
    )
    contents[MANIFEST_FILE] = manifest

    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    staging.chmod(0o755)  # mkdtemp makes it 0700: a service running as another user could not read it
    try:
        for name, data in contents.items():
            (staging / name).write_bytes(data)
            fsync_file(staging / name)
        fsync_dir(staging)
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
    fsync_dir(target.parent)
    return _sha256(manifest)


def replace_artifact_file(directory: str | Path, name: str, data: bytes) -> str:
    """Write (or add) one file of a verified artifact and list it in the manifest; returns the new sha256
    (the identity changes with any file). The file, then the manifest, is replaced atomically
    (``models.io.atomic``); a crash between the two leaves a file the old manifest does not match, which
    ``load_artifact`` refuses by name. The weights are not replaced this way (train and save instead).
    """
    if name in (WEIGHTS_FILE, MANIFEST_FILE) or Path(name).name != name:
        raise ArtifactError(f"{name}: not a file replace_artifact_file may write")
    root = Path(directory)
    load_artifact(root)  # verify before touching anything
    _, fmt, files = _read_manifest(root)
    files[name] = _sha256(data)
    manifest = _json_bytes({"format": fmt, "files": files})
    for target, content in ((name, data), (MANIFEST_FILE, manifest)):
        atomic_write_bytes(root / target, content)
    return _sha256(manifest)


def replace_calibration(directory: str | Path, calibration: Calibration) -> str:
    """Rewrite ``calibration.json`` (e.g. with a measured ``precision_drift``); weights, config and card are
    untouched. Returns the new sha256: the decisions the artifact allows changed."""
    return replace_artifact_file(directory, CALIBRATION_FILE, _json_bytes(calibration.to_dict()))


def replace_config(directory: str | Path, config: ArtifactConfig) -> str:
    """Rewrite ``config.json`` (e.g. other serving draws of the same posterior, ``training.reserve``); the
    weights must still match its architecture. Returns the new sha256."""
    root = Path(directory)
    load_artifact(root)
    old = ArtifactConfig.from_dict(json.loads((root / CONFIG_FILE).read_text()))
    if (old.builder, old.architecture) != (config.builder, config.architecture):
        raise ArtifactError(f"{CONFIG_FILE}: the architecture may not change under the same weights")
    return replace_artifact_file(root, CONFIG_FILE, _json_bytes(config.to_dict()))


def replace_model_card(directory: str | Path, model_card: str) -> str:
    """Rewrite ``MODEL_CARD.md`` (weights, config and calibration untouched); returns the new sha256."""
    return replace_artifact_file(directory, MODEL_CARD_FILE, model_card.encode("utf-8"))


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
        """The stored weights as dense fp32 CPU tensors (a pruned artifact's packed tensors unpacked),
        re-verified against the manifest as they are read."""
        data = (self.directory / WEIGHTS_FILE).read_bytes()
        _verify_hash(WEIGHTS_FILE, data, self.files[WEIGHTS_FILE])
        tensors = load_safetensors_bytes(data)
        if is_packed(tensors):
            try:
                tensors = unpack_state_dict(tensors)
            except ValueError as exc:
                raise ArtifactError(f"{WEIGHTS_FILE}: {exc}") from exc
        return {k: (v.float() if v.is_floating_point() else v) for k, v in tensors.items()}

    def image_transform(self) -> ImageTransform:
        """Image file or bytes -> this model's input: the preprocessing its config declares
        (``models.image.transform``)."""
        return self.config.image_transform()

    def serving_draws(self, mc_samples: int | None = None) -> ServingDraws:
        """The serving form (K, seed, head draws) of ``config.json``; ``mc_samples`` replaces its K."""
        return self.config.serving_draws(mc_samples)

    def serving_network(self, mc_samples: int | None = None, *, strategy: str = "grouped") -> DrawnNetwork:
        """The network the service runs: :meth:`build_model`'s posterior, drawn as :meth:`serving_draws` says."""
        return self.serving_draws(mc_samples).materialise(self.build_model(), strategy=strategy)

    def build_model(self) -> VGGStar:
        """The Bayesian VGG-16* with the stored weights (loaded strictly), fp32, eval mode."""
        model = build_architecture(self.config.builder, self.config.architecture)
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


def _read_manifest(root: Path) -> tuple[bytes, str, dict[str, str]]:
    path = root / MANIFEST_FILE
    if not path.is_file():
        raise ArtifactError(f"{MANIFEST_FILE}: missing in {root}; this is not a verified artifact directory")
    raw = path.read_bytes()
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"{MANIFEST_FILE}: not valid JSON ({exc})") from exc
    top = JsonFields(data, MANIFEST_FILE)
    fmt = top.str_("format")
    if fmt not in READ_FORMATS:
        readable = ", ".join(f"'{f}'" for f in READ_FORMATS)
        raise top.error("format", f"is '{fmt}'; this code reads {readable}")
    files = top.dict_("files")
    for name, digest in files.items():
        if Path(name).name != name or name in ("", ".", ".."):
            raise top.error("files", f"lists '{name}', which is not a plain file name in the artifact")
        if not isinstance(digest, str) or len(digest) != 64:
            raise top.error(f"files.{name}", f"must be a sha256 hex digest, got {digest!r}")
    missing = [name for name in REQUIRED_FILES if name not in files]
    if missing:
        raise ArtifactError(f"{MANIFEST_FILE}: does not list required file(s): {', '.join(missing)}")
    return raw, fmt, files


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
                "checkout. Train and export one (radscreen-train), or name an artifact directory (the "
                "service's and the batch job's model directory setting)."
            )
        raise ArtifactError(f"Artifact directory {root} does not exist")
    manifest_bytes, _, files = _read_manifest(root)
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
