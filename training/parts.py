"""Results that come back from a lease: an artifact in parts of at most 16 MiB, and their reassembly here.

A GPU lease returns at most 8 files of at most 16 MiB each, and the full model's fp32 weights alone are
58 MiB. ``split_artifact`` writes the artifact directory as one deterministic tar cut into parts
``<name>.tar.part-000``, ... with a manifest ``<name>.parts.json`` holding the sha256 and size of each
part and of the whole tar, and the artifact's own sha256. ``reassemble`` checks every part and the whole
against the manifest before it unpacks anything, unpacks into a temporary folder beside the target, checks
that the artifact loads (``models.artifact.load_artifact``: its manifest, every file's sha256, config and
calibration) and has the recorded sha256, and only then renames it into place: a missing, truncated or
altered part leaves nothing that could be loaded.

Example (on the node, then here)::

    radscreen-train split-artifact --artifact runs/lease/artifact --out $OUT
    radscreen-train reassemble --parts /work/.device/<call>/files --out models/lease-512
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from models.artifact import load_artifact
from models.io.atomic import atomic_write_bytes, file_sha256

FORMAT = "radscreen-artifact-parts/1"
PART_BYTES = 16 * 2**20
SUFFIX = ".parts.json"


class PartsError(ValueError):
    """Parts that do not make the artifact their manifest describes; the message names the part and the fix."""


def _tar(directory: Path) -> bytes:
    """The files of ``directory`` (flat, sorted) as an uncompressed tar with fixed owners and times."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(p for p in directory.iterdir() if p.is_file()):
            info = tarfile.TarInfo(path.name)
            info.size, info.mode, info.mtime = path.stat().st_size, 0o644, 0
            with path.open("rb") as f:
                tar.addfile(info, f)
    return buf.getvalue()


def split_artifact(artifact: Path, out: Path, *, name: str = "artifact", part_bytes: int = PART_BYTES) -> Path:
    """Write ``artifact`` (a verified artifact directory) as parts of at most ``part_bytes`` into ``out``;
    returns the parts manifest."""
    loaded = load_artifact(artifact)  # only a whole, verified artifact is sent back
    whole = _tar(Path(artifact))
    out.mkdir(parents=True, exist_ok=True)
    parts = []
    for i, start in enumerate(range(0, len(whole), part_bytes)):
        chunk = whole[start:start + part_bytes]
        path = out / f"{name}.tar.part-{i:03d}"
        atomic_write_bytes(path, chunk)
        parts.append({"file": path.name, "bytes": len(chunk), "sha256": hashlib.sha256(chunk).hexdigest()})
    manifest = {"format": FORMAT, "name": name, "artifact_sha256": loaded.sha256, "model": loaded.config.name,
                "version": loaded.config.version, "whole": {"bytes": len(whole),
                                                            "sha256": hashlib.sha256(whole).hexdigest()},
                "parts": parts}
    path = out / f"{name}{SUFFIX}"
    atomic_write_bytes(path, (json.dumps(manifest, indent=2) + "\n").encode())
    return path


def find_manifest(parts: Path) -> Path:
    """The parts manifest: ``parts`` itself, or the one ``*.parts.json`` in the folder ``parts``."""
    if parts.is_file():
        return parts
    found = sorted(parts.glob(f"*{SUFFIX}"))
    if len(found) != 1:
        raise PartsError(f"{parts}: expected one *{SUFFIX} manifest, found {len(found)}; name it with --parts")
    return found[0]


def reassemble(parts: Path, out: Path) -> str:
    """Check the parts against their manifest, unpack the artifact into ``out`` and return its sha256."""
    manifest_path = find_manifest(parts)
    manifest: dict[str, Any] = json.loads(manifest_path.read_text())
    if manifest.get("format") != FORMAT:
        raise PartsError(f"{manifest_path}: format {manifest.get('format')!r}, expected {FORMAT!r}")
    if out.exists():
        raise PartsError(f"{out} exists: reassemble into a new folder")
    chunks = []
    for part in manifest["parts"]:
        path = manifest_path.parent / part["file"]
        if not path.is_file():
            raise PartsError(f"{path}: missing; fetch every part the manifest lists")
        if path.stat().st_size != part["bytes"] or file_sha256(path) != part["sha256"]:
            raise PartsError(f"{path}: its size or sha256 is not the manifest's (truncated or altered); fetch it "
                             "again")
        chunks.append(path.read_bytes())
    whole = b"".join(chunks)
    if hashlib.sha256(whole).hexdigest() != manifest["whole"]["sha256"]:
        raise PartsError(f"{manifest_path}: the parts join into another file than the manifest's whole sha256")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        with tarfile.open(fileobj=io.BytesIO(whole), mode="r") as tar:
            tar.extractall(staging, filter="data")  # plain files only, nothing outside the folder
        sha = load_artifact(staging).sha256
        if sha != manifest["artifact_sha256"]:
            raise PartsError(f"{manifest_path}: the artifact unpacks with sha256 {sha}, the manifest names "
                             f"{manifest['artifact_sha256']}")
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return sha
