"""Is the model more uncertain on real photographs than on its own synthetic test images?

A model trained on synthetic fundus images has never seen a real photograph. Its mutual information (MI)
on real photographs should therefore be higher than on held-out synthetic images, and a screening service
should refer them to a human. This scores every photograph in ``--photos`` through the service itself
(``service.inference.scoring``: decode, quality gate, the artifact's preprocessing, the K serving draws,
the calibrated decision) and compares their MI with the MI of the synthetic test split, read from the
per-draw probabilities the training run saved for it (``<run>/eval_test/draws.npz``: the same artifact
and the same serving draws). It prints:

- the median MI of both sets and their ratio;
- the AUROC of MI for telling the photographs from the synthetic test images (0.5 = no signal);
- the share of photographs whose MI is above the median, and above the 95th percentile, of the
  synthetic test images ("higher than on the synthetic test images for most of them");
- how the service answers the photographs: referred as uncertain (MI above the calibrated threshold),
  ungradable, labelled referable (p̄ at or above the decision threshold), and its screening outcomes.

Example (figures in docs/results-training.md, "The synthetic benchmark's ceiling" and "A wider posterior")::

    .venv/bin/python benchmarks/real_photos_mi.py --model-dir models/default \\
        --test-draws runs/default-v2/eval_test/draws.npz --photos ../shared/data/idrid-lesion-54
"""

from __future__ import annotations

import argparse
import collections
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.artifact import DEFAULT_ARTIFACT_DIR
from models.outcome.decision import is_uncertain
from service.inference.loading import load_scorer
from service.inference.prepare import prepare_image
from service.inference.spec import ScorerSpec
from training.data.photos import list_photos
from training.evaluation.ensemble import load_draws
from training.evaluation.ood import ood_auroc
from training.evaluation.uncertainty import mc_uncertainty


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path, default=DEFAULT_ARTIFACT_DIR, help="artifact directory")
    p.add_argument("--test-draws", type=Path, required=True,
                   help="draws.npz of the synthetic test split, saved by the run that made the artifact")
    p.add_argument("--photos", type=Path, required=True, help="folder of real photographs (JPEG/PNG)")
    p.add_argument("--batch", type=int, default=4)
    args = p.parse_args(argv)

    scorer = load_scorer(ScorerSpec(model_dir=args.model_dir, backend="torch", device="cpu", precision="fp32"))
    cal, ident = scorer.calibration, scorer.model_identity
    test_mi = mc_uncertainty(load_draws(args.test_draws).probs).mutual_information  # [N_test]
    paths = list_photos(args.photos)
    t0 = time.perf_counter()
    scores = []
    for i in range(0, len(paths), args.batch):
        prepared = [prepare_image(path.read_bytes(), scorer.pipeline) for path in paths[i:i + args.batch]]
        scores.extend(scorer.score_batch(prepared))
    seconds = time.perf_counter() - t0
    photo_mi = np.array([s.mutual_information for s in scores])  # [N_photos]

    med_test, med_photo = float(np.median(test_mi)), float(np.median(photo_mi))
    print(f"artifact {args.model_dir} ({ident.name} {ident.version}, sha256 {ident.sha256[:12]}), "
          f"{ident.mc_samples} draws, fp32 torch on CPU ({platform.processor() or platform.machine()})")
    print(f"synthetic test images: {test_mi.size} (from {args.test_draws}); photographs: {len(paths)} "
          f"(scored in {seconds:.0f} s)")
    print(f"median MI: synthetic test {med_test:.3e} nat, photographs {med_photo:.3e} nat "
          f"(ratio {med_photo / med_test:.2f})" if med_test > 0 else f"median MI: photographs {med_photo:.3e}")
    print(f"AUROC of MI, photographs vs synthetic test: {ood_auroc(test_mi, photo_mi):.3f}")
    for q in (50, 95):
        cut = float(np.percentile(test_mi, q))
        share = float((photo_mi > cut).mean())
        print(f"photographs with MI above the synthetic test images' {q}th percentile ({cut:.3e}): "
              f"{share:.0%} ({int((photo_mi > cut).sum())}/{photo_mi.size})")
    threshold = cal.referral_threshold_mi
    print(f"calibrated MI threshold {threshold:.3e} nat: above it: photographs "
          f"{float(is_uncertain(photo_mi, threshold).mean()):.0%}, "
          f"synthetic test {float(is_uncertain(test_mi, threshold).mean()):.0%}")
    ungradable = sum(not s.quality.gradable for s in scores)
    referable = sum(s.label == "referable" for s in scores)
    print(f"service answers on the photographs: labelled referable {referable}/{len(scores)}, "
          f"ungradable {ungradable}/{len(scores)}, referred to an expert {sum(s.refer_to_expert for s in scores)}"
          f"/{len(scores)}")
    outcomes = collections.Counter(str(s.outcome) for s in scores)
    print("screening outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))


if __name__ == "__main__":
    main()
