"""Copy an artifact with its μ and ρ stored in fp16: half the bytes, for a warm start sent to a GPU lease.

    python scripts/artifact_fp16.py models/default .lease/init-fp16

The copy is a start point (``radscreen-train fit --init-from``), not a model to serve: its calibration is the
original's, measured with fp32 weights. The card says so. Rounding ρ (|ρ| < 8) to fp16 moves it by at most
2^-8, and σ = softplus(ρ) by less; the μ keep 11 significant bits.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.artifact import load_artifact
from models.artifact.storage import save_artifact


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    source, target = argv
    artifact = load_artifact(source)
    card = (f"{artifact.model_card.rstrip()}\n\n## This copy\n\nμ and ρ of {artifact.config.name} "
            f"{artifact.config.version} (sha256 {artifact.sha256}) stored in fp16 by scripts/artifact_fp16.py, "
            "as the start point of a GPU lease's run. Its calibration was measured with the fp32 weights: "
            "do not serve this copy.\n")
    sha = save_artifact(target, model=artifact.build_model(), config=artifact.config,
                        calibration=artifact.calibration, model_card=card, weights_dtype=torch.float16)
    print(f"{target}: fp16 copy of {source}, sha256 {sha}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
