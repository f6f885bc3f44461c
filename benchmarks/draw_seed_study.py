"""How the referral set depends on the draw seed and on K: is K = 16 enough?

The service fixes K posterior draws per artifact (``config.serving``: ``mc_samples`` draws with ``draw_seed``).
Another seed is another equally valid set of draws; if the mutual information (MI) ranking or the set
of images referred as uncertain changes a lot between seeds, K is too small for the decision it drives.

For each K in ``--k``, each M in ``--head-draws`` (draws of the last layer per network draw, ``models.nn.draws``)
and each of ``--seeds`` draw seeds this materialises the K draws, scores the same
images (synthetic renders from the current generator, or with ``--photos`` real photographs, through the
artifact's own preprocessing) and
prints, per K, over all pairs of seeds:

- Spearman correlation of MI between the two seeds (ranking stability);
- Jaccard overlap of the images referred at the artifact's calibrated MI threshold, and of the top
  ``--refer`` share by MI (the decision stability at a fixed workload);
- how many labels (p̄ >= decision threshold) differ;
- max |Δ p̄|.

Example (figures in docs/results-serving-estimator.md, "Head draws")::

    .venv/bin/python benchmarks/draw_seed_study.py --model-dir models/default --images 48 --k 16 32 64 --seeds 3
    .venv/bin/python benchmarks/draw_seed_study.py --photos ../shared/data/idrid-lesion-54 --images 54 \
        --k 16 --head-draws 1 64 --seeds 5

The MI threshold applied is the artifact's; it was calibrated for the artifact's own K and M, so the
"referred @ threshold" column is a decision comparison only on that row (the others show the scale shift).
"""

from __future__ import annotations

import argparse
import itertools
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.artifact import DEFAULT_ARTIFACT_DIR, load_artifact
from models.nn.draws import materialise_draws
from models.nn.uncertainty import binary_uncertainty_from_logits
from models.outcome.decision import is_referable, is_uncertain
from service.inference.loading import load_scorer
from service.inference.prepare import prepare_image
from service.inference.spec import ScorerSpec
from support.images import synthetic_jpegs


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """|A ∩ B| / |A ∪ B| of two boolean masks; 1.0 when both are empty."""
    union = int((a | b).sum())
    return 1.0 if union == 0 else int((a & b).sum()) / union


def top_share(mi: np.ndarray, share: float) -> np.ndarray:
    """Boolean mask of the ``share`` of images with the highest MI (ties broken by index)."""
    n = round(share * mi.size)
    mask = np.zeros(mi.size, bool)
    mask[np.argsort(-mi, kind="stable")[:n]] = True
    return mask


