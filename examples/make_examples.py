"""Writes the two example images (README, docs/integration.md) with the project's own synthetic fundus generator.

    .venv/bin/python examples/make_examples.py            # rewrites examples/*.jpg, prints what the model says

- ``examples/fundus-gradable.jpg``: a gradable synthetic photograph of DR grade 3 (referable) that the
  service's quality gate passes and the embedded model labels referable without being uncertain;
- ``examples/fundus-ungradable.jpg``: a synthetic photograph with a camera defect (``--defect``, default
  blur) that the quality gate rejects, so the service answers "refer to expert: image_quality".

Both are SYNTHETIC (procedurally drawn, no patient), 512 px JPEGs of a few tens of KB. The generator and
the default model change over time, so the script searches seeds from ``--seed`` upwards until each
image behaves as described, and fails loudly if none does within ``--tries``: rerun it after either
changes and commit the new images (the documented curl examples post them). Needs the ``train`` code on the
path, i.e. the dev install (``make setup``).
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image

from models.outcome.decision import ScreeningOutcome
from service.inference.loading import load_scorer
from service.inference.prepare import PreparedImage, prepare_image
from service.inference.scoring import Scorer
from service.inference.spec import ScorerSpec
from training.synthetic.camera import UNGRADABLE_KINDS
from training.synthetic.render import render_fundus

HERE = Path(__file__).resolve().parent
SIZE = 512
JPEG_QUALITY = 90
GRADABLE_GRADE = 3


def _jpeg(image: np.ndarray) -> bytes:
    """uint8 [H, W, 3] RGB -> JPEG bytes (no EXIF, no metadata of any kind)."""
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="JPEG", quality=JPEG_QUALITY, optimize=True)
    return buf.getvalue()


def _search(
    name: str, first_seed: int, tries: int, render: Callable[[np.random.Generator], np.ndarray],
    accept: Callable[[PreparedImage], str | None], scorer: Scorer,
) -> tuple[int, bytes]:
    """First seed whose rendering ``accept`` returns None for (else the reason it was refused)."""
    last = ""
    for seed in range(first_seed, first_seed + tries):
        data = _jpeg(render(np.random.default_rng(seed)))
        refusal = accept(prepare_image(data, scorer.pipeline))
        if refusal is None:
            return seed, data
        last = refusal
    raise SystemExit(f"{name}: no seed in [{first_seed}, {first_seed + tries}) qualified; last refusal: {last}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=HERE, help="folder for the two JPEGs")
    parser.add_argument("--seed", type=int, default=0, help="first seed tried")
    parser.add_argument("--tries", type=int, default=200, help="seeds tried per image before giving up")
    parser.add_argument("--defect", choices=UNGRADABLE_KINDS, default="blur", help="the ungradable image's defect")
    parser.add_argument("--model-dir", type=Path, default=None, help="artifact (default: the embedded model)")
    args = parser.parse_args(argv)

    scorer = load_scorer(ScorerSpec(model_dir=args.model_dir, device="cpu"))
    threshold = scorer.calibration.referral_threshold_mi

    def referable_and_confident(im: PreparedImage) -> str | None:
        if not im.quality.gradable:
            return f"quality gate: {im.quality.issues}"
        (score,) = scorer.score_batch([im])
        if score.outcome is not ScreeningOutcome.REFER_REFERABLE_DR:
            return f"model: {score.outcome}, MI {score.mutual_information:.3g} vs {threshold:.3g}"
        return None

    def rejected_by_gate(im: PreparedImage) -> str | None:
        return None if not im.quality.gradable else "quality gate passed it"

    jobs = [
        ("fundus-gradable.jpg", referable_and_confident,
         lambda rng: render_fundus(rng, GRADABLE_GRADE, size=SIZE, gradable=True)[0]),
        ("fundus-ungradable.jpg", rejected_by_gate,
         lambda rng: render_fundus(rng, 1, size=SIZE, gradable=False, ungradable_kind=args.defect)[0]),
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    for name, accept, render in jobs:
        seed, data = _search(name, args.seed, args.tries, render, accept, scorer)
        (args.out / name).write_bytes(data)
        (score,) = scorer.score_batch([prepare_image(data, scorer.pipeline)])
        print(f"{args.out / name}: seed {seed}, {len(data) / 1024:.0f} KiB; quality gradable={score.quality.gradable} "
              f"{list(score.quality.issues)}; p={score.probability:.4f} ({score.label}), "
              f"MI={score.mutual_information:.3g} nat, refer_to_expert={score.refer_to_expert} "
              f"{score.referral_reasons}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
