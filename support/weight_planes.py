"""An artifact's weights packed losslessly to travel to a GPU lease beside the tree, and unpacked there bit for bit.

A lease receives at most 64 MiB; the embedded model's ``weights.safetensors`` is 58 MiB of fp32 and the tree
about 6. General-purpose compression gains almost nothing on fp32 mantissas, but the byte holding the sign
and most of the exponent of each value is mostly the same few values: split the file's tensor bytes into
their 4 byte planes (byte 0 of every 4-byte word, then byte 1, ...) and zlib each plane; the top plane
shrinks to about a quarter and the whole to about 47 MiB. Unpacking interleaves the planes back, and the
result must match the sha256 the artifact's manifest records, or nothing is written: the lease serves the
embedded model itself, not a rounded copy (``scripts/artifact_fp16.py`` is a warm start, not a served model).

    python -m support.weight_planes pack models/default .lease/serving/model     # here
    python -m support.weight_planes unpack .lease/serving/model /tmp/embedded     # on the node
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import sys
import zlib
from pathlib import Path

import numpy as np

WEIGHTS = "weights.safetensors"
PLANES = "weights.planes"  # the packed weights: a JSON header line, then the zlib'd planes one after another
WORD = 4  # fp32: 4 bytes a value


class PlanesError(ValueError):
    """A pack that does not unpack to the weights its manifest names (truncated, altered or another model's)."""


def pack(artifact: Path, out: Path, *, level: int = 6) -> dict[str, int]:
    """Copy ``artifact`` into ``out`` with its weights as byte planes (every other file as it is); the sizes."""
    raw = (artifact / WEIGHTS).read_bytes()
    (head_len,) = struct.unpack("<Q", raw[:8])
    body = raw[8 + head_len:]
    pad = -len(body) % WORD
    words = np.frombuffer(body + b"\0" * pad, dtype=np.uint8).reshape(-1, WORD)  # [values, 4]
    planes = [zlib.compress(np.ascontiguousarray(words[:, i]).tobytes(), level) for i in range(WORD)]
    out.mkdir(parents=True, exist_ok=True)
    for other in artifact.iterdir():
        if other.is_file() and other.name != WEIGHTS:
            shutil.copy2(other, out / other.name)
    header = {"head": raw[:8 + head_len].hex(), "body_bytes": len(body), "planes": [len(p) for p in planes],
              "sha256": hashlib.sha256(raw).hexdigest()}
    with (out / PLANES).open("wb") as sink:
        sink.write(json.dumps(header).encode() + b"\n")
        for plane in planes:
            sink.write(plane)
    return {"weights_bytes": len(raw), "packed_bytes": (out / PLANES).stat().st_size}


def unpack(packed: Path, artifact: Path) -> str:
    """Write the artifact of ``packed`` to ``artifact`` (a new folder) with its weights restored; their sha256.

    Raises :class:`PlanesError` when the weights do not match both the pack's and the manifest's sha256."""
    with (packed / PLANES).open("rb") as source:
        try:
            header = json.loads(source.readline())
            planes = [zlib.decompress(source.read(n)) for n in header["planes"]]
        except (ValueError, KeyError, TypeError, zlib.error) as exc:
            raise PlanesError(f"{packed / PLANES} is not a readable weight pack ({exc})") from exc
    if len({len(p) for p in planes}) != 1:
        raise PlanesError(f"{packed / PLANES}: its planes differ in length (truncated or altered)")
    words = np.stack([np.frombuffer(p, dtype=np.uint8) for p in planes], axis=1)  # [values, 4]
    raw = bytes.fromhex(header["head"]) + words.tobytes()[:header["body_bytes"]]
    sha = hashlib.sha256(raw).hexdigest()
    manifest = json.loads((packed / "manifest.json").read_text())
    if sha != header["sha256"] or sha != manifest["files"].get(WEIGHTS):
        raise PlanesError(f"{packed / PLANES} unpacks to weights of sha256 {sha}, not the {WEIGHTS} its manifest "
                          f"names ({manifest['files'].get(WEIGHTS)}): truncated, altered or another model's")
    artifact.mkdir(parents=True)
    for other in packed.iterdir():
        if other.is_file() and other.name != PLANES:
            shutil.copy2(other, artifact / other.name)
    (artifact / WEIGHTS).write_bytes(raw)
    return sha


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in ("pack", "unpack"):
        print(__doc__.split("\n\n")[-1], file=sys.stderr)
        return 2
    if argv[0] == "pack":
        sizes = pack(Path(argv[1]), Path(argv[2]))
        print(f"{argv[2]}: weights {sizes['weights_bytes'] / 2**20:.1f} MiB packed to "
              f"{sizes['packed_bytes'] / 2**20:.1f} MiB")
        return 0
    try:
        print(f"{argv[2]}: weights sha256 {unpack(Path(argv[1]), Path(argv[2]))}")
    except PlanesError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