def score(model: torch.nn.Module, x: torch.Tensor, k: int, seed: int, batch: int,
          head_draws: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Mean probability and MI ``[N]`` of images ``x`` [N, C, H, W] under ``k`` draws made with ``seed``."""
    net = materialise_draws(model, mc_samples=k, seed=seed, strategy="loop", head_draws=head_draws)  # type: ignore[arg-type]
    means, mis = [], []
    with torch.inference_mode():
        for i in range(0, x.shape[0], batch):
            u = binary_uncertainty_from_logits(net(x[i:i + batch]))  # logits [K, B, 1] -> [B]
            means.append(u.probability.numpy())
            mis.append(u.mutual_information.numpy())
    return np.concatenate(means), np.concatenate(mis)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path, default=DEFAULT_ARTIFACT_DIR, help="artifact directory")
    p.add_argument("--images", type=int, default=48, help="images scored (at most this many with --photos)")
    p.add_argument("--photos", type=Path, default=None,
                   help="score the .jpg photographs in this folder instead of synthetic renders")
    p.add_argument("--image-size", type=int, default=512, help="rendered image side, px")
    p.add_argument("--image-seed", type=int, default=2028, help="seed of the rendered images")
    p.add_argument("--k", type=int, nargs="+", default=[16, 32, 64], help="draws per image to compare")
    p.add_argument("--head-draws", type=int, nargs="+", default=None,
                   help="head draws per network draw to compare (default: the artifact's)")
    p.add_argument("--seeds", type=int, default=3, help="draw seeds per K (pairs are compared)")
    p.add_argument("--refer", type=float, default=0.2, help="share referred in the fixed-workload comparison")
    p.add_argument("--batch", type=int, default=8)
    args = p.parse_args(argv)
    if args.seeds < 2:
        p.error("--seeds must be >= 2 (pairs of seeds are compared)")

    torch.manual_seed(0)
    artifact = load_artifact(args.model_dir)
    model = artifact.build_model().eval()
    cal = artifact.calibration
    # for its preprocessing contract
    scorer = load_scorer(ScorerSpec(model_dir=args.model_dir, backend="torch", device="cpu"))
    if args.photos is not None:  # real photographs, e.g. ../shared/data/idrid-lesion-54
        images = [f.read_bytes() for f in sorted(args.photos.glob("*.jpg"))[: args.images]]
        if not images:
            raise SystemExit(f"--photos {args.photos}: no .jpg files")
    else:
        images = synthetic_jpegs(args.images, args.image_size, args.image_seed)
    prepared = [prepare_image(b, scorer.pipeline) for b in images]
    x = torch.from_numpy(np.stack([pi.pixels for pi in prepared]))  # [N, 3, S, S]
    base = artifact.config.serving.draw_seed
    source = (f"{len(images)} photographs from {args.photos}" if args.photos is not None
              else f"{len(images)} synthetic images ({args.image_size} px, seed {args.image_seed})")
    print(f"model {artifact.config.name} {artifact.config.version} sha256 {artifact.sha256[:12]}; {source}; "
          f"MI threshold {cal.referral_threshold_mi:.3g} nat (calibrated at K = {artifact.config.serving.mc_samples}, "
          f"M = {artifact.config.serving.head_draws}), decision threshold {cal.decision_threshold}")
    print(f"machine: {platform.processor() or platform.machine()}, torch threads {torch.get_num_threads()}")
    print("| K | M | seed pairs | Spearman MI (min / mean) | Jaccard referred @ threshold (min / mean) | "
          f"Jaccard top {args.refer:.0%} by MI (min / mean) | referred @ threshold per seed | "
          "labels differing (max) | max abs Δp̄ | median MI per seed (max/min) | s per image per seed |")
    print("| ---: | ---: | ---: | --- | --- | --- | --- | ---: | ---: | --- | ---: |")
    for k, m in itertools.product(args.k, args.head_draws or [artifact.config.serving.head_draws]):
        runs = []
        start = time.perf_counter()
        for s in range(args.seeds):
            runs.append(score(model, x, k, base + 1000 * s, args.batch, m))  # seed base+0: the served set
        per_image = (time.perf_counter() - start) / (args.seeds * args.images)
        rho, jac_t, jac_top, flips, dp = [], [], [], [], []
        for (pa, ma), (pb, mb) in itertools.combinations(runs, 2):
            rho.append(float(spearmanr(ma, mb).statistic))
            jac_t.append(jaccard(*(is_uncertain(mi, cal.referral_threshold_mi) for mi in (ma, mb))))
            jac_top.append(jaccard(top_share(ma, args.refer), top_share(mb, args.refer)))
            label_a, label_b = (is_referable(p, cal.decision_threshold) for p in (pa, pb))
            flips.append(int((label_a != label_b).sum()))
            dp.append(float(np.abs(pa - pb).max()))
        referred = "/".join(str(int(is_uncertain(mi, cal.referral_threshold_mi).sum())) for _, mi in runs)
        medians = [float(np.median(mi)) for _, mi in runs]  # the MI scale each set of draws gives
        scale = f"{' / '.join(f'{v:.2e}' for v in medians)} ({max(medians) / max(min(medians), 1e-300):.2f}×)"
        print(f"| {k} | {m} | {len(rho)} | {min(rho):.3f} / {np.mean(rho):.3f} | {min(jac_t):.3f} / "
              f"{np.mean(jac_t):.3f} | {min(jac_top):.3f} / {np.mean(jac_top):.3f} | {referred} of {args.images} | "
              f"{max(flips)} | {max(dp):.2e} | {scale} | {per_image:.2f} |")


if __name__ == "__main__":
    main()
